"""Arguments and output helpers shared by every `lmsci-mi` subcommand.

A command reads: load (:func:`load_from_args`), config (:func:`config_from_args`), run, print
``result.summary()``, write outputs (:func:`write_outputs`). Analysis parameters come from configs
(:func:`add_config_args`), so a default is written once; the output flags ``--out``, ``--plot``,
``--export`` and ``--html`` mean the same in every command and are checked before any work runs.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from lmsci_mi.cli.arg_types import output_path
from lmsci_mi.config import Config
from lmsci_mi.errors import UserInputError
from lmsci_mi.generation import GenerationConfig, Generations, generate
from lmsci_mi.loading import DEFAULT_MODEL, load_model
from lmsci_mi.model import DEFAULT_SINK, LensModel, SinkChoice
from lmsci_mi.results import Result
from lmsci_mi.sites import Head

if TYPE_CHECKING:
    from lmsci_mi.cluster import ClusterConfig

__all__ = [
    "EXPORT_SUFFIXES",
    "NOT_DONE",
    "OUTPUT_FLAGS",
    "add_config_args",
    "add_generation_args",
    "add_model_args",
    "add_output_args",
    "check_outputs",
    "config_from_args",
    "generate_from_args",
    "head_list",
    "load_from_args",
    "output_path",
    "parse_sink",
    "read_json_file",
    "read_text_file",
    "write_outputs",
]

C = TypeVar("C", bound=Config)

EXPORT_SUFFIXES = (".csv", ".parquet", ".json")
"""The table formats of ``--export`` (those of :meth:`Result.export`)."""
_PLOT_SUFFIXES = (".png",)
_HTML_SUFFIXES = (".html", ".htm")
OUTPUT_FLAGS = ("out", "plot", "export", "html")
"""The ``dest`` of the output flags that :func:`add_output_args` adds."""


NOT_DONE = 3
"""The exit status of a command that ran without error but did not do what was asked, and says
so (an edit whose new answer did not overtake the old one). 0 is done, 1 a bug (a traceback), 2
bad input (one line)."""


def parse_sink(text: str) -> SinkChoice:
    """``--sink`` as a sink choice: ``default``, ``none``, a token id (digits) or a token's text.

    >>> parse_sink("none") is None, parse_sink("0"), parse_sink("<|im_start|>")
    (True, 0, '<|im_start|>')
    """
    if text.lower() == "default":
        return DEFAULT_SINK
    if text.lower() == "none":
        return None
    if text.isdigit():
        return int(text)
    return text


def head_list(text: str) -> list[Head]:
    """The argparse ``type`` of a comma-separated list of heads (``L5.H1,L6.H9``).

    >>> head_list("L5.H1, L6.H9")
    [Head('L5.H1'), Head('L6.H9')]
    """
    try:
        heads = [Head.parse(part) for part in text.split(",") if part.strip()]
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if not heads:
        raise argparse.ArgumentTypeError("no heads given; write e.g. L5.H1,L6.H9")
    return heads


def read_text_file(path: Path, flag: str) -> str:
    """The UTF-8 text of the file a flag names; a file that is not text is bad input, not a bug
    (a missing file or a folder raises as ``open`` does: the user's path, reported in one line).
    """
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise UserInputError(f"{flag} {path}: not a UTF-8 text file ({error.reason})") from None


def read_json_file(path: Path, flag: str) -> Any:
    """The parsed JSON of the file a flag names; text that is not JSON is bad input, not a bug."""
    import json

    try:
        return json.loads(read_text_file(path, flag))
    except json.JSONDecodeError as error:
        raise UserInputError(f"{flag} {path}: not a JSON file ({error})") from None


def add_model_args(
    parser: argparse.ArgumentParser,
    *,
    default: str | None = DEFAULT_MODEL,
    default_help: str | None = None,
) -> None:
    """``--model``, ``--device`` and ``--sink``: which model, where, and its attention sink.

    ``default=None`` with ``default_help`` suits commands whose input names its own model
    (a saved steer).
    """
    parser.add_argument(
        "--model",
        default=default,
        help=f"model name or path (default {default_help or default}; `lmsci-mi models` lists them)",
    )
    parser.add_argument("--device", default=None, help="torch device (default: cuda if present)")
    parser.add_argument(
        "--sink",
        type=parse_sink,
        default=DEFAULT_SINK,
        metavar="default|none|TOKEN",
        help="attention-sink token put before every prompt: the model's default "
        "(<|endoftext|> for SmolLM2), none, a token's text or a token id",
    )


# ------------------------------------------------------------------------------ output paths


_OUTPUT_FLAGS = (
    ("--out", None, "RESULT.json", "save the result (JSON + safetensors; `lmsci-mi report` reads it)"),
    ("--plot", _PLOT_SUFFIXES, "PLOT.png", "write the result's plot as PNG"),
    ("--export", EXPORT_SUFFIXES, "TABLE.csv", "write the result's table: .csv, .parquet or .json"),
    ("--html", _HTML_SUFFIXES, "VIEW.html", "write an offline HTML view of the result"),
)
"""The four ways a command writes its result: flag, accepted suffixes, metavar, help."""


def add_output_args(parser: argparse.ArgumentParser) -> None:
    """``--out``, ``--plot``, ``--export`` and ``--html``: where the command's result goes."""
    group = parser.add_argument_group("outputs (each checked before the analysis runs)")
    for flag, suffixes, metavar, text in _OUTPUT_FLAGS:
        group.add_argument(
            flag, type=output_path(flag, suffixes), default=None, metavar=metavar, help=text
        )


def _output_files(args: argparse.Namespace) -> list[tuple[str, Path]]:
    """Every file the output flags will write, with the flag that asks for it."""
    files: list[tuple[str, Path]] = []
    for flag in OUTPUT_FLAGS:
        path = getattr(args, flag, None)
        if not isinstance(path, Path):
            continue
        if flag == "out":
            json_path = path if path.suffix == ".json" else path.with_suffix(path.suffix + ".json")
            files += [(flag, json_path), (flag, json_path.with_suffix(".safetensors"))]
        else:
            files.append((flag, path))
    return files


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse two output flags that name one file (run by `main` before the command).

    Raises:
        ValueError: two flags would write the same file.
    """
    seen: dict[Path, str] = {}
    for flag, path in _output_files(args):
        key = path.absolute()
        if key in seen and seen[key] != flag:
            raise UserInputError(f"--{seen[key]} and --{flag} both write {path}; give two files")
        seen[key] = flag


def write_outputs(result: Result, args: argparse.Namespace) -> list[Path]:
    """Write what the output flags ask for and print where; return the files written.

    If one write fails, the files this call wrote are removed, so a failure leaves no partial
    output.
    """
    written: list[Path] = []
    try:
        if args.out is not None:
            written += [path for flag, path in _output_files(args) if flag == "out"]
            print(f"saved result to {result.save(args.out)}")
        if args.plot is not None:
            written.append(args.plot)
            _write_plot(result, args.plot)
            print(f"saved plot to {args.plot}")
        if args.export is not None:
            written.append(args.export)
            print(f"exported the table to {result.export(args.export)}")
        if args.html is not None:
            written.append(args.html)
            print(f"wrote {_write_html(result, args.html)} (opens offline)")
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    return written


def _write_plot(result: Result, path: Path) -> None:
    import matplotlib.pyplot as plt  # matplotlib is slow to import; only --plot needs it here

    path.parent.mkdir(parents=True, exist_ok=True)
    figure = result.plot(path)
    plt.close(figure)


def _write_html(result: Result, path: Path) -> Path:
    """The result's own page when it has one (a token view: highlights, feature cards), else the
    report's section of it: plot, table and meta."""
    from lmsci_mi.cli.report import Section, write_report

    own = getattr(result, "html", None)
    if callable(own):
        page = str(own())
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page, encoding="utf-8")
        return path
    kind = type(result).__name__
    section = Section(f"{kind}: {path.stem}", results={path.stem: result}, text=result.summary())
    return write_report(path, [section], title=f"{kind} — {result.meta.model}")


# ------------------------------------------------------------------------------ configs


def add_config_args(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    config_type: type[Config],
    *,
    skip: Sequence[str] = (),
    defaults: Mapping[str, Any] | None = None,
) -> None:
    """Add one flag per field of ``config_type`` (``trace_window`` -> ``--trace-window``).

    Fields in ``skip``, and fields with ``metadata["cli"] = False``, get no flag; give them to
    :func:`config_from_args` as overrides. ``defaults`` overrides a field's default for this
    command (its help shows the new default); the caller says why in a comment.

    >>> from lmsci_mi.config import config
    >>> @config
    ... class Demo(Config):
    ...     noise: float = 3.0
    >>> parser = argparse.ArgumentParser()
    >>> add_config_args(parser, Demo, defaults={"noise": 1.0})
    >>> config_from_args(Demo, parser.parse_args([])), config_from_args(Demo, parser.parse_args(["--noise", "2"]))
    (Demo(noise=1.0), Demo(noise=2.0))
    """
    config_type.add_arguments(parser, skip=skip)  # type: ignore[arg-type]
    for name, value in (defaults or {}).items():
        action = next(a for a in parser._actions if a.dest == name)
        action.default = value
        action.help = (action.help or "").replace(
            "(default: ", f"(default here: {value}; the config's: ", 1
        )


def config_from_args(config_type: type[C], args: argparse.Namespace, **overrides: Any) -> C:
    """The config of parsed arguments, with ``overrides`` for fields that have no flag.

    Raises:
        ValueError: the values fail the config's validation; the message names the field.
    """
    return config_type.from_args(args, **overrides)


def add_generation_args(
    parser: argparse.ArgumentParser, *, skip: Sequence[str] = (), **defaults: Any
) -> None:
    """The flags of :class:`GenerationConfig` (``--max-new-tokens``, ``--temperature``, ...)."""
    group = parser.add_argument_group("generation (GenerationConfig)")
    add_config_args(group, GenerationConfig, skip=skip, defaults=defaults)


def generate_from_args(
    lm: LensModel, prompts: Sequence[str], args: argparse.Namespace, *, skip: Sequence[str] = ()
) -> Generations:
    """:func:`lmsci_mi.generation.generate` under the ``GenerationConfig`` of the flags (fields in
    ``skip`` had no flag and keep their defaults); an intervention entered around it applies."""
    names = [f.name for f in dataclasses.fields(GenerationConfig) if f.name not in skip]
    given = argparse.Namespace(**{name: getattr(args, name) for name in names})
    return generate(lm, prompts, config_from_args(GenerationConfig, given))


def load_from_args(args: argparse.Namespace, model: str | None = None) -> LensModel:
    """The model of ``--model``/``--device``/``--sink`` (``model`` replaces ``--model``)."""
    name = model or args.model
    return load_model(name, device=args.device, sink=getattr(args, "sink", DEFAULT_SINK))


# ------------------------------------------------------------------------------ Ray


def add_cluster_args(parser: argparse.ArgumentParser) -> None:
    """``--ray ADDRESS`` and :class:`~lmsci_mi.cluster.ClusterConfig`'s flags (``--shards``,
    ``--workers``, ``--cpus-per-worker``, ...): run the analysis in shards on a Ray cluster
    (:mod:`lmsci_mi.cluster`) instead of in this process. ``--ray`` is the config's ``address``
    and the switch: without it the analysis runs here."""
    from lmsci_mi.cluster import ClusterConfig  # no Ray import: that waits for a run

    group = parser.add_argument_group("sharding over a Ray cluster (pip install 'lmsci-mi[ray]')")
    address = next(f for f in dataclasses.fields(ClusterConfig) if f.name == "address")
    group.add_argument(
        "--ray",
        default=None,
        metavar="ADDRESS",
        help=f"run in shards: {address.metadata['help']} (default: no sharding, in this process)",
    )
    add_config_args(group, ClusterConfig, skip=("address",))


def cluster_from_args(args: argparse.Namespace) -> ClusterConfig | None:
    """The :class:`~lmsci_mi.cluster.ClusterConfig` of ``--ray`` and its flags (None without
    ``--ray``), checked, with Ray's presence, before any model loads.

    Raises:
        ValueError: a cluster flag without ``--ray``, a bad value, or ``--ray`` with a Ray
            address and Ray not installed (the message says how to install it).
    """
    from lmsci_mi.cluster import ClusterConfig

    if args.ray is None:
        given = [
            "--" + f.name.replace("_", "-")
            for f in dataclasses.fields(ClusterConfig)
            if hasattr(args, f.name) and getattr(args, f.name) != f.default
        ]
        if given:
            raise UserInputError(f"{', '.join(given)} shard the work over Ray: give --ray too")
        return None
    cluster = config_from_args(ClusterConfig, args, address=args.ray)
    if cluster.address != "process":  # the one address that runs without Ray
        try:
            import ray  # noqa: F401
        except ModuleNotFoundError:
            raise UserInputError(
                "--ray needs Ray: pip install 'lmsci-mi[ray]' (or pip install ray), or leave out "
                "--ray"
            ) from None
    return cluster

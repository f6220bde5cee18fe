"""The benchmark harness: every benchmark's flags, timing, per-item cache and data file.

A benchmark (see benchmarks/induction.py) reads like this:

    import harness                                    # first: it sets HF_HUB_OFFLINE=1
    from doc_tables.schemas.circuits import InductionData   # the data file's schema, declared once

    run = harness.start(__doc__, __file__, threads=2, flags=add_flags)   # parse; set torch threads
    with run.timed("load"):                           # seconds per step -> the file's "timings"
        lm = load_model(run.args.model)
    cache = run.cache(exclude=["seeds"])              # resumable: keyed by the other flags
    runs = [cache.get(f"seed-{s}", lambda s=s: measure(lm, s)) for s in run.args.seeds]
    run.write(InductionData(...))                     # atomic, "provenance" first

Every script gets --threads (default: what it was always run with), --quick (a small run that
checks it end to end; written under out/quick/ unless --out says otherwise), --out (default
docs/data/<script>.json, or ``start(out=...)``) and --fresh (empty its cache first), and its
``--help`` is its docstring. ``cache.get`` keeps JSON items, ``cache.result`` lmsci-mi results
(``Result.save``/``load``); ``cache.path(item)`` names a file for anything else, and
``cache.load``/``cache.save`` keep a record updated run after run. ``read_json(run.out, {})`` reads the file a script adds sections to.

Every data file under docs/data/ carries a ``provenance`` record (command, date, commit, version,
threads) so that a number in the docs can be traced to the run that made it. Files written before
the harness existed get a reconstructed record from git (``backfill_provenance``):

    python benchmarks/harness.py --backfill                 # every docs/data/*.json without one
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "data"
QUICK = ROOT / "out" / "quick"
"""Where a ``--quick`` run writes by default: a check of the script must not overwrite the docs' data."""
HARNESS_FLAGS = ("threads", "quick", "out", "fresh")
COMMAND_ENV = ("HF_HUB_OFFLINE", "PYTHONPATH")
"""Environment variables that a recorded command shows when they were set (they change what runs)."""

if TYPE_CHECKING:
    from lmsci_mi.results import Result

log = logging.getLogger("benchmarks")
T = TypeVar("T")
R = TypeVar("R", bound="Result")

_ENV = {k: os.environ[k] for k in COMMAND_ENV if k in os.environ}
"""The recorded environment, as the user set it (before the default below)."""
# Benchmarks run offline (the machine has no hub); import the harness before lmsci_mi.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


class Provenance(TypedDict, total=False):
    """The record that opens every data file (``backfilled`` only on reconstructed ones)."""

    command: str
    date: str
    """ISO date the run finished."""
    commit: str | None
    """HEAD when the run started, ``+dirty`` when the tree had changes."""
    version: str | None
    threads: int | None
    backfilled: bool


# --- writing -----------------------------------------------------------------------------------


@contextlib.contextmanager
def atomic(path: Path) -> Iterator[Any]:
    """A text file to write that replaces ``path`` in one step when the block ends: written beside
    it and renamed over it, so an exception or a kill mid-write leaves the old file as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            yield out
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Any, *, ensure_ascii: bool = True) -> None:
    """Write ``data`` as ``json.dumps(indent=1)`` text and a newline, atomically."""
    with atomic(path) as out:
        json.dump(data, out, indent=1, ensure_ascii=ensure_ascii)
        out.write("\n")


def read_json(path: Path, default: Any = None) -> Any:
    """The file's JSON, or ``default`` when it does not exist (a script that adds one section)."""
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else default


# --- git -------------------------------------------------------------------------------------


def flat_params(config: Any) -> dict[str, Any]:
    """``config.params()`` with its nested configs' fields spread into it (their ``None`` fields
    and type names left out): a cache key that stays the one a config had before its sampling
    moved into a nested ``GenerationConfig``, so evaluations cached then are still found.

    >>> from lmsci_mi.steering import SteerEvalConfig
    >>> sorted(flat_params(SteerEvalConfig()))  # doctest: +NORMALIZE_WHITESPACE
    ['attribute', 'batch_size', 'config', 'max_new_tokens', 'n_prompts', 'progress', 'seed',
     'temperature', 'top_p', 'values']
    """
    flat: dict[str, Any] = {}
    for name, value in config.params().items():
        if isinstance(value, dict):
            flat.update({k: v for k, v in value.items() if k != "config" and v is not None})
        else:
            flat[name] = value
    return flat


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()


def git_commit(root: Path = ROOT) -> str | None:
    """HEAD's full sha, with ``+dirty`` when tracked or untracked files differ from it."""
    head = _git(root, "rev-parse", "HEAD")
    if not head:
        return None
    return head + ("+dirty" if _git(root, "status", "--porcelain") else "")


# --- a run -----------------------------------------------------------------------------------


class ItemCache:
    """One JSON file per finished item in ``folder``: a rerun with the same settings skips the
    items already done, so a long benchmark resumes where it was stopped."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def path(self, item: str, suffix: str = ".json") -> Path:
        """The item's file; an item name that is no safe file name gets a hash suffix."""
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", item)
        if safe != item:
            from lmsci_mi.cache import cache_key

            safe += "-" + cache_key(item, length=8)
        return self.folder / f"{safe}{suffix}"

    def __contains__(self, item: str) -> bool:
        return self.path(item).is_file()

    def load(self, item: str, default: Any = None) -> Any:
        """The item's stored value, or ``default`` (a record a script updates run after run)."""
        return read_json(self.path(item), default)

    def save(self, item: str, value: Any) -> None:
        write_json(self.path(item), value)

    def get(self, item: str, compute: Callable[[], T]) -> T:
        """The item's cached result, else ``compute()``'s, written as soon as it returns. Either
        way the value is what the JSON file holds (tuples come back as lists), so a resumed run
        sees the same values as the run that computed them."""
        path = self.path(item)
        if path.is_file():
            log.info("cached: %s", item)
        else:
            write_json(path, compute())
        return json.loads(path.read_text(encoding="utf-8"))

    def result(self, item: str, compute: Callable[[], R]) -> R:
        """The item's cached lmsci-mi result (``Result.save``: JSON and safetensors), else
        ``compute()``'s, saved as soon as it returns."""
        from lmsci_mi.results import Result

        path = self.path(item)
        if path.is_file():
            log.info("cached: %s", item)
            return typing.cast("R", Result.load(path))
        value = compute()
        value.save(path)
        return value


@dataclass
class Timer:
    """What ``Run.timed`` yields: ``seconds`` is set when the block ends."""

    step: str
    seconds: float = 0.0


@dataclass
class Run:
    """One invocation of a benchmark: its parsed flags, where it writes, and its timings."""

    name: str
    """The script's stem: names its default data file and its cache folder."""
    args: argparse.Namespace
    command: str
    commit: str | None
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds per named step (``timed``), written to the data file's ``timings``."""

    @property
    def out(self) -> Path:
        return self.args.out

    @property
    def quick(self) -> bool:
        return self.args.quick

    def settings(self, exclude: Sequence[str] = ()) -> dict[str, Any]:
        """The script's own flags and ``quick``, less ``exclude``: what a cached item depends on.
        Exclude the flag that lists the items (``--seeds``), so that adding items keeps the rest."""
        return {k: str(v) if isinstance(v, Path) else v for k, v in sorted(vars(self.args).items())
                if (k not in HARNESS_FLAGS or k == "quick") and k not in exclude}

    @contextlib.contextmanager
    def timed(self, step: str) -> Iterator[Timer]:
        """Time the block; its seconds go to ``timings[step]`` (summed if the step repeats)."""
        timer = Timer(step)
        began = time.perf_counter()
        try:
            yield timer
        finally:
            timer.seconds = time.perf_counter() - began
            self.timings[step] = self.timings.get(step, 0.0) + timer.seconds
            log.info("%s: %.1f s", step, timer.seconds)

    def cache(self, settings: Mapping[str, Any] | None = None, *, exclude: Sequence[str] = ()) -> ItemCache:
        """The per-item cache of this benchmark and ``settings`` (default: ``self.settings(exclude)``),
        under the lmsci-mi cache root; ``--fresh`` empties it first."""
        from lmsci_mi.cache import cache_key, cache_root

        settings = self.settings(exclude) if settings is None else dict(settings)
        folder = cache_root() / "benchmarks" / self.name / cache_key(settings)
        if self.args.fresh and folder.exists():
            shutil.rmtree(folder)
        cache = ItemCache(folder)
        write_json(folder / "settings.json", settings)
        return cache

    def provenance(self) -> Provenance:
        """The record every data file carries (see module docstring); the date is today's."""
        import torch

        import lmsci_mi

        return Provenance(command=self.command, date=datetime.date.today().isoformat(),
                          commit=self.commit, version=lmsci_mi.__version__, threads=torch.get_num_threads())

    def write(self, data: Mapping[str, Any], path: Path | None = None, *, ensure_ascii: bool = True) -> Path:
        """Write the data file (default ``--out``) atomically: ``provenance`` first, then ``data``,
        then ``timings`` when any step was timed and ``data`` has none of its own."""
        path = self.out if path is None else path
        document = {"provenance": self.provenance(), **{k: v for k, v in data.items() if k != "provenance"}}
        if self.timings and "timings" not in document:
            document["timings"] = {k: round(v, 3) for k, v in self.timings.items()}
        write_json(path, document, ensure_ascii=ensure_ascii)
        log.info("wrote %s", _shown(path))
        return path


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def command_line(script: Path, argv: Sequence[str]) -> str:
    """The command as run: the environment that matters, the interpreter (relative when it is the
    repository's own venv), the script relative to the repository, and its arguments."""
    env = [f"{k}={shlex.quote(v)}" for k, v in _ENV.items()]
    python = Path(sys.executable)
    shown = _shown(python) if python.resolve().is_relative_to(ROOT) else "python"
    return " ".join([*env, shlex.join([shown, _shown(script), *argv])])


def start(
    doc: str | None,
    script: str | Path,
    *,
    threads: int = 2,
    flags: Callable[[argparse.ArgumentParser], None] | None = None,
    out: str | Path | Callable[[argparse.Namespace], Path] | None = None,
    argv: Sequence[str] | None = None,
) -> Run:
    """Parse the benchmark's flags, set torch's threads and logging, and note the commit.

    Args:
        doc: the script's module docstring: the ``--help`` text.
        script: the script's ``__file__``; its stem names the data file and the cache folder.
        threads: ``--threads``' default (what the script has always been run with).
        flags: adds the script's own flags to the parser.
        out: the data file when it is not ``docs/data/<stem>.json``, or a function of the parsed
            flags when they name it (``docs/data/reading_<model>.json``).
        argv: the arguments (default ``sys.argv[1:]``).
    """
    script = Path(script).resolve()
    name = script.stem
    parser = argparse.ArgumentParser(
        prog=_shown(script), description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    common = parser.add_argument_group("harness")
    common.add_argument("--threads", type=int, default=threads, help=f"torch threads (default {threads})")
    common.add_argument("--quick", action="store_true",
                        help=f"a small run that checks the script end to end (writes under {_shown(QUICK)}/)")
    common.add_argument("--out", type=Path, default=None,
                        help="the data file (default "
                        + ("named by the flags" if callable(out) else _shown(Path(out) if out else DATA / f"{name}.json"))
                        + ")")
    common.add_argument("--fresh", action="store_true", help="empty the per-item cache first")
    if flags is not None:
        flags(parser)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.out is None:
        default = Path(out(args)) if callable(out) else Path(out) if out else DATA / f"{name}.json"
        args.out = QUICK / default.name if args.quick else default

    import torch

    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    return Run(name=name, args=args, command=command_line(script, argv), commit=git_commit())


# --- provenance for files written before the harness ---------------------------------------------

BLOCK = re.compile(r"<!-- table: \S+ from (?P<files>.+?) \(written by: (?P<command>.+)\) -->")
OWN_COMMAND_KEYS = ("command", "script")
ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _pages(root: Path) -> list[Path]:
    return [p for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))] if p.is_file()]


def documented_command(path: Path, root: Path = ROOT) -> str | None:
    """The "(written by: ...)" of the docs blocks that read ``path``: the distinct commands of
    the blocks that read it alone, joined by "; ", else its share of a block over several files
    (the n-th of n ";"-separated commands), else that block's whole command."""
    name = _shown_in(path, root)
    alone: list[str] = []
    shared: list[str] = []
    for page in _pages(root):
        for match in BLOCK.finditer(page.read_text(encoding="utf-8")):
            files = [f.strip() for f in match["files"].split(",")]
            if name not in files:
                continue
            command = match["command"].strip()
            if len(files) == 1:
                alone.append(command)
            else:
                parts = [c.strip() for c in command.split(";")]
                shared.append(parts[files.index(name)] if len(parts) == len(files) else command)
    found = alone or shared
    return "; ".join(dict.fromkeys(found)) if found else None


def _shown_in(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def _recorded_date(data: Mapping[str, Any]) -> str | None:
    """The file's own date: its top-level ``date``, else the latest ``date`` one or two levels
    down (files that keep one record per run)."""
    if isinstance(data.get("date"), str) and ISO_DATE.match(data["date"]):
        return data["date"]
    found = []
    for value in data.values():
        children = value.values() if isinstance(value, dict) else []
        for child in [value, *children]:
            if isinstance(child, dict) and isinstance(child.get("date"), str) and ISO_DATE.match(child["date"]):
                found.append(child["date"])
    return max(found, default=None)


def backfilled_provenance(path: Path, root: Path = ROOT) -> Provenance:
    """A reconstructed record for a data file that was not re-run: the commit that last wrote it,
    its command from its own keys or else from the docs, its date from itself or the commit."""
    data = json.loads(path.read_text(encoding="utf-8"))
    relative = _shown_in(path, root)
    commit = _git(root, "log", "-1", "--format=%H", "--", relative) or None
    own = next((data[k] for k in OWN_COMMAND_KEYS if isinstance(data.get(k), str)), None)
    if own is not None and " " not in own:  # generation.json's "script": a bare script path
        own = f"python {own}"
    command = own or documented_command(path, root)
    date = _recorded_date(data) or (_git(root, "log", "-1", "--format=%cs", "--", relative) or None)
    threads = next((data[k] for k in ("threads", "torch_threads") if isinstance(data.get(k), int)), None)
    version = data.get("version") if isinstance(data.get("version"), str) else None
    return Provenance(command=command, date=date, commit=commit, version=version, threads=threads,
                      backfilled=True)


def _format(text: str, data: Any) -> dict[str, Any] | None:
    """How the file was written (``json.dumps(indent=1)``, ASCII or not, final newline), so that
    the rewritten file differs by the added record only; None when it was written otherwise."""
    for ensure_ascii in (True, False):
        dumped = json.dumps(data, indent=1, ensure_ascii=ensure_ascii)
        if text in (dumped, dumped + "\n"):
            return {"ensure_ascii": ensure_ascii, "newline": text.endswith("\n")}
    return None


def backfill_provenance(path: Path, root: Path = ROOT) -> Provenance | None:
    """Give ``path`` a backfilled ``provenance`` record, first in the file, keeping every other
    key and the file's formatting; returns the record, or None when it already has one."""
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    if "provenance" in data:
        return None
    how = _format(text, data)
    if how is None:
        raise ValueError(f"{path} is not json.dumps(indent=1) output; rewrite it by hand")
    record = backfilled_provenance(path, root)
    missing = [k for k in ("command", "date", "commit") if not record[k]]
    if missing:
        raise ValueError(f"{path}: no {', '.join(missing)} found (not in the file, the docs or git)")
    document = {"provenance": record, **data}
    dumped = json.dumps(document, indent=1, ensure_ascii=how["ensure_ascii"]) + ("\n" if how["newline"] else "")
    with atomic(path) as out:
        out.write(dumped)
    return record


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backfill", nargs="*", type=Path, metavar="FILE",
                        help="add a backfilled provenance record to these data files "
                             "(default: every docs/data/*.json without one)")
    args = parser.parse_args(argv)
    if args.backfill is None:
        parser.print_help()
        return 2
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for path in args.backfill or sorted(DATA.glob("*.json")):
        record = backfill_provenance(path)
        if record is not None:
            log.info("%s: %s", _shown(path), json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())

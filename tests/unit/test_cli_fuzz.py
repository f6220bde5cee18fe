"""Property-based test of the whole `lmsci-mi` command: random and malformed arguments for every
subcommand end in exit 0, or exit 2 with a one-line message, never in a traceback.

The arguments come from the parser itself (each subcommand's flags, their types and choices), so
a flag added later is fuzzed too. Values mix sensible ones (prompts, toy model names, heads) with
malformed ones (garbage numbers, unknown names, unwritable paths). Every run uses a toy model and
small counts, and loads each toy once, so the test stays well under a minute.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from tour_args import FAST_STEPS, FAST_TOUR

import lmsci_mi.cli.common
from lmsci_mi.cli import build_parser, main
from lmsci_mi.loading import load_model
from lmsci_mi.model import LensModel

# The suite runs 25 fixed examples per subcommand, unshrunk, so it is deterministic and quick;
# LMSCI_FUZZ_EXAMPLES=300 runs a longer random search that shrinks what it finds.
EXAMPLES = int(os.environ.get("LMSCI_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=EXAMPLES or 25,
    deadline=None,
    derandomize=not EXAMPLES,
    database=None,
    phases=list(Phase) if EXAMPLES else [Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

PROMPTS = [
    "The Eiffel Tower is located in the city of",
    "{} is located in the city of",
    "When Mary and John went to the store, John gave a drink to",
    "When Mary and John went to the store, Mary gave a drink to",
]
SUBJECTS = ["Eiffel Tower", "The Eiffel Tower", "Mary"]
ANSWERS = [" Paris", " Rome", " Mary", " John"]
IOI_PAIR = PROMPTS[2:]  # equal token lengths, as patching needs
HEADS = ["1.1", "0.3,1.2", "L1.H2"]
TEXTS = {
    "--prompt": PROMPTS,
    "--clean": IOI_PAIR,
    "--corrupted": IOI_PAIR,
    "--subject": SUBJECTS,
    "--answer": ANSWERS,
    "--wrong": ANSWERS,
    "--target": ANSWERS,
    "--target-new": ANSWERS,
    "--heads": HEADS,
}
USUALLY_GIVEN = {"--prompt", "--subject", "--target-new"}
"""Optional flags that a run needs together (`edit`), given as often as required ones."""
MALFORMED_TEXTS = [
    "",
    " ",
    "{}",
    "{} {}",
    "1.1",
    "9.9",
    "-1",
    "0",
    "nan",
    "<|endoftext|>",
    "none",
    "💥",
    "a\nb",
]
# (plausible values, malformed values) of the flags that every model-loading command has.
MODELS = (["toy-2l", "toy-gpt2-2l"], ["no-such-model", "", "/", "x.gguf"])
DEVICES = (["cpu"], ["cuda", "gpu", "", "meta"])
SINKS = (["default", "none", "<|im_start|>", " the", "0"], ["999999999", "The cat", ""])
INTS = (["0", "1", "2", "3", "5"], ["-2", "-1", "40", "1.5", "x", "", "1e3"])
FLOATS = (["0.5", "1", "3"], ["-1", "0", "1e-9", "nan", "inf", "x", ""])
# How often a flag gets a malformed value, an optional flag is given, a required flag is left
# out, and a stray argument is added. (sampled_from draws evenly; st.floats favours 0 and 1.)
MALFORMED = st.sampled_from([False] * 5 + [True])
GIVEN = st.sampled_from([True, False, False])
LEFT_OUT = st.sampled_from([False] * 15 + [True])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A scratch folder as the working directory and the cache, with a junk file and a folder."""
    root = tmp_path_factory.mktemp("fuzz")
    (root / "junk.txt").write_text("not a result, not a delta\n")
    (root / "folder").mkdir()
    saved_cwd, saved_cache = Path.cwd(), os.environ.get("LMSCI_MI_CACHE")
    os.chdir(root)
    os.environ["LMSCI_MI_CACHE"] = str(root / "cache")
    yield root
    os.chdir(saved_cwd)
    if saved_cache is None:
        os.environ.pop("LMSCI_MI_CACHE", None)
    else:
        os.environ["LMSCI_MI_CACHE"] = saved_cache


@pytest.fixture(scope="module")
def cached_loads(workdir: Path) -> Iterator[None]:
    """Load each toy once: a fuzz run gets the cached model unless a run left it changed."""
    models: dict[tuple[Any, ...], tuple[LensModel, list[torch.Tensor]]] = {}

    def load(name: str, **kwargs: Any) -> LensModel:
        key = (name, *sorted((k, repr(v)) for k, v in kwargs.items()))
        if key in models:
            lm, weights = models[key]
            unchanged = all(
                torch.equal(p, w) for p, w in zip(lm.model.parameters(), weights, strict=True)
            )
            if unchanged and lm.hooks.attached_count() == 0:
                return lm
        lm = load_model(name, **kwargs)
        models[key] = (lm, [p.detach().clone() for p in lm.model.parameters()])
        return lm

    saved = lmsci_mi.cli.common.load_model
    lmsci_mi.cli.common.load_model = load  # type: ignore[assignment]
    yield
    lmsci_mi.cli.common.load_model = saved


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _pools(action: argparse.Action, root: Path) -> tuple[list[str], list[str]]:
    """Plausible and malformed argument strings for one flag."""
    flag = action.option_strings[-1]
    named = {"--model": MODELS, "--device": DEVICES, "--sink": SINKS}
    if flag in named:
        return named[flag]
    if action.choices is not None:
        return [str(c) for c in action.choices], ["nonsense", ""]
    if action.type is int:
        return INTS
    if action.type is float:
        return FLOATS
    if flag == "--out-dir":  # a folder of its own: a tour must not turn out/p.png into one
        return [str(root / "tour")], [str(root / "junk.txt"), "/dev/null/x", " "]
    # Input files are Paths; output and artefact files are checked paths (cli.common, `X path`).
    if action.type is Path or getattr(action.type, "__name__", "").endswith(("path", "folder")):
        return (
            [
                str(root / "out" / "r.json"),
                str(root / "out" / "p.png"),
                str(root / "out" / "t.csv"),
                str(root / "out" / "v.html"),
            ],
            [
                str(root / "folder"),
                str(root / "junk.txt"),
                str(root / "missing" / "x.bin"),
                "/dev/null/x",
                "",
            ],
        )
    return TEXTS.get(flag, [*PROMPTS, *SUBJECTS, *ANSWERS]), MALFORMED_TEXTS


@st.composite
def _values(draw: Callable[..., Any], action: argparse.Action, root: Path) -> list[str]:
    """One flag with its argument(s): mostly plausible, now and then malformed."""
    if action.nargs == 0:
        return [action.option_strings[0]]
    good, bad = _pools(action, root)
    count = draw(st.integers(1, 3)) if action.nargs in ("+", "*") else 1
    if action.nargs == "+" and draw(MALFORMED):
        count = 0
    values = []
    for _ in range(count):
        if draw(MALFORMED):
            values.append(draw(st.one_of(st.sampled_from(bad), st.text(max_size=8))))
        else:
            values.append(draw(st.sampled_from(good)))
    return [action.option_strings[-1], *values]


@st.composite
def _argv(draw: Callable[..., Any], command: str, root: Path) -> list[str]:
    parser = _subparsers()[command]
    actions = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    argv = [command]
    if any(a.dest == "model" for a in actions):
        argv += ["--model", "toy-2l", "--device", "cpu"]  # never the real model by default
    for action in actions:
        # Required flags are left out now and then, optional ones given now and then.
        usually = action.required or action.option_strings[-1] in USUALLY_GIVEN
        if (not draw(LEFT_OUT)) if usually else draw(GIVEN):
            argv += draw(_values(action, root))
    if draw(MALFORMED):
        argv.append(draw(st.sampled_from(["--bogus", "-x", "extra", "--help", "--"])))
    if command == "tour":
        # The full tour runs every analysis: minutes, not a fuzz case.
        argv += ["--steps", FAST_STEPS]
        if "--report" not in argv:  # drawing every plot takes seconds; test_report.py covers it
            argv += ["--report", "none"]
    return argv


def run_cli(argv: list[str]) -> tuple[int, str]:
    """Exit code and stderr of `lmsci-mi argv`, run in this process."""
    err = io.StringIO()
    with (
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(err),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")  # as on the command line, warnings are not failures
        try:
            code = main(argv)
        except SystemExit as stop:  # argparse: --help, or a usage error
            code = stop.code if isinstance(stop.code, int) else 2
    return code, err.getvalue()


COMMANDS = sorted(_subparsers())
KNOWN_CRASHES: dict[str, str] = {}
"""Crashes found by this test in modules owned elsewhere (cli/editing.py, weights.py,
cli/heads.py, circuits/heads.py, circuits/ioi.py): the subcommand's case stays xfail (not strict) until they are fixed."""


# The full fuzz is slow (minutes); the fast suite fuzzes a few subcommands on a few examples.
QUICK = {"edit": 2, "heads": 2, "patch": 3}


@pytest.mark.parametrize(
    ("command", "examples"),
    [
        pytest.param(
            c,
            FUZZ.max_examples,
            marks=[pytest.mark.slow, pytest.mark.xfail(strict=False, reason=KNOWN_CRASHES[c])],
        )
        if c in KNOWN_CRASHES
        else pytest.param(c, FUZZ.max_examples, marks=pytest.mark.slow)
        for c in COMMANDS
    ]
    + [pytest.param(c, n, id=f"quick-{c}") for c, n in QUICK.items()],
)
def test_every_subcommand_exits_cleanly(
    command: str, examples: int, workdir: Path, cached_loads: None
) -> None:
    @settings(FUZZ, max_examples=examples)
    @given(argv=_argv(command, workdir))
    def check(argv: list[str]) -> None:
        code, err = run_cli(argv)
        # 3 (cli.common.NOT_DONE): an edit ran and said it did not install, which random flags can cause.
        assert code in ((0, 2, 3) if command == "edit" else (0, 2)), (argv, code, err)
        assert "Traceback" not in err, (argv, err)
        if code == 2:
            assert "error:" in err, (argv, err)

    check()


@pytest.mark.slow  # a tour; test_report.py's failing-step tour is the fast suite's
def test_a_bug_still_shows_its_traceback(
    workdir: Path, cached_loads: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only bad input becomes exit 2. A bug in a tour step is no input error: the tour records the
    step as failed, shows the traceback, goes on, and exits 1."""
    import lmsci_mi.cli.core as core

    def broken(lm: LensModel, out_dir: Path) -> str:
        raise RuntimeError("a bug, not bad input")

    monkeypatch.setattr(core, "_step_predictions", broken)
    code, err = run_cli([*FAST_TOUR, "--model", "toy-2l", "--device", "cpu"])
    assert code == 1 and "RuntimeError: a bug" in err and "Traceback" in err
    code, err = run_cli(["tour", "--quick", "--model", "no-such-model"])
    assert code == 2 and "no-such-model" in err and len(err.strip().splitlines()) == 1

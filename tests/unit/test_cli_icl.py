"""`lmsci-mi icl kernel|vectors|regression` on toy-2l: each prints what it measured and writes its
result, the heads it names are the ones dev chooses, bad input (an unknown or pair task, a label
word of several tokens, no demonstrations, a layer out of range) is one line and exit 2 with no
hook left attached, and the tour step reports held-out heads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import lmsci_mi.cli.common
from lmsci_mi import LensModel
from lmsci_mi.cli import main
from lmsci_mi.cli.icl import TOUR_PROMPTS, TOUR_TASK, _step_kernel
from lmsci_mi.icl import (
    ALGORITHMS,
    ICLGainRecovery,
    ICLPromptConfig,
    KernelRegressionConfig,
    KernelRegressionHeads,
    RegressionCurves,
    choose_kr_heads,
    icl_prompts,
    kernel_regression_heads,
)
from lmsci_mi.results import Result

TOY = ["--model", "toy-2l", "--device", "cpu"]
KERNEL = ["icl", "kernel", *TOY, "--n-prompts", "6", "--n-demonstrations", "4"]
TINY_REGRESSION = ["icl", "regression", "--d", "2", "--n-points", "5", "--n-layers", "1", "--d-model", "16",
                   "--n-heads", "2", "--steps", "4", "--batch-size", "8", "--warmup", "1", "--prompts", "40"]


@pytest.fixture
def loaded(tiny: LensModel, monkeypatch: pytest.MonkeyPatch) -> LensModel:
    """The model the commands load: the test's own toy, so it can look at its hooks after."""
    monkeypatch.setattr(lmsci_mi.cli.common, "load_model", lambda *args, **kwargs: tiny)
    return tiny


def _line(out: str, start: str) -> str:
    """The printed line that starts (after its indent) with ``start``."""
    lines = [line for line in out.splitlines() if line.strip().startswith(start.strip())]
    assert len(lines) == 1, (start, out)
    return lines[0]


def test_kernel_names_the_heads_dev_chooses_and_writes_the_held_out_result(
    loaded: LensModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*KERNEL, "--task", "parity", "--out", str(tmp_path / "kr.json")]) == 0
    out = capsys.readouterr().out
    held = Result.load(tmp_path / "kr.json")
    assert isinstance(held, KernelRegressionHeads)
    assert (held.task, held.split, held.n_prompts) == ("parity", "held_out", 6)
    icl = held.interval("icl")
    assert f"{icl.estimate:.2f} [{icl.low:.2f}, {icl.high:.2f}]" in _line(out, "ICL accuracy of the model")
    dev = kernel_regression_heads(loaded, icl_prompts(loaded, "parity", ICLPromptConfig(
        n_demonstrations=4, n_prompts=6)), KernelRegressionConfig())
    choice = choose_kr_heads({"parity": dev})
    for weighting in ("span_max", "label"):
        head = choice.task_best[weighting]["parity"]
        accuracy, agreement = held.interval(weighting, head), held.interval(weighting, head, "model")
        line = _line(out, f"best head, {weighting} weighting: {head} ")
        assert f" {accuracy.estimate:.2f} [{accuracy.low:.2f}, {accuracy.high:.2f}], agreement with ICL " in line
        assert f"ICL {agreement.estimate:.2f} [{agreement.low:.2f}, {agreement.high:.2f}], Pearson r " in line
    assert loaded.hooks.attached_count() == 0


# Each method on the toy, a few seconds together: the whole suite runs it; the tour step's test stays fast.
@pytest.mark.slow
def test_vectors_runs_each_registered_method_and_saves_its_curves(
    loaded: LensModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = {"task_vector": ["--n-prompts", "3"],
                "function_vector": ["--n-prompts", "3", "--n-mean-prompts", "4", "--n-aie-prompts", "2",
                                    "--n-top-heads", "2", "--no-cache"]}
    for method, flags in settings.items():
        path = tmp_path / f"{method}.json"
        assert main(["icl", "vectors", method, *TOY, "--layers", "1", *flags, "--out", str(path)]) == 0
        result = Result.load(path)
        assert isinstance(result, ICLGainRecovery)
        assert (result.method, result.task, result.best_layer, result.held_out.layers) == (method, "antonyms", 1, (1,))
        assert f"{method} on antonyms (toy-2l), layer 1 (chosen on dev)" in capsys.readouterr().out
    assert loaded.hooks.attached_count() == 0


@pytest.mark.slow  # trains twice (about 1.5 s): the whole suite runs it
def test_regression_trains_once_then_loads_and_compares_with_least_squares(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path / "cache"))
    assert main([*TINY_REGRESSION, "--out", str(tmp_path / "errors.json")]) == 0
    first = capsys.readouterr().out
    assert "training the regression transformer (4 steps" in first and "trained: 4 steps" in first
    errors = Result.load(tmp_path / "errors.json")
    assert isinstance(errors, RegressionCurves)
    assert list(errors.axis_labels(0)) == ["model", *ALGORITHMS] and errors.n_prompts == 40
    # n = 2d = 4 is the last point a 5-point prompt predicts: the printed row is the curve's
    model = errors.at("model", 4)
    assert f"model          {model[0]:.3f} [{model[1]:.3f}, {model[2]:.3f}]" in first
    assert "model / least squares at n = 4: " in first
    assert main(TINY_REGRESSION) == 0
    second = capsys.readouterr().out.splitlines()
    # The cached weights give the same figures: training line and --out's line aside, the same lines.
    assert second[0].startswith("cached: 4 steps") and second[1:] == first.splitlines()[2:-1]
    assert main([*TINY_REGRESSION[:-4], "--steps", "5", "--no-train"]) == 2
    assert "no trained regression model cached" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["icl", "kernel", *TOY, "--task", "no_such_task"], "sentiment"),
        (["icl", "kernel", *TOY, "--task", "antonyms"], "needs a classification task"),
        (["icl", "vectors", "task_vector", *TOY, "--task", "facts:no_such_relation"], "no_such_relation"),
        ([*KERNEL, "--n-demonstrations", "0"], "needs demonstrations"),
        ([*TINY_REGRESSION, "--retrain", "--no-train"], "give one of them"),
        ([*TINY_REGRESSION, "--d-model", "15"], "multiple of n_heads"),
    ],
    ids=["unknown task", "pair task", "unknown relation", "no demonstrations", "retrain and no-train", "bad shape"],
)
def test_input_that_needs_no_model_fails_before_one_loads(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_model(*args: object, **kwargs: object) -> None:
        raise AssertionError("bad input loaded a model")

    monkeypatch.setattr(lmsci_mi.cli.common, "load_model", no_model)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*KERNEL, "--label-words", "positive,supercalifragilistic"], "must be one token"),
        ([*KERNEL, "--layers", "0,2"], "layer 2 does not exist"),
        (["icl", "vectors", "function_vector", *TOY, "--layers", "7", "--no-cache"], "layer 7 does not exist"),
        (["icl", "vectors", "task_vector", *TOY, "--task", "topic"], "one token"),
    ],
    ids=["label word of several tokens", "kernel layer", "vector layer", "label words in Hendel's format"],
)
def test_bad_input_on_a_model_is_one_line_and_leaves_no_hook(
    argv: list[str], message: str, loaded: LensModel, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert loaded.hooks.attached_count() == 0


def test_the_tour_step_reports_held_out_heads_chosen_on_dev(tiny: LensModel, tmp_path: Path) -> None:
    output = _step_kernel(tiny, tmp_path)
    held = output.results["icl_kernel_heads"]
    assert isinstance(held, KernelRegressionHeads)
    assert (held.task, held.split, held.n_prompts) == (TOUR_TASK, "held_out", TOUR_PROMPTS.n_prompts)
    assert "\n" not in output.summary
    icl = re.search(r"ICL accuracy (\d\.\d\d)", output.summary)
    assert icl is not None and float(icl.group(1)) == round(held.interval("icl").estimate, 2)
    assert "best head, span_max weighting" in output.text and list(tmp_path.iterdir()) == []

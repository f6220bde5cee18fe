"""`lmsci-mi outliers massive|super-weights|sinks|mask|ablate|length` and `heads --kind sink` on
toy-2l: each prints what it measured and writes its result, the figures printed are the result's,
bad input is one line and exit 2 (before a model loads where no model is needed) with no hook left
attached and the weights as they were, and the tour step reports what it found."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import lmsci_mi.cli.common
from lmsci_mi import LensModel
from lmsci_mi.circuits.heads import HeadScoreConfig, HeadScores
from lmsci_mi.cli import main
from lmsci_mi.cli.outliers import (
    TOUR_TEXTS,
    _step_outliers,
    ablation_plan,
    first_appearances,
)
from lmsci_mi.outliers import (
    FirstTokenMaskEffect,
    LambdaMaskConfig,
    MassiveActivations,
    MassiveConfig,
    MassiveCoordinate,
    NLLByPosition,
    NLLByPositionConfig,
    OutlierAblations,
    OutlierPositions,
    SinkHeads,
    SinkScoreConfig,
    SuperWeightCandidates,
    SuperWeightConfig,
    SuperWeightCoordinate,
    find_massive_activations,
    find_super_weights,
    lambda_mask,
    long_text,
    nll_by_position,
    sink_scores,
)
from lmsci_mi.results import Result

TOY = ["--model", "toy-2l", "--device", "cpu"]
# The toy's random weights hold nothing above the paper's rule: a low one finds entries to test on.
LOW_RULE = ["--threshold", "1", "--ratio", "4"]
SMALL_ABLATION = ["--n-texts", "3", "--seq-len", "16", "--text-start", "2", "--n-reference-texts", "1",
                  "--n-control-draws", "1", "--n-facts", "3", "--n-ioi", "2", "--n-resamples", "20"]
SMALL_LENGTH = ["--n-texts", "2", "--length", "64", "--window", "8", "--in-context-start", "4",
                "--in-context-stop", "32", "--chunk-size", "16"]


@pytest.fixture
def loaded(tiny: LensModel, monkeypatch: pytest.MonkeyPatch) -> LensModel:
    """The model the commands load: the test's own toy, so it can look at its hooks after."""
    monkeypatch.setattr(lmsci_mi.cli.common, "load_model", lambda *args, **kwargs: tiny)
    return tiny


def _weights(lm: LensModel) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in lm.model.named_parameters()}


def _unchanged(lm: LensModel, before: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(p, before[name]) for name, p in lm.model.named_parameters())


def test_massive_and_super_weights_print_and_save_what_the_library_finds(
    loaded: LensModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _weights(loaded)
    texts = ["The cat sat on the mat.\nIt slept.", "A dog ran. Then it sat down."]
    argv = ["outliers", "massive", *TOY, "--text", texts[0], "--text", texts[1], *LOW_RULE]
    assert main([*argv, "--out", str(tmp_path / "m.json")]) == 0
    found = Result.load(tmp_path / "m.json")
    assert isinstance(found, MassiveActivations) and found.n_texts == 2
    direct = find_massive_activations(loaded, texts, MassiveConfig(threshold=1, ratio=4))
    assert found.entries == direct.entries and len(found.selected("paper")) > 0
    out = capsys.readouterr().out
    assert f"{len(direct.selected('paper'))} entries;" in out and "text: 2 given texts" in out

    assert main(["outliers", "super-weights", *TOY, "--threshold", "0.5", "--max-candidates", "2",
                 "--out", str(tmp_path / "sw.json")]) == 0
    weights = Result.load(tmp_path / "sw.json")
    assert isinstance(weights, SuperWeightCandidates)
    assert weights.coordinates() == find_super_weights(loaded, SuperWeightConfig(threshold=0.5, max_candidates=2)).coordinates()
    assert len(weights.candidates) == 2 and "2 found" in capsys.readouterr().out
    assert _unchanged(loaded, before) and loaded.hooks.attached_count() == 0


def test_heads_kind_sink_is_the_registered_sink_score(
    loaded: LensModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["heads", *TOY, "--kind", "sink", "--n-sequences", "2", "--out", str(tmp_path / "s.json")]) == 0
    scores = Result.load(tmp_path / "s.json")
    assert isinstance(scores, HeadScores) and scores.head_kind == "sink"
    assert torch.equal(scores.values, sink_scores(loaded, config=HeadScoreConfig(n_sequences=2)).values)


@pytest.mark.slow  # three small analyses on the toy, some 2 s together: the whole suite runs them
def test_sinks_mask_and_length_measure_what_their_functions_do(
    loaded: LensModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["outliers", "sinks", *TOY, "--n-texts", "3", "--seq-len", "16", "--out", str(tmp_path / "s.json")]) == 0
    heads = Result.load(tmp_path / "s.json")
    assert isinstance(heads, SinkHeads) and heads.n_texts == 3
    (head, score), = heads.top(1)
    assert f"{head.label:>8}  {score:.3f}  {float(heads.values[1, head.layer, head.head]):.3f}" in capsys.readouterr().out

    mask = ["outliers", "mask", *TOY, "--n-texts", "3", "--seq-len", "16", "--skip-texts", "2", "--top", "2",
            "--n-random-draws", "1", "--n-resamples", "20", "--out", str(tmp_path / "mask.json")]
    assert main(mask) == 0
    effect = Result.load(tmp_path / "mask.json")
    chosen = sink_scores(loaded, config=SinkScoreConfig(n_texts=2, seq_len=16)).top(2)
    assert isinstance(effect, FirstTokenMaskEffect) and effect.heads == tuple(h for h, _ in chosen)
    assert f"{'2 heads together':>24}  {effect.together}" in capsys.readouterr().out

    assert main(["outliers", "length", *TOY, *SMALL_LENGTH, "--lambda-mask", "--local-window", "8",
                 "--n-global", "2", "--out", str(tmp_path / "nll.json")]) == 0
    curve = Result.load(tmp_path / "nll.json")
    config = NLLByPositionConfig(window=8, in_context_start=4, in_context_stop=32, chunk_size=16)
    with lambda_mask(loaded, LambdaMaskConfig(local_window=8, n_global=2)):
        masked = nll_by_position(loaded, long_text(loaded, 2, 64), config)
    plain = nll_by_position(loaded, long_text(loaded, 2, 64), config)
    assert isinstance(curve, NLLByPosition) and torch.allclose(curve.per_text, masked.per_text, equal_nan=True)
    out = capsys.readouterr().out
    assert f"{plain.rise.in_context_mean:>22.4f}  {masked.rise.in_context_mean:>22.4f}" in out
    assert "window 8, first 2 tokens, distance cap 8" in out and "Λ-mask: the NLL" in out
    assert loaded.hooks.attached_count() == 0


@pytest.mark.slow  # five conditions and their controls on the toy, about 1 s: the whole suite runs it
def test_ablate_runs_each_intervention_against_its_control_and_restores_the_model(
    loaded: LensModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _weights(loaded)
    argv = ["outliers", "ablate", *TOY, "--massive", "0:5,1:5", "--super-weights", "1:7:30", *SMALL_ABLATION,
            "--out", str(tmp_path / "a.json")]
    assert main(argv) == 0
    result = Result.load(tmp_path / "a.json")
    assert isinstance(result, OutlierAblations)
    assert result.interventions == ("zero 2 massive", "zero L1.W_out[col 30, row 7]",
                                    "zero L1.W_out[col 30, row 7], restore its activation")
    assert [len(result.controls_of(name)) for name in result.interventions] == [1, 1, 1]
    out = capsys.readouterr().out
    assert "acting at positions [0]" in out and f"perplexity x{result.effect('zero 2 massive').perplexity_ratio}" in out
    assert _unchanged(loaded, before) and loaded.hooks.attached_count() == 0


def test_ablation_plan_takes_each_dimension_where_it_first_appears(tiny: LensModel) -> None:
    found = find_massive_activations(tiny, long_text(tiny, 2, 24).tokens, MassiveConfig(threshold=1, ratio=4))
    coords = first_appearances(found)
    by_dim = {}
    for entry in found.selected("paper"):
        by_dim[entry.dim] = min(by_dim.get(entry.dim, 99), entry.layer)
    assert coords == tuple(sorted(MassiveCoordinate(layer, dim) for dim, layer in by_dim.items()))
    plan = ablation_plan(coords[:1], [SuperWeightCoordinate(1, 7, 30)], OutlierPositions(), restore=False)
    assert list(plan) == [f"zero massive {coords[0]}", "zero L1.W_out[col 30, row 7]"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["outliers", "massive", *TOY, "--n-texts", "0"], "--n-texts 0: give 1 or more"),
        (["outliers", "mask", *TOY, "--skip-texts", "0"], "give --skip-texts 1 or more, or name --heads"),
        (["outliers", "ablate", *TOY, "--positions", ""], "selects nothing"),
        (["outliers", "length", *TOY, "--n-texts", "1"], "--n-texts 1: give 2 or more"),
    ],
    ids=["no texts", "top heads on no rows", "no positions", "one text"],
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


def test_malformed_coordinates_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["outliers", "ablate", *TOY, "--massive", "1:2:3"])  # a weight's triple for an activation
    assert stop.value.code == 2 and "give layer:dim pairs, e.g. 1:5,2:5" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["outliers", "mask", *TOY, "--heads", "L5.H0"], "head L5.H0 does not exist"),
        (["outliers", "ablate", *TOY, "--super-weights", "1:70:30", *SMALL_ABLATION], "outside W_out"),
        (["outliers", "length", *TOY, *SMALL_LENGTH, "--lambda-mask", "--layers", "5"], "do not exist"),
    ],
    ids=["unknown head", "weight outside W_out", "mask layer"],
)
def test_bad_input_on_a_model_is_one_line_and_leaves_the_model_as_it_was(
    argv: list[str], message: str, loaded: LensModel, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _weights(loaded)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert loaded.hooks.attached_count() == 0 and _unchanged(loaded, before)


def test_a_result_of_another_kind_is_refused(
    loaded: LensModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    find_super_weights(loaded, SuperWeightConfig(max_candidates=1)).save(tmp_path / "sw.json")
    assert main(["outliers", "ablate", *TOY, "--massive-from", str(tmp_path / "sw.json")]) == 2
    assert "a SuperWeightCandidates, not the result of `lmsci-mi outliers massive --out`" in capsys.readouterr().err


def test_the_tour_step_reports_what_it_found(tiny: LensModel, tmp_path: Path) -> None:
    output = _step_outliers(tiny, tmp_path)
    massive, weights, sinks = (output.results[k] for k in ("outliers_massive", "outliers_super_weights", "outliers_sinks"))
    assert isinstance(massive, MassiveActivations) and massive.n_texts == TOUR_TEXTS[0]
    assert isinstance(weights, SuperWeightCandidates) and isinstance(sinks, SinkHeads)
    assert "\n" not in output.summary and list(tmp_path.iterdir()) == []
    # The toy's random weights meet neither rule; its best sink head is named with its score.
    assert "no activation meets the paper's rule in 8 texts" in output.summary
    assert "no super-weight candidate" in output.summary
    (head, score), = sinks.top(1)
    assert f"top sink head {head}: {score:.2f}" in output.summary

"""Super-weight candidates (Yu et al. 2024) on toys with planted super weights: the raw
down-projection output on pre- and post-norm blocks, the coordinates found, the iterative removal,
exact restoration (also on error) and bad input."""

from __future__ import annotations

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.errors import UserInputError
from lmsci_mi.outliers import (
    SuperWeightCandidates,
    SuperWeightConfig,
    down_proj_output_hooks,
    find_super_weights,
)
from lmsci_mi.outliers import super_weights as module
from lmsci_mi.sites import hook_name
from lmsci_mi.weights import WeightEdit

LAYER, ROW, COL = 1, 5, 17
TOYS = ["tiny", "tiny_post_norm"]


def _plant(lm: LensModel, rows: dict[int, float]) -> None:
    """Make input channel COL of LAYER's down-projection spike (its gate and linear columns scaled)
    and write into the output channels ``rows`` only, through the weights ``rows`` gives."""
    mlp = lm.model.blocks[LAYER].mlp
    with torch.no_grad():
        mlp.W_gate[:, COL] *= 40
        mlp.W_in[:, COL] *= 40
        mlp.W_out[COL, :] = 0.0
        for row, value in rows.items():
            mlp.W_out[COL, row] = value


def _snapshot(lm: LensModel) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in lm.model.named_parameters()}


def _unchanged(lm: LensModel, snapshot: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(p, snapshot[name]) for name, p in lm.model.named_parameters())


def _check_output_hooks(lm: LensModel) -> None:
    """The hooks of the raw down-projection output give ``hook_post @ W_out + b_out``."""
    outputs = down_proj_output_hooks(lm, LAYER)
    post = hook_name("mlp_post", LAYER)
    with lm.hooks.capture([post, *outputs]) as cap:
        lm(lm.to_tokens("The cat sat on the mat."))
    raw = cap[outputs[-1]] * (cap[outputs[0]] if len(outputs) == 2 else 1.0)
    mlp = lm.model.blocks[LAYER].mlp
    torch.testing.assert_close(raw, cap[post] @ mlp.W_out + mlp.b_out, rtol=1e-5, atol=1e-5)
    # Gemma-shaped: hook_mlp_out is after the post-MLP norm, so it is not the raw output.
    assert (len(outputs) == 2) == lm.cfg.use_normalization_before_and_after


@pytest.mark.parametrize("toy", TOYS)
def test_a_planted_super_weight_is_found_and_the_model_restored(
    toy: str, request: pytest.FixtureRequest
) -> None:
    lm: LensModel = request.getfixturevalue(toy)
    _check_output_hooks(lm)
    _plant(lm, {ROW: 2.0})
    before = _snapshot(lm)
    found = find_super_weights(lm, SuperWeightConfig(threshold=20))
    assert found.coordinates() == [(LAYER, ROW, COL)]
    (c,) = found.candidates
    assert c.weight == 2.0 and c.w_out_index == (LAYER, COL, ROW) and c.iteration == 0
    assert c.above_threshold and c.input_position == c.position
    assert c.super_activation == c.output_spike == float(found.values[LAYER, 1])
    # The weight is all of the output channel's input from the spiking channel.
    assert c.contribution == pytest.approx(c.output_spike, rel=0.05)
    assert found.tokens[c.position] == c.token and found.tokens[0] == lm.sink
    # Removed, the output spike is gone; the input spike (upstream of the weight) is not.
    assert abs(float(found.passes[-1, LAYER, 1])) < 20 < abs(float(found.passes[-1, LAYER, 0]))
    assert found.stop_reason == "no further layer spikes in both its input and its output"
    assert _unchanged(lm, before) and lm.hooks.attached_count() == 0
    assert WeightEdit.applied_to(lm) == ()


def test_the_search_repeats_after_each_removal(tiny: LensModel, tmp_path) -> None:
    # Two weights from one input channel, as Llama-3-8B's (1, 788, 2427) and (1, 1384, 2427).
    _plant(tiny, {ROW: 2.0, 40: -1.5})
    before = _snapshot(tiny)
    found = find_super_weights(tiny, SuperWeightConfig(threshold=20, max_candidates=3))
    assert found.coordinates() == [(LAYER, ROW, COL), (LAYER, 40, COL)]
    assert [c.iteration for c in found.candidates] == [0, 1] and found.candidates[1].weight == -1.5
    assert found.passes.shape == (3, 2, 2)  # unedited, one removed, both removed
    assert _unchanged(tiny, before)

    once = find_super_weights(tiny, SuperWeightConfig(threshold=20, max_candidates=1))
    assert once.coordinates() == [(LAYER, ROW, COL)] and once.stop_reason == "max_candidates (1) reached"
    assert SuperWeightCandidates.load(found.save(tmp_path / "sw.json")) == found
    assert list(found.to_dataframe()[["layer", "row", "col"]].itertuples(index=False, name=None)) == [
        (LAYER, ROW, COL), (LAYER, 40, COL)]
    assert len(found.plot().axes) == 2


def test_the_ratio_rule_is_reported_beside_the_threshold(tiny: LensModel) -> None:
    _plant(tiny, {ROW: 2.0})
    by_threshold = find_super_weights(tiny, SuperWeightConfig(threshold=1e5))
    assert by_threshold.candidates == () and by_threshold.stop_reason.startswith("no layer spikes")
    by_ratio = find_super_weights(tiny, SuperWeightConfig(threshold=1e5, rule="ratio", ratio=50))
    (c,) = by_ratio.candidates
    assert (c.layer, c.row, c.col) == (LAYER, ROW, COL)
    assert c.above_ratio and not c.above_threshold and min(c.input_ratio, c.output_ratio) >= 50


def test_weights_and_hooks_are_restored_when_a_pass_fails(
    tiny: LensModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    _plant(tiny, {ROW: 2.0, 40: -1.5})
    before = _snapshot(tiny)
    scan = module._scan
    calls = []

    def failing(*args: object) -> object:
        calls.append(1)
        if len(calls) == 2:  # after the first candidate was removed
            raise RuntimeError("boom")
        return scan(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(module, "_scan", failing)
    with pytest.raises(RuntimeError, match="boom"):
        find_super_weights(tiny, SuperWeightConfig(threshold=20))
    assert _unchanged(tiny, before) and WeightEdit.applied_to(tiny) == ()
    assert tiny.hooks.attached_count() == 0


BAD_CONFIG = [
    ({"threshold": 0.0}, "SuperWeightConfig.threshold must be > 0"),
    ({"ratio": -1.0}, "SuperWeightConfig.ratio must be > 0"),
    ({"max_candidates": 0}, "SuperWeightConfig.max_candidates must be >= 1"),
    ({"rule": "both"}, "SuperWeightConfig.rule must be one of"),
]


def test_bad_input_is_named(tiny: LensModel, monkeypatch: pytest.MonkeyPatch) -> None:
    for fields, message in BAD_CONFIG:
        with pytest.raises(UserInputError, match=message):
            SuperWeightConfig(**fields)
    for fields, message in [({"layers": (0, 2)}, "layer 2 does not exist"), ({"prompt": "  "}, "empty prompt")]:
        with pytest.raises(UserInputError, match=message):
            find_super_weights(tiny, SuperWeightConfig(**fields))
    monkeypatch.setattr(tiny.model.cfg, "attn_only", True)  # what the check reads
    with pytest.raises(UserInputError, match="attention-only"):
        find_super_weights(tiny)

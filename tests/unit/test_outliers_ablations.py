"""Outlier ablations (issue 40, item 2): each intervention touches only its coordinates, restores
the model exactly (also when the body raises), draws seeded controls of the requested count and
magnitude, refuses bad input, and the measurement's clean NLL is the model's own."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.data.text_corpus import text_chunks
from lmsci_mi.errors import UserInputError
from lmsci_mi.outliers.ablations import (
    MassiveActivationAblation,
    MassiveCoordinate,
    OutlierAblationConfig,
    OutlierAblations,
    OutlierPositions,
    SuperWeightCoordinate,
    SuperWeightRestoreActivation,
    SuperWeightScaling,
    ablate_massive_activations,
    massive_means,
    outlier_ablations,
    random_massive_controls,
    random_weight_controls,
    remove_super_weight_restore_activation,
    scale_super_weights,
    super_activation,
)
from lmsci_mi.sites import hook_name

TOKENS = torch.tensor([[0, 5, 6, 5, 7], [0, 8, 5, 9, 9]])
PROSE = ["The quick brown fox jumps over the lazy dog, and the dog sleeps on in the sun. " * 3]


def _state(lm: LensModel) -> dict[str, torch.Tensor]:
    # The blocks' weights, copied: every intervention here edits W_out or hooks a block, and
    # copying the 49152-token embedding and unembedding too would double each test's time.
    return {name: param.detach().clone() for name, param in lm.model.named_parameters()
            if name.startswith("blocks.")}


def _assert_restored(lm: LensModel, before: dict[str, torch.Tensor]) -> None:
    assert lm.hooks.attached_count() == 0 and not lm.hooks.active()
    after = dict(lm.model.named_parameters())
    assert all(torch.equal(after[name], value) for name, value in before.items())


def _capture(lm: LensModel, sites: list[str], tokens: torch.Tensor = TOKENS) -> dict[str, torch.Tensor]:
    with lm.hooks.capture(sites) as cap:
        lm(tokens)
    return {site: cap[site] for site in sites}


INTERVENTIONS: dict[str, Callable[[LensModel], AbstractContextManager[Any]]] = {
    "massive": lambda lm: ablate_massive_activations(lm, [(0, 5), (1, 9)]),
    "scale": lambda lm: scale_super_weights(lm, [(1, 7, 30), (1, 8, 30)], 2.0),
    "restore": lambda lm: remove_super_weight_restore_activation(lm, (0, 7, 30), 3.0),
}


def test_every_intervention_restores_the_model_on_exit_and_on_error(tiny: LensModel) -> None:
    before, clean = _state(tiny), tiny(TOKENS)
    for name, intervention in INTERVENTIONS.items():
        with intervention(tiny):
            assert not torch.equal(tiny(TOKENS), clean), name  # it did something
        _assert_restored(tiny, before)
        with pytest.raises(RuntimeError, match="inside"), intervention(tiny):
            raise RuntimeError("inside the block")
        _assert_restored(tiny, before)
    with INTERVENTIONS["massive"](tiny), INTERVENTIONS["scale"](tiny):  # nested blocks unwind too
        tiny(TOKENS)
    _assert_restored(tiny, before)
    assert torch.equal(tiny(TOKENS), clean)


def test_zeroing_massive_activations_touches_the_planted_coordinates_only(tiny: LensModel) -> None:
    site = hook_name("resid_post", 0)
    clean = _capture(tiny, [site])[site]
    where = OutlierPositions(positions=(0,), token_ids=(5,))
    with ablate_massive_activations(tiny, [MassiveCoordinate(0, 5), (0, 11)], positions=where):
        ablated = _capture(tiny, [site])[site]
    changed = (ablated != clean).nonzero().tolist()
    selected = where.mask(TOKENS)  # position 0 and the token 5's: (0,0) (0,1) (0,3) (1,0) (1,2)
    assert selected.sum() == 5
    expected = sorted([b, p, d] for b, p in selected.nonzero().tolist() for d in (5, 11))
    assert sorted(changed) == expected
    assert bool((ablated[..., [5, 11]][selected] == 0).all())
    # Sun et al.'s set_mean: the mean over the reference's selected positions is what is written.
    site = hook_name("resid_post", 1)
    means = massive_means(tiny, TOKENS, [(1, 3)])
    assert means[0] == pytest.approx(float(_capture(tiny, [site])[site][:, 0, 3].double().mean()))
    with ablate_massive_activations(tiny, [(1, 3)], values=means):
        ablated = _capture(tiny, [site])[site]
    assert torch.allclose(ablated[:, 0, 3], torch.full((2,), means[0]))


def test_scaling_a_super_weight_and_restoring_its_activation(tiny: LensModel) -> None:
    w_out = tiny.model.blocks[1].mlp.W_out
    before = w_out.detach().clone()
    with scale_super_weights(tiny, [SuperWeightCoordinate(1, row=7, col=30)], 0.5):
        changed = (w_out.detach() != before).nonzero().tolist()
        assert changed == [[30, 7]]  # TransformerLens's W_out[col, row]
        assert float(w_out[30, 7].detach()) == pytest.approx(0.5 * float(before[30, 7]))
    # Yu et al.'s removeSW_restoreSA on a pre-norm model: hook_mlp_out is the raw output.
    layer, row, col = 0, 7, 30
    site = hook_name("mlp_out", layer)
    clean_out = _capture(tiny, [site])[site]
    clean = super_activation(tiny, TOKENS, (layer, row, col))
    assert torch.equal(clean, clean_out[..., row])
    with scale_super_weights(tiny, [(layer, row, col)], 0.0):
        removed = _capture(tiny, [site])[site]
    with remove_super_weight_restore_activation(tiny, (layer, row, col), clean):
        restored = _capture(tiny, [site])[site]
    assert torch.equal(restored[:, 0], clean_out[:, 0])  # position 0: as with the weight
    assert torch.equal(restored[:, 1:], removed[:, 1:])  # elsewhere: as without it
    assert not torch.equal(removed[:, 0], clean_out[:, 0])


def test_restoring_the_super_activation_through_a_post_norm(tiny_post_norm: LensModel) -> None:
    lm, weight = tiny_post_norm, (1, 4, 9)
    with torch.no_grad():
        lm.model.blocks[1].mlp.W_out[9, 4] = 5.0  # a planted super weight (W_out[col, row])
    site = hook_name("mlp_out", 1)  # after Gemma's ln2_post: the raw output has no hook
    clean_out = _capture(lm, [site])[site]
    clean = super_activation(lm, TOKENS, weight)
    with scale_super_weights(lm, [weight], 0.0):
        removed = _capture(lm, [site])[site]
        assert not torch.allclose(super_activation(lm, TOKENS, weight), clean)
    with remove_super_weight_restore_activation(lm, weight, clean):
        restored = _capture(lm, [site])[site]
    assert torch.allclose(restored[:, 0], clean_out[:, 0], atol=1e-5)
    assert not torch.allclose(removed[:, 0], clean_out[:, 0], atol=1e-3)
    assert torch.equal(restored[:, 1:], removed[:, 1:])


def test_controls_are_seeded_in_the_same_layers_and_of_equal_magnitude(tiny: LensModel) -> None:
    candidates = [(0, 5), (0, 6), (1, 9)]
    draws = random_massive_controls(tiny, candidates, n_draws=4, seed=3)
    assert draws == random_massive_controls(tiny, candidates, n_draws=4, seed=3)
    assert draws != random_massive_controls(tiny, candidates, n_draws=4, seed=4)
    assert len(draws) == 4
    for draw in draws:
        assert [c.layer for c in draw] == [0, 0, 1] and len(set(draw)) == 3
        assert not {(c.layer, c.dim) for c in draw} & set(candidates)
    # Weight controls: from the entries of the same W_out closest in |value| (planted: equal).
    w_out = tiny.model.blocks[1].mlp.W_out
    planted = [(3, 1), (40, 2), (100, 63), (7, 7), (200, 0), (55, 20)]  # W_out[col, row] entries
    with torch.no_grad():
        w_out[30, 7] = 5.0
        for i, (col, row) in enumerate(planted):
            w_out[col, row] = 5.0 if i % 2 else -5.0
    draws = random_weight_controls(tiny, [(1, 7, 30)], n_draws=5, seed=0, pool=len(planted))
    assert draws == random_weight_controls(tiny, [(1, 7, 30)], n_draws=5, seed=0, pool=len(planted))
    assert len(draws) == 5 and len({d[0] for d in draws}) == 5  # distinct while the pool lasts
    for (weight,) in draws:
        assert (weight.col, weight.row) in planted and weight != SuperWeightCoordinate(1, 7, 30)
        assert abs(float(w_out[weight.col, weight.row].detach())) == 5.0


BAD_INPUT: list[tuple[Callable[[LensModel], AbstractContextManager[Any]], str]] = [
    (lambda lm: ablate_massive_activations(lm, [(2, 5)]), "layer 2 does not exist"),
    (lambda lm: ablate_massive_activations(lm, [(0, 64)]), "dimension 64"),
    (lambda lm: ablate_massive_activations(lm, []), "no massive activations"),
    (lambda lm: ablate_massive_activations(lm, [(0, 1)], values=[1.0, 2.0]), "2 values for 1"),
    (lambda lm: scale_super_weights(lm, [(2, 3, 4)], 0.0), "layer 2 does not exist"),
    (lambda lm: scale_super_weights(lm, [(0, 64, 3)], 0.0), "outside W_out"),
    (lambda lm: scale_super_weights(lm, [(0, 3, 256)], 0.0), "outside W_out"),
    (lambda lm: scale_super_weights(lm, [(0, 3, 4)], -0.5), "scale must be"),
    (lambda lm: scale_super_weights(lm, [(0, 3, 4), (0, 3, 4)], 0.0), "given twice"),
    (lambda lm: remove_super_weight_restore_activation(lm, (0, 3, 999), 1.0), "outside W_out"),
]


def test_bad_input_is_refused_clearly_and_changes_nothing(tiny: LensModel) -> None:
    before = _state(tiny)
    for make, message in BAD_INPUT:
        with pytest.raises(UserInputError, match=message), make(tiny):
            pass
        _assert_restored(tiny, before)
    bad_values = torch.zeros(3, 3)  # found at the forward pass: the block still cleans up
    with pytest.raises(UserInputError, match="clean super-activation values of shape"), \
            remove_super_weight_restore_activation(tiny, (0, 7, 30), bad_values):
        tiny(TOKENS)
    _assert_restored(tiny, before)
    with pytest.raises(UserInputError, match="n_reference_texts"):
        OutlierAblationConfig(text_start=2, n_reference_texts=3)
    with pytest.raises(UserInputError, match="selects nothing"):
        OutlierPositions(positions=())


def test_ablations_measure_against_clean_and_controls(tiny: LensModel, tmp_path: Any) -> None:
    config = OutlierAblationConfig(n_texts=2, seq_len=8, text_start=1, n_reference_texts=1,
                                   n_control_draws=1, control_pool=8, n_facts=2, n_ioi=1,
                                   batch_size=4, n_resamples=20, massive_fill="mean")
    before = _state(tiny)
    result = outlier_ablations(tiny, {
        "identity": SuperWeightScaling(((1, 7, 30),), scale=1.0),
        "massive": MassiveActivationAblation(((0, 5),)),
        "restore": SuperWeightRestoreActivation((0, 7, 30)),
    }, config, documents=PROSE)
    _assert_restored(tiny, before)
    assert result.values.shape == (7, 2) and result.fact_correct.shape == (7, 2)
    assert result.kinds == ("clean", *("intervention", "control") * 3)
    assert result.controls_of("massive") == ("massive / random 0",)
    reference = text_chunks(tiny, 7, seq_len=8, documents=PROSE)[:1]  # chunk 0: set_mean's means
    (mean,) = massive_means(tiny, reference, [(0, 5)])
    assert f"[{round(mean, 4)}]" in result.descriptions[result.conditions.index("massive")]
    # The clean NLL is the model's own: next-token log-probs of the held-out chunk.
    chunk = text_chunks(tiny, 3 * 7, seq_len=8, documents=PROSE)[1:3]
    log_probs = tiny(chunk).float().log_softmax(-1)[:, :-1].gather(-1, chunk[:, 1:, None])[..., 0]
    assert torch.allclose(result.values[0], -log_probs.double().mean(-1), atol=1e-5)
    identity = result.effect("identity")  # scaling by 1 changes nothing: exactly the clean numbers
    assert identity.perplexity_ratio.estimate == 1.0 and identity.control_ratio.draws == (1.0,)
    assert identity.fact_accuracy == result.fact_accuracy()
    assert len(result.report()) == 3
    saved = result.save(tmp_path / "ablations")
    assert OutlierAblations.load(saved) == result

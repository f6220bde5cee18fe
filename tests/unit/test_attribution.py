"""Attribution patching on the tiny models: equal to a hand-written gradient × difference, the
same layout as exact patching, its rank correlation reported, and no gradients or hooks left."""

from __future__ import annotations

import pytest
import scipy.stats
import torch

from lmsci_mi import LensModel
from lmsci_mi.circuits import (
    AttributionConfig,
    LogitDiff,
    PatchingConfig,
    attribution_patch,
    patch_activations,
)
from lmsci_mi.circuits.attribution import spearman

CLEAN = "When Mary and John went, John gave it to"
CORRUPTED = "When Mary and John went, Mary gave it to"


def _metric(lm: LensModel) -> LogitDiff:
    return LogitDiff(lm.token_id(" Mary"), lm.token_id(" John"))


def test_equals_gradient_times_difference(tiny: LensModel) -> None:
    metric = _metric(tiny)
    names = [f"blocks.{layer}.attn.hook_z" for layer in range(tiny.cfg.n_layers)]
    _, clean_cache = tiny.model.run_with_cache(tiny.to_tokens(CLEAN))
    _, corr_cache = tiny.model.run_with_cache(tiny.to_tokens(CORRUPTED))
    expected = []
    for name in names:
        # d metric / d z by perturbing the corrupted run's z with a leaf tensor.
        z = corr_cache[name].clone().requires_grad_(True)
        with tiny.hooks.hooks(fwd=[(name, lambda act, hook, z=z: z)]):
            logits = tiny.model(tiny.to_tokens(CORRUPTED))
        (grad,) = torch.autograd.grad(metric(logits[:, -1]).mean(), z)
        delta = clean_cache[name] - corr_cache[name]
        expected.append((delta * grad).sum(dim=(0, 1, 3)))
    with torch.no_grad():
        corrupted_value = float(metric(tiny.model(tiny.to_tokens(CORRUPTED))[:, -1]).mean())
    res = attribution_patch(tiny, CLEAN, CORRUPTED, metric, AttributionConfig(site="z"))
    torch.testing.assert_close(
        res.values, torch.stack(expected).detach().cpu() + corrupted_value, atol=1e-4, rtol=0
    )


@pytest.mark.parametrize(
    ("site", "positions"),
    [("z", "all"), ("resid_pre", "each"), ("pattern", "each"), ("k", "all"), ("mlp_out", "all")],
)
def test_same_layout_as_exact_patching(tiny: LensModel, site: str, positions: str) -> None:
    metric = _metric(tiny)
    approx = attribution_patch(tiny, CLEAN, CORRUPTED, metric,
                               AttributionConfig(site=site, positions=positions))
    exact = patch_activations(tiny, CLEAN, CORRUPTED, metric,
                              PatchingConfig(site=site, positions=positions))
    assert approx.axes == exact.axes and approx.labels == exact.labels
    assert approx.values.shape == exact.values.shape
    assert approx.corrupted_value == pytest.approx(exact.corrupted_value, abs=1e-4)


def test_rank_correlation_is_reported(tiny: LensModel) -> None:
    res = attribution_patch(tiny, CLEAN, CORRUPTED, _metric(tiny),
                            AttributionConfig(site="z", compare_exact=True))
    assert res.exact is not None and res.exact.axes == res.axes
    exact = patch_activations(tiny, CLEAN, CORRUPTED, _metric(tiny),
                              PatchingConfig(site="z", positions="all"))
    assert torch.equal(res.exact.values, exact.values)
    # Spearman from scipy, an implementation independent of ours.
    expected = scipy.stats.spearmanr(res.values.flatten().numpy(), exact.values.flatten().numpy())
    assert res.rank_correlation == pytest.approx(float(expected.statistic), abs=1e-9)
    plain = attribution_patch(tiny, CLEAN, CORRUPTED, _metric(tiny))
    assert plain.exact is None and plain.rank_correlation is None


def test_spearman_equals_scipy_with_ties() -> None:
    a = torch.tensor([3.0, 1.0, 2.0, 2.0, 5.0, 1.0])
    b = torch.tensor([0.5, 0.1, 0.3, 0.9, 0.2, 0.1])
    assert spearman(a, b) == pytest.approx(float(scipy.stats.spearmanr(a, b).statistic), abs=1e-12)


def test_named_positions_equal_the_plain_attribution_there(tiny: LensModel) -> None:
    metric = _metric(tiny)
    plain = attribution_patch(tiny, CLEAN, CORRUPTED, metric, AttributionConfig(site="z", positions="each"))
    named = attribution_patch(tiny, CLEAN, CORRUPTED, metric, AttributionConfig(site="z", positions="each"),
                              align={"S2": (7, 7), "END": (-1, -1)})
    assert named.labels[1] == ("S2", "END")
    torch.testing.assert_close(named.values[:, 0], plain.values[:, 7])
    torch.testing.assert_close(named.values[:, 1], plain.values[:, -1])


def test_one_clean_and_one_corrupted_forward(tiny: LensModel) -> None:
    calls = []
    with tiny.hooks.hooks(fwd=[("hook_embed", lambda act, hook: calls.append(act.shape[0]))]):
        attribution_patch(tiny, CLEAN, CORRUPTED, _metric(tiny))
    assert calls == [1, 1]


def test_leaves_no_gradients_or_hooks(tiny: LensModel) -> None:
    before = {n: p.detach().clone() for n, p in tiny.model.named_parameters()}
    attribution_patch(tiny, CLEAN, CORRUPTED, _metric(tiny), AttributionConfig(site="v", positions="each"))
    assert all(p.grad is None for p in tiny.model.parameters())
    assert all(torch.equal(p, before[n]) for n, p in tiny.model.named_parameters())
    assert tiny.hooks.attached_count() == 0


def test_bad_input(tiny: LensModel) -> None:
    with pytest.raises(ValueError, match="site must be one of"):
        attribution_patch(tiny, CLEAN, CORRUPTED, _metric(tiny), AttributionConfig(site="heads"))
    with pytest.raises(ValueError, match="align="):
        attribution_patch(
            tiny, CLEAN, "When Mary and John went out, Mary gave it to", _metric(tiny)
        )
    assert tiny.hooks.attached_count() == 0


def test_spearman_handles_ties_and_order() -> None:
    assert spearman(torch.arange(5.0), torch.arange(5.0) ** 3) == pytest.approx(1.0)
    assert spearman(torch.arange(5.0), -torch.arange(5.0)) == pytest.approx(-1.0)
    assert spearman(torch.tensor([1.0, 1.0, 2.0]), torch.tensor([1.0, 1.0, 2.0])) == pytest.approx(
        1.0
    )

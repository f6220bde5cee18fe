"""Circuits on SmolLM2 (slow): batched patching equals TransformerLens's own patcher on a reduced
sweep, the Eiffel Tower trace behaves like the paper's, and bad input leaves no hook behind. The
deterministic figures are pinned (tests/data/pins.json, benchmarks/pins.py)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from transformer_lens import patching as tl_patching

from lmsci_mi import LensModel
from lmsci_mi.circuits import (
    LogitDiff,
    PatchingConfig,
    TraceConfig,
    causal_trace,
    patch_activations,
)
from tests.pins import Measured, check_pins, measure

pytestmark = pytest.mark.slow

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"
EIFFEL = "The Eiffel Tower is located in the city of"


def _tl_subset(lm: LensModel, metric: LogitDiff, setter, name: str, axes, ranges) -> torch.Tensor:
    # TransformerLens's generic patcher on a subset of its (layer, ...) grid keeps this test short.
    _, cache = lm.model.run_with_cache(lm.to_tokens(CLEAN))
    index = pd.MultiIndex.from_product(ranges, names=axes).to_frame(index=False)
    out = tl_patching.generic_activation_patch(
        lm.model,
        lm.to_tokens(CORRUPTED),
        cache,
        lambda logits: metric(logits[:, -1]).mean(),
        setter,
        name,
        index_df=index,
    )
    return out.reshape(*[len(r) for r in ranges]).cpu()


def test_resid_pre_equals_transformer_lens(clean_smollm2: LensModel) -> None:
    lm = clean_smollm2
    metric = LogitDiff(lm.token_id(" Mary"), lm.token_id(" John"))
    layers = [0, 14, 29]
    n_pos = lm.to_tokens(CLEAN).shape[1]
    expected = _tl_subset(
        lm,
        metric,
        tl_patching.layer_pos_patch_setter,
        "resid_pre",
        ["layer", "pos"],
        [layers, list(range(n_pos))],
    )
    ours = patch_activations(lm, CLEAN, CORRUPTED, metric, PatchingConfig(site="resid_pre", layers=tuple(layers)))
    torch.testing.assert_close(ours.values, expected, atol=1e-4, rtol=0)
    # The IOI answer is a real effect: the clean logit difference favours Mary, the corrupted one John.
    assert ours.clean_value > 2 and ours.corrupted_value < -2


def test_head_out_all_pos_equals_transformer_lens(clean_smollm2: LensModel) -> None:
    lm = clean_smollm2
    metric = LogitDiff(lm.token_id(" Mary"), lm.token_id(" John"))
    layers = [12, 25]
    expected = _tl_subset(
        lm,
        metric,
        tl_patching.layer_head_vector_patch_setter,
        "z",
        ["layer", "head"],
        [layers, list(range(lm.cfg.n_heads))],
    )
    ours = patch_activations(lm, CLEAN, CORRUPTED, metric,
                             PatchingConfig(site="z", positions="all", layers=tuple(layers)))
    torch.testing.assert_close(ours.values, expected, atol=1e-4, rtol=0)


@pytest.fixture(scope="module")
def attribution(smollm2: LensModel) -> Measured:
    return measure("attribution", smollm2)


def test_attribution_ranks_heads_like_exact_patching(clean_smollm2: LensModel, attribution: Measured) -> None:
    res = attribution.result
    assert res.rank_correlation is not None and res.values.numel() == 270  # every head
    # docs/circuits.md and the README: Spearman 0.963 with exact head patching on this pair.
    check_pins("attribution", attribution, clean_smollm2.device)


def test_attribution_robustness_band(attribution: Measured) -> None:
    """Robustness, not the pin: a bootstrap over the 270 heads (2,000 resamples) gives s.d. 0.014
    around 0.9634 (three other name pairs of the same template: 0.954, 0.974, 0.953). The bound
    is the measured value - 3 s.d."""
    assert attribution.result.rank_correlation > 0.922


def test_eiffel_trace_is_sensible(clean_smollm2: LensModel) -> None:
    lm = clean_smollm2
    measured = measure("eiffel_trace", lm)  # resid only, 4 noise samples, seed 0
    trace = measured.result
    check_pins("eiffel_trace", measured, lm.device)
    assert trace.clean_prob > 0.5
    assert trace.corrupted_prob < trace.clean_prob / 2  # the noise destroys the fact
    resid = trace.kind_values("resid")
    gap = trace.clean_prob - trace.corrupted_prob
    # Restoring the subject's tokens in early layers brings the fact back (Meng et al. Fig. 1; on
    # SmolLM2 it is carried by " E|iffel", not the last subject token " Tower"), as does restoring
    # the last token in late layers; restoring a token before the subject does nothing.
    subject = list(trace.subject_positions)
    assert float(resid[:5, subject].max()) > trace.corrupted_prob + 0.3 * gap
    assert float(resid[-5:, -1].max()) > trace.corrupted_prob + 0.8 * gap
    # Before the subject the engine runs no row at all; the naive loop (full forward passes)
    # shows that is right.
    from lmsci_mi.circuits.tracing import naive_causal_trace

    naive = naive_causal_trace(lm, trace, layers=[0, 29])
    torch.testing.assert_close(naive[0, :, 1], resid[[0, 29], 1], atol=1e-5, rtol=0)


def test_bad_input_leaves_no_hook(clean_smollm2: LensModel) -> None:
    lm = clean_smollm2
    with pytest.raises(ValueError, match="not in the prompt"):
        causal_trace(lm, EIFFEL, "Big Ben")
    with pytest.raises(ValueError, match="one token is needed"):
        causal_trace(lm, EIFFEL, "Eiffel Tower", TraceConfig(target=" Paris, France"))
    metric = LogitDiff(lm.token_id(" Mary"), lm.token_id(" John"))
    with pytest.raises(ValueError, match="site must be one of"):
        patch_activations(lm, CLEAN, CORRUPTED, metric, PatchingConfig(site="heads"))
    with pytest.raises(ValueError, match="align="):
        patch_activations(
            lm, CLEAN, "When Mary and John went to the big store, Mary gave a drink to", metric
        )
    assert lm.hooks.attached_count() == 0

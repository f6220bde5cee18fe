"""LM-Infinite's length diagnostics (lmsci_mi/outliers/length.py): the "NLL starts to rise" rule on
synthetic curves, each diagnostic against a brute-force computation on the normal attention path,
the same numbers through the chunked path and under the Λ-mask, and the trained-context table."""

from __future__ import annotations

import math

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.errors import UserInputError
from lmsci_mi.outliers.lambda_mask import LambdaMaskConfig, lambda_mask
from lmsci_mi.outliers.length import (
    TRAINED_CONTEXT,
    AttentionCurvesConfig,
    NLLByPositionConfig,
    SeparationConfig,
    attention_length_curves,
    first_token_separation,
    long_text,
    nll_by_position,
    nll_rise,
    trained_context,
    window_excess,
)
from lmsci_mi.sites import hook_name

# ----------------------------------------------------------------------------- the rise rule


def _noisy(n_texts: int, n_pos: int, sd: float = 0.1, seed: int = 0) -> torch.Tensor:
    return 2.0 + sd * torch.randn(n_texts, n_pos, generator=torch.Generator().manual_seed(seed))


def test_the_rise_is_the_first_window_past_the_context_that_clears_two_standard_errors() -> None:
    curve = _noisy(8, 400)
    curve[:, 300:] += 0.5  # a step at 300, far above 2 SE of 8 texts' window means
    rise = nll_rise(curve, window=20, in_context=(10, 200), stride=10)
    ends = rise.window_ends.tolist()
    assert ends[0] == 220 and rise.in_context == (10, 200)  # windows [L - 20, L) past the context
    # [290, 310) holds 10 raised tokens: +0.25 on average, some 30 standard errors; [280, 300) none.
    assert rise.length == 310
    assert float(rise.excess[ends.index(300)]) == pytest.approx(0.0, abs=0.03)
    assert float(rise.excess[ends.index(310)]) == pytest.approx(0.25, abs=0.03)
    assert float(rise.excess[ends.index(320)]) == pytest.approx(0.5, abs=0.03)


def test_a_flat_curve_and_a_bump_inside_the_context_never_rise() -> None:
    curve = _noisy(8, 400)
    assert nll_rise(curve, window=50, in_context=(10, 200), n_se=4.0).length is None
    bumped = curve.clone()
    bumped[:, 50:100] += 3.0  # inside the in-context range: raises the reference, never a window
    assert nll_rise(bumped, window=50, in_context=(10, 200)).length is None


def test_the_standard_error_is_over_texts() -> None:
    curve = _noisy(6, 300, sd=0.01)
    shift = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, -0.9])[:, None]  # the mean rises by 0.017
    curve[:, 200:] += shift  # ...but the texts disagree: no rise by the texts' SE
    assert nll_rise(curve, window=20, in_context=(10, 150)).length is None
    curve[:, 200:] = curve[:, 200:] - shift + 0.05  # every text rises by 0.05
    assert nll_rise(curve, window=20, in_context=(10, 150)).length == 210  # [190, 210): half risen


def test_one_texts_windows_are_the_rules_arithmetic() -> None:
    curve = _noisy(3, 300)
    curve[:, 200:] += 0.5
    rise = nll_rise(curve, window=20, in_context=(10, 150))
    ends, reference, difference = window_excess(curve, window=20, in_context=(10, 150))
    assert torch.equal(ends, rise.window_ends) and torch.allclose(difference.mean(0), rise.excess)
    assert float(reference.mean()) == pytest.approx(rise.in_context_mean)
    one = window_excess(curve[:1], window=20, in_context=(10, 150))[2]  # one text is enough here
    assert torch.equal(one[0], difference[0])


def test_the_rule_refuses_what_it_cannot_measure() -> None:
    with pytest.raises(UserInputError, match="at least 2 texts"):
        nll_rise(_noisy(1, 100), window=10, in_context=(1, 50))
    with pytest.raises(UserInputError, match="1 <= start < stop <= 100"):
        nll_rise(_noisy(3, 100), window=10, in_context=(0, 50))
    with pytest.raises(UserInputError, match="must exceed in_context_start"):
        NLLByPositionConfig(in_context_start=64, in_context_stop=32)


# ----------------------------------------------------------------------------- diagnostics


def _text(lm: LensModel, n_pos: int = 30) -> torch.Tensor:
    """3 rows of random tokens behind the sink (the stdlib text's first read costs seconds)."""
    body = torch.randint(0, 1000, (3, n_pos - 1), generator=torch.Generator().manual_seed(n_pos))
    return torch.cat([torch.full((3, 1), lm.sink_token_id), body], dim=1)


def _brute_force_curves(lm: LensModel, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[layer, text, pos] running max logit by distance and entropy by position, by loops."""
    n_layers, n_pos = lm.cfg.n_layers, tokens.shape[1]
    sites = [hook_name(s, layer) for layer in range(n_layers) for s in ("attn_scores", "pattern")]
    with torch.no_grad(), lm.hooks.capture(sites) as cap:
        lm.model(tokens, stop_at_layer=n_layers)
    most = torch.full((n_layers, tokens.shape[0], n_pos), -math.inf)
    entropy = torch.zeros(n_layers, tokens.shape[0], n_pos)
    for layer in range(n_layers):
        scores, pattern = cap[hook_name("attn_scores", layer)], cap[hook_name("pattern", layer)]
        for d in range(n_pos):
            diagonal = torch.diagonal(scores, offset=-d, dim1=-2, dim2=-1)  # [text, head, n_pos - d]
            most[layer, :, d] = diagonal.amax(dim=(1, 2))
        p = pattern.clamp_min(1e-30)
        entropy[layer] = -(pattern * p.log()).sum(-1).mean(1)
    return torch.cummax(most, dim=-1).values, entropy


@pytest.mark.parametrize("toy", ["tiny", "tiny_gemma3"])
def test_max_logit_and_entropy_curves_match_brute_force_through_chunks(toy: str, request: pytest.FixtureRequest) -> None:
    lm: LensModel = request.getfixturevalue(toy)
    tokens = _text(lm)
    most, entropy = _brute_force_curves(lm, tokens)
    curves = attention_length_curves(lm, tokens, AttentionCurvesConfig(chunk_size=7, batch_size=2))
    torch.testing.assert_close(curves.max_logit.values, most.mean(1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(curves.max_logit.std, most.std(1), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(curves.entropy.values, entropy.mean(1), atol=1e-5, rtol=1e-5)
    assert curves.entropy.n_texts == 3 and curves.max_logit.axes == ("layer", "distance")
    assert curves.max_logit.meta.data_source == "token ids given" and curves.max_logit.meta.sink == lm.sink


def test_under_the_lambda_mask_entropy_is_bounded_by_the_window(tiny: LensModel) -> None:
    tokens = _text(tiny, 40)
    with lambda_mask(tiny, LambdaMaskConfig(local_window=4, n_global=0)):
        curves = attention_length_curves(tiny, tokens, AttentionCurvesConfig(chunk_size=8))
    assert float(curves.entropy.values[:, 4:].max()) <= math.log(4) + 1e-5  # 4 keys at most
    plain = attention_length_curves(tiny, tokens, AttentionCurvesConfig(chunk_size=None))
    assert float(plain.entropy.values[:, -1].min()) > math.log(4)  # and without it, more
    assert tiny.hooks.attached_count() == 0


def test_first_token_separation_by_hand(tiny_gemma3: LensModel) -> None:
    lm = tiny_gemma3
    tokens = _text(lm)
    cfg = SeparationConfig(first_k=2, chunk_size=8)
    sep = first_token_separation(lm, tokens, cfg)
    with torch.no_grad(), lm.hooks.capture(hook_name("resid_post", 1)) as cap:
        lm.model(tokens, stop_at_layer=2)
    x = cap[hook_name("resid_post", 1)].double()
    centre = x[:, 2:].mean(1, keepdim=True)
    spread = (x[:, 2:] - centre).pow(2).sum(-1).mean(1).sqrt()
    first = ((x[:, :2] - centre).norm(dim=-1) / spread[:, None]).mean(1)
    assert float(sep.values[1]) == pytest.approx(float(first.mean()), rel=1e-5)
    assert float(sep.std[1]) == pytest.approx(float(first.std()), rel=1e-4)
    coords = sep.pca[1]
    assert sep.pca.shape == (2, 30, 2) and bool((coords[0] >= 0).all())
    assert float(coords[:, 0].var()) >= float(coords[:, 1].var()) and 0 < float(sep.explained[1].sum()) <= 1
    with pytest.raises(UserInputError, match="first_k 29 leaves too few"):
        first_token_separation(lm, tokens, SeparationConfig(first_k=29))


def test_nll_by_position_is_the_models_own_through_chunks(tiny: LensModel) -> None:
    text = long_text(tiny, 3, 40)  # the standard library's prose
    tokens = text.tokens
    with torch.no_grad():
        log_probs = tiny.model(tokens).log_softmax(-1)
    expected = -log_probs[:, :-1].gather(-1, tokens[:, 1:, None])[..., 0]
    cfg = NLLByPositionConfig(window=4, in_context_start=2, in_context_stop=20, chunk_size=6, logits_chunk=7)
    curve = nll_by_position(tiny, text, cfg)
    assert curve.meta.data_source.startswith("python3.") and bool((tokens[:, 0] == tiny.sink_token_id).all())
    torch.testing.assert_close(curve.per_text[:, 1:], expected, atol=1e-4, rtol=1e-5)
    assert math.isnan(float(curve.values[0])) and curve.rise.in_context == (2, 20)
    assert curve.rise.window_ends.tolist() == [24, 28, 32, 36, 40]
    assert curve.trained_length == 256 and "not in TRAINED_CONTEXT" in curve.trained_length_source
    with pytest.raises(UserInputError, match="integer tensor"):
        nll_by_position(tiny, tokens[0], cfg)


# ----------------------------------------------------------------------------- trained length


def test_the_trained_context_table_states_its_sources() -> None:
    smol, gemma = TRAINED_CONTEXT["smollm2-135m"], TRAINED_CONTEXT["gemma3-270m"]
    assert (smol.trained_length, smol.n_ctx, smol.rotary_base) == (8192, 8192, 100000.0)
    assert (gemma.trained_length, gemma.n_ctx, gemma.sliding_window) == (32768, 8192, 512)
    assert (gemma.rotary_base, gemma.rotary_base_local) == (1e6, 1e4)
    assert "[unverified" in smol.source and smol.pretraining_length == 2048


def test_a_model_outside_the_table_uses_its_config(tiny_gemma3: LensModel) -> None:
    row = trained_context(tiny_gemma3)
    assert (row.trained_length, row.sliding_window, row.rotary_base_local) == (64, 6, 1e4)

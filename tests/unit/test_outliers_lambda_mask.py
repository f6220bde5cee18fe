"""LM-Infinite's Λ-shaped mask (lmsci_mi/outliers/lambda_mask.py) against a reference written here
from the paper's description: ordinary scores inside the window, the first tokens scored with the
query rotated at the cap and the key un-rotated, the rest masked; global layers only on Gemma 3;
the model restored exactly on exit."""

from __future__ import annotations

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.errors import UserInputError
from lmsci_mi.long_context import chunked_attention
from lmsci_mi.outliers.lambda_mask import LambdaMask, LambdaMaskConfig, lambda_mask
from lmsci_mi.sites import hook_name
from tests.fixtures import weights_fingerprint

N_POS = 24


def _rotate(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Rotary as Llama/GPT-NeoX pair dimensions (i, i + d/2), written from the formula."""
    half = x.shape[-1] // 2
    inv_freq = base ** (-torch.arange(half, dtype=torch.float64) / half)
    angle = positions.double()[:, None] * inv_freq[None]  # [pos, half]
    cos, sin = angle.cos()[None, :, None].float(), angle.sin()[None, :, None].float()
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def _reference(q: torch.Tensor, k: torch.Tensor, mask: LambdaMask, base: float, scale: float) -> torch.Tensor:
    """[batch, head, query, key] Λ-masked scores from pre-rotary q [b, pos, head, d], k [b, pos, kv, d]."""
    n = q.shape[1]
    k = k.repeat_interleave(q.shape[2] // k.shape[2], dim=2)
    pos = torch.arange(n)
    ordinary = torch.einsum("bqhd,bkhd->bhqk", _rotate(q, pos, base), _rotate(k, pos, base)) / scale
    capped = torch.einsum("bqhd,bkhd->bhqk", _rotate(q, torch.full((n,), mask.distance_cap), base), k) / scale
    distance = pos[:, None] - pos[None, :]
    local = (distance >= 0) & (distance < mask.local_window)
    first = (distance >= mask.local_window) & (pos[None, :] < mask.n_global)
    out = torch.where(local, ordinary, torch.where(first, capped, torch.tensor(float("-inf"))))
    return out


def _scores_under_mask(lm: LensModel, cfg: LambdaMaskConfig, chunk: int | None, layer: int):
    tokens = torch.randint(0, 1000, (2, N_POS), generator=torch.Generator().manual_seed(1))
    sites = [hook_name("q", layer), hook_name("k", layer)]
    blocks: list[torch.Tensor] = []
    seen = [(hook_name("attn_scores", layer), lambda s, hook: blocks.append(s))]
    # The recording hook is attached after the mask's hooks, so it sees the masked scores.
    with torch.no_grad(), lambda_mask(lm, cfg) as mask, lm.hooks.capture(sites) as cap, lm.hooks.hooks(fwd=seen):
        if chunk is None:
            lm.model(tokens, stop_at_layer=layer + 1)
        else:
            with chunked_attention(lm, chunk):
                lm.model(tokens, stop_at_layer=layer + 1)
    return torch.cat(blocks, dim=2), cap[sites[0]], cap[sites[1]], mask


@pytest.mark.parametrize("chunk", [None, 5])
def test_scores_match_the_papers_mask_on_the_normal_and_the_chunked_path(tiny: LensModel, chunk: int | None) -> None:
    cfg = LambdaMaskConfig(local_window=6, n_global=3, distance_cap=6)
    scores, q, k, mask = _scores_under_mask(tiny, cfg, chunk, layer=1)
    assert mask == LambdaMask(layers=(0, 1), local_window=6, n_global=3, distance_cap=6)
    expected = _reference(q, k, mask, base=tiny.cfg.rotary_base, scale=tiny.model.blocks[1].attn.attn_scale)
    torch.testing.assert_close(scores, expected, atol=1e-5, rtol=1e-5)
    assert torch.isinf(scores[0, 0, 20, 5]) and torch.isfinite(scores[0, 0, 20, 2])  # masked; a first token


def test_gemma3_masks_its_global_layers_only_with_their_rotary_base(tiny_gemma3: LensModel) -> None:
    lm = tiny_gemma3
    cfg = LambdaMaskConfig(local_window=5, n_global=2)
    scores, q, k, mask = _scores_under_mask(lm, cfg, None, layer=1)
    assert mask.layers == (1,)  # layer 0 is a sliding-window layer
    attn = lm.model.blocks[1].attn
    q_pre, k_pre = attn._apply_qk_norm(q, attn.q_norm), attn._apply_qk_norm(k, attn.k_norm)
    expected = _reference(q_pre, k_pre, mask, base=1e6, scale=attn.attn_scale)
    torch.testing.assert_close(scores, expected, atol=1e-5, rtol=1e-5)
    tokens = torch.randint(0, 1000, (1, N_POS))
    with torch.no_grad(), lm.hooks.capture(hook_name("attn_scores", 0)) as plain:
        lm.model(tokens, stop_at_layer=1)
    with torch.no_grad(), lambda_mask(lm, cfg), lm.hooks.capture(hook_name("attn_scores", 0)) as masked:
        lm.model(tokens, stop_at_layer=1)
    assert torch.equal(plain[hook_name("attn_scores", 0)], masked[hook_name("attn_scores", 0)])
    with pytest.raises(UserInputError, match="sliding-window layers already"), lambda_mask(lm, cfg.replace(layers=(0,))):
        pass


def test_a_window_that_covers_the_text_changes_nothing(tiny: LensModel) -> None:
    tokens = torch.randint(0, 1000, (1, N_POS))
    with torch.no_grad():
        plain = tiny.model(tokens, stop_at_layer=2)
        with lambda_mask(tiny, LambdaMaskConfig(local_window=N_POS, n_global=4)):
            masked = tiny.model(tokens, stop_at_layer=2)
    assert torch.equal(plain, masked)


def test_the_model_is_restored_exactly_also_after_an_error(tiny: LensModel) -> None:
    before = weights_fingerprint(tiny)
    with pytest.raises(RuntimeError, match="boom"), lambda_mask(tiny, LambdaMaskConfig(local_window=4)):
        tiny.model(torch.randint(0, 1000, (1, 12)), stop_at_layer=2)
        raise RuntimeError("boom")
    assert tiny.hooks.attached_count() == 0 and weights_fingerprint(tiny) == before


def test_bad_input_gets_a_clear_error(tiny: LensModel, tiny_gpt2: LensModel) -> None:
    with pytest.raises(UserInputError, match="rotary"), lambda_mask(tiny_gpt2):
        pass
    with pytest.raises(UserInputError, match="layers \\[5\\] do not exist"), lambda_mask(tiny, LambdaMaskConfig(layers=(5,))):
        pass
    with pytest.raises(UserInputError, match="n_global must be >= 0"):
        LambdaMaskConfig(n_global=-1)
    with pytest.raises(UserInputError, match="cached generation"), lambda_mask(tiny, LambdaMaskConfig(local_window=2)):
        tiny.generate("The cat sat on the", max_new_tokens=2)
    assert tiny.hooks.attached_count() == 0

"""The query-chunked attention path and long inputs (lmsci_mi/long_context.py): the normal path's
numbers on Llama- and Gemma-3-shaped toys (grouped queries, a sliding-window layer, two rotary
bases, q/k norms), per-block score hooks, rotary tables past n_ctx, and exact restoration."""

from __future__ import annotations

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.errors import UserInputError
from lmsci_mi.long_context import (
    QueryChunk,
    attention_layers,
    chunked_attention,
    current_query_chunk,
    extended_rotary,
    pre_rotary,
    rotate_at,
)
from lmsci_mi.sites import hook_name


def _resid(lm: LensModel, tokens: torch.Tensor) -> torch.Tensor:
    """The last block's output: every attention layer has acted, and no [pos, vocab] logits."""
    return lm.model(tokens, stop_at_layer=lm.cfg.n_layers)


def _tokens(n_pos: int, batch: int = 2) -> torch.Tensor:
    return torch.randint(0, 1000, (batch, n_pos), generator=torch.Generator().manual_seed(n_pos))


def _untouched(lm: LensModel, tables: list[tuple[torch.Tensor, torch.Tensor]]) -> bool:
    attns = [block.attn for block in lm.model.blocks]
    return (
        all("forward" not in attn.__dict__ for attn in attns)
        and all(a.rotary_sin is s and a.rotary_cos is c for a, (s, c) in zip(attns, tables, strict=True))
        and lm.hooks.attached_count() == 0
    )


def _tables(lm: LensModel) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(block.attn.rotary_sin, block.attn.rotary_cos) for block in lm.model.blocks]


@pytest.mark.parametrize("toy", ["tiny", "tiny_gemma3"])
def test_chunked_attention_gives_the_normal_paths_logits_and_restores_the_model(
    toy: str, request: pytest.FixtureRequest
) -> None:
    lm: LensModel = request.getfixturevalue(toy)
    tables = _tables(lm)
    tokens = _tokens(40)  # 40 > the Gemma toy's window of 6; 7 does not divide 40
    with torch.no_grad():
        normal = _resid(lm, tokens)
        with chunked_attention(lm, chunk_size=7):
            assert all("forward" in block.attn.__dict__ for block in lm.model.blocks)
            chunked = _resid(lm, tokens)
    torch.testing.assert_close(chunked, normal, atol=1e-5, rtol=1e-5)
    assert _untouched(lm, tables)


def test_score_hooks_fire_per_block_with_the_blocks_queries(tiny_gemma3: LensModel) -> None:
    lm, tokens = tiny_gemma3, _tokens(20, batch=1)
    site = hook_name("pattern", 0)  # the local layer: the window must hold in every block
    blocks: list[tuple[QueryChunk | None, torch.Tensor]] = []
    with torch.no_grad():
        with lm.hooks.capture([site, hook_name("z", 0)]) as normal:
            _resid(lm, tokens)
        with chunked_attention(lm, chunk_size=8), lm.hooks.capture([hook_name("z", 0)]) as chunked, \
                lm.hooks.hooks(fwd=[(site, lambda p, hook: blocks.append((current_query_chunk(), p)))]):
            _resid(lm, tokens)
    assert [(c.layer, c.start, c.stop) for c, _ in blocks if c] == [(0, 0, 8), (0, 8, 16), (0, 16, 20)]
    assert all(p.shape == (1, 4, c.stop - c.start, 20) for c, p in blocks if c)
    torch.testing.assert_close(torch.cat([p for _, p in blocks], dim=2), normal[site], atol=1e-6, rtol=0)
    torch.testing.assert_close(chunked[hook_name("z", 0)], normal[hook_name("z", 0)], atol=1e-6, rtol=0)
    assert current_query_chunk() is None


def test_inputs_past_n_ctx_run_and_the_tables_shrink_back(tiny: LensModel) -> None:
    lm, tokens = tiny, _tokens(300, batch=1)  # n_ctx is 256
    tables = _tables(lm)
    with torch.no_grad():
        with extended_rotary(lm, 300):
            normal = _resid(lm, tokens)
        assert _untouched(lm, tables)
        with chunked_attention(lm, chunk_size=64):
            chunked = _resid(lm, tokens)
            assert lm.model.blocks[0].attn.rotary_cos.shape[0] >= 300
    torch.testing.assert_close(chunked, normal, atol=1e-5, rtol=1e-5)
    assert _untouched(lm, tables)


def test_an_error_inside_the_block_and_nested_blocks_leave_nothing_behind(tiny: LensModel) -> None:
    tables = _tables(tiny)
    with pytest.raises(RuntimeError, match="inside"), chunked_attention(tiny, chunk_size=4):
        raise RuntimeError("inside")
    assert _untouched(tiny, tables)
    with chunked_attention(tiny, chunk_size=4):
        outer = tiny.model.blocks[0].attn.forward
        with chunked_attention(tiny, chunk_size=2):
            assert tiny.model.blocks[0].attn.forward is not outer
        assert tiny.model.blocks[0].attn.forward is outer  # the outer block's path is back
    assert _untouched(tiny, tables)


def test_bad_input_gets_a_clear_error(tiny: LensModel, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UserInputError, match="chunk_size must be at least 1"), chunked_attention(tiny, 0):
        pass
    monkeypatch.setattr(tiny.model.cfg, "clip_qkv", 5.0)  # a model feature the path does not cover
    with pytest.raises(UserInputError, match="clipped q/k/v"), chunked_attention(tiny, 8):
        pass
    assert _untouched(tiny, _tables(tiny))
    with pytest.raises(UserInputError, match="layer 7 does not exist"):
        rotate_at(tiny, 7, torch.zeros(1, 1, 2, 16), 0)


def test_layer_kinds_and_rotation_at_each_layer_types_base(tiny_gemma3: LensModel) -> None:
    lm = tiny_gemma3
    kinds = attention_layers(lm)
    assert [(a.kind, a.window, a.rotary_base) for a in kinds] == [("local", 6, 1e4), ("global", None, 1e6)]
    sites = [hook_name(s, layer) for layer in (0, 1) for s in ("k",)] + [f"blocks.{i}.attn.hook_rot_k" for i in (0, 1)]
    with torch.no_grad(), lm.hooks.capture(sites) as cap:
        _resid(lm, _tokens(12, batch=1))
    for layer in (0, 1):
        turned = rotate_at(lm, layer, pre_rotary(lm, layer, cap[hook_name("k", layer)], "k"), torch.arange(12))
        torch.testing.assert_close(turned, cap[f"blocks.{layer}.attn.hook_rot_k"], atol=1e-6, rtol=0)

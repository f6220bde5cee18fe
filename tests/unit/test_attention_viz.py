"""circuitsvis views: self-contained HTML (no CDN), head names, input checks and hook cleanup."""

from __future__ import annotations

import re

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.circuits.attention import head_patterns, parse_heads, save_attention_html
from lmsci_mi.sites import Head

PROMPT = "When Mary and John went to the store, John gave a drink to"


def test_saved_page_is_offline_and_names_heads(tiny: LensModel, tmp_path) -> None:
    path = save_attention_html(tiny, PROMPT, [(0, 1), (1, 3)], tmp_path / "view.html")
    html = path.read_text()
    # circuitsvis's str() form loads the bundle from a CDN; the local form inlines it
    assert not re.search(r"<script[^>]+src=", html)
    assert "unpkg" not in html and "cdn" not in html.lower()
    assert len(html) > 100_000  # the inlined bundle
    assert "L0.H1" in html and "L1.H3" in html and " Mary" in html
    assert tiny.hooks.attached_count() == 0


def test_patterns_are_the_models(tiny: LensModel) -> None:
    tokens = tiny.to_tokens(PROMPT)
    patterns = head_patterns(tiny, tokens, [(1, 2)])
    with tiny.hooks.capture("blocks.1.attn.hook_pattern") as cap:
        tiny(tokens)
    torch.testing.assert_close(patterns[0], cap["blocks.1.attn.hook_pattern"][0, 2].cpu())


def test_bad_heads(tiny: LensModel) -> None:
    assert parse_heads("5.1,L6H9, L7.H2") == [Head(5, 1), Head(6, 9), Head(7, 2)]
    for bad in ("5", "١.٢", "L5.H1.3", ","):
        with pytest.raises(ValueError, match=r"LAYER\.HEAD|no heads"):
            parse_heads(bad)
    with pytest.raises(ValueError, match="does not exist"):
        head_patterns(tiny, tiny.to_tokens(PROMPT), [(7, 0)])
    assert tiny.hooks.attached_count() == 0

"""Key statistics: values, the cache key (weights, dtype, text, token count) and refusal under an edit."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lmsci_mi import LensModel, WeightEdit, load_model
from lmsci_mi.data.text_corpus import text_chunks
from lmsci_mi.editing.stats import StatsConfig, TextSource, key_statistics, weight_fingerprints
from lmsci_mi.sites import hook_name

SMALL = StatsConfig(n_tokens=252, seq_len=64)


def direct_moments(lm: LensModel, layer: int, rows: torch.Tensor) -> torch.Tensor:
    site = hook_name("mlp_post", layer)
    with lm.hooks.capture(site) as cap:
        lm.model(rows)
    keys = cap[site][:, 1:].reshape(-1, lm.cfg.d_mlp).double()
    return keys.T @ keys / len(keys)


def test_stats_shape_symmetry_and_cache(tiny: LensModel, tmp_path: Path) -> None:
    stats = key_statistics(tiny, [1, 0], StatsConfig(n_tokens=500, seq_len=64), cache_dir=tmp_path)
    d_mlp = tiny.cfg.d_mlp
    assert stats.values.shape == (2, d_mlp, d_mlp) and stats.layers == (1, 0)
    assert stats.values.dtype == torch.float64
    c = stats.for_layer(0)
    assert torch.allclose(c, c.T)
    assert torch.linalg.eigvalsh(c).min() > -1e-8  # a second moment is positive semi-definite
    assert stats.n_tokens >= 500 and stats.meta.data_source == stats.source
    assert len(list((tmp_path / tiny.name).glob("*.json"))) == 2
    # A smaller request is served from the cache (no compute time) with the same values.
    again = key_statistics(tiny, 0, StatsConfig(n_tokens=100, seq_len=64), cache_dir=tmp_path)
    assert again.seconds == 0.0
    assert torch.equal(again.for_layer(0), c)


def test_stats_match_a_direct_computation(tiny: LensModel, tmp_path: Path) -> None:
    stats = key_statistics(tiny, 1, StatsConfig(n_tokens=126, seq_len=64), cache_dir=tmp_path)
    expected = direct_moments(tiny, 1, text_chunks(tiny, 126, seq_len=64))
    assert torch.allclose(stats.for_layer(1), expected, rtol=1e-4, atol=1e-6)


def test_stats_reject_bad_layers_and_configs(tiny: LensModel, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="out of range"):
        key_statistics(tiny, 2, SMALL, cache_dir=tmp_path)
    with pytest.raises(ValueError, match=r"StatsConfig\.seq_len must be >= 2, not 1"):
        StatsConfig(seq_len=1)


def test_two_wrapped_models_never_share_a_cache_entry(tmp_path: Path) -> None:
    """Both are named "custom"; the cache used to be keyed by that name, so the second model got
    the first one's statistics."""
    first = LensModel.wrap(load_model("toy-2l", device="cpu").model)
    second = LensModel.wrap(load_model("toy-2l", device="cpu").model)
    assert first.name == second.name == "custom"
    with torch.no_grad():
        second.model.blocks[0].mlp.W_in.mul_(3.0)
    a = key_statistics(first, 1, SMALL, cache_dir=tmp_path)
    b = key_statistics(second, 1, SMALL, cache_dir=tmp_path)
    rows = text_chunks(second, SMALL.n_tokens, SMALL.seq_len)
    assert torch.allclose(b.for_layer(1), direct_moments(second, 1, rows), rtol=1e-4, atol=1e-6)
    assert not torch.allclose(a.for_layer(1), b.for_layer(1))


def test_fingerprint_ignores_what_acts_after_the_keys(tiny: LensModel) -> None:
    before = weight_fingerprints(tiny, [0, 1])
    with WeightEdit(tiny, {"blocks.1.mlp.W_out": torch.ones(256, 64)}).apply():
        assert weight_fingerprints(tiny, [0, 1]) == before  # W_out of layer 1 acts after its keys
    with WeightEdit(tiny, {"blocks.0.mlp.W_out": torch.ones(256, 64)}).apply():
        after = weight_fingerprints(tiny, [0, 1])
    assert after[0] == before[0] and after[1] != before[1]


def test_user_text_is_used_and_keyed_by_its_content(tiny: LensModel, tmp_path: Path) -> None:
    docs = ["The quick brown fox jumps over the lazy dog. " * 40, "Paris is the capital of France. " * 40]
    config = StatsConfig(n_tokens=126, seq_len=64)
    mine = key_statistics(tiny, 1, config, text=docs, cache_dir=tmp_path)
    stdlib = key_statistics(tiny, 1, config, cache_dir=tmp_path)
    assert mine.source.startswith("text-") and mine.source != stdlib.source
    assert not torch.allclose(mine.for_layer(1), stdlib.for_layer(1))
    again = key_statistics(tiny, 1, config, text=lambda: iter(docs), cache_dir=tmp_path)
    assert torch.allclose(again.for_layer(1), mine.for_layer(1))  # same text, another name
    assert key_statistics(tiny, 1, config, text=TextSource(mine.source, lambda: docs),
                          cache_dir=tmp_path).seconds == 0.0  # same name: read from the cache


def test_stats_are_not_computed_under_an_edit(tiny: LensModel, tmp_path: Path) -> None:
    edit = WeightEdit(tiny, {"blocks.0.mlp.W_out": torch.ones(256, 64)}).apply()
    with edit, pytest.raises(ValueError, match=r"edit.*applied.*[Rr]estore"):
        key_statistics(tiny, 1, SMALL, cache_dir=tmp_path)
    assert not list(tmp_path.rglob("*.json"))
    assert tiny.hooks.attached_count() == 0

"""load_transcoders: a preset's set from the cache, from the shipped compact form, or built on
request; a clear error otherwise."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.errors import UserInputError
from lmsci_mi.transcoders import TRANSCODER_PRESETS, load_transcoders, save_compact
from lmsci_mi.transcoders.presets import shipped_compact_folder


@pytest.fixture
def toy(tiny: LensModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LensModel:
    # The toy is loaded first (from the suite's copy), then the transcoder cache is empty.
    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path / "cache"))
    return tiny


def test_a_model_without_a_preset_is_named_with_the_ones_that_have_one(tiny_gpt2: LensModel) -> None:
    with pytest.raises(UserInputError, match=f"no transcoder build for '{tiny_gpt2.name}'.*cfg-gpt"):
        load_transcoders(tiny_gpt2)


def test_a_missing_set_names_the_command_that_builds_it(toy: LensModel) -> None:
    with pytest.raises(UserInputError, match=r"benchmarks/transcoders.py --model toy-2l.*build=True"):
        load_transcoders(toy)


@pytest.mark.slow  # trains the toy's set (2 s)
def test_built_then_cached_then_shipped_compact(toy: LensModel) -> None:
    built = load_transcoders(toy, build=True, progress=False)
    assert sorted(built) == [0, 1] and "toy-2l" in TRANSCODER_PRESETS
    cached = load_transcoders(toy)
    assert torch.equal(cached[1].W_dec, built[1].W_dec)
    # A user without the trained layers but with the compact form (as a shipped set arrives).
    compact = shipped_compact_folder(toy)
    save_compact(built, compact)
    for layer in (0, 1):
        shutil.rmtree(compact.parent / f"layer_{layer}")
    expanded = load_transcoders(toy)
    x = torch.randn(5, toy.cfg.d_model)
    torch.testing.assert_close(expanded[0](x), built[0](x), atol=2e-2, rtol=2e-2)  # float16 weights


def test_the_cfg_gpts_shipped_set_loads_into_an_empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lmsci_mi.probes.cfg.model import load_cfg_model

    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path / "cache"))
    cfg = load_cfg_model(train=False)[0]
    tcs = load_transcoders(cfg)  # no training: the compact float16 form from the package
    assert sorted(tcs) == [0, 1, 2, 3] and tcs.model_name == cfg.name
    assert tcs[0].d_transcoder == 4096 and tcs[0].W_skip is not None

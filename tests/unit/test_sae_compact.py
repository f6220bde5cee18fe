"""The shipped SAE's compact form on a toy SAE: compact → ship → expand keeps the live features'
reconstruction and indices, dropped features never fire and refuse to steer, and a damaged file
raises with the rebuild command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from lmsci_mi import LensModel, artefacts, load_model
from lmsci_mi.artefacts import record_artefact
from lmsci_mi.sae import (
    LensSAE,
    SAEDataConfig,
    SAETrainConfig,
    cached_sae_path,
    load_trained_sae,
    steer_with_sae_feature,
    train_sae,
)
from lmsci_mi.sae import train as train_module
from lmsci_mi.sae.build import live_features
from lmsci_mi.sae.compact import (
    COMPACT_WEIGHTS,
    DEAD_BIAS,
    compact_sae,
    dropped_features,
    expand_sae,
)
from lmsci_mi.sae.shipped import restore_shipped_sae, shipped_sae_folders

DATA = SAEDataConfig(corpus_tokens=3000, seq_len=64, generations=0)
TRAIN = SAETrainConfig(
    layer=1,
    d_sae=96,
    k=4,
    training_samples=4096,
    batch_size=512,
    autocast=None,
    progress=False,
)
TEXTS = ["The cat sat on the mat", "Once upon a time there was", "My favourite food is soup"]


@pytest.fixture
def toy() -> LensModel:
    return load_model("toy-2l", device="cpu")


@pytest.fixture
def shipped(
    toy: LensModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, Path, LensSAE, torch.Tensor]:
    """A toy SAE trained into a scratch cache, compacted to the features that fire on TEXTS, and
    recorded in a scratch package folder; then its cache folder is emptied.

    Returns (cache folder, package folder, the original SAE, the live mask)."""
    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path / "cache"))
    package = tmp_path / "package"
    monkeypatch.setattr(artefacts, "package_folder", lambda: package)
    original, _ = train_sae(toy, DATA, TRAIN)
    folder = cached_sae_path(toy, DATA, TRAIN)
    live = live_features(toy, original, [toy.encode(t) for t in TEXTS])
    assert 0 < int(live.sum()) < original.d_sae  # some features dropped, some kept
    files = compact_sae(folder, live)
    record_artefact(
        "sae", files, description="toy", rebuild="python scripts/build_artefacts.py sae",
        params={}, small={}, folder=package,
    )  # fmt: skip
    for path in folder.iterdir():
        if path.is_file():
            path.unlink()
    import shutil

    shutil.rmtree(folder / "shipped")
    return folder, package, original, live


def _resid(lm: LensModel, sae: LensSAE) -> torch.Tensor:
    with torch.no_grad(), lm.hooks.capture([sae.hook]) as captured:
        lm.model(lm.encode_batch(TEXTS).tokens)
    return captured[sae.hook][:, 1:].reshape(-1, sae.d_model)


@pytest.mark.slow  # trains an SAE (4 s), like the tests below
def test_round_trip_keeps_the_live_features(
    toy: LensModel,
    shipped: tuple[Path, Path, LensSAE, torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder, _, original, live = shipped

    def no_training(*args: object, **kwargs: object) -> None:
        raise AssertionError("the shipped SAE was trained again")

    monkeypatch.setattr(train_module, "_fit", no_training)
    expanded, _ = train_sae(toy, DATA, TRAIN)  # restored from the package, not trained
    assert expanded.d_sae == original.d_sae and expanded.hook == original.hook
    info = expanded.info["shipped"]
    assert info["live_features"] == int(live.sum()) and info["dtype"] == "float16"
    assert torch.equal(dropped_features(expanded), ~live)
    x = _resid(toy, original)
    f_orig, f_exp = original.encode(x), expanded.encode(x)
    # the same features fire, with the same indices, at float16 precision
    assert torch.equal(f_orig > 0, f_exp > 0)
    assert torch.allclose(f_exp, f_orig, atol=2e-3 * float(f_orig.abs().max()))
    error = (expanded.decode(f_exp) - original.decode(f_orig)).norm() / x.norm()
    assert error < 2e-3
    assert torch.equal(expanded.feature_scale, original.feature_scale)
    # dropped features cannot fire, even on inputs far from the training data
    noise = 100 * torch.randn(256, expanded.d_model)
    assert not (expanded.encode(noise)[:, ~live] > 0).any()
    assert load_trained_sae(toy, DATA, TRAIN).info["shipped"] == info
    assert shipped_sae_folders() == [folder]


@pytest.mark.slow  # trains an SAE; the round trip above is the fast suite's
def test_a_dropped_feature_refuses_to_steer(
    toy: LensModel, shipped: tuple[Path, Path, LensSAE, torch.Tensor]
) -> None:
    folder, _, _, live = shipped
    assert restore_shipped_sae(folder)
    sae = LensSAE.load(folder)
    dead = int((~live).nonzero()[0])
    assert float(sae.sae.b_enc.detach()[dead]) == DEAD_BIAS
    with pytest.raises(ValueError, match="never fired"), steer_with_sae_feature(toy, sae, dead, 1):
        pass
    with steer_with_sae_feature(toy, sae, int(live.nonzero()[0]), 1) as vector:
        assert vector.norm() > 0


@pytest.mark.slow  # trains an SAE
def test_a_damaged_shipped_file_raises_and_names_the_rebuild(
    shipped: tuple[Path, Path, LensSAE, torch.Tensor],
) -> None:
    folder, package, _, _ = shipped
    weights = next(package.rglob(COMPACT_WEIGHTS))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(RuntimeError, match=r"build_artefacts\.py sae"):
        restore_shipped_sae(folder)
    assert not (folder / "sae_weights.safetensors").exists()


@pytest.mark.slow  # trains an SAE
def test_inconsistent_compact_files_in_the_cache_raise(
    shipped: tuple[Path, Path, LensSAE, torch.Tensor], tmp_path: Path
) -> None:
    _, package, _, _ = shipped
    compact = next(package.rglob(COMPACT_WEIGHTS)).parent
    broken = tmp_path / "broken"
    broken.mkdir()
    for path in compact.iterdir():
        (broken / path.name).write_bytes(path.read_bytes())
    parts = load_file(str(broken / COMPACT_WEIGHTS))
    parts["live_ids"] = parts["live_ids"].flip(0).contiguous()  # ids out of order
    save_file(parts, str(broken / COMPACT_WEIGHTS))
    with pytest.raises(ValueError, match="damaged"):
        expand_sae(broken, tmp_path / "out")
    assert json.loads((compact / "lmsci_sae.json").read_text())["source"] == ""


@pytest.mark.slow  # trains an SAE
def test_nothing_ships_for_other_settings(
    toy: LensModel, shipped: tuple[Path, Path, LensSAE, torch.Tensor]
) -> None:
    other = TRAIN.replace(k=3)
    assert not restore_shipped_sae(cached_sae_path(toy, DATA, other))
    with pytest.raises(FileNotFoundError, match=r"build_artefacts\.py sae"):
        load_trained_sae(toy, DATA, other)

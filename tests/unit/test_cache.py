"""The cache module: keys are stable, and the shipped artefacts' folder names are reproduced from
their configs (so the code still finds them offline, without retraining)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lmsci_mi.artefacts import package_folder, shipped_artefacts
from lmsci_mi.cache import WeightsHash, cache_key, cache_root, weights_fingerprint
from lmsci_mi.data.cfg import CFGConfig
from lmsci_mi.data.steering_texts import steering_texts
from lmsci_mi.model import LensModel
from lmsci_mi.probes.cfg.model import CFGModelConfig, cfg_model_folder
from lmsci_mi.sae import SAEDataConfig, SAETrainConfig
from lmsci_mi.sae.train import sae_cache_key
from lmsci_mi.steering import LMSteerConfig, SteerTrainConfig
from lmsci_mi.steering.train import steer_cache_key


def _shipped_folders(name: str) -> set[str]:
    return {f.path.split("/")[1] for f in shipped_artefacts()[name].files}


def _smollm2_fingerprint() -> str:
    """The bundled SmolLM2's weights fingerprint, as the shipped SAE recorded it."""
    (folder,) = _shipped_folders("sae")
    meta = package_folder() / "sae" / folder / "shipped" / "lmsci_sae.json"
    return json.loads(meta.read_text(encoding="utf-8"))["model_fingerprint"]


def test_shipped_sae_folder_is_its_key() -> None:
    key = sae_cache_key(
        _smollm2_fingerprint(), "blocks.15.hook_resid_post", SAEDataConfig(), SAETrainConfig()
    )
    assert _shipped_folders("sae") == {f"smollm2-135m-blocks.15.hook_resid_post-{key}"}


def test_shipped_steer_files_are_named_by_its_key() -> None:
    key = steer_cache_key(
        _smollm2_fingerprint(), steering_texts("sentiment"), LMSteerConfig(), SteerTrainConfig()
    )
    stems = {f.path.split("/")[1].split(".")[0] for f in shipped_artefacts()["steer"].files}
    assert {s.removesuffix("-training") for s in stems} == {f"smollm2-135m-sentiment-{key}"}


def test_shipped_cfg_folder_is_its_key() -> None:
    assert _shipped_folders("cfg") == {cfg_model_folder(CFGConfig(), CFGModelConfig()).name}


def test_cache_key_forms() -> None:
    assert cache_key({"a": 1, "b": [2]}) == cache_key({"b": [2], "a": 1})
    assert len(cache_key("x")) == 20 and len(cache_key("x", length=24)) == 24
    # Parts are hashed one after another: the same bytes give the same key.
    assert cache_key("ab", b"c") == cache_key("abc")
    assert cache_key("abc", length=64, algorithm="sha256").startswith("ba7816bf")
    with pytest.raises(ValueError, match="even length"):
        cache_key("x", length=7)
    with pytest.raises(ValueError, match="algorithm"):
        cache_key("x", algorithm="md5")  # type: ignore[arg-type]


def test_cache_root_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path))
    assert str(cache_root()) == str(tmp_path)


def test_weights_fingerprint_sees_every_weight(tiny: LensModel) -> None:
    before = weights_fingerprint(tiny)
    param = next(tiny.model.parameters())
    with torch.no_grad():
        param.view(-1)[0] += 1.0
    try:
        assert weights_fingerprint(tiny) != before
    finally:
        with torch.no_grad():
            param.view(-1)[0] -= 1.0
    branch = WeightsHash().update("w", torch.ones(3))
    assert branch.copy().hexdigest() == branch.hexdigest()

"""Shipped artefacts: the manifest, the copy into an empty cache, a damaged file, and the small
rebuild of the CFG GPT matching the figures recorded when the shipped one was built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmsci_mi import artefacts
from lmsci_mi.artefacts import (
    ARTEFACT_BUILDERS,
    package_folder,
    record_artefact,
    restore_shipped,
    shipped_artefacts,
)
from lmsci_mi.cache import file_sha256


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("LMSCI_MI_CACHE", str(root))
    return root


def test_every_shipped_file_is_in_the_package_with_its_sha256() -> None:
    shipped = shipped_artefacts()
    assert {"cfg", "steer"} <= set(shipped)
    for artefact in shipped.values():
        assert artefact.rebuild.startswith("python scripts/build_artefacts.py")
        assert artefact.small["figures"], artefact.name
        for entry in artefact.files:
            path = package_folder() / entry.path
            assert path.stat().st_size == entry.bytes
            assert file_sha256(path) == entry.sha256


def test_the_shipped_cfg_gpt_loads_into_an_empty_cache_without_training(empty_cache: Path) -> None:
    from lmsci_mi.probes.cfg import load_cfg_model

    lm, training = load_cfg_model(train=False)  # raises if the shipped GPT is not found
    assert (empty_cache / "cfg").is_dir()
    assert training.seconds > 60  # the shipped record of the full training run
    assert lm.cfg.n_layers == 4


def test_restore_leaves_a_users_own_file_alone(empty_cache: Path) -> None:
    entry = shipped_artefacts()["cfg"].files[1]
    own = empty_cache / entry.path
    own.parent.mkdir(parents=True)
    own.write_text("{}")
    assert restore_shipped(own)
    assert own.read_text() == "{}"


def test_unknown_paths_are_not_restored(empty_cache: Path) -> None:
    assert not restore_shipped(empty_cache / "cfg" / "gpt-000000000000" / "record.json")
    assert not (empty_cache / "cfg").exists()


def test_a_damaged_shipped_file_raises_and_names_the_rebuild(
    empty_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = empty_cache / "demo" / "weights.bin"
    made.parent.mkdir(parents=True)
    made.write_bytes(b"trained weights")
    folder = tmp_path / "package"
    record_artefact(
        "demo",
        [made],
        description="d",
        rebuild="python scripts/build_artefacts.py demo",
        params={},
        small={},
        folder=folder,
    )
    assert json.loads((folder / "manifest.json").read_text())["demo"]["files"][0]["bytes"] == 15
    monkeypatch.setattr(artefacts, "package_folder", lambda: folder)
    made.unlink()
    assert restore_shipped(made) and made.read_bytes() == b"trained weights"
    made.unlink()
    (folder / "demo" / "weights.bin").write_bytes(b"damaged")
    with pytest.raises(RuntimeError, match=r"damaged.*build_artefacts\.py demo"):
        restore_shipped(made)
    assert not made.exists()


def test_a_small_cfg_rebuild_matches_the_recorded_one() -> None:
    import lmsci_mi.probes.cfg.shipped  # noqa: F401  (registers the builder)

    recorded = shipped_artefacts()["cfg"].small
    rebuilt = ARTEFACT_BUILDERS.get("cfg").function(small=True)
    assert json.loads(json.dumps(rebuilt.params)) == recorded["params"]
    for name, value in recorded["figures"].items():
        assert rebuilt.figures[name] == pytest.approx(value, rel=1e-4), name


@pytest.mark.slow  # trains one narrow layer on the shipped CFG GPT (seconds)
def test_a_small_cfg_transcoders_rebuild_matches_the_recorded_one() -> None:
    import lmsci_mi.transcoders.shipped  # noqa: F401  (registers the builder)

    recorded = shipped_artefacts()["transcoders-cfg"].small
    rebuilt = ARTEFACT_BUILDERS.get("transcoders-cfg").function(small=True)
    assert json.loads(json.dumps(rebuilt.params)) == recorded["params"]
    for name, value in recorded["figures"].items():
        assert rebuilt.figures[name] == pytest.approx(value, rel=1e-4), name

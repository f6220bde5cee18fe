"""Project-trained artefacts shipped as package data, so that a first run reads them instead of
training for many minutes.

An artefact (the CFG GPT, the LM-Steer sentiment steer, the SAE) is a set of files that the cache
(:func:`lmsci_mi.cache.cache_root`) would otherwise hold after training. They ship under
``lmsci_mi/data/artefacts/`` at the same relative paths, with ``manifest.json`` giving each file's
sha256 and how the artefact was built: the command that rebuilds it (``scripts/build_artefacts.py
NAME``), its settings, and the figures of a small rebuild that a test repeats.

Each artefact's module registers a builder in :data:`ARTEFACT_BUILDERS` (``build(small=False)``
trains it with the default settings and returns the cache files to ship; ``build(small=True)``
trains a small seeded version and returns its figures), which ``scripts/build_artefacts.py`` and
the tests find by name.

A loader calls :func:`restore_shipped` with the cache paths it is about to read. Missing ones that
ship are checked against their sha256 and copied into the cache; the cache stays the one place the
loaders read, and a file already there (a user's own training) is never overwritten.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from lmsci_mi.cache import cache_root, file_sha256
from lmsci_mi.registry import MethodRegistry

__all__ = [
    "ARTEFACT_BUILDERS",
    "MANIFEST",
    "BuiltArtefact",
    "ShippedArtefact",
    "ShippedFile",
    "package_folder",
    "record_artefact",
    "restore_shipped",
    "shipped_artefacts",
]

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class ShippedFile:
    """One shipped file: its path relative to the cache root (posix), sha256 and size."""

    path: str
    sha256: str
    bytes: int


@dataclass(frozen=True)
class ShippedArtefact:
    """A shipped artefact and how it was built.

    Attributes:
        name: ``cfg``, ``steer`` or ``sae``.
        description: what it is, in a line.
        rebuild: the command that rebuilds it from scratch.
        files: its files.
        params: the settings it was built with (for the reader; the cache keys hold the truth).
        small: the settings and figures of the small rebuild that its test repeats.
    """

    name: str
    description: str
    rebuild: str
    files: tuple[ShippedFile, ...]
    params: Mapping[str, Any] = field(default_factory=dict)
    small: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BuiltArtefact:
    """What a builder made.

    Attributes:
        files: the cache files to ship (empty for a small build, which is not shipped).
        params: the settings it was built with.
        figures: numbers that identify the build (losses, checksums), compared by the tests.
    """

    files: tuple[Path, ...]
    params: Mapping[str, Any]
    figures: Mapping[str, float]


ARTEFACT_BUILDERS: MethodRegistry[Callable[..., BuiltArtefact]] = MethodRegistry("artefact builder")
"""Builders by artefact name, each ``build(*, small: bool) -> BuiltArtefact``, registered with the
config type of its training run (``lmsci_mi.probes.cfg.shipped``, ``lmsci_mi.steering.shipped``,
``lmsci_mi.sae.build``, ``lmsci_mi.transcoders.shipped``)."""

BUILDER_MODULES = (
    "lmsci_mi.probes.cfg.shipped",
    "lmsci_mi.steering.shipped",
    "lmsci_mi.sae.build",
    "lmsci_mi.transcoders.shipped",
)
"""The modules that register the builders (imported by ``scripts/build_artefacts.py``)."""


def package_folder() -> Path:
    """The folder of the shipped artefacts inside the installed package."""
    return Path(str(resources.files("lmsci_mi.data").joinpath("artefacts")))


def _read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def shipped_artefacts(folder: Path | None = None) -> dict[str, ShippedArtefact]:
    """The shipped artefacts by name, from the manifest (empty when none ship)."""
    manifest = _read_manifest(folder if folder is not None else package_folder())
    return {name: _entry(name, manifest) for name in manifest}


def restore_shipped(*paths: Path) -> bool:
    """Copy the shipped versions of the missing ``paths`` (files under the cache root) into the
    cache.

    Returns:
        True when every path exists afterwards.

    Raises:
        RuntimeError: a shipped file does not match its sha256 (a damaged install); the message
            names the command that rebuilds the artefact.
    """
    missing = [p for p in paths if not p.exists()]
    if not missing:
        return True
    root = cache_root().resolve()
    shipped = {f.path: (a, f) for a in shipped_artefacts().values() for f in a.files}
    for path in missing:
        try:
            relative = path.resolve().relative_to(root).as_posix()
        except ValueError:
            continue  # not under the cache root: nothing ships there
        if relative not in shipped:
            continue
        artefact, entry = shipped[relative]
        source = package_folder() / relative
        if not source.is_file() or file_sha256(source) != entry.sha256:
            raise RuntimeError(
                f"the shipped {artefact.name} artefact file {source} is missing or damaged "
                f"(sha256 mismatch); reinstall lmsci-mi or rebuild it: {artefact.rebuild}"
            )
        _copy_atomically(source, path)
        log.info("restored the shipped %s artefact %s", artefact.name, path)
    return all(p.exists() for p in paths)


def _copy_atomically(source: Path, target: Path) -> None:
    """Copy through a temporary file in the target's folder, so a reader never sees half a file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    os.close(handle)
    try:
        shutil.copyfile(source, temporary)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def record_artefact(
    name: str,
    files: list[Path],
    *,
    description: str,
    rebuild: str,
    params: Mapping[str, Any],
    small: Mapping[str, Any],
    folder: Path | None = None,
) -> ShippedArtefact:
    """Copy an artefact's cache ``files`` into the package folder and record it in the manifest
    (used by ``scripts/build_artefacts.py``; the artefact's old files are removed first).

    Raises:
        ValueError: a file is not under the cache root.
    """
    folder = folder if folder is not None else package_folder()
    root = cache_root().resolve()
    manifest = _read_manifest(folder)
    for old in manifest.get(name, {}).get("files", []):
        (folder / old["path"]).unlink(missing_ok=True)
    entries = []
    for path in files:
        try:
            relative = path.resolve().relative_to(root).as_posix()
        except ValueError:
            raise ValueError(f"{path} is not under the cache root {root}") from None
        _copy_atomically(path, folder / relative)
        entries.append(ShippedFile(relative, file_sha256(path), path.stat().st_size).__dict__)
    manifest[name] = {
        "description": description,
        "rebuild": rebuild,
        "files": entries,
        "params": dict(params),
        "small": dict(small),
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return _entry(name, manifest)


def _entry(name: str, manifest: Mapping[str, Any]) -> ShippedArtefact:
    entry = manifest[name]
    return ShippedArtefact(
        name=name,
        description=entry["description"],
        rebuild=entry["rebuild"],
        files=tuple(ShippedFile(**f) for f in entry["files"]),
        params=entry.get("params", {}),
        small=entry.get("small", {}),
    )

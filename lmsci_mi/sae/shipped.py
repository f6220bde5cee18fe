"""The SAE that ships with lmsci-mi, restored into the cache at run time.

The default SAE of the bundled SmolLM2 (``blocks.15.hook_resid_post``, TopK, d_sae 4608, k 48)
takes some 25 minutes to train on two CPU cores, and about 70% of its features never fire; it
ships (:mod:`lmsci_mi.artefacts`) in the compact form of :mod:`lmsci_mi.sae.compact`, some 3 MB.
When the cache lacks it, :func:`restore_shipped_sae` copies the compact files into the cache
(sha256-checked) and expands them. :mod:`lmsci_mi.sae.build` builds it.
"""

from __future__ import annotations

from pathlib import Path

from lmsci_mi.artefacts import restore_shipped, shipped_artefacts
from lmsci_mi.cache import cache_root
from lmsci_mi.sae.compact import (
    COMPACT_FOLDER,
    COMPACT_WEIGHTS,
    compact_paths,
    expand_sae,
    is_complete,
)

__all__ = ["restore_shipped_sae", "shipped_sae_folders"]


def restore_shipped_sae(folder: Path) -> bool:
    """Make the cache folder ``folder`` hold its SAE, from the shipped compact form if needed.

    Returns:
        True when ``folder`` holds a complete SAE afterwards (already there, or expanded from the
        shipped copy); False when nothing ships for it (the caller trains).

    Raises:
        RuntimeError: a shipped file is damaged (sha256 mismatch; from
            :func:`lmsci_mi.artefacts.restore_shipped`).
        ValueError: the compact files in the cache are inconsistent.
    """
    if is_complete(folder):
        return True
    paths = compact_paths(folder)
    if not restore_shipped(*paths):
        return False
    relative = paths[0].parent.resolve().relative_to(cache_root().resolve()).as_posix()
    expand_sae(paths[0].parent, folder, shipped_from=f"lmsci_mi/data/artefacts/{relative}")
    return True


def shipped_sae_folders() -> list[Path]:
    """The cache folders of the SAEs that ship (they may not be expanded yet)."""
    artefact = shipped_artefacts().get("sae")
    if artefact is None:
        return []
    folders = {
        (cache_root() / f.path).parent.parent
        for f in artefact.files
        if f.path.endswith(f"/{COMPACT_FOLDER}/{COMPACT_WEIGHTS}")
    }
    return sorted(folders)

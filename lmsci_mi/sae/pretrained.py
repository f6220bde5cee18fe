"""Pretrained SAEs through sae-lens's registry (online only), and the locally trained ones.

``SAE.from_pretrained`` downloads from the Hugging Face hub. Offline, :func:`load_sae` fails with
a message that names the SAEs trained here and the command that trains one. Gemma Scope 2
(``gemma-scope-2-270m-pt-res``) has SAEs for Gemma 3 270M, which load onto the bundled
``gemma3-270m`` when the hub is reachable.
"""

from __future__ import annotations

import difflib
import json
import os
import warnings
from pathlib import Path

import torch

from lmsci_mi.cache import cache_root
from lmsci_mi.errors import UnknownNameError
from lmsci_mi.loading import ModelNotAvailableError
from lmsci_mi.model import LensModel
from lmsci_mi.sae.core import LensSAE, SAEMismatchError
from lmsci_mi.sae.shipped import restore_shipped_sae, shipped_sae_folders

__all__ = ["PretrainedSAEUnavailable", "list_trained_saes", "load_sae"]


class PretrainedSAEUnavailable(ModelNotAvailableError):
    """A pretrained SAE cannot be downloaded (offline, or the hub is unreachable)."""


def list_trained_saes() -> list[Path]:
    """Folders of the SAEs trained here (``lmsci-mi sae train``) and the one that ships with
    lmsci-mi (expanded into the cache on first use), newest first."""
    for folder in shipped_sae_folders():
        restore_shipped_sae(folder)
    root = cache_root() / "sae"
    if not root.is_dir():
        return []
    found = [p.parent for p in root.glob("*/lmsci_sae.json")]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _unavailable(release: str, sae_id: str, why: str) -> PretrainedSAEUnavailable:
    trained = list_trained_saes()
    local = (
        f"the locally trained SAE {trained[0]} (load it with LensSAE.load, or use "
        "`lmsci-mi sae stats`)"
        if trained
        else "a locally trained SAE: none is trained yet, train one with `lmsci-mi sae train`"
    )
    return PretrainedSAEUnavailable(
        f"cannot load pretrained SAE {release}/{sae_id}: {why}. Pretrained SAEs come from the "
        f"Hugging Face hub; use {local}"
    )


def _check_registry(release: str, sae_id: str) -> None:
    """Unknown releases and ids fail before any download (the registry ships with sae-lens)."""
    from sae_lens.loading.pretrained_saes_directory import get_pretrained_saes_directory

    directory = get_pretrained_saes_directory()
    if release not in directory:
        close = difflib.get_close_matches(release, list(directory), n=5, cutoff=0.5)
        raise UnknownNameError(f"sae-lens has no release {release!r}; close names: {close}")
    ids = list(directory[release].saes_map)
    if sae_id not in ids:
        close = difflib.get_close_matches(sae_id, ids, n=5, cutoff=0.5)
        raise UnknownNameError(f"release {release!r} has no SAE {sae_id!r}; close ids: {close}")


def load_sae(
    release: str, sae_id: str, lm: LensModel | None = None, *, device: str | None = None
) -> LensSAE:
    """A pretrained SAE from sae-lens's registry, bound to ``lm`` when given.

    The feature scale of a pretrained SAE is unknown until measured (it is 1 for every feature,
    so steering coefficients are raw activations); :func:`sae_stats` measures it.

    Raises:
        ValueError: a release or id not in sae-lens's registry, or an SAE whose width does not
            match ``lm``.
        PretrainedSAEUnavailable: offline (``HF_HUB_OFFLINE=1``) or the download failed; the
            message names the locally trained SAE and how to train one.

    >>> import os; os.environ["HF_HUB_OFFLINE"] = "1"
    >>> load_sae("gemma-scope-2-270m-pt-res", "layer_12_width_16k_l0_medium")
    Traceback (most recent call last):
    ...
    lmsci_mi.sae.pretrained.PretrainedSAEUnavailable: cannot load pretrained SAE ...
    """
    _check_registry(release, sae_id)
    if _offline():
        raise _unavailable(release, sae_id, "the hub is offline here (HF_HUB_OFFLINE=1)")
    from sae_lens import SAE

    target = device or (str(lm.device) if lm is not None else "cpu")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sae = SAE.from_pretrained(release, sae_id, device=target)
    except (OSError, ConnectionError, TimeoutError) as error:  # hub errors are OSErrors
        raise _unavailable(
            release, sae_id, f"the download failed ({type(error).__name__})"
        ) from error
    hook = str(sae.cfg.metadata.hook_name)
    d_in = int(sae.cfg.d_in)
    if lm is not None and lm.cfg.d_model != d_in:
        raise SAEMismatchError(
            f"{release}/{sae_id} reads {d_in}-dimensional activations but {lm.name} has "
            f"d_model {lm.cfg.d_model}"
        )
    return LensSAE(
        sae=sae,
        hook=hook,
        model_name=lm.name if lm is not None else str(sae.cfg.metadata.model_name),
        d_model=d_in,
        feature_scale=torch.ones(int(sae.cfg.d_sae), device=target),
        source=f"{release}/{sae_id}",
        info={"pretrained": json.dumps([release, sae_id])},
    )

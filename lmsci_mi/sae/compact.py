"""The compact file format of a shipped SAE: its live features only, expanded on use.

An SAE's cache folder (:meth:`LensSAE.save` plus ``stats.json``) compacts
(:func:`compact_sae`) into a ``shipped/`` subfolder holding the live features' encoder columns
and unit decoder rows in float16 with their feature ids, the decoder norms, the biases and the
small metadata files. :func:`expand_sae` turns it back into a full-size float32 SAE whose
dropped features can never fire (encoder column 0, encoder bias :data:`DEAD_BIAS`), so every
feature keeps its index; steering or clamping a dropped feature raises
(:func:`check_not_dropped`), since its decoder row did not ship.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

from lmsci_mi.errors import UserInputError
from lmsci_mi.sae.core import LensSAE

__all__ = [
    "COMPACT_FOLDER",
    "COMPACT_WEIGHTS",
    "DEAD_BIAS",
    "REBUILD",
    "check_not_dropped",
    "compact_paths",
    "compact_sae",
    "dropped_features",
    "expand_sae",
    "is_complete",
]

log = logging.getLogger(__name__)

COMPACT_FOLDER = "shipped"
"""The compact form lives in this subfolder of the SAE's cache folder (and of the package's)."""

COMPACT_WEIGHTS = "sae_live_float16.safetensors"
"""The live features' weights in float16, their ids, the decoder norms and the biases."""

_SMALL_FILES = (
    "cfg.json",
    "lmsci_feature_scale.safetensors",
    "stats.safetensors",
    "lmsci_sae.json",
    "stats.json",  # last: train_sae's cache check reads it, so it is written last on expansion
)
_WEIGHTS = "sae_weights.safetensors"

DEAD_BIAS = -1.0e4
"""Encoder bias of a dropped feature: with a zero encoder column its pre-activation is −10⁴, so
TopK either leaves it out or (when fewer than k features are positive) gives it ReLU(−10⁴) = 0."""

REBUILD = "python scripts/build_artefacts.py sae"
"""The command that rebuilds the shipped SAE (``--retrain`` trains it again from scratch); the
messages about a damaged or dropped part name it."""


def compact_paths(folder: Path) -> list[Path]:
    """The compact form's files for the SAE cache folder ``folder``."""
    return [folder / COMPACT_FOLDER / name for name in (COMPACT_WEIGHTS, *_SMALL_FILES)]


def compact_sae(folder: Path, live: Tensor | None = None) -> list[Path]:
    """Write the compact form of the SAE in the cache folder ``folder`` next to its files.

    Args:
        folder: a folder written by :meth:`LensSAE.save` (plus ``stats.json``).
        live: ``[d_sae]`` bool, the features to keep (default: those that fire on the held-out
            tokens of ``stats.json``). Every other feature is dropped.

    Returns:
        The compact files (:func:`compact_paths`).

    Raises:
        FileNotFoundError: ``folder`` holds no complete SAE.
    """
    missing = [n for n in (_WEIGHTS, *_SMALL_FILES) if not (folder / n).is_file()]
    if missing:
        raise FileNotFoundError(f"{folder} holds no complete SAE (missing {missing})")
    weights = load_file(str(folder / _WEIGHTS))
    d_sae = weights["b_enc"].numel()
    if live is None:
        live = load_file(str(folder / "stats.safetensors"))["values"] > 0
    if live.shape != (d_sae,) or live.dtype != torch.bool:
        raise UserInputError(f"live must be a bool mask of {d_sae} features, not {live.shape}")
    ids = live.nonzero().flatten()
    w_dec = weights["W_dec"][ids].float()
    norms = w_dec.norm(dim=-1).clamp_min(1e-12)
    target = folder / COMPACT_FOLDER
    target.mkdir(parents=True, exist_ok=True)
    save_file(
        {
            "live_ids": ids.to(torch.int32).contiguous(),
            "W_enc": weights["W_enc"][:, ids].half().contiguous(),
            "W_dec": (w_dec / norms[:, None]).half().contiguous(),
            "W_dec_norm": norms.float().contiguous(),
            "b_enc": weights["b_enc"][ids].float().contiguous(),
            "b_dec": weights["b_dec"].float().contiguous(),
        },
        str(target / COMPACT_WEIGHTS),
        metadata={"d_sae": str(d_sae), "format": "lmsci-mi-compact-sae/1"},
    )
    for name in _SMALL_FILES:
        shutil.copyfile(folder / name, target / name)
    meta = json.loads((target / "lmsci_sae.json").read_text(encoding="utf-8"))
    meta["source"] = ""  # the builder's own cache path means nothing elsewhere
    (target / "lmsci_sae.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return compact_paths(folder)


def expand_sae(compact: Path, folder: Path, *, shipped_from: str = "") -> Path:
    """Expand the compact form in ``compact`` into a full-size float32 SAE in ``folder``.

    Dropped features get a zero encoder column, the encoder bias :data:`DEAD_BIAS` and a unit
    placeholder decoder row (TopK rescales by the decoder norm, so a zero row would give NaN);
    they never fire. ``lmsci_sae.json`` records the expansion under ``info["shipped"]``.

    Raises:
        ValueError: the compact files are inconsistent (a damaged cache); the message names the
            rebuild command.
    """
    parts = load_file(str(compact / COMPACT_WEIGHTS))
    cfg = json.loads((compact / "cfg.json").read_text(encoding="utf-8"))
    d_sae, d_in = int(cfg["d_sae"]), int(cfg["d_in"])
    ids = parts["live_ids"].long()
    n = len(ids)
    expected = {
        "W_enc": (d_in, n),
        "W_dec": (n, d_in),
        "W_dec_norm": (n,),
        "b_enc": (n,),
        "b_dec": (d_in,),
    }
    shapes_ok = all(tuple(parts[k].shape) == s for k, s in expected.items() if k in parts)
    if (
        set(expected) - set(parts)
        or not shapes_ok
        or n == 0
        or not bool((ids[1:] > ids[:-1]).all())
        or int(ids[0]) < 0
        or int(ids[-1]) >= d_sae
        or not all(bool(t.isfinite().all()) for t in parts.values())
    ):
        raise ValueError(
            f"the compact SAE in {compact} is damaged (shapes, ids or values); delete it and "
            f"reinstall lmsci-mi, or rebuild it: {REBUILD} --retrain"
        )
    w_enc = torch.zeros(d_in, d_sae)
    w_enc[:, ids] = parts["W_enc"].float()
    b_enc = torch.full((d_sae,), DEAD_BIAS)
    b_enc[ids] = parts["b_enc"].float()
    w_dec = torch.full((d_sae, d_in), d_in**-0.5)
    w_dec[ids] = parts["W_dec"].float() * parts["W_dec_norm"].float()[:, None]
    meta = json.loads((compact / "lmsci_sae.json").read_text(encoding="utf-8"))
    meta["source"] = str(folder)
    meta.setdefault("info", {})["shipped"] = {
        "expanded_from": shipped_from or str(compact),
        "live_features": n,
        "d_sae": d_sae,
        "dtype": "float16",
        "dropped": "features that never fired when it was built: encoder column 0, encoder bias "
        f"{DEAD_BIAS:g}, a placeholder decoder row; steering or clamping one raises",
        "stats": "stats.json is the full float32 SAE's, measured before compaction",
    }
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{folder.name}.") as scratch:
        work = Path(scratch)
        save_file(
            {"W_enc": w_enc, "W_dec": w_dec, "b_enc": b_enc, "b_dec": parts["b_dec"].float()},
            str(work / _WEIGHTS),
        )
        for name in _SMALL_FILES:
            shutil.copyfile(compact / name, work / name)
        (work / "lmsci_sae.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        # Readers look for lmsci_sae.json / stats.json: those arrive last, after the weights.
        for name in (_WEIGHTS, *_SMALL_FILES):
            os.replace(work / name, folder / name)
    log.info("expanded the shipped SAE (%d live features) into %s", n, folder)
    return folder


def is_complete(folder: Path) -> bool:
    """Whether ``folder`` holds every file of a full-size SAE (weights and metadata)."""
    return all((folder / n).is_file() for n in (_WEIGHTS, *_SMALL_FILES))


# ------------------------------------------------------------------------------ dropped features


def dropped_features(sae: LensSAE) -> Tensor:
    """``[d_sae]`` bool: the features an expanded shipped SAE dropped (all False otherwise).

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.sae.train import SAETrainConfig, untrained_sae
    >>> lm = load_model("toy-2l")
    >>> sae = untrained_sae(lm, SAETrainConfig(layer=1, d_sae=32, k=4))
    >>> int(dropped_features(sae).sum())
    0
    """
    with torch.no_grad():
        b_enc = sae.sae.b_enc.detach()
        silent = sae.sae.W_enc.detach().abs().amax(dim=0) == 0
        return (silent & (b_enc <= DEAD_BIAS / 2)).cpu()


def check_not_dropped(sae: LensSAE, index: int) -> None:
    """Raise ValueError if feature ``index`` was dropped from the shipped SAE (its decoder row did
    not ship, so steering or clamping it would act with a placeholder)."""
    if "shipped" in sae.info and bool(dropped_features(sae)[index]):
        raise UserInputError(
            f"feature {index} never fired when the shipped SAE was built, so only its index "
            f"shipped ({sae.info['shipped'].get('live_features')} live features did); pick a "
            f"live feature, or train the full SAE with `{REBUILD} --retrain`"
        )

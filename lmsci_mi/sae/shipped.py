"""The SAE that ships with lmsci-mi, in a compact form, and its expansion into the cache.

The default SAE of the bundled SmolLM2 (``blocks.15.hook_resid_post``, TopK, d_sae 4608, k 48)
takes some 25 minutes to train on two CPU cores, and its float32 weights are 21 MB, while about
70% of its features never fire. It ships (:mod:`lmsci_mi.artefacts`) as the live features'
encoder columns and decoder rows in float16 with their feature ids, the biases, and the small
metadata files: some 3 MB. When the cache lacks the SAE, :func:`restore_shipped_sae` copies the
compact files into the cache (sha256-checked) and expands them into a full-size float32 SAE whose
dropped features can never fire (encoder column 0, encoder bias :data:`DEAD_BIAS`), so every
feature keeps its index: feature 212 is feature 212 in both. Steering or clamping a dropped
feature raises (:func:`check_not_dropped`), since its decoder row did not ship.

``scripts/build_artefacts.py sae`` rebuilds it through :func:`build_sae_artefact` (registered in
:data:`lmsci_mi.artefacts.ARTEFACT_BUILDERS`): :func:`build_shipped_sae` for the files, and the
figures of :func:`small_sae_rebuild`, which ``tests/integration/test_sae_shipped_smollm2.py``
repeats.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

from lmsci_mi.artefacts import ARTEFACT_BUILDERS, BuiltArtefact, restore_shipped, shipped_artefacts
from lmsci_mi.loading import DEFAULT_MODEL, cache_root, load_model
from lmsci_mi.steering.sae.core import LensSAE
from lmsci_mi.steering.sae.data import SAEDataConfig, sae_corpus
from lmsci_mi.steering.sae.train import SAETrainConfig, cached_sae_path, harvest, train_sae

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel

__all__ = [
    "COMPACT_FOLDER",
    "COMPACT_WEIGHTS",
    "DEAD_BIAS",
    "REBUILD",
    "SMALL_SAE_DATA",
    "SMALL_SAE_TRAIN",
    "build_sae_artefact",
    "build_shipped_sae",
    "check_not_dropped",
    "compact_paths",
    "compact_sae",
    "dropped_features",
    "expand_sae",
    "live_features",
    "restore_shipped_sae",
    "shipped_sae_folders",
    "small_sae_rebuild",
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
"""The command that rebuilds the shipped SAE (``--retrain`` trains it again from scratch)."""


# ------------------------------------------------------------------------------ compact form


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
        raise ValueError(f"live must be a bool mask of {d_sae} features, not {live.shape}")
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


def _complete(folder: Path) -> bool:
    return all((folder / n).is_file() for n in (_WEIGHTS, *_SMALL_FILES))


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
    if _complete(folder):
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


# ------------------------------------------------------------------------------ dropped features


def dropped_features(sae: LensSAE) -> Tensor:
    """``[d_sae]`` bool: the features an expanded shipped SAE dropped (all False otherwise).

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.steering.sae.train import SAETrainConfig, _training_sae
    >>> lm = load_model("toy-2l")
    >>> raw = _training_sae(lm, "blocks.1.hook_resid_post", SAETrainConfig(layer=1, d_sae=32, k=4))
    >>> sae = LensSAE(raw, "blocks.1.hook_resid_post", lm.name, lm.cfg.d_model, torch.ones(32))
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
        raise ValueError(
            f"feature {index} never fired when the shipped SAE was built, so only its index "
            f"shipped ({sae.info['shipped'].get('live_features')} live features did); pick a "
            f"live feature, or train the full SAE with `{REBUILD} --retrain`"
        )


# ------------------------------------------------------------------------------ building


@torch.no_grad()
def live_features(
    lm: LensModel, sae: LensSAE, rows: Sequence[Sequence[int]], autocast: str | None = None
) -> Tensor:
    """``[d_sae]`` bool: the features that fire on at least one token of ``rows`` (sink left out).

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.steering.sae.train import SAETrainConfig, _training_sae
    >>> lm = load_model("toy-2l")
    >>> raw = _training_sae(lm, "blocks.1.hook_resid_post", SAETrainConfig(layer=1, d_sae=32, k=4))
    >>> sae = LensSAE(raw, "blocks.1.hook_resid_post", lm.name, lm.cfg.d_model, torch.ones(32))
    >>> 4 <= int(live_features(lm, sae, [lm.encode("The cat sat on the mat")]).sum()) <= 32
    True
    """
    acts = harvest(lm, [list(r) for r in rows], sae.hook, autocast, progress=False)
    fired = torch.zeros(sae.d_sae, dtype=torch.bool)
    for start in range(0, len(acts), 4096):
        f = sae.encode(acts[start : start + 4096].to(sae.sae.device, torch.float32))
        fired |= (f > 0).any(0).cpu()
    return fired


LIVE_TRAIN_ROWS = 600
"""Training rows (of 128 tokens) whose firing features are kept, besides the held-out ones."""


def build_shipped_sae(*, retrain: bool = False) -> list[Path]:
    """Train the default SAE of the bundled model (or read it from the cache unless ``retrain``)
    and write its compact form: the features that fire on the held-out tokens or on the first
    :data:`LIVE_TRAIN_ROWS` training rows are kept.

    Returns:
        The compact files to ship (under the cache root).
    """
    lm = load_model(DEFAULT_MODEL)
    data, train = SAEDataConfig(), SAETrainConfig()
    folder = cached_sae_path(lm, data, train)
    if retrain and folder.exists():
        shutil.rmtree(folder)
    if not _complete(folder) or "shipped" in _info(folder):
        # an expanded shipped SAE is no source for the shipped one: train the real thing
        shutil.rmtree(folder, ignore_errors=True)
    sae, stats = train_sae(lm, data, train, shipped=False)
    corpus = sae_corpus(lm, data, fingerprint=sae.model_fingerprint)
    live = (stats.values > 0) | live_features(
        lm, sae, corpus.train[:LIVE_TRAIN_ROWS], train.autocast
    )
    return compact_sae(folder, live)


def _info(folder: Path) -> dict[str, Any]:
    path = folder / "lmsci_sae.json"
    if not path.is_file():
        return {}
    return dict(json.loads(path.read_text(encoding="utf-8")).get("info", {}))


def _small_configs() -> tuple[SAEDataConfig, SAETrainConfig]:
    data = SAEDataConfig(corpus_tokens=8_000, generations=0, held_out_fraction=0.1)
    train = SAETrainConfig(
        d_sae=1152,
        k=16,
        training_samples=150 * 512,
        batch_size=512,
        lr=1e-3,
        autocast=None,
        progress=False,
    )
    return data, train


SMALL_SAE_DATA, SMALL_SAE_TRAIN = _small_configs()
"""The small rebuild: the same model, site, corpus kind, pipeline, trainer and seed as the shipped
SAE, on 8k tokens of the prose corpus plus the bundled texts (no generations), with d_sae 1152,
k 16 and 150 steps of 512, harvested in float32."""


def small_sae_rebuild() -> dict[str, float]:
    """Train the small SAE (:data:`SMALL_SAE_DATA`, :data:`SMALL_SAE_TRAIN`; not cached) on the
    bundled model through the same corpus, harvest and trainer as :func:`train_sae`, and return
    its figures on its held-out tokens: explained variance, L0, the fraction of features that
    fire, and a checksum of its weights. The same settings give the same figures up to float
    rounding. (The next-token loss passes of :func:`train_sae`'s statistics are left out: they
    would triple the time.)"""
    from lmsci_mi.steering.sae.stats import feature_summary
    from lmsci_mi.steering.sae.train import _fit

    lm = load_model(DEFAULT_MODEL)
    data, train = SMALL_SAE_DATA, SMALL_SAE_TRAIN
    hook = train.hook(lm)
    corpus = sae_corpus(lm, data)
    raw = _fit(lm, harvest(lm, corpus.train, hook, train.autocast, progress=False), hook, train)
    sae = LensSAE(raw, hook, lm.name, lm.cfg.d_model, torch.ones(train.d_sae))
    held_out = harvest(lm, corpus.held_out, hook, train.autocast, progress=False)
    explained, l0, density, _ = feature_summary(sae, held_out)
    weights = sum(
        float(getattr(raw, name).detach().double().abs().sum())
        for name in ("W_enc", "W_dec", "b_enc", "b_dec")
    )
    return {
        "explained_variance": explained,
        "l0": l0,
        "live_fraction": float((density > 0).float().mean()),
        "weight_abs_sum": weights,
    }


def _params(data: SAEDataConfig, train: SAETrainConfig) -> dict[str, Any]:
    return {
        "model": "smollm2-135m",
        **{f"data.{k}": v for k, v in data.params().items()},
        **{f"train.{k}": v for k, v in train.params().items() if k != "progress"},
    }


@ARTEFACT_BUILDERS.register(
    "sae",
    SAETrainConfig,
    "the TopK SAE (d_sae 4608, k 48) of the bundled SmolLM2-135M at blocks.15.hook_resid_post, "
    "seed 0: its live features in float16, expanded into the cache on first use",
)
def build_sae_artefact(*, small: bool, retrain: bool = False) -> BuiltArtefact:
    """The shipped SAE's compact files (:func:`build_shipped_sae`), or with ``small`` the figures
    of :func:`small_sae_rebuild` (nothing cached or shipped)."""
    if small:
        return BuiltArtefact((), _params(SMALL_SAE_DATA, SMALL_SAE_TRAIN), small_sae_rebuild())
    files = build_shipped_sae(retrain=retrain)
    weights = load_file(str(files[0]))
    figures = {
        "live_features": float(len(weights["live_ids"])),
        "weight_abs_sum": sum(float(t.double().abs().sum()) for t in weights.values()),
    }
    return BuiltArtefact(tuple(files), _params(SAEDataConfig(), SAETrainConfig()), figures)

"""Build the shipped SAE: train the default SAE of the bundled model and write its compact form.

``scripts/build_artefacts.py sae`` rebuilds it through :func:`build_sae_artefact` (registered in
:data:`lmsci_mi.artefacts.ARTEFACT_BUILDERS`): :func:`build_shipped_sae` for the files (the
features that fire on held-out or early training tokens are kept), and the figures of
:func:`small_sae_rebuild`, which ``tests/integration/test_sae_shipped_smollm2.py`` repeats.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import Tensor

from lmsci_mi.artefacts import ARTEFACT_BUILDERS, BuiltArtefact
from lmsci_mi.loading import DEFAULT_MODEL, load_model
from lmsci_mi.model import LensModel
from lmsci_mi.sae.compact import compact_sae, is_complete
from lmsci_mi.sae.core import LensSAE
from lmsci_mi.sae.data import SAEDataConfig, sae_corpus
from lmsci_mi.sae.stats import feature_summary
from lmsci_mi.sae.train import SAETrainConfig, _fit, cached_sae_path, harvest, train_sae

__all__ = [
    "LIVE_TRAIN_ROWS",
    "SMALL_SAE_DATA",
    "SMALL_SAE_TRAIN",
    "build_sae_artefact",
    "build_shipped_sae",
    "live_features",
    "small_sae_rebuild",
]


@torch.no_grad()
def live_features(
    lm: LensModel, sae: LensSAE, rows: Sequence[Sequence[int]], autocast: str | None = None
) -> Tensor:
    """``[d_sae]`` bool: the features that fire on at least one token of ``rows`` (sink left out).

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.sae.train import SAETrainConfig, untrained_sae
    >>> lm = load_model("toy-2l")
    >>> sae = untrained_sae(lm, SAETrainConfig(layer=1, d_sae=32, k=4))
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


def build_shipped_sae(
    *,
    retrain: bool = False,
    data: SAEDataConfig | None = None,
    train: SAETrainConfig | None = None,
) -> list[Path]:
    """Train the default SAE of the bundled model (or read it from the cache unless ``retrain``)
    and write its compact form: the features that fire on the held-out tokens or on the first
    :data:`LIVE_TRAIN_ROWS` training rows are kept.

    ``data`` and ``train`` replace the default settings (``benchmarks/sae_shipped.py`` compacts
    an SAE harvested in float32 this way, since bfloat16 autocast is slow on CPUs without AMX);
    the files shipped are the defaults'.

    Returns:
        The compact files (under the settings' cache folder).
    """
    lm = load_model(DEFAULT_MODEL)
    data, train = data or SAEDataConfig(), train or SAETrainConfig()
    folder = cached_sae_path(lm, data, train)
    if retrain and folder.exists():
        shutil.rmtree(folder)
    if not is_complete(folder) or "shipped" in _info(folder):
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

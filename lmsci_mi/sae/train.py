"""Train a TopK / BatchTopK SAE with sae-lens's ``SAETrainer`` on activations harvested here.

Route B of the sae-lens notes: the residual vectors are harvested with
:func:`lmsci_mi.collect.collect_activations` (through the hook registry, sink left out), shuffled,
and fed to ``SAETrainer`` as an iterator of batches. The trained SAE is cached under the cache
folder, keyed by the model's weights, the hook, the text and both configs. After Gao et al. 2024
(TopK SAEs) and Bussmann et al. 2024 (BatchTopK).
"""

from __future__ import annotations

import logging
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import field, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from lmsci_mi.cache import cache_key, cache_root, weights_fingerprint
from lmsci_mi.collect import CollectConfig, collect_activations
from lmsci_mi.config import NOT_IN_NOTES, Config, config, paper
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.sae.compact import REBUILD
from lmsci_mi.sae.core import LensSAE
from lmsci_mi.sae.data import SAECorpus, SAEDataConfig, sae_corpus
from lmsci_mi.sae.shipped import restore_shipped_sae
from lmsci_mi.sae.stats import SAEStats, sae_stats
from lmsci_mi.sites import hook_name

__all__ = [
    "SAETrainConfig",
    "cached_sae_path",
    "harvest",
    "load_trained_sae",
    "sae_cache_key",
    "train_sae",
    "untrained_sae",
]

logger = logging.getLogger(__name__)

ARCHITECTURES = ("topk", "batchtopk")


@config
class SAETrainConfig(Config):
    """The SAE and its training run. A d_sae=4608 step costs about 3–4 min per million samples
    on a 2-core CPU; the defaults train in well under 30 minutes there."""

    layer: int = field(
        default=15, metadata={"help": "block whose residual output is encoded", "ge": 0}
    )
    site: str = field(
        default="resid_post",
        metadata={"help": "residual site", "choices": ("resid_pre", "resid_mid", "resid_post")},
    )
    architecture: str = field(
        default="topk", metadata={"help": "SAE architecture", "choices": ARCHITECTURES}
    )
    d_sae: int = field(
        default=4608,
        metadata={
            "help": "number of features",
            "ge": 1,
            **paper(NOT_IN_NOTES, "Gao et al. 2024, arXiv:2406.04093"),
        },
    )
    k: int = field(
        default=48,
        metadata={
            "help": "active features per token (the L0)",
            "ge": 1,
            **paper(NOT_IN_NOTES, "Gao et al. 2024, arXiv:2406.04093"),
        },
    )
    training_samples: int = field(
        default=2_000_000, metadata={"help": "activations seen in training", "ge": 1}
    )
    batch_size: int = field(default=4096, metadata={"help": "activations per step", "ge": 1})
    lr: float = field(
        default=4e-4,
        metadata={
            "help": "Adam learning rate",
            "gt": 0,
            **paper(NOT_IN_NOTES, "Gao et al. 2024, arXiv:2406.04093"),
        },
    )
    lr_decay_fraction: float = field(
        default=0.2,
        metadata={
            "help": "fraction of the steps over which lr decays to 0 at the end", "ge": 0, "le": 1
        },
    )
    dead_feature_window: int = field(
        default=150,
        metadata={"help": "steps without firing before a feature counts as dead", "ge": 1},
    )
    autocast: str | None = field(
        default="bfloat16",
        metadata={
            "help": "autocast dtype of the harvest's forward pass (None: float32)",
            "choices": ("bfloat16",),
        },
    )
    seed: int = field(default=0, metadata={"help": "seeds the SAE's initialisation and shuffles"})
    progress: bool = field(default=True, metadata={"help": "show progress bars", "cli": False})

    def validate(self) -> None:
        if self.k > self.d_sae:
            raise UserInputError(f"k ({self.k}) cannot exceed d_sae ({self.d_sae})")

    def hook(self, lm: LensModel) -> str:
        """The hook name at this config's site, checked against the model's depth."""
        if self.layer >= lm.cfg.n_layers:
            raise UserInputError(
                f"layer {self.layer} does not exist: {lm.name} has layers 0..{lm.cfg.n_layers - 1}"
            )
        return hook_name(self.site, self.layer)


def cached_sae_path(lm: LensModel, data: SAEDataConfig, train: SAETrainConfig) -> Path:
    """The cache folder of the SAE these settings train on ``lm`` (it may not exist yet)."""
    hook = train.hook(lm)
    key = sae_cache_key(weights_fingerprint(lm), hook, data, train)
    return cache_root() / "sae" / f"{lm.name}-{hook}-{key}"


def sae_cache_key(fingerprint: str, hook: str, data: SAEDataConfig, train: SAETrainConfig) -> str:
    """The key part of :func:`cached_sae_path`: the model's weights, the hook, the text and the
    training settings (the progress bar aside). The shipped SAE's folder is named by it."""
    payload = {
        "model": fingerprint,
        "hook": hook,
        "data": data.params(),
        "train": {k: v for k, v in train.params().items() if k != "progress"},
    }
    return cache_key(payload, length=20)


def train_sae(
    lm: LensModel,
    data: SAEDataConfig | None = None,
    train: SAETrainConfig | None = None,
    *,
    cache: bool = True,
    shipped: bool = True,
) -> tuple[LensSAE, SAEStats]:
    """Train an SAE on ``lm``'s activations at one residual site (the model is only read).

    Args:
        lm: the model.
        data: the text (:class:`SAEDataConfig`).
        train: the SAE and its training (:class:`SAETrainConfig`).
        cache: read and write the SAE and its statistics under the cache folder
            (:func:`cached_sae_path`); a second call with the same settings is instant.
        shipped: with ``cache``, use the SAE that ships with lmsci-mi when these are its
            settings (the default SAE of the bundled SmolLM2, expanded from its compact form
            into the cache; :mod:`lmsci_mi.sae.shipped`) instead of training.

    Returns:
        (the trained :class:`LensSAE`, its :class:`SAEStats` on held-out tokens).

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> sae, stats = train_sae(lm, SAEDataConfig(corpus_tokens=2000, seq_len=64, generations=0),
    ...     SAETrainConfig(layer=1, d_sae=128, k=8, training_samples=4096, batch_size=512,
    ...                    autocast=None, progress=False), cache=False)
    >>> sae.d_sae, stats.l0
    (128, 8.0)
    """
    data = data or SAEDataConfig()
    train = train or SAETrainConfig()
    hook = train.hook(lm)
    folder = cached_sae_path(lm, data, train) if cache else None
    if folder is not None and (
        (shipped and restore_shipped_sae(folder)) or (folder / "stats.json").is_file()
    ):
        logger.info("loading cached SAE %s", folder)
        return LensSAE.load(folder, lm.device), SAEStats.load(folder / "stats.json")

    fingerprint = weights_fingerprint(lm)
    start = time.perf_counter()
    corpus = sae_corpus(lm, data, fingerprint=fingerprint)
    text_seconds = time.perf_counter() - start
    start = time.perf_counter()
    acts = harvest(lm, corpus.train, hook, train.autocast, progress=train.progress)
    harvest_seconds = time.perf_counter() - start
    start = time.perf_counter()
    sae = _fit(lm, acts, hook, train)
    train_seconds = time.perf_counter() - start
    del acts
    lens_sae = LensSAE(
        sae=sae,
        hook=hook,
        model_name=lm.name,
        d_model=lm.cfg.d_model,
        feature_scale=torch.ones(train.d_sae),
        model_fingerprint=fingerprint,
        source=str(folder) if folder is not None else "",
        info={
            "data": {k: v for k, v in data.params().items() if k != "config"},
            "train": {k: v for k, v in train.params().items() if k != "config"},
        },
    )
    costs = {
        "text_seconds": text_seconds,
        "harvest_seconds": harvest_seconds,
        "train_seconds": train_seconds,
    }
    lens_sae, stats = _measure(lm, lens_sae, corpus, data, train, costs)
    if folder is not None:
        lens_sae.save(folder)
        stats.save(folder / "stats.json")
    return lens_sae, stats


def load_trained_sae(
    lm: LensModel, data: SAEDataConfig | None = None, train: SAETrainConfig | None = None
) -> LensSAE:
    """The SAE that :func:`train_sae` caches for these settings (default: the shipped SAE of the
    bundled SmolLM2), never training one.

    Raises:
        FileNotFoundError: neither the cache nor the package holds it; the message names the
            commands that train it.
    """
    data = data or SAEDataConfig()
    train = train or SAETrainConfig()
    folder = cached_sae_path(lm, data, train)
    if not restore_shipped_sae(folder) and not (folder / "lmsci_sae.json").is_file():
        raise FileNotFoundError(
            f"no trained SAE for {lm.name} at {train.hook(lm)} in the cache ({folder}), and none "
            f"ships for these settings; train it with `lmsci-mi sae train --model {lm.name} "
            f"--layer {train.layer}` (about 25 min on 2 CPU cores), or rebuild the shipped one "
            f"with `{REBUILD}`"
        )
    return LensSAE.load(folder, lm.device)


def harvest(
    lm: LensModel, rows: list[list[int]], hook: str, autocast: str | None, *, progress: bool = True
) -> Tensor:
    """Activations at ``hook`` of every token of ``rows`` but the sink, ``[token, d_model]``."""
    acts = collect_activations(
        lm,
        rows,
        [hook],
        positions="all",
        config=CollectConfig(autocast=autocast, progress=progress, token_budget=4096),
    )
    return acts.acts[hook]


def _batches(acts: Tensor, batch_size: int, seed: int) -> Iterator[Tensor]:
    """Endless seeded shuffles of ``acts``, ``batch_size`` rows at a time (sae-lens's
    ``DataProvider``)."""
    generator = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(len(acts), generator=generator)
        for start in range(0, len(order) - batch_size + 1, batch_size):
            yield acts[order[start : start + batch_size]].float()


def untrained_sae(lm: LensModel, train: SAETrainConfig | None = None) -> LensSAE:
    """A freshly initialised (untrained) SAE of ``train``'s shape at its site, as a
    :class:`LensSAE` with unit feature scales: the SAE for an example or a test that needs an
    SAE's shape and plumbing, not its features (train one with :func:`train_sae`).

    Its initial weights come from ``train.seed``; the global random state is left as it was.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> sae = untrained_sae(lm, SAETrainConfig(layer=1, d_sae=32, k=4))
    >>> sae.hook, sae.d_sae
    ('blocks.1.hook_resid_post', 32)
    """
    train = train or SAETrainConfig()
    hook = train.hook(lm)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(train.seed)
        sae = _training_sae(lm, hook, train)
    return LensSAE(
        sae=sae,
        hook=hook,
        model_name=lm.name,
        d_model=lm.cfg.d_model,
        feature_scale=torch.ones(train.d_sae),
        info={"train": {k: v for k, v in train.params().items() if k != "config"}, "untrained": True},
    )


def _training_sae(lm: LensModel, hook: str, train: SAETrainConfig) -> Any:
    from sae_lens import (
        BatchTopKTrainingSAE,
        BatchTopKTrainingSAEConfig,
        TopKTrainingSAE,
        TopKTrainingSAEConfig,
    )

    common: dict[str, Any] = {
        "d_in": lm.cfg.d_model,
        "d_sae": train.d_sae,
        "k": train.k,
        "normalize_activations": "expected_average_only_in",
        "device": str(lm.device),
    }
    if train.architecture == "topk":
        sae: Any = TopKTrainingSAE(TopKTrainingSAEConfig(**common))
    else:
        sae = BatchTopKTrainingSAE(BatchTopKTrainingSAEConfig(**common))
    # SAEMetadata answers None for any missing name, so these are set explicitly (add_sae and
    # our own checks read them).
    sae.cfg.metadata.hook_name = hook
    sae.cfg.metadata.model_name = lm.name
    sae.cfg.metadata.context_size = None
    return sae


def _fit(lm: LensModel, acts: Tensor, hook: str, train: SAETrainConfig) -> Any:
    """sae-lens's trainer on shuffled batches of ``acts``; returns the inference SAE."""
    from sae_lens import SAE, SAETrainer
    from sae_lens.config import LoggingConfig, SAETrainerConfig

    if len(acts) < train.batch_size:
        raise UserInputError(
            f"{len(acts)} training activations are fewer than one batch of {train.batch_size}; "
            "give more text or a smaller batch_size"
        )
    torch.manual_seed(train.seed)
    sae = _training_sae(lm, hook, train)
    steps = train.training_samples // train.batch_size
    trainer_config = SAETrainerConfig(
        total_training_samples=steps * train.batch_size,
        train_batch_size_samples=train.batch_size,
        lr=train.lr,
        lr_end=train.lr / 10,  # unused by the constant schedule, but the trainer asserts it
        lr_decay_steps=int(steps * train.lr_decay_fraction),
        dead_feature_window=train.dead_feature_window,
        feature_sampling_window=max(1, min(250, steps)),
        n_batches_for_norm_estimate=min(20, max(1, len(acts) // train.batch_size)),
        device=str(lm.device),
        logger=LoggingConfig(log_to_wandb=False),
    )
    # sae-lens warns about things this route handles on purpose (no evaluator, no wandb), and
    # pytest runs with filterwarnings=error: its warnings are silenced here, and only here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = SAETrainer(
            cfg=trainer_config,
            sae=sae,
            data_provider=_batches(acts, train.batch_size, train.seed),
        )
        trained = trainer.fit()
        # The inference SAE (BatchTopK becomes JumpReLU) comes from sae-lens's own save format.
        with tempfile.TemporaryDirectory() as folder:
            trained.save_inference_model(folder)
            inference = SAE.load_from_disk(folder, device=str(lm.device))
    inference.cfg.metadata.hook_name = hook
    inference.cfg.metadata.model_name = lm.name
    inference.eval()
    return inference


def _measure(
    lm: LensModel,
    sae: LensSAE,
    corpus: SAECorpus,
    data: SAEDataConfig,
    train: SAETrainConfig,
    costs: dict[str, float],
) -> tuple[LensSAE, SAEStats]:
    stats = sae_stats(
        lm,
        sae,
        corpus.held_out,
        progress=train.progress,
        autocast_check=train.autocast,
        params={
            **{f"data.{k}": v for k, v in data.params().items()},
            **{f"train.{k}": v for k, v in train.params().items()},
        },
        data_source=corpus.source,
        extra={
            **costs,
            "n_train_tokens": float(corpus.n_train_tokens),
            "train_dead_features": float(sae.sae.cfg.metadata.num_dead_features or 0),
        },
    )
    return replace(sae, feature_scale=stats.feature_scale.to(lm.device)), stats

"""Train per-layer and skip transcoders offline through the training home, seeded, resumable per
layer and cached.

Paulo et al. 2025 (arXiv:2501.18823) by default, as their code (EleutherAI's sparsify,
``transcode=True``) runs it: TopK with k=32, 32 latents per model dimension, the FVU loss,
``W_dec`` and ``W_skip`` zero-initialised, the encoder bias centring the first batch's inputs and
the decoder bias its mean output, and sparsify's AuxK for dead latents. Dunefsky et al. 2024's
ReLU + L1 variant is :meth:`TranscoderTrainConfig.dunefsky`. Activations are harvested once per
pass (:func:`~lmsci_mi.transcoders.data.harvest_pairs`) and each layer trains on them with
:func:`lmsci_mi.training.train_model` (AdamW with its seeding, checkpoints and resumption); the
finished weights are cached by :func:`lmsci_mi.training.load_or_train` under a key of the model's
weights, the sites, the data and the config.

Why not sparsify itself (eai-sparsify 1.3.3 on PyPI, MIT): it hooks Hugging Face modules
(``model.base_model.named_modules()``), not TransformerLens hook points, so it cannot train the
TL-only CFG GPT nor read ``ln2.hook_normalized``; it streams token batches from a ``datasets``
dataset and pulls in accelerate, datasets, schedulefree and simple-parsing; and its loop has no
per-layer cache or the project's resumable checkpoints. Its recipe is some 100 lines here.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lmsci_mi.artefacts import restore_shipped
from lmsci_mi.cache import weights_fingerprint
from lmsci_mi.config import Config, config, paper
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.training import (
    WEIGHTS,
    TrainConfig,
    TrainingRecord,
    load_or_train,
    train_model,
    trained_folder,
    training_key,
)
from lmsci_mi.transcoders.data import TranscoderDataConfig, harvest_pairs, transcoder_rows
from lmsci_mi.transcoders.model import Transcoder, TranscoderSet, check_sites

__all__ = [
    "TrainedLayer",
    "TranscoderTrainConfig",
    "train_transcoder",
    "train_transcoders",
    "transcoder_folder",
]

log = logging.getLogger(__name__)

_FORMAT = 1
"""The trainer's code version in the cache key: bump it when the code changes what a config
produces."""

_RECORD = "record.json"

_PAULO = "Paulo et al. 2025 (arXiv:2501.18823); sparsify 1.3.3 TrainConfig/SparseCoderConfig"


@config
class TranscoderTrainConfig(Config):
    """One layer's transcoder and its training run (Paulo et al.'s recipe by default).

    >>> round(TranscoderTrainConfig().learning_rate(18432), 7)  # SmolLM2's 32 × 576 latents
    0.0001886
    """

    activation: Literal["topk", "relu"] = field(
        default="topk",
        metadata={
            "help": "topk (Paulo et al.) or relu (Dunefsky et al., with an L1 penalty)",
            **paper("ReLU, then TopK", _PAULO + " activation; fused_encoder.py", why=(
                "sparsify applies ReLU before TopK; we gate the k largest pre-activations as "
                "circuit-tracer's TopK does, so a saved file computes the same function there; "
                "the two differ only where fewer than k pre-activations are positive "
                "(TranscoderMetrics.negative_kept_fraction measures it)")),
        },
    )
    k: int = field(
        default=32,
        metadata={"help": "latents TopK keeps per token", "ge": 1, **paper(32, _PAULO + " k")},
    )
    expansion: int = field(
        default=32,
        metadata={
            "help": "latents per model dimension (when n_latents is 0)",
            "ge": 1,
            **paper(32, _PAULO + " expansion_factor"),
        },
    )
    n_latents: int = field(
        default=0, metadata={"help": "latents per layer (0: expansion × d_model)", "ge": 0}
    )
    skip: bool = field(
        default=True,
        metadata={
            "help": "train the linear skip W_skip (a skip transcoder)",
            **paper(True, "Paulo et al. 2025 (skip transcoders); sparsify skip_connection"),
        },
    )
    loss: Literal["fvu", "dunefsky"] = field(
        default="fvu",
        metadata={
            "help": "fvu: ‖y−ŷ‖²/Σ‖y−ȳ‖² per batch; dunefsky: mean((ŷ−y)²/‖y‖) + L1",
            **paper("fvu", _PAULO + " loss_fn"),
        },
    )
    l1_coefficient: float = field(
        default=0.0, metadata={"help": "weight of mean ‖f‖₁ (the dunefsky loss)", "ge": 0}
    )
    lr: float | None = field(
        default=None,
        metadata={
            "help": "Adam learning rate (None: 2e-4/√(n_latents/2¹⁴), sparsify's Adam rule)",
            "gt": 0,
            **paper("signum, 5e-3/√(n_latents/2¹⁴)", _PAULO + " optimizer, lr", why=(
                "the training home optimises with AdamW (weight decay 0 here: Adam); sparsify's "
                "own Adam option sets 2e-4/√(n_latents/2¹⁴) with 1,000 warm-up steps and a "
                "linear decay, which we follow")),
        },
    )
    warmup: int = field(
        default=1000,
        metadata={"help": "linear warm-up steps", "ge": 0, **paper(1000, _PAULO + " lr_warmup_steps")},
    )
    batch_size: int = field(
        default=4096,
        metadata={
            "help": "tokens per step",
            "ge": 1,
            **paper(65536, _PAULO + " batch_size 32 × ctx_len 2048", why=(
                "a CPU step of 65k tokens at 32× expansion takes minutes; 4,096 tokens keeps "
                "thousands of steps within the build's budget (benchmarks/transcoders.py)")),
        },
    )
    training_tokens: int = field(
        default=16_384_000,
        metadata={"help": "tokens seen in training (several epochs of the harvest)", "ge": 1},
    )
    auxk_alpha: float = field(
        default=1 / 32,
        metadata={
            "help": "weight of the AuxK loss on dead latents (0: off)",
            "ge": 0,
            **paper(0.0, _PAULO + " auxk_alpha", why=(
                "short CPU runs lose latents; AuxK (Gao et al. 2024, α = 1/32, sparsify's own "
                "implementation) revives them; the dead fraction is in every layer's metrics")),
        },
    )
    dead_tokens: int = field(
        default=1_000_000,
        metadata={
            "help": "tokens without firing after which a latent counts as dead (AuxK)",
            "ge": 1,
            **paper(10_000_000, _PAULO + " dead_feature_threshold", why=(
                "our runs see a few million tokens, so 10M would never mark a latent dead")),
        },
    )
    seed: int = field(default=0, metadata={"help": "seeds the weights and the batch order"})
    checkpoint_every: int = field(
        default=200, metadata={"help": "steps between checkpoints (0: none)", "ge": 0}
    )

    def validate(self) -> None:
        if self.activation == "topk" and self.loss != "fvu":
            raise UserInputError("a TopK transcoder trains with loss='fvu'; relu takes 'dunefsky'")
        if self.steps <= self.warmup and self.warmup:
            raise UserInputError(
                f"{self.steps} steps ({self.training_tokens} tokens / batch {self.batch_size}) "
                f"do not get past the {self.warmup} warm-up steps: give more training_tokens "
                "or a shorter warmup"
            )

    @property
    def steps(self) -> int:
        return max(1, self.training_tokens // self.batch_size)

    def latents(self, d_model: int) -> int:
        """Latents of a layer of width ``d_model``."""
        return self.n_latents or self.expansion * d_model

    def learning_rate(self, n_latents: int) -> float:
        """``lr``, or sparsify's Adam rule 2e-4/√(n_latents/2¹⁴)."""
        return self.lr if self.lr is not None else 2e-4 * math.sqrt(2**14 / n_latents)

    @classmethod
    def dunefsky(cls, **overrides: Any) -> TranscoderTrainConfig:
        """Dunefsky et al. 2024's recipe (arXiv:2406.11944, ``train_transcoder.py``): ReLU, no
        skip, loss mean((ŷ−y)²/‖y‖) + 1.4e-4·mean‖f‖₁, unit-norm decoder rows, lr 4e-4,
        5,000 warm-up steps. Their ghost grads are not implemented (AuxK is off here).

        >>> TranscoderTrainConfig.dunefsky(training_tokens=4096 * 6000).activation
        'relu'
        """
        base: dict[str, Any] = dict(
            activation="relu", skip=False, loss="dunefsky", l1_coefficient=1.4e-4, lr=4e-4,
            warmup=5000, auxk_alpha=0.0, training_tokens=4096 * 10_000,
        )
        return cls(**{**base, **overrides})


@dataclass(frozen=True)
class TrainedLayer:
    """What one layer's transcoder cost and reached.

    Attributes:
        layer: the layer.
        steps: optimiser steps.
        final_loss: mean training loss of the last 50 steps.
        seconds, cpu_seconds: training wall and process CPU time (summed over resumptions).
        harvest_seconds: this layer's share of the harvest pass it was trained from.
        n_train_tokens: harvested training tokens.
        threads: torch threads while training.
        resumed_from: the step a checkpoint resumed it from (0: one run).
        lr: the peak learning rate used (``TranscoderTrainConfig.learning_rate``).
    """

    layer: int
    steps: int
    final_loss: float
    seconds: float
    cpu_seconds: float
    harvest_seconds: float
    n_train_tokens: int
    threads: int
    resumed_from: int = 0
    lr: float = 0.0


class _Trainee(nn.Module):
    """The transcoder in training, with the AuxK counter that a checkpoint must resume with."""

    tokens_since_fired: Tensor

    def __init__(self, transcoder: Transcoder, config: TranscoderTrainConfig) -> None:
        super().__init__()
        self.transcoder = transcoder
        self.config = config
        self.register_buffer(
            "tokens_since_fired", torch.zeros(transcoder.d_transcoder, dtype=torch.long)
        )

    def loss(self, batch: tuple[Tensor, Tensor]) -> Tensor:
        x, y = batch
        tc, cfg = self.transcoder, self.config
        if cfg.loss == "dunefsky":
            with torch.no_grad():  # unit-norm decoder rows, renormalised before every step
                tc.W_dec.div_(tc.W_dec.norm(dim=-1, keepdim=True).clamp_min(1e-8))
        pre = tc.pre_acts(x)
        if tc.activation == "topk":
            assert tc.k is not None
            # Only the k kept latents are decoded (an embedding bag): the same sum as
            # acts @ W_dec, without the dense [batch, d_transcoder] product.
            values, indices = pre.topk(tc.k, dim=-1)
            out = F.embedding_bag(indices, tc.W_dec, per_sample_weights=values, mode="sum")
            fired = indices[values != 0]
            acts = None
        else:
            acts = tc.activate(pre)
            out = acts @ tc.W_dec
            fired = acts.nonzero()[:, -1]
        out = out + tc.b_dec + tc.skip(x)
        error = y - out
        total_variance = (y - y.mean(0)).pow(2).sum()
        if cfg.loss == "dunefsky":
            value = (error.pow(2) / y.norm(dim=-1, keepdim=True)).mean()
            l1 = (acts if acts is not None else tc.activate(pre)).abs().sum(-1).mean()
            value = value + cfg.l1_coefficient * l1
        else:
            value = error.pow(2).sum() / total_variance
        if cfg.auxk_alpha > 0:
            value = value + cfg.auxk_alpha * self._auxk(pre, error, total_variance)
        with torch.no_grad():
            self.tokens_since_fired += len(x)
            self.tokens_since_fired[fired] = 0
        return value

    def _auxk(self, pre: Tensor, error: Tensor, total_variance: Tensor) -> Tensor:
        """sparsify's AuxK (Gao et al. 2024, B.1): the top d_model/2 dead latents' (ReLU'd)
        pre-activations predict the residual error, scaled down when few latents are dead."""
        dead = self.tokens_since_fired > self.config.dead_tokens
        n_dead = int(dead.sum())
        if n_dead == 0:
            return error.new_zeros(())
        k_aux = self.transcoder.d_model // 2
        scale = min(n_dead / k_aux, 1.0)
        candidates = torch.where(dead, F.relu(pre), torch.full_like(pre, -math.inf))
        values, indices = candidates.topk(min(k_aux, n_dead), dim=-1)
        predicted = F.embedding_bag(indices, self.transcoder.W_dec, per_sample_weights=values,
                                    mode="sum")
        return scale * (predicted - error.detach()).pow(2).sum() / total_variance


class _Batches:
    """Seeded epochs over harvested pairs: batch ``step`` depends on the step only (a resumed run
    sees the same data). A partial last batch of an epoch is dropped, as a data loader would."""

    def __init__(self, x: Tensor, y: Tensor, seed: int) -> None:
        self.x, self.y, self.seed = x, y, seed

    @functools.lru_cache(maxsize=2)  # noqa: B019 - one object per training run
    def _order(self, epoch: int) -> Tensor:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(len(self.x), generator=generator)

    def __call__(self, step: int, batch_size: int) -> tuple[Tensor, Tensor]:
        per_epoch = len(self.x) // batch_size
        epoch, index = divmod(step, per_epoch)
        rows = self._order(epoch)[index * batch_size : (index + 1) * batch_size]
        return self.x[rows].float(), self.y[rows].float()


def _initialised(
    d_model: int, config: TranscoderTrainConfig, first: tuple[Tensor, Tensor]
) -> _Trainee:
    """sparsify's initialisation: the encoder as ``nn.Linear``'s, W_dec and W_skip zero, b_enc
    centring the first batch's pre-activations, b_dec its mean output. Dunefsky's decoder is
    random with unit-norm rows instead (a zero row has no direction)."""
    n = config.latents(d_model)
    tc = Transcoder(d_model, n, activation=config.activation, k=config.k, skip=config.skip)
    x, y = first
    with torch.no_grad():
        nn.init.kaiming_uniform_(tc.W_enc, a=math.sqrt(5))
        tc.b_enc.copy_(-(x.mean(0) @ tc.W_enc.T))
        tc.b_dec.copy_(y.mean(0))
        if config.loss == "dunefsky":
            nn.init.kaiming_uniform_(tc.W_dec, a=math.sqrt(5))
            tc.W_dec.div_(tc.W_dec.norm(dim=-1, keepdim=True))
    return _Trainee(tc, config)


def train_transcoder(
    x: Tensor,
    y: Tensor,
    config: TranscoderTrainConfig | None = None,
    *,
    checkpoints: Path | None = None,
    threads: int | None = None,
    device: torch.device | str | None = None,
    progress: bool = False,
    desc: str = "transcoder",
) -> tuple[Transcoder, TrainingRecord]:
    """Train one transcoder mapping ``x`` to ``y`` (``[token, d_model]`` each) from its seeded
    start, with :func:`lmsci_mi.training.train_model` (no cache; see :func:`train_transcoders`).

    With ``checkpoints`` and ``config.checkpoint_every``, an interrupted run resumes from its
    last checkpoint to the same weights (CPU, one thread). The transcoder is built on the CPU
    (so a seed gives the same start everywhere), trained on ``device`` and returned on the CPU.

    >>> x = torch.randn(512, 8); y = x.tanh() @ torch.randn(8, 8)
    >>> tc, record = train_transcoder(x, y, TranscoderTrainConfig(n_latents=32, k=4,
    ...     batch_size=64, training_tokens=64 * 60, warmup=10, checkpoint_every=0))
    >>> record.steps, record.final_loss(5) < record.losses[0]
    (60, True)
    """
    config = config or TranscoderTrainConfig()
    if x.ndim != 2 or x.shape != y.shape:
        raise UserInputError(
            f"a transcoder trains on [token, d_model] inputs and targets of one shape, not "
            f"{tuple(x.shape)} and {tuple(y.shape)}"
        )
    if len(x) < config.batch_size:
        raise UserInputError(
            f"{len(x)} training tokens are fewer than one batch of {config.batch_size}; "
            "harvest more tokens or lower batch_size"
        )
    batches = _Batches(x, y, config.seed)
    n_latents = config.latents(x.shape[1])
    run = TrainConfig(
        steps=config.steps, batch_size=config.batch_size, lr=config.learning_rate(n_latents),
        schedule="warmup_linear", warmup=config.warmup, final_lr_fraction=0.0, weight_decay=0.0,
        seed=config.seed, checkpoint_every=config.checkpoint_every,
    )
    trainee, record = train_model(
        lambda: _initialised(x.shape[1], config, batches(0, config.batch_size)),
        batches,
        lambda model, batch: model.loss(batch),
        run,
        checkpoints=checkpoints,
        device=device,
        threads=threads,
        progress=progress,
        desc=desc,
    )
    tc = trainee.transcoder.cpu()
    if config.loss == "dunefsky":
        with torch.no_grad():
            tc.W_dec.div_(tc.W_dec.norm(dim=-1, keepdim=True).clamp_min(1e-8))
    tc.requires_grad_(False)
    return tc, record


def transcoder_folder(
    lm: LensModel,
    data: TranscoderDataConfig,
    train: TranscoderTrainConfig,
    *,
    input_site: str = "mlp_in_normed",
    output_site: str = "mlp_out",
) -> Path:
    """The cache folder of the set these settings train on ``lm``, one ``layer_{i}`` folder per
    layer: ``cache_root()/transcoders/<model>-<key of weights, sites, data, config, code>``."""
    key = training_key(
        _FORMAT,
        model={"name": lm.name, "weights": weights_fingerprint(lm)},
        sites={"input": input_site, "output": output_site},
        data=data.params(),
        # checkpoints leave the weights alone, so their interval is not in the key
        train={k: v for k, v in train.params().items() if k != "checkpoint_every"},
    )
    return trained_folder("transcoders", f"{lm.name}-{key}")


def missing_layers(folder: Path, layers: Sequence[int]) -> list[int]:
    """The layers with no finished transcoder cached (nor shipped) in ``folder``."""
    return [
        layer for layer in layers
        if not restore_shipped(folder / f"layer_{layer}" / WEIGHTS, folder / f"layer_{layer}" / _RECORD)
    ]


def _unreachable(checkpoints: Path) -> tuple[Transcoder, dict[str, Any]]:
    raise AssertionError("load_or_train trains nothing when given `missing`")


def _chosen_layers(lm: LensModel, layers: Sequence[int] | None) -> list[int]:
    """The layers asked for, sorted (None: every layer); a layer the model lacks is refused."""
    chosen = list(range(lm.cfg.n_layers)) if layers is None else sorted(set(layers))
    if not chosen or not all(0 <= layer < lm.cfg.n_layers for layer in chosen):
        raise UserInputError(
            f"layers {list(layers or [])} are not layers of {lm.name} (0..{lm.cfg.n_layers - 1})"
        )
    return chosen


def train_transcoders(
    lm: LensModel,
    data: TranscoderDataConfig | None = None,
    train: TranscoderTrainConfig | None = None,
    *,
    layers: Sequence[int] | None = None,
    input_site: str = "mlp_in_normed",
    output_site: str = "mlp_out",
    layers_per_pass: int | None = None,
    scratch: Path | None = None,
    threads: int | None = None,
    device: torch.device | str | None = None,
    budget_seconds: float | None = None,
    retrain: bool = False,
    progress: bool = False,
) -> tuple[TranscoderSet, dict[int, TrainedLayer]]:
    """A transcoder per layer of ``lm``, from the cache or trained and cached layer by layer.

    The layers not cached are harvested ``layers_per_pass`` at a time (one forward pass per
    batch for all of them; None: all at once) and trained one after the other; each layer's
    checkpoint sits in its cache folder, so a stopped build resumes at the layer and step it
    reached. With ``budget_seconds``, no new layer starts once that much time has passed: the
    set then holds the layers done (a later call goes on from there). Reads the model only.

    Args:
        lm: the model.
        data: the rows (:class:`~lmsci_mi.transcoders.data.TranscoderDataConfig`).
        train: the transcoder and its run.
        layers: the layers (None: every layer).
        input_site, output_site: site-table names of what each transcoder reads and replaces.
        layers_per_pass: layers per harvest pass (fewer: less memory, more forward passes).
        scratch: stream the harvest into memory-mapped files in this folder.
        threads: torch threads while training (None: torch's setting).
        device: train there (None: the CPU); the set comes back on ``lm``'s device.
        budget_seconds: start no layer after this many seconds of the call.
        retrain: train even when cached.

    Returns:
        The :class:`TranscoderSet` (on ``lm``'s device) and each layer's :class:`TrainedLayer`.
    """
    data = data or TranscoderDataConfig()
    train = train or TranscoderTrainConfig()
    chosen = _chosen_layers(lm, layers)
    check_sites(lm, input_site)
    folder = transcoder_folder(lm, data, train, input_site=input_site, output_site=output_site)
    d_model = lm.cfg.d_model

    def build() -> Transcoder:
        return Transcoder(d_model, train.latents(d_model), activation=train.activation,
                          k=train.k, skip=train.skip)

    todo = chosen if retrain else missing_layers(folder, chosen)
    rows = transcoder_rows(lm, data).train if todo else []
    _train_missing(
        lm, rows, todo, folder, train, build, (input_site, output_site),
        dtype=data.harvest_dtype, layers_per_pass=layers_per_pass, scratch=scratch,
        budget_seconds=budget_seconds,
        options=dict(threads=threads, device=device, retrain=retrain, progress=progress),
    )
    left = missing_layers(folder, chosen)
    done_layers = [layer for layer in chosen if layer not in left]
    if not done_layers:
        raise UserInputError(
            f"the budget of {budget_seconds} s ran out before any layer finished; give more time "
            "(a rerun resumes from the checkpoints)"
        )
    if left:
        log.warning("transcoders: the budget ran out; layers %s are left for the next call", left)
    trained, records = {}, {}
    for layer in done_layers:
        tc, record = load_or_train(
            folder / f"layer_{layer}", build, _unreachable, record_file=_RECORD,
            missing=f"layer {layer}'s transcoder vanished from {folder} while training",
        )
        trained[layer] = tc.requires_grad_(False).to(lm.device)
        records[layer] = TrainedLayer(**record["trained"])
    return TranscoderSet(trained, input_site, output_site, lm.name), records


def _train_missing(
    lm: LensModel,
    rows: list[list[int]],
    todo: list[int],
    folder: Path,
    train: TranscoderTrainConfig,
    build: Callable[[], Transcoder],
    sites: tuple[str, str],
    *,
    dtype: str,
    layers_per_pass: int | None,
    scratch: Path | None,
    budget_seconds: float | None,
    options: dict[str, Any],
) -> None:
    """Harvest ``todo``'s layers a pass at a time and train each into its cache folder, starting
    no layer once ``budget_seconds`` have passed."""
    began = time.perf_counter()

    def over_budget() -> bool:
        return budget_seconds is not None and time.perf_counter() - began > budget_seconds

    step = layers_per_pass or len(todo) or 1
    for start in range(0, len(todo), step):
        if over_budget():
            return
        group = todo[start : start + step]
        harvest_began = time.perf_counter()
        pairs = harvest_pairs(lm, rows, group, input_site=sites[0], output_site=sites[1],
                              dtype=dtype, out_dir=scratch, progress=options["progress"])
        harvest_seconds = (time.perf_counter() - harvest_began) / len(group)
        for layer in group:
            if over_budget():
                return
            x, y = pairs.pop(layer)
            _train_layer(folder, layer, x, y, train, build, harvest_seconds, **options)
            del x, y
            done = todo.index(layer) + 1
            spent = time.perf_counter() - began
            log.info("transcoders: %d of %d layers in %.0f s; about %.0f s to go", done,
                     len(todo), spent, spent / done * (len(todo) - done))
        del pairs


def _train_layer(
    folder: Path,
    layer: int,
    x: Tensor,
    y: Tensor,
    train: TranscoderTrainConfig,
    build: Callable[[], Transcoder],
    harvest_seconds: float,
    *,
    threads: int | None,
    device: torch.device | str | None,
    retrain: bool,
    progress: bool,
) -> None:
    """Train ``layer``'s transcoder into its cache folder (resuming its checkpoint)."""

    def run(checkpoints: Path) -> tuple[Transcoder, dict[str, Any]]:
        tc, record = train_transcoder(x, y, train, checkpoints=checkpoints, threads=threads,
                                      device=device, progress=progress, desc=f"transcoder L{layer}")
        trained = TrainedLayer(
            layer=layer, steps=record.steps, final_loss=record.final_loss(50),
            seconds=record.seconds, cpu_seconds=record.cpu_seconds,
            harvest_seconds=harvest_seconds, n_train_tokens=len(x), threads=record.threads,
            resumed_from=record.resumed_from, lr=train.learning_rate(tc.d_transcoder),
        )
        log.info("transcoder L%d: %d steps in %.1f s, loss %.4f", layer, trained.steps,
                 trained.seconds, trained.final_loss)
        return tc, {"trained": asdict(trained), "train": train.params(), "losses": list(record.losses)}

    load_or_train(folder / f"layer_{layer}", build, run, record_file=_RECORD, retrain=retrain)

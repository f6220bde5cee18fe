"""The one home for training small models from scratch: a seeded, resumable loop and its cache.

:func:`train_model` runs AdamW with a registered learning-rate schedule over a batch sampler and a
loss, seeding every random stream and checkpointing model, optimiser, schedule, RNG state and
step, so an interrupted run resumes to the same weights. :func:`load_or_train` caches the finished
weights under the cache root, keyed by :func:`training_key` (config, data spec, code version).
The toy induction model and the CFG GPT train here; so should any new toy, lens or transcoder.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import Tensor, nn
from tqdm.auto import tqdm
from transformer_lens import HookedTransformer, HookedTransformerConfig

from lmsci_mi.artefacts import restore_shipped
from lmsci_mi.cache import cache_key, cache_root
from lmsci_mi.config import Config, config
from lmsci_mi.registry import MethodRegistry

__all__ = [
    "SCHEDULES",
    "TrainConfig",
    "TrainingRecord",
    "load_checkpoint",
    "load_or_train",
    "save_checkpoint",
    "train_model",
    "trained_folder",
    "training_key",
]

log = logging.getLogger(__name__)

B = TypeVar("B")
M = TypeVar("M", bound=nn.Module)

CHECKPOINT = "checkpoint.safetensors"
WEIGHTS = "weights.safetensors"


@config
class TrainConfig(Config):
    """One training run: steps, batch, AdamW, the schedule, the seed and the checkpoint interval.

    >>> TrainConfig(steps=100, schedule="cosine", warmup=10).final_lr_fraction
    0.1
    """

    steps: int = field(default=1000, metadata={"help": "optimiser steps", "ge": 1})
    batch_size: int = field(default=32, metadata={"help": "rows per step", "ge": 1})
    lr: float = field(default=3e-3, metadata={"help": "peak AdamW learning rate", "gt": 0})
    schedule: Literal["constant", "linear", "cosine", "warmup_linear"] = field(
        default="cosine", metadata={"help": "learning-rate schedule (SCHEDULES)"}
    )
    warmup: int = field(default=0, metadata={"help": "linear warm-up steps", "ge": 0})
    final_lr_fraction: float = field(
        default=0.1, metadata={"help": "the schedule's floor, a fraction of lr", "ge": 0, "le": 1}
    )
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay", "ge": 0})
    betas: tuple[float, float] = field(
        default=(0.9, 0.999), metadata={"help": "AdamW betas", "ge": 0, "lt": 1, "cli": False}
    )
    grad_clip: float | None = field(
        default=None, metadata={"help": "clip the gradient norm to this (None: no clipping)", "gt": 0}
    )
    seed: int = field(default=0, metadata={"help": "seeds the weights, the data and every RNG"})
    checkpoint_every: int = field(
        default=0, metadata={"help": "steps between checkpoints (0: none)", "ge": 0}
    )


SCHEDULES: MethodRegistry[Callable[[int, TrainConfig], float]] = MethodRegistry("lr schedule")
"""Learning-rate schedules by name: ``factor(step, config)``, the multiple of ``config.lr`` used at
``step`` (0-based)."""


@SCHEDULES.register("constant", TrainConfig, "linear warm-up, then constant")
def _constant(step: int, config: TrainConfig) -> float:
    return min(1.0, (step + 1) / config.warmup) if config.warmup else 1.0


@SCHEDULES.register("linear", TrainConfig, "warm-up ramp times a linear decay to the floor")
def _linear(step: int, config: TrainConfig) -> float:
    # The ramp multiplies a decay that starts at step 0 (not after the warm-up): the toy induction
    # model was trained with exactly this product.
    ramp = min(1.0, (step + 1) / config.warmup) if config.warmup else 1.0
    return ramp * max(config.final_lr_fraction, 1 - step / config.steps)


@SCHEDULES.register("warmup_linear", TrainConfig, "linear warm-up, then linear decay to the floor")
def _warmup_linear(step: int, config: TrainConfig) -> float:
    # transformers' get_linear_schedule_with_warmup (sparsify's Adam schedule): the decay starts
    # where the warm-up ends, unlike "linear"'s product.
    if step < config.warmup:
        return (step + 1) / config.warmup
    left = (config.steps - step) / max(1, config.steps - config.warmup)
    return max(config.final_lr_fraction, left)


@SCHEDULES.register("cosine", TrainConfig, "linear warm-up, then cosine decay to the floor")
def _cosine(step: int, config: TrainConfig) -> float:
    if step < config.warmup:
        return (step + 1) / config.warmup
    done = (step - config.warmup) / max(1, config.steps - config.warmup)
    # The cosine in float32, as the shipped CFG GPT was trained: float64 would move its weights.
    cosine = torch.cos(torch.tensor(done * torch.pi)).item()
    floor = config.final_lr_fraction
    return floor + (1 - floor) * 0.5 * (1 + cosine)


@dataclass(frozen=True)
class TrainingRecord:
    """What a run cost and reached.

    Attributes:
        losses: the loss of every step (the curve), resumed steps included.
        steps: steps run in all.
        seconds: wall-clock seconds of training (callbacks left out; summed over resumptions).
        cpu_seconds: process CPU seconds, likewise.
        threads: torch's thread count during training.
        device: where it trained.
        resumed_from: the step a checkpoint resumed it from (0: one uninterrupted run).
    """

    losses: tuple[float, ...]
    steps: int
    seconds: float
    cpu_seconds: float
    threads: int
    device: str
    resumed_from: int = 0

    def final_loss(self, last: int = 1) -> float:
        """The mean loss of the ``last`` steps."""
        tail = self.losses[-last:]
        return sum(tail) / len(tail)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "losses": list(self.losses)}


def training_key(version: int, **parts: Mapping[str, Any]) -> str:
    """The cache key of a trained model: its named settings (model and training config, data
    spec) and ``version``, the trainer's code version (bump it when the code changes what a
    config produces). 12 hex digits.

    >>> training_key(1, model={"d": 8}, data={"seed": 0}) == training_key(2, model={"d": 8},
    ...     data={"seed": 0})
    False
    """
    return cache_key({**parts, "format": version}, length=12, algorithm="sha256")


def trained_folder(family: str, name: str) -> Path:
    """``cache_root() / family / name``: where a trained model's files live."""
    return cache_root() / family / name


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # every device's generator


def _build(model: HookedTransformerConfig | Callable[[], nn.Module], seed: int) -> nn.Module:
    _seed_everything(seed)
    if isinstance(model, HookedTransformerConfig):
        return HookedTransformer(model)
    return model()


# ------------------------------------------------------------------------------ checkpoints


def _flatten_optimiser(state: Mapping[str, Any]) -> tuple[dict[str, Tensor], dict[str, Any]]:
    tensors: dict[str, Tensor] = {}
    plain: dict[str, dict[str, Any]] = {}
    for index, values in state["state"].items():
        for name, value in values.items():
            if isinstance(value, Tensor):
                tensors[f"optimiser/{index}/{name}"] = value.detach().cpu().clone()
            else:
                plain.setdefault(str(index), {})[name] = value
    return tensors, {"plain": plain, "param_groups": state["param_groups"]}


def _unflatten_optimiser(tensors: Mapping[str, Tensor], meta: Mapping[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        if key.startswith("optimiser/"):
            _, index, name = key.split("/", 2)
            state.setdefault(int(index), {})[name] = value
    for index, values in meta["plain"].items():
        state.setdefault(int(index), {}).update(values)
    # JSON turned tuples (AdamW's betas) into lists
    groups = [
        {k: tuple(v) if isinstance(v, list) and k != "params" else v for k, v in group.items()}
        for group in meta["param_groups"]
    ]
    return {"state": state, "param_groups": groups}


def _rng_state() -> tuple[dict[str, Tensor], dict[str, Any]]:
    tensors = {"rng/torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng/cuda/{i}"] = state
    numpy_state = np.random.get_state()
    tensors["rng/numpy"] = torch.from_numpy(numpy_state[1].astype(np.int64))
    plain = {"python": random.getstate(), "numpy": [numpy_state[0], *numpy_state[2:]]}
    return tensors, plain


def _set_rng_state(tensors: Mapping[str, Tensor], plain: Mapping[str, Any]) -> None:
    torch.set_rng_state(tensors["rng/torch"])
    cuda = [tensors[k] for k in sorted(tensors) if k.startswith("rng/cuda/")]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
    version, inner, gauss = plain["python"]
    random.setstate((version, tuple(inner), gauss))
    name, position, has_gauss, cached = plain["numpy"]
    keys = tensors["rng/numpy"].numpy().astype(np.uint32)
    np.random.set_state((name, keys, position, has_gauss, cached))


def save_checkpoint(
    path: Path,
    model: nn.Module,
    optimiser: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
    progress: Mapping[str, Any],
) -> None:
    """Model, optimiser, schedule, RNG state and ``progress`` (step, losses, seconds) in one
    safetensors file (JSON in its metadata, never pickle), replaced atomically."""
    tensors = {f"model/{k}": v.detach().cpu().clone() for k, v in model.state_dict().items()}
    optimiser_tensors, optimiser_plain = _flatten_optimiser(optimiser.state_dict())
    rng_tensors, rng_plain = _rng_state()
    meta = {
        "progress": progress,
        "optimiser": optimiser_plain,
        "schedule": schedule.state_dict(),
        "rng": rng_plain,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written beside the target and moved over it, so a run stopped mid-write keeps the last
    # whole checkpoint; the temporary folder goes either way.
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".checkpoint-") as folder:
        temporary = Path(folder) / path.name
        save_file({**tensors, **optimiser_tensors, **rng_tensors}, temporary,
                  metadata={"state": json.dumps(meta)})
        os.replace(temporary, path)


def load_checkpoint(
    path: Path,
    model: nn.Module,
    optimiser: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
) -> dict[str, Any]:
    """Restore a checkpoint written by :func:`save_checkpoint` into ``model``, ``optimiser`` and
    ``schedule`` (and the global RNG state); returns its progress. Public for loops that need
    their own step (the tuned lens's per-layer backward passes)."""
    with safe_open(str(path), framework="pt") as handle:
        meta = json.loads(handle.metadata()["state"])
    tensors = load_file(path)
    prefix = len("model/")
    model.load_state_dict({k[prefix:]: v for k, v in tensors.items() if k.startswith("model/")})
    optimiser.load_state_dict(_unflatten_optimiser(tensors, meta["optimiser"]))
    schedule.load_state_dict(meta["schedule"])
    _set_rng_state(tensors, meta["rng"])
    return meta["progress"]


# ------------------------------------------------------------------------------ the loop


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, Tensor):
        return batch.to(device)
    if isinstance(batch, tuple):
        return tuple(_to_device(part, device) for part in batch)
    return batch


@dataclass
class _Run:
    """The mutable state of one run: the step to do next, the curve so far and the time spent."""

    step: int = 0
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    resumed_from: int = 0


def train_model(
    model: HookedTransformerConfig | Callable[[], nn.Module],
    sampler: Callable[[int, int], B],
    loss: Callable[[Any, B], Tensor],
    config: TrainConfig,
    *,
    checkpoints: Path | None = None,
    device: torch.device | str | None = None,
    threads: int | None = None,
    progress: bool = False,
    desc: str = "training",
    on_step: Callable[[int, Any], None] | None = None,
) -> tuple[Any, TrainingRecord]:
    """Train a model from its seeded initial weights (no cache; see :func:`load_or_train`).

    Every random stream (Python, NumPy, torch on every device) is seeded with ``config.seed``
    before the model is built. Each step draws ``sampler(step, config.batch_size)`` (a batch that
    depends on the step only, so a resumed run sees the same data), minimises ``loss(model,
    batch)`` with AdamW and the schedule ``SCHEDULES[config.schedule]``, and clips the gradient
    norm to ``config.grad_clip``. With ``checkpoints`` and ``config.checkpoint_every``, a
    checkpoint is written every that many steps and a run finds and resumes the last one: on the
    CPU with one thread, stopping and resuming gives bitwise the weights of an uninterrupted run.

    Args:
        model: a HookedTransformer config, or a function building any module.
        sampler: ``sampler(step, batch_size)``: a tensor or tuple of tensors (moved to the
            model's device), or anything ``loss`` reads.
        loss: the scalar loss of a batch.
        config: the run.
        checkpoints: the folder of the run's checkpoint (None: no checkpoints).
        device: train there (the model is built on its config's device first).
        threads: torch threads while training on the CPU (None: leave torch's setting).
        progress: show a progress bar named ``desc``.
        on_step: called as ``on_step(step, model)`` after each step (e.g. an evaluation); its
            time is left out of the record.

    Returns:
        The trained model (eval mode) and its :class:`TrainingRecord`.

    >>> cfg = HookedTransformerConfig(n_layers=1, d_model=8, n_ctx=4, d_head=4, d_vocab=5,
    ...                               attn_only=True, device="cpu")
    >>> rows = lambda step, n: torch.randint(0, 5, (n, 4), generator=torch.Generator().manual_seed(step))
    >>> model, record = train_model(cfg, rows, lambda m, x: m(x, return_type="loss"),
    ...                             TrainConfig(steps=3, batch_size=2))
    >>> record.steps, len(record.losses)
    (3, 3)
    """
    built = _build(model, config.seed)
    if device is not None:
        built.to(device)
    optimiser = torch.optim.AdamW(
        built.parameters(), lr=config.lr, weight_decay=config.weight_decay, betas=config.betas
    )
    factor = SCHEDULES.get(config.schedule).function
    schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, lambda step: factor(step, config))
    run = _Run()
    checkpoint = checkpoints / CHECKPOINT if checkpoints is not None else None
    if checkpoint is not None and checkpoint.is_file():
        state = load_checkpoint(checkpoint, built, optimiser, schedule)
        run = _Run(state["step"], state["losses"], state["seconds"], state["cpu_seconds"],
                   state["step"])
        log.info("resuming %s from step %d (%s)", desc, run.step, checkpoint)
    dev = next(built.parameters()).device
    saved_threads = torch.get_num_threads()
    if threads is not None and dev.type == "cpu":
        torch.set_num_threads(threads)
    try:
        used_threads = torch.get_num_threads()
        _run_steps(built, optimiser, schedule, sampler, loss, config, run, checkpoint,
                   progress=progress, desc=desc, on_step=on_step)
    finally:
        torch.set_num_threads(saved_threads)
    built.eval()
    record = TrainingRecord(
        losses=tuple(run.losses), steps=config.steps, seconds=run.seconds,
        cpu_seconds=run.cpu_seconds, threads=used_threads, device=str(dev),
        resumed_from=run.resumed_from,
    )
    log.info("trained %s in %.1f s, loss %.3f", desc, record.seconds, record.final_loss())
    return built, record


def _run_steps(
    model: nn.Module,
    optimiser: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
    sampler: Callable[[int, int], Any],
    loss: Callable[[Any, Any], Tensor],
    config: TrainConfig,
    run: _Run,
    checkpoint: Path | None,
    *,
    progress: bool,
    desc: str,
    on_step: Callable[[int, Any], None] | None,
) -> None:
    """Steps ``run.step`` .. ``config.steps - 1``, updating ``run`` as they go."""
    dev = next(model.parameters()).device
    bar = tqdm(range(run.step, config.steps), disable=not progress, desc=desc, unit="step")
    start, cpu_start = time.perf_counter(), time.process_time()
    model.train()
    for step in bar:
        value = loss(model, _to_device(sampler(step, config.batch_size), dev))
        optimiser.zero_grad(set_to_none=True)
        value.backward()
        if config.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimiser.step()
        schedule.step()
        run.losses.append(float(value.detach()))
        run.step = step + 1
        if step % 50 == 0:
            bar.set_postfix(loss=f"{run.losses[-1]:.3f}")
        now, cpu_now = time.perf_counter(), time.process_time()
        run.seconds += now - start
        run.cpu_seconds += cpu_now - cpu_start
        if checkpoint is not None and config.checkpoint_every and run.step < config.steps and (
            run.step % config.checkpoint_every == 0
        ):
            progress_state = {"step": run.step, "losses": run.losses, "seconds": run.seconds,
                              "cpu_seconds": run.cpu_seconds}
            save_checkpoint(checkpoint, model, optimiser, schedule, progress_state)
        if on_step is not None:
            on_step(step, model)
            model.train()
        # the checkpoint's and the callback's time are left out of the cost
        start, cpu_start = time.perf_counter(), time.process_time()


# ------------------------------------------------------------------------------ the cache


def load_or_train(
    folder: Path,
    build: Callable[[], M],
    train: Callable[[Path], tuple[M, Mapping[str, Any]]],
    *,
    record_file: str = "record.json",
    retrain: bool = False,
    missing: str | None = None,
) -> tuple[M, dict[str, Any]]:
    """The trained model cached in ``folder``, else trained (resuming its checkpoint) and cached.

    The folder holds ``weights.safetensors`` and ``record_file`` (JSON); a shipped artefact with
    those cache paths is copied in first (:func:`lmsci_mi.artefacts.restore_shipped`). While
    training, ``folder / "checkpoints"`` holds the run's checkpoint, so an interrupted run
    resumes on the next call; it is removed once the weights are written.

    Args:
        folder: the cache entry, named by :func:`training_key` (:func:`trained_folder`).
        build: the model with any weights (the cached ones are loaded into it).
        train: ``train(checkpoints)`` -> (the trained model, the JSON record to cache).
        record_file: the record's file name.
        retrain: train from scratch even when cached (an old checkpoint is dropped).
        missing: raise ``FileNotFoundError(missing)`` instead of training when nothing is cached.

    Returns:
        The model (eval mode, on the CPU unless ``build``/``train`` put it elsewhere) and the
        cached record.
    """
    weights, record = folder / WEIGHTS, folder / record_file
    if not retrain and restore_shipped(weights, record):
        model = build()
        model.load_state_dict(load_file(weights))
        model.eval()
        return model, json.loads(record.read_text())
    if missing is not None:
        raise FileNotFoundError(missing)
    checkpoints = folder / "checkpoints"
    if retrain:
        shutil.rmtree(checkpoints, ignore_errors=True)
    model, written = train(checkpoints)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, weights)
    record.write_text(json.dumps(written, indent=1))
    shutil.rmtree(checkpoints, ignore_errors=True)
    return model, dict(written)

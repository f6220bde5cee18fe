"""A small GPT trained on one synthetic CFG (Allen-Zhu & Li, Physics of LMs Part 1): a seeded CPU
trainer (on :mod:`lmsci_mi.training`) with a cache keyed by grammar, model and training settings,
its random-weights twin (the probing baseline), and the model's evaluation: next-token accuracy and
generation validity (the fraction of its samples that the DP parser accepts).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from lmsci_mi.config import Config, config
from lmsci_mi.data.cfg import CFGConfig, Grammar, build_grammar, cfg_accepts
from lmsci_mi.errors import UserInputError
from lmsci_mi.generation import GenerationConfig, generate
from lmsci_mi.loading import default_device
from lmsci_mi.model import LensModel
from lmsci_mi.training import (
    TrainConfig,
    TrainingRecord,
    load_or_train,
    train_model,
    trained_folder,
    training_key,
)

__all__ = [
    "CFGEvaluation",
    "CFGModelConfig",
    "CFGTraining",
    "cfg_model_folder",
    "evaluate_cfg_model",
    "load_cfg_model",
    "random_cfg_model",
    "sample_cfg_model",
    "train_cfg_model",
]

log = logging.getLogger(__name__)

# Bump when the training code changes what a config produces, so stale caches are not reused.
# (Moving the loop into lmsci_mi.training did not: the weights are bitwise the same.)
_TRAIN_FORMAT = 1

_CHECKPOINT_EVERY = 100
"""Steps between checkpoints of a cached training run (not in the key: they leave the weights
alone)."""


@config
class CFGModelConfig(Config):
    """The GPT and its training run; with the grammar, the cache key of the trained weights.

    Rotary positions, as the paper's best variants (GPT-rot/rel) use. Training packs
    ``BOS s EOS`` documents into rows of ``context`` tokens, as the paper does, so no position is
    padding.
    """

    n_layers: int = field(default=4, metadata={"help": "transformer layers", "ge": 1})
    d_model: int = field(default=128, metadata={"help": "residual width", "ge": 1})
    n_heads: int = field(default=4, metadata={"help": "attention heads per layer", "ge": 1})
    positional: Literal["rotary", "standard"] = field(
        default="rotary", metadata={"help": "rotary or learned absolute positions"}
    )
    context: int = field(default=128, metadata={"help": "tokens per packed training row", "ge": 1})
    batch_size: int = field(default=32, metadata={"help": "rows per training step", "ge": 1})
    steps: int = field(default=700, metadata={"help": "optimiser steps", "ge": 1})
    lr: float = field(default=3e-3, metadata={"help": "peak AdamW learning rate", "gt": 0})
    warmup: int = field(default=50, metadata={"help": "linear warm-up steps", "ge": 0})
    weight_decay: float = field(default=0.1, metadata={"help": "AdamW weight decay", "ge": 0})
    seed: int = field(default=0, metadata={"help": "seed of the initial weights and the data"})

    def validate(self) -> None:
        if self.d_model % self.n_heads:
            raise UserInputError(
                f"d_model ({self.d_model}) must be a multiple of n_heads ({self.n_heads})"
            )

    def hooked_config(self, grammar: Grammar) -> HookedTransformerConfig:
        d_head = self.d_model // self.n_heads
        _, longest = grammar.length_range
        return HookedTransformerConfig(
            n_layers=self.n_layers,
            d_model=self.d_model,
            n_heads=self.n_heads,
            d_head=d_head,
            d_mlp=4 * self.d_model,
            # generation and probing feed one whole document: BOS, the string, EOS
            n_ctx=max(self.context, longest + 2),
            d_vocab=grammar.vocab_size,
            act_fn="gelu_new",
            normalization_type="LN",
            positional_embedding_type=self.positional,
            rotary_dim=d_head if self.positional == "rotary" else None,
            seed=self.seed,
            # Built and trained on the CPU so that a seed gives the same weights (and cache) on
            # every machine; loading moves the model to the user's device.
            device="cpu",
        )


def _key(grammar_config: CFGConfig, model_config: CFGModelConfig) -> str:
    # {"grammar", "model", "format"}: the payload that names the shipped GPT's folder.
    return training_key(
        _TRAIN_FORMAT, grammar=grammar_config.params(), model=model_config.params()
    )


def cfg_model_folder(grammar_config: CFGConfig, model_config: CFGModelConfig) -> Path:
    """The cache folder of the GPT trained with these settings."""
    return trained_folder("cfg", f"gpt-{_key(grammar_config, model_config)}")


@dataclass(frozen=True)
class CFGTraining:
    """What a training run cost and reached: wall and CPU seconds, tokens seen, final loss
    (nats per token, mean of the last 50 steps), and the torch thread count used."""

    seconds: float
    cpu_seconds: float
    tokens: int
    final_loss: float
    threads: int
    device: str


def _packed_rows(grammar: Grammar, config: CFGModelConfig, step: int) -> torch.Tensor:
    """``[batch, context]`` rows cut from a stream of ``BOS s EOS`` documents."""
    need = config.batch_size * config.context
    lo, hi = grammar.length_range
    mean_guess = (lo * hi) ** 0.5 + 2
    seed = config.seed * 1_000_003 + step
    stream: list[torch.Tensor] = []
    total = 0
    while total < need:
        sample = grammar.sample(int(need / mean_guess) + 8, seed=seed)
        seed += 7919  # a further draw for the rare short batch
        docs = torch.split(sample.tokens, sample.lengths.tolist())
        for doc in docs:
            stream.append(torch.tensor([grammar.bos]))
            stream.append(doc)
            stream.append(torch.tensor([grammar.eos]))
        total += len(sample.tokens) + 2 * len(docs)
    return torch.cat(stream)[:need].view(config.batch_size, config.context)


def _train_config(config: CFGModelConfig) -> TrainConfig:
    """The run in :mod:`lmsci_mi.training`'s terms: linear warm-up, cosine decay to 10%, AdamW
    with betas (0.9, 0.98), gradients clipped to norm 1."""
    return TrainConfig(
        steps=config.steps,
        batch_size=config.batch_size,
        lr=config.lr,
        schedule="cosine",
        warmup=config.warmup,
        final_lr_fraction=0.1,
        weight_decay=config.weight_decay,
        betas=(0.9, 0.98),
        grad_clip=1.0,
        seed=config.seed,
        checkpoint_every=_CHECKPOINT_EVERY,
    )


def _train(
    grammar: Grammar,
    config: CFGModelConfig,
    *,
    progress: bool,
    on_step: Callable[[int, HookedTransformer], None] | None,
    checkpoints: Path | None,
) -> tuple[HookedTransformer, CFGTraining, TrainingRecord]:
    model, run = train_model(
        config.hooked_config(grammar),
        lambda step, _: _packed_rows(grammar, config, step),
        lambda model, rows: model(rows, return_type="loss"),
        _train_config(config),
        checkpoints=checkpoints,
        progress=progress,
        desc="cfg gpt",
        on_step=on_step,
    )
    record = CFGTraining(
        seconds=run.seconds,
        cpu_seconds=run.cpu_seconds,
        tokens=config.steps * config.batch_size * config.context,
        final_loss=run.final_loss(50),
        threads=run.threads,
        device="cpu",
    )
    return model, record, run


def train_cfg_model(
    grammar: Grammar,
    config: CFGModelConfig | None = None,
    *,
    progress: bool = False,
    on_step: Callable[[int, HookedTransformer], None] | None = None,
) -> tuple[HookedTransformer, CFGTraining]:
    """Train a GPT on ``grammar`` from scratch (no cache), on the CPU, deterministically, with
    :func:`lmsci_mi.training.train_model`.

    Next-token cross-entropy on every position of packed rows; AdamW with linear warm-up and
    cosine decay to 10%.

    Args:
        grammar: the grammar to learn.
        config: the model and its training run.
        progress: show a progress bar.
        on_step: called as ``on_step(step, model)`` after each step (e.g. to evaluate every few
            hundred steps); its time is left out of the recorded cost.

    Returns:
        The trained model (eval mode, on the CPU) and its :class:`CFGTraining` record.
    """
    config = config if config is not None else CFGModelConfig()
    model, record, _ = _train(grammar, config, progress=progress, on_step=on_step, checkpoints=None)
    log.info("trained the CFG GPT in %.1f s, loss %.3f", record.seconds, record.final_loss)
    return model, record


def _wrap(model: HookedTransformer, name: str, source: str, grammar: Grammar) -> LensModel:
    return LensModel(model, name=name, source=source, tokenizer=None, sink_token_id=grammar.bos)


def load_cfg_model(
    grammar_config: CFGConfig | None = None,
    model_config: CFGModelConfig | None = None,
    *,
    train: bool = True,
    retrain: bool = False,
    device: torch.device | str | None = None,
    progress: bool = False,
    on_step: Callable[[int, HookedTransformer], None] | None = None,
) -> tuple[LensModel, CFGTraining]:
    """The trained GPT as a :class:`LensModel`, from the cache, or trained and cached.

    Cached under ``cache_root() / "cfg" / "gpt-<hash of grammar, model and training config>"``
    (``weights.safetensors`` and ``record.json``); the default configs' GPT ships with the
    package and is copied there on first use (:mod:`lmsci_mi.artefacts`). An interrupted
    training run resumes from its last checkpoint (:func:`lmsci_mi.training.load_or_train`).
    The model has no tokenizer: feed token ids with BOS (0) first, which is its sink.

    Args:
        train: train when nothing is cached (False raises instead, e.g. for a CLI without --train).
        retrain: train even when cached.
        on_step: passed to :func:`train_cfg_model` when training.

    Raises:
        FileNotFoundError: nothing cached and ``train`` is False.
    """
    grammar_config = grammar_config if grammar_config is not None else CFGConfig()
    model_config = model_config if model_config is not None else CFGModelConfig()
    grammar = build_grammar(grammar_config)
    folder = cfg_model_folder(grammar_config, model_config)

    def run(checkpoints: Path) -> tuple[HookedTransformer, dict[str, Any]]:
        model, record, curve = _train(
            grammar, model_config, progress=progress, on_step=on_step, checkpoints=checkpoints
        )
        return model, {
            "grammar": grammar_config.params(),
            "model": model_config.params(),
            "training": record.__dict__,
            "run": curve.to_dict(),
        }

    # The default GPT ships with the package (scripts/build_artefacts.py cfg): a first run copies
    # it into the cache instead of training for minutes.
    model, cached = load_or_train(
        folder,
        lambda: HookedTransformer(model_config.hooked_config(grammar)),
        run,
        retrain=retrain,
        missing=None if train else (
            f"no trained CFG model cached at {folder}; train it first (`train=True`, or "
            "`lmsci-mi probe cfg --train`)"
        ),
    )
    record = CFGTraining(**cached["training"])
    model.to(device if device is not None else default_device(), print_details=False)
    name = f"cfg-gpt-{_key(grammar_config, model_config)}"
    return _wrap(model, name, str(folder), grammar), record


def random_cfg_model(
    grammar_config: CFGConfig | None = None,
    model_config: CFGModelConfig | None = None,
    *,
    device: torch.device | str | None = None,
) -> LensModel:
    """The same architecture with its seeded initial (untrained) weights: the probing baseline.

    >>> lm = random_cfg_model()
    >>> lm.cfg.n_layers, lm.cfg.d_vocab
    (4, 5)
    """
    grammar_config = grammar_config if grammar_config is not None else CFGConfig()
    model_config = model_config if model_config is not None else CFGModelConfig()
    grammar = build_grammar(grammar_config)
    torch.manual_seed(model_config.seed)
    model = HookedTransformer(model_config.hooked_config(grammar))
    model.eval()
    model.to(device if device is not None else default_device(), print_details=False)
    return _wrap(
        model, f"cfg-gpt-random-{_key(grammar_config, model_config)}", "random init", grammar
    )


def sample_cfg_model(
    lm: LensModel,
    grammar: Grammar,
    n: int,
    *,
    temperature: float = 1.0,
    seed: int = 0,
    batch_size: int = 250,
) -> list[list[int] | None]:
    """Generate ``n`` strings from BOS with the one sampler (:func:`~lmsci_mi.generation.generate`,
    cached, stopping at EOS); None for a sample with no EOS in reach (longer than the grammar
    allows). Sample ``i`` draws from its own stream seeded from ``(seed, i)``, never the global
    random state. Registry interventions apply at every step."""
    _, longest = grammar.length_range
    config = GenerationConfig(
        max_new_tokens=longest + 1, temperature=temperature, seed=seed, batch_size=batch_size
    )
    rows = generate(lm, [[grammar.bos]] * n, config, stop_at=grammar.eos).tokens
    return [list(row[:-1]) if row and row[-1] == grammar.eos else None for row in rows]


@dataclass(frozen=True)
class CFGEvaluation:
    """How well the GPT learned the grammar.

    Attributes:
        next_token_accuracy: argmax prediction equals the next token, over held-out documents'
            terminal and EOS targets (the grammar is random, so 100% is out of reach).
        loss: held-out next-token cross-entropy (nats per token).
        validity: fraction of temperature-1 samples that end with EOS and that the parser accepts.
        distinct: fraction of valid samples that are distinct strings.
        n_samples: how many samples were drawn.
    """

    next_token_accuracy: float
    loss: float
    validity: float
    distinct: float
    n_samples: int


@torch.no_grad()
def evaluate_cfg_model(
    lm: LensModel,
    grammar: Grammar,
    *,
    n_documents: int = 500,
    n_samples: int = 500,
    seed: int = 12345,
) -> CFGEvaluation:
    """Next-token accuracy and loss on held-out documents, and generation validity.

    The held-out documents come from a seed the trainer does not use. Reads the model only.
    """
    batch = grammar.sample(n_documents, seed=seed)
    tokens, _, _, mask = batch.padded(bos=grammar.bos, pad=grammar.eos)
    targets = torch.cat([tokens[:, 1:], torch.full_like(tokens[:, :1], grammar.eos)], dim=1)
    # predict every terminal and the EOS after the last one: positions 0..len
    predict = mask.clone()
    predict[:, :-1] |= mask[:, 1:]
    logits = lm.model(tokens.to(lm.device)).float().cpu()
    log_probs = logits.log_softmax(-1)
    nll = -log_probs.gather(-1, targets[..., None])[..., 0]
    correct = logits.argmax(-1) == targets
    samples = sample_cfg_model(lm, grammar, n_samples, seed=seed)
    complete = [s for s in samples if s is not None]
    valid = cfg_accepts(grammar, complete) if complete else torch.zeros(0, dtype=torch.bool)
    valid_strings = {tuple(s) for s, ok in zip(complete, valid.tolist(), strict=True) if ok}
    n_valid = int(valid.sum())
    return CFGEvaluation(
        next_token_accuracy=float(correct[predict].float().mean()),
        loss=float(nll[predict].mean()),
        validity=n_valid / n_samples,
        distinct=len(valid_strings) / max(1, n_valid),
        n_samples=n_samples,
    )

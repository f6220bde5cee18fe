"""The one sampler: batched, ragged, KV-cached, seeded generation under a ``GenerationConfig``.

Steered and edited generation is "apply the intervention, then sample": interventions active in
the hook registry apply at every decoding step. Each row draws from its own seeded stream, so a
prompt samples the same tokens alone or in a batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lmsci_mi.config import Config, config

__all__ = ["GenerationConfig", "Generations", "generate"]


@config
class GenerationConfig(Config):
    """How to continue prompts: length, temperature, top-k / top-p and the seed.

    ``temperature == 0`` is greedy decoding (top-k and top-p are then ignored).
    """

    max_new_tokens: int = field(
        default=20, metadata={"help": "tokens generated per prompt", "ge": 1}
    )
    temperature: float = field(
        default=1.0, metadata={"help": "sampling temperature; 0 is greedy", "ge": 0}
    )
    top_k: int | None = field(
        default=None, metadata={"help": "sample among the k likeliest tokens", "ge": 1}
    )
    top_p: float | None = field(
        default=None,
        metadata={"help": "sample from the smallest set of tokens of this mass", "gt": 0, "le": 1},
    )
    seed: int | None = field(default=0, metadata={"help": "seed of each row's random stream"})
    batch_size: int = field(default=32, metadata={"help": "prompts decoded together", "ge": 1})


@dataclass(frozen=True)
class Generations:
    """What :func:`generate` returns: each prompt's new token ids and their text."""

    prompts: tuple[str, ...]
    tokens: tuple[tuple[int, ...], ...]
    texts: tuple[str, ...]


def generate(lm: Any, prompts: Sequence[str], config: GenerationConfig | None = None) -> Generations:
    """Continue each prompt under ``config``; interventions active in ``lm.hooks`` apply.

    ``lm`` is a ``LensModel`` (typed loosely: ``model`` imports this module, not the reverse).
    Reads the model only.
    """
    # Interface placeholder: the one batched, KV-cached sampler replaces this body.
    config = config or GenerationConfig()
    texts = lm.sample(
        list(prompts), config.max_new_tokens, temperature=config.temperature,
        top_k=config.top_k, seed=config.seed,
    )
    tokens = tuple(tuple(lm.encode(t)) for t in texts)
    return Generations(tuple(prompts), tokens, tuple(texts))

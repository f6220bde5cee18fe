"""The one sampler: batched, ragged, KV-cached, seeded generation under a ``GenerationConfig``.

Steered and edited generation is "apply the intervention, then sample": interventions active in
the hook registry apply at every decoding step. Each row draws from its own seeded stream, so a
prompt samples the same tokens alone or in a batch.
"""

from __future__ import annotations

from dataclasses import field

from lmsci_mi.config import Config, config

__all__ = ["GenerationConfig"]


@config
class GenerationConfig(Config):
    """How to continue prompts: length, temperature, top-k / top-p and the seed.

    ``temperature == 0`` is greedy decoding (top-k and top-p are then ignored).
    """

    max_new_tokens: int = field(default=20, metadata={"help": "tokens generated per prompt"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature; 0 is greedy"})
    top_k: int | None = field(default=None, metadata={"help": "sample among the k likeliest tokens"})
    top_p: float | None = field(
        default=None, metadata={"help": "sample from the smallest set of tokens of this mass"}
    )
    seed: int | None = field(default=0, metadata={"help": "seed of each row's random stream"})
    batch_size: int = field(default=32, metadata={"help": "prompts decoded together"})

"""The SAE's offline training text: the project's corpus plus seeded generations of the model.

Rows are token id lists that start with the model's sink: chunks of the standard library's prose
(:mod:`lmsci_mi.data.text_corpus`), the bundled steering texts, fact prompts and neutral prompts,
and seeded continuations sampled from the model itself (cached, keyed by the model's weights).
A seeded shuffle of the rows sets a held-out part aside for the statistics.
"""

from __future__ import annotations

import json
import logging
from dataclasses import field

import torch

from lmsci_mi.cache import cache_key, cache_root
from lmsci_mi.config import Config, config
from lmsci_mi.data.facts import load_facts
from lmsci_mi.data.steering_texts import neutral_prompts, steering_texts
from lmsci_mi.data.text_corpus import STDLIB_TEXT_SOURCE, TokenRows, text_chunks
from lmsci_mi.errors import UserInputError
from lmsci_mi.generation import GenerationConfig, generate
from lmsci_mi.model import LensModel

__all__ = ["SAECorpus", "SAEDataConfig", "sae_corpus"]

logger = logging.getLogger(__name__)


@config
class SAEDataConfig(Config):
    """Which text the SAE is trained and measured on."""

    corpus_tokens: int = field(
        default=480_000,
        metadata={"help": "tokens of standard-library prose (at most ~500k)", "ge": 0},
    )
    seq_len: int = field(
        # 2 or more: the sink and a token
        default=128, metadata={"help": "tokens per row, sink included", "ge": 2}
    )
    generations: int = field(
        default=64, metadata={"help": "seeded model continuations added to the text", "ge": 0}
    )
    generation_tokens: int = field(
        default=48, metadata={"help": "tokens per continuation", "ge": 0}
    )
    held_out_fraction: float = field(
        default=0.05,
        metadata={
            "help": "fraction of rows kept out of training for the statistics", "gt": 0, "lt": 1
        },
    )
    data_seed: int = field(default=0, metadata={"help": "seeds the generations and the split"})


class SAECorpus(TokenRows):
    """Token rows (each starting with the sink) split into training and held-out rows."""


def _bundled_texts() -> list[str]:
    facts = [f.rewrite_prompt for f in load_facts("facts")]
    return [*steering_texts(["sentiment", "topic"]).texts, *neutral_prompts(), *facts]


def generation_prompts() -> list[str]:
    """Prompts of the seeded generations: the neutral prompts, the fact prompts and the first
    words of each steering text."""
    facts = [f.rewrite_prompt for f in load_facts("facts")]
    openings = [" ".join(t.split()[:4]) for t in steering_texts(["sentiment", "topic"]).texts]
    return [*neutral_prompts(), *facts, *openings]


def _generations(lm: LensModel, config: SAEDataConfig, fingerprint: str) -> list[list[int]]:
    """Seeded continuations (prompt and new tokens, sink first), cached by model and settings."""
    if config.generations == 0 or config.generation_tokens == 0:
        return []
    sampling = GenerationConfig(
        max_new_tokens=config.generation_tokens,
        temperature=1.0,
        top_p=0.95,
        seed=config.data_seed,
        batch_size=128,
    )
    # The sampling settings are in the key: the generations moved to the core sampler, whose
    # streams differ from the old one's, so its samples get a cache entry of their own.
    key = cache_key(
        [fingerprint, config.generations, sampling.params(), generation_prompts()], length=20
    )
    path = cache_root() / "sae" / f"generations-{lm.name}-{key}.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    pool = generation_prompts()
    prompts = [pool[i % len(pool)] for i in range(config.generations)]
    continuations = generate(lm, prompts, sampling).tokens
    rows = [lm.encode(p) + list(c) for p, c in zip(prompts, continuations, strict=True)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows), encoding="utf-8")
    return rows


def sae_corpus(lm: LensModel, config: SAEDataConfig, *, fingerprint: str = "") -> SAECorpus:
    """The SAE's text as token rows, split into training and held-out rows.

    Args:
        lm: the model (its tokenizer and, for the generations, the model itself; only read).
        config: how much text of each kind, and the split.
        fingerprint: the model's weight hash, the generations' cache key.

    >>> from lmsci_mi import load_model
    >>> corpus = sae_corpus(load_model("toy-2l"), SAEDataConfig(corpus_tokens=630, seq_len=64,
    ...                     generations=0, held_out_fraction=0.5))
    >>> corpus.n_train_tokens > 0 and corpus.n_held_out_tokens > 0
    True
    """
    rows: list[list[int]] = []
    if config.corpus_tokens > 0:
        rows += text_chunks(lm, config.corpus_tokens, seq_len=config.seq_len).tolist()
    rows += [lm.encode(t)[: config.seq_len] for t in _bundled_texts()]
    rows += [r[: config.seq_len] for r in _generations(lm, config, fingerprint)]
    rows = [r for r in rows if len(r) >= 2]
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(config.data_seed))
    n_held = max(1, round(len(rows) * config.held_out_fraction))
    if n_held >= len(rows):
        raise UserInputError(f"{len(rows)} rows are too few to hold {n_held} out; give more text")
    held = [rows[i] for i in order[:n_held].tolist()]
    train = [rows[i] for i in order[n_held:].tolist()]
    source = (
        f"{STDLIB_TEXT_SOURCE} ({config.corpus_tokens} tokens) + lmsci-mi steering/neutral/fact "
        f"texts + {config.generations} seeded {lm.name} generations of {config.generation_tokens} tokens"
    )
    return SAECorpus(train, held, source)

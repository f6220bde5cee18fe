"""What a transcoder trains and is measured on: token rows, split into training and held-out
rows, and the (MLP input, MLP output) pairs harvested from them through the hook registry.

Two sources, both offline: the standard library's prose (:mod:`lmsci_mi.data.text_corpus`) for a
language model, and sentences of the synthetic grammar (:mod:`lmsci_mi.data.cfg`), each as
``BOS s EOS``, for the CFG GPT, which saw nothing else. The sink (or BOS) never enters a
transcoder: circuit-tracer zeroes position 0 too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor

from lmsci_mi.collect import Activations, CollectConfig, collect_activations
from lmsci_mi.config import Config, config
from lmsci_mi.data.cfg import CFGConfig, build_grammar
from lmsci_mi.data.text_corpus import STDLIB_TEXT_SOURCE, TokenRows, text_chunks
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.sites import hook_name

__all__ = [
    "TranscoderData",
    "TranscoderDataConfig",
    "collect_pairs",
    "harvest_pairs",
    "transcoder_rows",
]


@config
class TranscoderDataConfig(Config):
    """The rows a transcoder set trains and is measured on, and how their activations are kept."""

    source: Literal["text", "cfg"] = field(
        default="text",
        metadata={"help": "text: the stdlib prose; cfg: sentences of the grammar (the CFG GPT)"},
    )
    train_tokens: int = field(
        default=200_000, metadata={"help": "training tokens harvested per layer", "ge": 1}
    )
    held_out_tokens: int = field(
        default=20_000, metadata={"help": "held-out tokens for the metrics", "ge": 1}
    )
    seq_len: int = field(
        default=128, metadata={"help": "tokens per text row, sink included", "ge": 2}
    )
    grammar: CFGConfig = field(default_factory=CFGConfig)
    harvest_dtype: Literal["float32", "float16"] = field(
        default="float32",
        metadata={"help": "how harvested activations are stored (float16 halves the memory)"},
    )
    data_seed: int = field(default=0, metadata={"help": "seeds the split and the sentences"})

    # More tokens than the prose holds is refused where it is read (text_chunks names both counts).


TranscoderData = TokenRows
"""The rows a transcoder set trains and is measured on (:class:`lmsci_mi.data.text_corpus.TokenRows`)."""


def _text_rows(lm: LensModel, data: TranscoderDataConfig) -> tuple[list[list[int]], list[list[int]]]:
    per_row = data.seq_len - 1 if lm.sink_token_id is not None else data.seq_len
    n_held = max(1, -(-data.held_out_tokens // per_row))
    # whole held-out rows on top of the training tokens, so training gets at least train_tokens
    rows = text_chunks(lm, data.train_tokens + n_held * per_row, seq_len=data.seq_len).tolist()
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(data.data_seed))
    if n_held >= len(rows):
        raise UserInputError(f"{len(rows)} rows are too few to hold {n_held} out; ask for more tokens")
    return [rows[i] for i in order[n_held:].tolist()], [rows[i] for i in order[:n_held].tolist()]


def _sentences(data: TranscoderDataConfig, n_tokens: int, seed: int) -> list[list[int]]:
    """``BOS s EOS`` rows of grammar sentences until they hold ``n_tokens`` positions after BOS."""
    grammar = build_grammar(data.grammar)
    lo, hi = grammar.length_range
    rows: list[list[int]] = []
    total, draw = 0, 0
    while total < n_tokens:
        batch = grammar.sample(max(8, int(n_tokens / (lo * hi) ** 0.5) + 8), seed=seed + 7919 * draw)
        draw += 1
        for sentence in batch.sequences():
            if total >= n_tokens:
                break
            rows.append([grammar.bos, *sentence, grammar.eos])
            total += len(sentence) + 1
    return rows


def transcoder_rows(lm: LensModel, data: TranscoderDataConfig) -> TranscoderData:
    """The training and held-out rows of ``data`` for ``lm`` (only its tokenizer is read).

    >>> from lmsci_mi import load_model
    >>> rows = transcoder_rows(load_model("toy-2l"), TranscoderDataConfig(train_tokens=300,
    ...     held_out_tokens=100, seq_len=64))
    >>> rows.n_train_tokens >= 300, len(rows.held_out)
    (True, 2)
    """
    if data.source == "cfg":
        # Held-out sentences come from a seed stream of their own, so they are new draws.
        train = _sentences(data, data.train_tokens, seed=2 * data.data_seed)
        held = _sentences(data, data.held_out_tokens, seed=2 * data.data_seed + 1)
        source = f"CFG sentences (BOS s EOS) of grammar {data.grammar.params()}"
    else:
        train, held = _text_rows(lm, data)
        source = f"{STDLIB_TEXT_SOURCE} ({data.train_tokens} + {data.held_out_tokens} tokens)"
    return TranscoderData(train, held, source)


def harvest_pairs(
    lm: LensModel,
    rows: Sequence[Sequence[int]],
    layers: Sequence[int],
    *,
    input_site: str = "mlp_in_normed",
    output_site: str = "mlp_out",
    dtype: str = "float32",
    out_dir: str | Path | None = None,
    progress: bool = False,
) -> dict[int, tuple[Tensor, Tensor]]:
    """Each layer's (MLP input, MLP output) at every position of ``rows`` but the sink,
    ``[token, d_model]`` each, from one forward pass per batch that stops after the last layer
    asked for. Reads the model only.

    Args:
        out_dir: stream the activations into memory-mapped files there (for runs larger than
            memory; see :func:`lmsci_mi.collect.collect_activations`).

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> x, y = harvest_pairs(lm, [lm.to_tokens("The cat sat").tolist()[0]], [1])[1]
    >>> tuple(x.shape), tuple(y.shape)
    ((3, 64), (3, 64))
    """
    collected, names = collect_pairs(lm, rows, layers, input_site, output_site,
                                     dtype=dtype, out_dir=out_dir, progress=progress)
    return {layer: (collected.acts[i], collected.acts[o]) for layer, (i, o) in names.items()}


def collect_pairs(
    lm: LensModel,
    rows: Sequence[Sequence[int]],
    layers: Sequence[int],
    input_site: str,
    output_site: str,
    *,
    dtype: str = "float32",
    out_dir: str | Path | None = None,
    progress: bool = False,
) -> tuple[Activations, dict[int, tuple[str, str]]]:
    """The collection behind :func:`harvest_pairs`, with each position's row (``example``), and
    each layer's (input, output) hook names."""
    if not layers:
        raise UserInputError("no layer to harvest: give at least one layer")
    bad = [layer for layer in layers if not 0 <= layer < lm.cfg.n_layers]
    if bad:
        raise UserInputError(
            f"layer {bad[0]} does not exist: {lm.name} has layers 0..{lm.cfg.n_layers - 1}"
        )
    names = {layer: (hook_name(input_site, layer), hook_name(output_site, layer)) for layer in layers}
    collected = collect_activations(
        lm,
        [list(r) for r in rows],
        [name for pair in names.values() for name in pair],
        positions="all",
        config=CollectConfig(dtype=dtype, progress=progress, token_budget=4096),
        out_dir=out_dir,
    )
    return collected, names

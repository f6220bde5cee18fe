"""A small Llama-shaped language model trained here at a short context (256 tokens), so that the
failure beyond the training length and LM-Infinite's fix (Han et al., NAACL 2024, arXiv:2308.16137)
show up to 8x that length on a CPU: byte-level tokens, the standard library's prose split by
document into training and held-out text, trained, checkpointed and cached by
:mod:`lmsci_mi.training`, loaded as a :class:`~lmsci_mi.model.LensModel`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any, Literal

import torch
from jaxtyping import Int
from torch import Tensor
from transformer_lens import HookedTransformer, HookedTransformerConfig

from lmsci_mi.config import Config, config
from lmsci_mi.data.text_corpus import STDLIB_TEXT_SOURCE, stdlib_documents, text_chunks
from lmsci_mi.errors import UserInputError
from lmsci_mi.loading import default_device
from lmsci_mi.model import DEFAULT_SINK, LensModel, SinkChoice, resolve_sink
from lmsci_mi.outliers.length import TrainedContext, register_trained_context
from lmsci_mi.training import (
    TrainConfig,
    TrainingRecord,
    load_or_train,
    train_model,
    trained_folder,
    training_key,
)

__all__ = [
    "ByteTokenizer",
    "ShortLMConfig",
    "heldout_rows",
    "load_short_context_lm",
    "short_context_lm_folder",
    "short_lm_documents",
    "train_short_context_lm",
    "wrap_short_context_lm",
]

_TRAIN_FORMAT = 1
"""Bump when the code changes what a config trains, so stale cached weights are not reused."""
_CHECKPOINT_EVERY = 100
"""Steps between checkpoints of a cached run (not in the key: they leave the weights alone)."""
END_OF_TEXT = "<|endoftext|>"


class ByteTokenizer:
    """UTF-8 bytes as tokens 0-255 and ``<|endoftext|>`` as token 256: the sink (BOS) in front of
    every prompt and the separator between documents, as GPT-2's tokenizer uses it.

    Why bytes: SmolLM2's 49,152-token vocabulary restricted to the few thousand tokens the
    stdlib text uses would need a remapping of ids and a rule for the tokens left out (which
    split a word differently than the full tokenizer would); bytes encode every text losslessly,
    the 257-row embedding leaves the parameters to the layers, and lengths count the same units
    everywhere. The price is that 256 tokens are about 256 characters (some 60 BPE tokens).

    The methods are those of a Hugging Face tokenizer that lmsci-mi calls (encode with offsets,
    decode, token <-> id); it adds no special tokens itself (the sink is :class:`LensModel`'s
    policy) and does not parse ``<|endoftext|>`` inside text.

    >>> tok = ByteTokenizer()
    >>> tok("hé", add_special_tokens=False, return_offsets_mapping=True)
    {'input_ids': [104, 195, 169], 'offset_mapping': [(0, 1), (1, 2), (1, 2)]}
    >>> tok.decode([256, 104, 195, 169]), tok.decode([256, 104], skip_special_tokens=True)
    ('<|endoftext|>hé', 'h')
    """

    bos_token = eos_token = END_OF_TEXT
    bos_token_id = eos_token_id = 256
    pad_token_id = None
    padding_side = "right"
    all_special_ids = (256,)
    vocab_size = 257

    def __len__(self) -> int:
        return self.vocab_size

    def __call__(
        self,
        text: str | Sequence[str],
        add_special_tokens: bool = True,
        return_offsets_mapping: bool = False,
    ) -> dict[str, Any]:
        """``{"input_ids": [...]}`` (and ``"offset_mapping"``: each byte's character span) of a
        text, or lists of them for a list of texts. ``add_special_tokens`` adds nothing."""
        if not isinstance(text, str):
            encoded = [self(t, return_offsets_mapping=return_offsets_mapping) for t in text]
            return {key: [e[key] for e in encoded] for key in (encoded[0] if encoded else {})}
        ids = list(text.encode("utf-8", errors="surrogatepass"))
        if not return_offsets_mapping:
            return {"input_ids": ids}
        offsets = [span for i, char in enumerate(text)
                   for span in [(i, i + 1)] * len(char.encode("utf-8", errors="surrogatepass"))]
        return {"input_ids": ids, "offset_mapping": offsets}

    def decode(self, ids: int | Iterable[int] | Tensor, skip_special_tokens: bool = False) -> str:
        """The text of token ids; a byte sequence that is not whole UTF-8 shows as U+FFFD."""
        ids = [int(ids)] if isinstance(ids, int) or (isinstance(ids, Tensor) and ids.ndim == 0) \
            else [int(i) for i in ids]
        pieces: list[str] = []
        run = bytearray()
        for i in ids:
            if not 0 <= i < self.vocab_size:
                raise UserInputError(f"token id {i} is outside the byte vocabulary (0..256)")
            if i < 256:
                run.append(i)
                continue
            pieces.append(run.decode("utf-8", errors="replace"))
            run = bytearray()
            if not skip_special_tokens:
                pieces.append(END_OF_TEXT)
        pieces.append(run.decode("utf-8", errors="replace"))
        return "".join(pieces)

    def batch_decode(self, rows: Iterable[Iterable[int]], skip_special_tokens: bool = False) -> list[str]:
        return [self.decode(row, skip_special_tokens=skip_special_tokens) for row in rows]

    def convert_ids_to_tokens(self, token_id: int) -> str:
        """``<|endoftext|>`` or a byte's name, ``<0x41>`` (SentencePiece's byte-fallback names)."""
        return END_OF_TEXT if token_id == 256 else f"<0x{token_id:02X}>"

    def convert_tokens_to_ids(self, token: str) -> int | None:
        """The id of a token's name (see :meth:`convert_ids_to_tokens`), None for no such name."""
        if token == END_OF_TEXT:
            return 256
        if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
            try:
                return int(token[3:5], 16)
            except ValueError:
                return None
        return None


@config
class ShortLMConfig(Config):
    """The model, its data and its training run: every field is part of the weights' cache key.

    Llama-shaped as SmolLM2 (RMSNorm, rotary positions on every dimension of a head, gated SiLU
    MLP, grouped-query attention), so LM-Infinite's argument about unseen distances applies. The
    model is built with ``n_ctx = context * eval_factor`` (TransformerLens's rotary tables reach
    that far) and trained on rows of ``context`` tokens only: sink + ``context - 1`` bytes cut at
    random offsets of the training stream (the documents joined by ``<|endoftext|>``).

    Sizes and steps from a measurement at one thread on this project's 2-core CPU while shared
    (load 4-8; a scratch run, not a data file): 0.83-0.87 CPU s per step, so 1,300 steps take
    about 18-19 minutes. A 600-step run (its own cosine schedule) reached a training loss of 1.39
    nats per byte; on 16 held-out rows of 2,048 its NLL fell from 1.81 (positions 1-7) to
    1.23-1.39 (8-255; flat after about 32: no gain from context further back yet), then rose
    past the training length to 2.11 (384-511) and 3.48 (1,536-2,047; +2.13, 95 % interval
    [2.01, 2.24] over 128-255), while a 256-token window that keeps the sink held it at
    1.36-1.41 to 2,048. The full run's figures: ``benchmarks/short_context_lm.py``.
    """

    n_layers: int = field(default=4, metadata={"help": "transformer layers", "ge": 1})
    d_model: int = field(default=128, metadata={"help": "residual width", "ge": 1})
    n_heads: int = field(default=4, metadata={"help": "query heads per layer", "ge": 1})
    n_key_value_heads: int = field(
        default=2, metadata={"help": "key/value heads per layer (grouped-query attention)", "ge": 1}
    )
    d_mlp: int = field(default=384, metadata={"help": "gated MLP width", "ge": 1})
    rotary_base: float = field(default=10000.0, metadata={"help": "rotary base (theta)", "gt": 0})
    context: int = field(
        default=256, metadata={"help": "training length in tokens, the sink included", "ge": 2}
    )
    eval_factor: int = field(
        default=8, metadata={"help": "the loaded n_ctx is this many training lengths", "ge": 1}
    )
    heldout_block: int = field(
        default=20, metadata={"help": "consecutive documents per split block", "ge": 1}
    )
    heldout_every: int = field(
        default=10, metadata={"help": "every this-th block of documents is held out", "ge": 2}
    )
    batch_size: int = field(default=16, metadata={"help": "rows per step", "ge": 1})
    steps: int = field(default=1300, metadata={"help": "optimiser steps", "ge": 1})
    lr: float = field(default=2e-3, metadata={"help": "peak AdamW learning rate", "gt": 0})
    warmup: int = field(default=100, metadata={"help": "linear warm-up steps", "ge": 0})
    weight_decay: float = field(default=0.1, metadata={"help": "AdamW weight decay", "ge": 0})
    seed: int = field(default=0, metadata={"help": "seeds the initial weights and the rows"})

    def validate(self) -> None:
        if self.n_heads % self.n_key_value_heads:
            raise UserInputError(f"n_heads ({self.n_heads}) must be a multiple of "
                                 f"n_key_value_heads ({self.n_key_value_heads})")
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise UserInputError(f"d_model ({self.d_model}) must be n_heads ({self.n_heads}) "
                                 "times an even head width (rotary pairs dimensions)")

    @property
    def n_ctx(self) -> int:
        """The loaded model's context: ``eval_factor`` training lengths."""
        return self.context * self.eval_factor

    def hooked_config(self) -> HookedTransformerConfig:
        d_head = self.d_model // self.n_heads
        return HookedTransformerConfig(
            n_layers=self.n_layers, d_model=self.d_model, n_heads=self.n_heads, d_head=d_head,
            d_mlp=self.d_mlp, n_ctx=self.n_ctx, d_vocab=ByteTokenizer.vocab_size, act_fn="silu",
            gated_mlp=True, normalization_type="RMS", final_rms=True, eps=1e-5,
            positional_embedding_type="rotary", rotary_dim=d_head, rotary_base=self.rotary_base,
            rotary_adjacent_pairs=False,
            n_key_value_heads=(
                self.n_key_value_heads if self.n_key_value_heads != self.n_heads else None),
            default_prepend_bos=False, seed=self.seed,
            # on the CPU, so that a seed gives the same weights (and cache entry) everywhere
            device="cpu",
        )

    def train_config(self) -> TrainConfig:
        """AdamW (betas 0.9, 0.95), warm-up and cosine decay to 10 %, gradients clipped to 1."""
        return TrainConfig(
            steps=self.steps, batch_size=self.batch_size, lr=self.lr, schedule="cosine",
            warmup=min(self.warmup, self.steps), final_lr_fraction=0.1,
            weight_decay=self.weight_decay, betas=(0.9, 0.95), grad_clip=1.0, seed=self.seed,
            checkpoint_every=_CHECKPOINT_EVERY,
        )


# ---------------------------------------------------------------------- data


def short_lm_documents(
    split: Literal["train", "heldout"],
    config: ShortLMConfig | None = None,
    documents: Sequence[str] | None = None,
) -> list[str]:
    """The training or held-out documents: the stdlib prose (:func:`stdlib_documents`) in blocks
    of ``heldout_block`` consecutive documents, every ``heldout_every``-th block held out.

    Whole blocks, not single documents, are held out so that held-out text keeps what a long
    context gives: neighbouring docstrings of one module share names and terms.

    >>> docs = [str(i) for i in range(8)]
    >>> cfg = ShortLMConfig(heldout_block=2, heldout_every=2)
    >>> short_lm_documents("heldout", cfg, docs), short_lm_documents("train", cfg, docs)
    (['2', '3', '6', '7'], ['0', '1', '4', '5'])
    """
    if split not in ("train", "heldout"):
        raise UserInputError(f"split is 'train' or 'heldout', not {split!r}")
    config = config if config is not None else ShortLMConfig()
    docs = list(stdlib_documents()) if documents is None else list(documents)
    held = config.heldout_every - 1
    return [doc for i, doc in enumerate(docs)
            if ((i // config.heldout_block) % config.heldout_every == held) == (split == "heldout")]


def _stream(documents: Sequence[str]) -> Int[Tensor, " token"]:
    """The documents' bytes joined by ``<|endoftext|>`` (uint8 would not hold the 256)."""
    tokenizer = ByteTokenizer()
    ids: list[int] = []
    for doc in documents:
        if doc.strip():
            ids.extend(tokenizer(doc)["input_ids"])
            ids.append(ByteTokenizer.eos_token_id)
    return torch.tensor(ids, dtype=torch.int16)


@functools.cache
def _training_stream(heldout_block: int, heldout_every: int) -> Tensor:
    config = ShortLMConfig(heldout_block=heldout_block, heldout_every=heldout_every)
    return _stream(short_lm_documents("train", config))


def _sampler(config: ShortLMConfig, text: Tensor) -> Callable[[int, int], Int[Tensor, "batch pos"]]:
    """Rows of sink + ``context - 1`` tokens of ``text`` from offsets drawn from ``(seed, step)``."""
    width = config.context - 1
    if len(text) <= width:
        raise UserInputError(f"the training text has {len(text)} tokens, fewer than a row's "
                             f"{width}; give more documents or a shorter context")

    def rows(step: int, batch_size: int) -> Tensor:
        generator = torch.Generator().manual_seed(config.seed * 1_000_003 + step)
        starts = torch.randint(0, len(text) - width, (batch_size,), generator=generator)
        body = text[starts[:, None] + torch.arange(width)].long()
        sink = torch.full((batch_size, 1), ByteTokenizer.bos_token_id, dtype=torch.long)
        return torch.cat([sink, body], dim=1)

    return rows


def heldout_rows(
    lm: LensModel,
    n_rows: int,
    length: int | None = None,
    config: ShortLMConfig | None = None,
    documents: Sequence[str] | None = None,
) -> Int[Tensor, "row pos"]:
    """``n_rows`` rows of held-out text, ``length`` tokens each (default: the loaded n_ctx, 8x
    the training length), the sink first: consecutive cuts of the held-out documents joined by
    ``<|endoftext|>`` (:func:`~lmsci_mi.data.text_corpus.text_chunks`).

    Raises:
        UserInputError: no rows asked for, or more than the held-out text holds (about 95 rows
            of 2,048).
    """
    if n_rows < 1:
        raise UserInputError(f"n_rows must be at least 1, not {n_rows}")
    config = config if config is not None else ShortLMConfig()
    length = length if length is not None else config.n_ctx
    docs = short_lm_documents("heldout", config, documents)
    per_row = length - 1 if lm.sink_token_id is not None else length
    return text_chunks(lm, n_rows * per_row, seq_len=length, documents=docs,
                       name="the held-out stdlib text")


# ---------------------------------------------------------------------- training and loading


def train_short_context_lm(
    config: ShortLMConfig | None = None,
    *,
    documents: Sequence[str] | None = None,
    checkpoints: Path | None = None,
    threads: int | None = None,
    progress: bool = False,
    on_step: Callable[[int, Any], None] | None = None,
) -> tuple[HookedTransformer, TrainingRecord]:
    """Train the model from its seeded initial weights (no cache; see
    :func:`load_short_context_lm`) with :func:`lmsci_mi.training.train_model`: next-token
    cross-entropy on every position of rows of ``config.context`` tokens.

    Args:
        documents: the text to split (default: the stdlib prose); the training split is used.
        checkpoints: the folder a stopped run resumes from (bitwise, at one thread).
        threads: torch threads while training (None: leave torch's setting).
        on_step: ``on_step(step, model)`` after each step, outside the recorded cost.

    >>> tiny = ShortLMConfig(n_layers=1, d_model=16, n_heads=2, n_key_value_heads=1, d_mlp=16,
    ...                      context=8, steps=2, batch_size=2, heldout_block=1, heldout_every=2)
    >>> model, record = train_short_context_lm(tiny, documents=["some text here"] * 4)
    >>> record.steps, model.cfg.n_ctx
    (2, 64)
    """
    config = config if config is not None else ShortLMConfig()
    # Read and encode the text before the loop, so that its seconds are not the run's cost.
    stream = (_training_stream(config.heldout_block, config.heldout_every) if documents is None
              else _stream(short_lm_documents("train", config, documents)))
    return train_model(
        config.hooked_config(), _sampler(config, stream),
        lambda model, rows: model(rows, return_type="loss"), config.train_config(),
        checkpoints=checkpoints, threads=threads, progress=progress, desc="short-context lm",
        on_step=on_step,
    )


def short_context_lm_folder(config: ShortLMConfig | None = None) -> Path:
    """The cache folder of the model trained with ``config``."""
    config = config if config is not None else ShortLMConfig()
    key = training_key(_TRAIN_FORMAT, model=config.params(), data={"source": STDLIB_TEXT_SOURCE})
    return trained_folder("outliers", f"short-lm-{key}")


def wrap_short_context_lm(
    model: HookedTransformer,
    config: ShortLMConfig | None = None,
    *,
    source: str = "random init",
    sink: SinkChoice = DEFAULT_SINK,
) -> LensModel:
    """The model as a :class:`LensModel` with the byte tokenizer, named by its config's key.

    Args:
        sink: by default ``<|endoftext|>``, which starts every training row; a token's text or
            id, or None for no sink (see :func:`~lmsci_mi.model.resolve_sink`).

    >>> lm = wrap_short_context_lm(HookedTransformer(ShortLMConfig().hooked_config()))
    >>> lm.encode("Hi"), lm.sink, lm.cfg.n_ctx
    ([256, 72, 105], '<|endoftext|>', 2048)
    """
    config = config if config is not None else ShortLMConfig()
    name = short_context_lm_folder(config).name  # "short-lm-<key>"
    tokenizer = ByteTokenizer()
    sink_id = resolve_sink(tokenizer, sink, ByteTokenizer.bos_token_id, tokenizer.vocab_size)
    # Loaded at eval_factor x its training length: the length diagnostics must know the shorter one.
    register_trained_context(TrainedContext(
        model=name, trained_length=config.context, max_position_embeddings=None, n_ctx=config.n_ctx,
        rotary_base=config.rotary_base, rotary_base_local=None, sliding_window=None, pretraining_length=None,
        source=f"trained here (lmsci_mi.outliers.short_context_lm): rows of ShortLMConfig.context = "
               f"{config.context} tokens; loaded with n_ctx = {config.eval_factor} x that"))
    return LensModel(model, name=name, source=source, tokenizer=tokenizer, sink_token_id=sink_id)


def load_short_context_lm(
    config: ShortLMConfig | None = None,
    *,
    train: bool = True,
    retrain: bool = False,
    threads: int | None = None,
    progress: bool = False,
    device: torch.device | str | None = None,
    sink: SinkChoice = DEFAULT_SINK,
) -> tuple[LensModel, dict[str, Any]]:
    """The trained model as a :class:`LensModel`, from the cache, else trained (resuming an
    interrupted run) and cached (:func:`lmsci_mi.training.load_or_train`); with its record: the
    config, the data source and the run's cost and loss curve. ``sink`` as in
    :func:`wrap_short_context_lm` (``<|endoftext|>`` by default: every training row starts with it).

    Raises:
        FileNotFoundError: nothing cached and ``train`` is False.
    """
    config = config if config is not None else ShortLMConfig()
    folder = short_context_lm_folder(config)

    def run(checkpoints: Path) -> tuple[HookedTransformer, dict[str, Any]]:
        model, record = train_short_context_lm(config, checkpoints=checkpoints, threads=threads,
                                               progress=progress)
        return model, {"config": config.params(), "data": STDLIB_TEXT_SOURCE,
                       "trained_context": config.context, "run": record.to_dict()}

    model, record = load_or_train(
        folder, lambda: HookedTransformer(config.hooked_config()), run, retrain=retrain,
        missing=None if train else (f"no short-context LM cached at {folder}; train it first "
                                    "(train=True, or benchmarks/short_context_lm.py)"),
    )
    model.to(device if device is not None else default_device(), print_details=False)
    return wrap_short_context_lm(model, config, source=str(folder), sink=sink), record

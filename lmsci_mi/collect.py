"""Activation collection: run many texts through the model and keep the activations at chosen hook
points and positions, in bounded memory.

Probes read one vector per example (the last token, a subject's last token) or every token;
LM-Steer trains on cached final-norm states; SAEs train on a harvest of residual vectors. All of
them collect here. Texts are sorted by length and packed into batches under a token budget; the
forward pass stops after the deepest block any hook needs and never unembeds. Each hook writes only
the selected rows, straight into a preallocated buffer (host memory, or a ``.npy`` memmap on disk).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

import numpy as np
import torch
from jaxtyping import Int
from numpy.lib.format import open_memmap
from torch import Tensor
from tqdm.auto import tqdm
from transformer_lens.hook_points import HookPoint

from lmsci_mi.config import Config, config, validate_choice
from lmsci_mi.model import LensModel
from lmsci_mi.sites import SITES, layer_of, layout_of, parse_hook_name

__all__ = [
    "Activations",
    "CollectConfig",
    "PositionChoice",
    "collect_activations",
    "select_positions",
]

logger = logging.getLogger(__name__)
T = TypeVar("T")

PositionChoice = Literal["last", "all"] | Sequence[Sequence[int]]
"""Which positions to keep: ``"last"`` (each text's last token), ``"all"`` (every real token but
the sink), or one list of positions per text (negative counts from the end, like Python)."""

_DTYPES = {"float32": torch.float32, "float16": torch.float16}
_GLOBAL_SITES = {"ln_final", "ln_final_scale"}  # computed after the last block


@config
class CollectConfig(Config):
    """How activations are collected; only ``max_items``/``seed`` change which rows come back."""

    token_budget: int = field(
        default=8192, metadata={"help": "tokens per forward pass (memory bound)"}
    )
    dtype: str = field(default="float32", metadata={"help": "storage dtype: float32 or float16"})
    max_items: int | None = field(
        default=None, metadata={"help": "keep a seeded random subset of this many positions"}
    )
    seed: int = field(default=0, metadata={"help": "seed of the max_items subsample"})
    progress: bool = field(default=True, metadata={"help": "show a progress bar", "cli": False})

    def validate(self) -> None:
        if self.token_budget < 1:
            raise ValueError(f"token_budget must be positive, not {self.token_budget}")
        validate_choice("dtype", self.dtype, sorted(_DTYPES))
        if self.max_items is not None and self.max_items < 1:
            raise ValueError(f"max_items must be positive or None, not {self.max_items}")


@dataclass(frozen=True)
class Activations:
    """Collected activations: one row per kept (text, position).

    Attributes:
        acts: per hook name, ``[item, ...]`` (``[item, d]`` for vector sites, ``[item, head, d]``
            for per-head sites); on the host, or memory-mapped from ``.npy`` files.
        example: the text each row comes from.
        position: the row's token position in that text (the sink is position 0).
        token: the token id at that position (the "word type" of a control task).
        hooks: the hook names, in the order asked for.
    Rows are ordered by example, then position.
    """

    acts: dict[str, Tensor]
    example: Int[Tensor, " item"]
    position: Int[Tensor, " item"]
    token: Int[Tensor, " item"]
    hooks: tuple[str, ...] = ()

    def __len__(self) -> int:
        return int(self.example.shape[0])

    def stack(self, hooks: Sequence[str] | None = None) -> Tensor:
        """The activations of several hooks as one ``[hook, item, ...]`` tensor (a copy)."""
        return torch.stack([self.acts[name] for name in (hooks or self.hooks)])

    def per_item(self, values: Sequence[T]) -> list[T]:
        """Expand one value per text (a label, a group) to one value per row."""
        return [values[i] for i in self.example.tolist()]


def select_positions(
    sequences: Sequence[Sequence[int]], positions: PositionChoice, *, skip: int
) -> list[list[int]]:
    """The positions kept in each sequence, validated (``skip`` leading positions are the sink).

    Raises:
        ValueError: a position outside its sequence, a list of the wrong length, or a text with no
            token after the sink; the message names the text.

    >>> select_positions([[7, 1, 2], [7, 3]], "all", skip=1)
    [[1, 2], [1]]
    >>> select_positions([[7, 1, 2]], [[-1]], skip=1)
    [[2]]
    """
    if isinstance(positions, str):
        validate_choice("positions", positions, ["last", "all"])
        chosen = []
        for i, seq in enumerate(sequences):
            if len(seq) <= skip:
                raise ValueError(f"text {i} has no token after the sink; drop empty texts")
            chosen.append([len(seq) - 1] if positions == "last" else list(range(skip, len(seq))))
        return chosen
    if len(positions) != len(sequences):
        raise ValueError(
            f"got {len(positions)} position lists for {len(sequences)} texts; give one per text"
        )
    chosen = []
    for i, (seq, wanted) in enumerate(zip(sequences, positions, strict=True)):
        row = []
        for p in wanted:
            q = int(p) + len(seq) if int(p) < 0 else int(p)
            if not 0 <= q < len(seq):
                raise ValueError(f"position {p} is outside text {i}, which has {len(seq)} tokens")
            row.append(q)
        chosen.append(row)
    return chosen


def _stop_layer(hooks: Sequence[str], n_layers: int) -> int | None:
    """Blocks to run: up to the deepest hooked one; None means all blocks and the final norm."""
    if any(parse_hook_name(h)[0].name in _GLOBAL_SITES for h in hooks if _in_table(h)):
        return None
    layers = [layer_of(h) for h in hooks]
    return max((layer + 1 for layer in layers if layer is not None), default=0)


def _in_table(hook: str) -> bool:
    try:
        parse_hook_name(hook)
    except ValueError:
        return False
    return True


def _batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Text indices grouped into batches of similar length with ``batch × width <= budget``."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= budget:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


_DEFAULT = CollectConfig()


@torch.no_grad()
def collect_activations(
    lm: LensModel,
    texts: Sequence[str] | Sequence[Sequence[int]],
    hooks: Sequence[str],
    *,
    positions: PositionChoice = "last",
    config: CollectConfig = _DEFAULT,
    out_dir: str | Path | None = None,
) -> Activations:
    """Run ``texts`` through ``lm`` and keep the activations at ``hooks`` and ``positions``.

    Reads the model only. Texts are tokenised under the sink policy (token id lists are taken as
    they are). Hooks go through the registry; every name is checked before anything runs.

    Args:
        lm: the model.
        texts: prompts, or token id lists that already hold the sink.
        hooks: hook names (``hook_name("resid_post", 3)``); vector and per-head sites.
        positions: ``"last"``, ``"all"`` (every token but the sink), or a position list per text.
        config: batching, storage dtype and subsampling.
        out_dir: if given, each hook's rows stream into ``out_dir/<hook>.npy`` (a memmap), so a
            collection larger than memory never sits in RAM.

    Returns:
        :class:`Activations`, rows ordered by text then position.

    Raises:
        ValueError: no texts, no hooks, an unknown hook (the message lists close names), a site
            with no per-position vector (attention patterns), or a bad position.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.sites import hook_name
    >>> lm = load_model("toy-2l")
    >>> acts = collect_activations(lm, ["The cat sat", "A dog"], [hook_name("resid_post", 1)],
    ...                            config=CollectConfig(progress=False))
    >>> tuple(acts.acts["blocks.1.hook_resid_post"].shape), acts.position.tolist()
    ((2, 64), [3, 2])
    """
    if len(texts) == 0:
        raise ValueError("collect_activations needs at least one text")
    if len(hooks) == 0:
        raise ValueError(f"give at least one hook, e.g. {SITES['resid_post'].hook(0)!r}")
    names = list(dict.fromkeys(lm.hooks.resolve(list(hooks))))
    for name in names:
        if layout_of(name).position_axis != 1:
            raise ValueError(
                f"{name} has no vector per position (attention patterns are [query, key]); "
                "capture it with lm.hooks.capture instead"
            )
    sequences = [lm.encode(t) if isinstance(t, str) else [int(x) for x in t] for t in texts]
    skip = 1 if lm.sink is not None else 0
    chosen = select_positions(sequences, positions, skip=skip)
    chosen = _subsample(chosen, config)

    offsets = np.cumsum([0] + [len(c) for c in chosen])
    n_items = int(offsets[-1])
    if n_items == 0:
        raise ValueError("no position selected: every position list is empty")
    example = torch.repeat_interleave(
        torch.arange(len(chosen)), torch.tensor([len(c) for c in chosen])
    )
    position = torch.tensor([p for c in chosen for p in c], dtype=torch.long)
    token = torch.tensor(
        [sequences[i][p] for i, c in enumerate(chosen) for p in c], dtype=torch.long
    )

    buffers: dict[str, Tensor] = {}
    memmaps: list[np.memmap] = []
    dtype = _DTYPES[config.dtype]
    folder = Path(out_dir) if out_dir is not None else None

    def buffer(name: str, shape: tuple[int, ...]) -> Tensor:
        if name not in buffers:
            if folder is None:
                # Host memory on purpose: a large collection must not fill an accelerator's memory.
                buffers[name] = torch.empty((n_items, *shape), dtype=dtype)
            else:
                folder.mkdir(parents=True, exist_ok=True)
                array = open_memmap(
                    folder / f"{name}.npy",
                    mode="w+",
                    dtype=np.dtype(config.dtype),
                    shape=(n_items, *shape),
                )
                memmaps.append(array)
                buffers[name] = torch.from_numpy(array)
        return buffers[name]

    stop = _stop_layer(names, lm.cfg.n_layers)
    lengths = [len(s) for s in sequences]
    batches = [b for b in _batches(lengths, config.token_budget) if any(chosen[i] for i in b)]
    for batch in tqdm(batches, desc="collect", unit="batch", disable=not config.progress):
        padded = lm.pad_batch([sequences[i] for i in batch])
        rows = torch.tensor([r for r, i in enumerate(batch) for _ in chosen[i]], device=lm.device)
        cols = torch.tensor([p for i in batch for p in chosen[i]], device=lm.device)
        slots = torch.cat([torch.arange(int(offsets[i]), int(offsets[i + 1])) for i in batch])

        def store(activation: Tensor, hook: HookPoint, rows=rows, cols=cols, slots=slots) -> None:
            picked = activation[rows, cols]
            buffer(hook.name or "", tuple(picked.shape[1:]))[slots] = picked.to("cpu", dtype)

        with lm.hooks.hooks(fwd=[(names, store)], label="collect"):
            if stop is None:
                resid = lm.model(padded.tokens, stop_at_layer=lm.cfg.n_layers)
                lm.model.ln_final(resid)
            else:
                lm.model(padded.tokens, stop_at_layer=stop)
    for array in memmaps:
        array.flush()
    return Activations(
        {name: buffers[name] for name in names}, example, position, token, tuple(names)
    )


def _subsample(chosen: list[list[int]], config: CollectConfig) -> list[list[int]]:
    """Keep a seeded random ``config.max_items`` of the selected positions (order kept)."""
    total = sum(len(c) for c in chosen)
    if config.max_items is None or config.max_items >= total:
        return chosen
    generator = torch.Generator().manual_seed(config.seed)
    keep = torch.zeros(total, dtype=torch.bool)
    keep[torch.randperm(total, generator=generator)[: config.max_items]] = True
    out, start = [], 0
    for c in chosen:
        flags = keep[start : start + len(c)].tolist()
        out.append([p for p, k in zip(c, flags, strict=True) if k])
        start += len(c)
    return out

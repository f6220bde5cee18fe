"""Activation collection: run many texts through the model and keep the activations at chosen hook
points and positions, in bounded memory.

Probes read one vector per example (the last token, a subject's last token) or every token;
LM-Steer trains on cached final-norm states; SAEs train on a harvest of residual vectors. All of
them collect here. Texts are sorted by length and packed into batches under a token budget; the
forward pass stops after the deepest block any hook needs and never unembeds. Each hook writes only
the selected rows, straight into a preallocated buffer (host memory, or a ``.npy`` memmap on disk).
A collection over many texts shards by text over a cluster (``cluster=``; :class:`CollectShards`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np
import torch
from jaxtyping import Int
from numpy.lib.format import open_memmap
from torch import Tensor
from tqdm.auto import tqdm
from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache
from transformer_lens.hook_points import HookPoint

from lmsci_mi.cluster.shardable import SHARDABLE, Job, Shardable
from lmsci_mi.config import Config, config, validate_choice
from lmsci_mi.errors import UserInputError
from lmsci_mi.hooks import HookFn
from lmsci_mi.model import LensModel
from lmsci_mi.positions import Exclude, resolve_exclude
from lmsci_mi.sites import SITES, layer_of, layout_of, parse_hook_name

if TYPE_CHECKING:
    from lmsci_mi.cluster import ClusterConfig

__all__ = [
    "Activations",
    "CollectConfig",
    "CollectShards",
    "PositionChoice",
    "collect_activations",
    "positions_to_collect",
    "select_positions",
]

logger = logging.getLogger(__name__)
T = TypeVar("T")

PositionChoice = Literal["last", "all"] | Sequence[Sequence[int]]
"""Which positions to keep: ``"last"`` (each text's last token), ``"all"`` (every real token but
the sink, and but any other position an :class:`~lmsci_mi.positions.Exclude` names), or one list
of positions per text (negative counts from the end, like Python)."""

_DTYPES = {"float32": torch.float32, "float16": torch.float16}
_GLOBAL_SITES = {"ln_final", "ln_final_scale"}  # computed after the last block


@config
class CollectConfig(Config):
    """How activations are collected; only ``max_items``/``seed`` change which rows come back."""

    token_budget: int = field(
        default=8192, metadata={"help": "tokens per forward pass (memory bound)", "ge": 1}
    )
    dtype: str = field(
        default="float32", metadata={"help": "storage dtype", "choices": sorted(_DTYPES)}
    )
    max_items: int | None = field(
        default=None,
        metadata={"help": "keep a seeded random subset of this many positions", "ge": 1},
    )
    seed: int = field(default=0, metadata={"help": "seed of the max_items subsample"})
    autocast: str | None = field(
        default=None,
        metadata={
            "help": "run the forward pass under autocast to this dtype (bfloat16: ~3.5x faster "
            "on CPUs with AMX, but ~6x slower on CPUs without bf16 matrix instructions; "
            "activations within ~1% relative error)",
            "choices": ("bfloat16", "float16"),
        },
    )
    batch_overhead_tokens: int = field(
        default=64,
        metadata={
            "help": "what one more forward call costs, in tokens (planning only: a batch "
            "closes when a text would cost more inside it than this plus its length)"
        },
    )
    reuse_prefix: bool = field(
        default=True,
        metadata={
            "help": "compute the tokens every text of a batch starts with once (the sink, a "
            "template's opening words) and share their keys and values"
        },
    )
    progress: bool = field(default=True, metadata={"help": "show a progress bar", "cli": False})


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
    sequences: Sequence[Sequence[int]],
    positions: PositionChoice,
    *,
    exclude: Exclude | None = None,
    skip: int | None = None,
) -> list[list[int]]:
    """The positions kept in each sequence, validated.

    ``"all"`` is every position ``exclude`` keeps (None: every position but 0, the sink);
    ``"last"`` and explicit lists are taken as given. ``skip=n``, the older spelling, leaves the
    first ``n`` positions out (``Exclude.leading(n)``) and is deprecated.

    Raises:
        ValueError: a position outside its sequence, a list of the wrong length, or a text with no
            token left once the excluded positions are out; the message names the text.

    >>> select_positions([[7, 1, 2], [7, 3]], "all")
    [[1, 2], [1]]
    >>> select_positions([[7, 1, 2, 9]], "all", exclude=Exclude(token_ids=(2,)))
    [[1, 3]]
    >>> select_positions([[7, 1, 2]], [[-1]])
    [[2]]
    """
    chosen_exclude = _exclude_or_skip(exclude, skip)
    if isinstance(positions, str):
        validate_choice("positions", positions, ["last", "all"])
        chosen = []
        for i, seq in enumerate(sequences):
            ids = torch.tensor(list(seq), dtype=torch.long)
            kept = chosen_exclude.keep_at(torch.arange(len(ids)), ids).nonzero()[:, 0].tolist()
            if not kept:
                raise UserInputError(
                    f"text {i} has no token left once {chosen_exclude.describe()} is left out; "
                    "drop empty texts"
                )
            chosen.append([len(seq) - 1] if positions == "last" else kept)
        return chosen
    if len(positions) != len(sequences):
        raise UserInputError(
            f"got {len(positions)} position lists for {len(sequences)} texts; give one per text"
        )
    chosen = []
    for i, (seq, wanted) in enumerate(zip(sequences, positions, strict=True)):
        row = []
        for p in wanted:
            q = int(p) + len(seq) if int(p) < 0 else int(p)
            if not 0 <= q < len(seq):
                raise UserInputError(f"position {p} is outside text {i}, which has {len(seq)} tokens")
            row.append(q)
        chosen.append(row)
    return chosen


def _exclude_or_skip(exclude: Exclude | None, skip: int | None) -> Exclude:
    """The exclusion of ``exclude`` or of the deprecated ``skip`` (not both)."""
    if skip is None:
        return resolve_exclude(exclude)
    warnings.warn(
        "select_positions(skip=n) is deprecated; use exclude=Exclude.leading(n) (lmsci_mi.Exclude)",
        DeprecationWarning,
        stacklevel=3,
    )
    if exclude is not None:
        raise UserInputError("give exclude= or the older skip=, not both")
    if skip < 0:
        raise UserInputError(f"skip must be >= 0, got {skip}")
    return Exclude.leading(skip)


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


def _batches(
    sequences: Sequence[Sequence[int]], budget: int, reuse_prefix: bool, overhead: int = 64
) -> list[list[int]]:
    """Text indices grouped into batches with ``batch × width <= budget``.

    Two plans are made: by length (least padding) and, when prefixes are reused, in token order,
    where a batch closes early when the next text would cost more inside it (by shortening the
    shared prefix) than on its own (so each template's texts share their opening words). The plan
    that computes fewer tokens is used.
    """
    by_length = sorted(range(len(sequences)), key=lambda i: -len(sequences[i]))
    plans = [_pack(sequences, by_length, budget, share=False, overhead=overhead)]
    if reuse_prefix:
        by_tokens = sorted(range(len(sequences)), key=lambda i: list(sequences[i]))
        plans.append(_pack(sequences, by_tokens, budget, share=True, overhead=overhead))
    return min(plans, key=lambda plan: _cost(sequences, plan, reuse_prefix, overhead))


def _cost(
    sequences: Sequence[Sequence[int]],
    plan: list[list[int]],
    reuse_prefix: bool,
    overhead: int = 64,
) -> int:
    """Tokens computed by ``plan`` (each batch's shared prefix once, then every row's rest), plus
    ``overhead`` per forward call."""
    total = 0
    for batch in plan:
        seqs = [sequences[i] for i in batch]
        prefix = _shared_prefix(seqs) if reuse_prefix else 0
        total += (
            prefix
            + len(batch) * (max(len(s) for s in seqs) - prefix)
            + overhead * (1 + (prefix > 0))
        )
    return total


def _pack(
    sequences: Sequence[Sequence[int]], order: list[int], budget: int, *, share: bool, overhead: int
) -> list[list[int]]:
    batches: list[list[int]] = []
    width = prefix = shortest = 0
    for i in order:
        seq = sequences[i]
        if batches:
            rows = len(batches[-1])
            new_width = max(width, len(seq))
            new_prefix = 0
            if share:
                first = sequences[batches[-1][0]]
                new_prefix = min(prefix, _common(first, seq), min(shortest, len(seq)) - 1)
            extra = (
                new_prefix
                + (rows + 1) * (new_width - new_prefix)
                - (prefix + rows * (width - prefix))
            )
            if (rows + 1) * new_width <= budget and (not share or extra <= len(seq) + 2 * overhead):
                batches[-1].append(i)
                width, prefix, shortest = new_width, new_prefix, min(shortest, len(seq))
                continue
        batches.append([i])
        width, prefix, shortest = len(seq), len(seq) - 1, len(seq)
    return batches


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


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
    cluster: ClusterConfig | None = None,
    exclude: Exclude | None = None,
) -> Activations:
    """Run ``texts`` through ``lm`` and keep the activations at ``hooks`` and ``positions``.

    Reads the model only. Texts are tokenised under the sink policy (token id lists are taken as
    they are). Hooks go through the registry; every name is checked before anything runs.

    Args:
        lm: the model.
        texts: prompts, or token id lists that already hold the sink.
        hooks: hook names (``hook_name("resid_post", 3)``); vector and per-head sites.
        positions: ``"last"``, ``"all"`` (every token ``exclude`` keeps), or a list per text.
        config: batching, storage dtype and subsampling.
        out_dir: if given, each hook's rows stream into ``out_dir/<hook>.npy`` (a memmap), so a
            collection larger than memory never sits in RAM.
        cluster: collect in shards of texts on a Ray cluster (or in this process with
            ``address="process"``), :func:`lmsci_mi.cluster.run_sharded`; the same rows, equal
            up to float summation order. Not with ``out_dir``.
        exclude: the positions ``"all"`` leaves out (:class:`~lmsci_mi.positions.Exclude`; None:
            the sink token, where the model puts one in front, as always).

    Returns:
        :class:`Activations`, rows ordered by text then position.

    Raises:
        ValueError: no texts, no hooks, an unknown hook (the message lists close names), a site
            with no per-position vector (attention patterns), a bad position, or ``out_dir``
            with ``cluster``.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.sites import hook_name
    >>> lm = load_model("toy-2l")
    >>> acts = collect_activations(lm, ["The cat sat", "A dog"], [hook_name("resid_post", 1)],
    ...                            config=CollectConfig(progress=False))
    >>> tuple(acts.acts["blocks.1.hook_resid_post"].shape), acts.position.tolist()
    ((2, 64), [3, 2])
    """
    if cluster is not None:
        return _collect_sharded(lm, texts, hooks, positions, config, out_dir, cluster, exclude)
    names = _checked_hooks(lm, texts, hooks)
    sequences = _sequences(lm, texts)
    chosen = positions_to_collect(lm, texts, positions, config, sequences=sequences, exclude=exclude)
    counts = [len(c) for c in chosen]
    offsets = np.cumsum([0, *counts])
    if offsets[-1] == 0:
        raise UserInputError("no position selected: every position list is empty")
    buffers = _Buffers(int(offsets[-1]), config.dtype, out_dir)
    stop = _stop_layer(names, lm.cfg.n_layers)
    plan = _batches(
        sequences, config.token_budget, config.reuse_prefix, config.batch_overhead_tokens
    )
    batches = [b for b in plan if any(chosen[i] for i in b)]
    for batch in tqdm(batches, desc="collect", unit="batch", disable=not config.progress):
        slots = {
            i: list(zip(chosen[i], range(int(offsets[i]), int(offsets[i + 1])), strict=True))
            for i in batch
        }
        seqs = [sequences[i] for i in batch]
        _collect_batch(lm, names, seqs, [slots[i] for i in batch], buffers, stop, config)
    return Activations(
        buffers.finish(names),
        example=torch.repeat_interleave(torch.arange(len(chosen)), torch.tensor(counts)),
        position=torch.tensor([p for c in chosen for p in c], dtype=torch.long),
        token=torch.tensor(
            [sequences[i][p] for i, c in enumerate(chosen) for p in c], dtype=torch.long
        ),
        hooks=tuple(names),
    )


def _collect_sharded(
    lm: LensModel,
    texts: Sequence[str] | Sequence[Sequence[int]],
    hooks: Sequence[str],
    positions: PositionChoice,
    config: CollectConfig,
    out_dir: str | Path | None,
    cluster: ClusterConfig,
    exclude: Exclude | None,
) -> Activations:
    """:func:`collect_activations` in shards of texts (:func:`lmsci_mi.cluster.run_sharded`)."""
    if out_dir is not None:
        raise UserInputError(
            "a sharded collection comes back in memory: give out_dir or cluster, not both"
        )
    from lmsci_mi.cluster import run_sharded

    return run_sharded("collect", lm, texts, hooks, positions=positions, config=config,
                       cluster=cluster, exclude=exclude)

def positions_to_collect(
    lm: LensModel,
    texts: Sequence[str] | Sequence[Sequence[int]],
    positions: PositionChoice = "last",
    config: CollectConfig = _DEFAULT,
    *,
    sequences: Sequence[Sequence[int]] | None = None,
    exclude: Exclude | None = None,
) -> list[list[int]]:
    """The positions :func:`collect_activations` keeps in each text (after ``max_items``'s
    subsample): given back to it as ``positions`` with ``max_items`` off, it collects the same
    rows, which is how a sharded collection keeps one subsample over all texts.

    >>> from lmsci_mi import load_model
    >>> positions_to_collect(load_model("toy-2l"), ["The cat sat", "A dog"], "all")
    [[1, 2, 3], [1, 2]]
    """
    sequences = _sequences(lm, texts) if sequences is None else sequences
    # None keeps what collection always did: a sink-free model's first token is a word, kept.
    chosen_exclude = resolve_exclude(exclude, sink_token=lm.sink_token_id is not None)
    chosen = select_positions(sequences, positions, exclude=chosen_exclude)
    return _subsample(chosen, config)


def _sequences(lm: LensModel, texts: Sequence[str] | Sequence[Sequence[int]]) -> list[list[int]]:
    return [lm.encode(t) if isinstance(t, str) else [int(x) for x in t] for t in texts]


def _checked_hooks(lm: LensModel, texts: Sequence[object], hooks: Sequence[str]) -> list[str]:
    """The hook names, resolved and checked before anything runs."""
    if len(texts) == 0:
        raise UserInputError("collect_activations needs at least one text")
    if len(hooks) == 0:
        raise UserInputError(f"give at least one hook, e.g. {SITES['resid_post'].hook(0)!r}")
    names = list(dict.fromkeys(lm.hooks.resolve(list(hooks))))
    for name in names:
        if layout_of(name).position_axis != 1:
            raise UserInputError(
                f"{name} has no vector per position (attention patterns are [query, key]); "
                "capture it with lm.hooks.capture instead"
            )
    return names


class _Buffers:
    """One ``[item, ...]`` buffer per hook, allocated at its first activation: in host memory
    (on purpose: a large collection must not fill an accelerator's memory) or a ``.npy`` memmap."""

    def __init__(self, n_items: int, dtype: str, out_dir: str | Path | None) -> None:
        self.n_items, self.dtype_name, self.dtype = n_items, dtype, _DTYPES[dtype]
        self.folder = Path(out_dir) if out_dir is not None else None
        self.tensors: dict[str, Tensor] = {}
        self.memmaps: list[np.memmap] = []

    def __call__(self, name: str, shape: tuple[int, ...]) -> Tensor:
        if name not in self.tensors:
            if self.folder is None:
                self.tensors[name] = torch.empty((self.n_items, *shape), dtype=self.dtype)
            else:
                self.folder.mkdir(parents=True, exist_ok=True)
                array = open_memmap(
                    self.folder / f"{name}.npy",
                    mode="w+",
                    dtype=np.dtype(self.dtype_name),
                    shape=(self.n_items, *shape),
                )
                self.memmaps.append(array)
                self.tensors[name] = torch.from_numpy(array)
        return self.tensors[name]

    def finish(self, names: Sequence[str]) -> dict[str, Tensor]:
        for array in self.memmaps:
            array.flush()
        return {name: self.tensors[name] for name in names}


def _collect_batch(
    lm: LensModel,
    names: list[str],
    seqs: list[list[int]],
    slots: list[list[tuple[int, int]]],
    buffers: _Buffers,
    stop: int | None,
    config: CollectConfig,
) -> None:
    """Run one batch: its shared prefix once (if any), then every row's rest, storing the rows
    whose (position, slot) pairs ``slots`` lists."""
    prefix = _shared_prefix(seqs) if config.reuse_prefix else 0
    items = [(r, p, slot) for r, row in enumerate(slots) for p, slot in row]
    early = [(0, p, slot) for _, p, slot in items if p < prefix]  # read from the shared prefix
    late = [(r, p - prefix, slot) for r, p, slot in items if p >= prefix]
    cache = None
    with _autocast(lm, config.autocast):
        if prefix:
            cache = TransformerLensKeyValueCache.init_cache(lm.cfg, lm.device, 1)
            prefix_tokens = torch.tensor([seqs[0][:prefix]], device=lm.device)
            _forward(
                lm,
                names,
                _storing(early, buffers, buffers.dtype, lm.device),
                prefix_tokens,
                stop,
                cache,
            )
            _share(cache, len(seqs))
        padded = lm.pad_batch([seq[prefix:] for seq in seqs])
        _forward(
            lm, names, _storing(late, buffers, buffers.dtype, lm.device), padded.tokens, stop, cache
        )


def _storing(
    items: list[tuple[int, int, int]],
    buffer: Callable[[str, tuple[int, ...]], Tensor],
    dtype: torch.dtype,
    device: torch.device,
) -> HookFn:
    """A hook writing activation ``[row, position]`` of each item into its buffer slot."""
    rows = torch.tensor([r for r, _, _ in items], dtype=torch.long, device=device)
    cols = torch.tensor([p for _, p, _ in items], dtype=torch.long, device=device)
    slots = torch.tensor([slot for _, _, slot in items], dtype=torch.long)

    def store(activation: Tensor, hook: HookPoint) -> None:
        if len(slots):
            picked = activation[rows, cols]
            buffer(hook.name or "", tuple(picked.shape[1:]))[slots] = picked.to("cpu", dtype)

    return store


def _forward(
    lm: LensModel,
    names: list[str],
    store: HookFn,
    tokens: Tensor,
    stop: int | None,
    cache: TransformerLensKeyValueCache | None,
) -> None:
    """Run ``tokens`` (after the cached prefix, if any) as far as the hooks need, storing rows."""
    # Every position is real (padding sits after a row's end, where causal attention never looks
    # back from a real token), so the mask is all ones; TransformerLens would otherwise guess
    # padding from the pad token's id.
    kwargs = (
        {"past_kv_cache": cache, "attention_mask": torch.ones_like(tokens)}
        if cache is not None
        else {}
    )
    with lm.hooks.hooks(fwd=[(names, store)], label="collect"):
        if stop is None:
            resid = lm.model(tokens, stop_at_layer=lm.cfg.n_layers, **kwargs)
            lm.model.ln_final(resid)
        else:
            lm.model(tokens, stop_at_layer=stop, **kwargs)


def _shared_prefix(sequences: Sequence[Sequence[int]]) -> int:
    """Tokens every sequence starts with, leaving each at least one token of its own."""
    shortest = min(len(s) for s in sequences)
    first = sequences[0]
    n = 0
    while n < shortest - 1 and all(s[n] == first[n] for s in sequences):
        n += 1
    return n


def _share(cache: TransformerLensKeyValueCache, batch: int) -> None:
    """Turn a one-sequence prefix cache into a frozen cache shared by ``batch`` sequences."""
    for entry in cache.entries:
        entry.past_keys = entry.past_keys.expand(batch, -1, -1, -1)
        entry.past_values = entry.past_values.expand(batch, -1, -1, -1)
    cache.previous_attention_mask = cache.previous_attention_mask.expand(batch, -1)
    cache.freeze()


def _autocast(lm: LensModel, dtype: str | None) -> contextlib.AbstractContextManager:
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=lm.device.type, dtype=getattr(torch, dtype))


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


# ---------------------------------------------------------------------- sharded over a cluster


@dataclass(frozen=True)
class _Text:
    index: int
    text: str | tuple[int, ...]
    positions: tuple[int, ...]


@dataclass(frozen=True)
class _ShardContext:
    hooks: tuple[str, ...]
    config: CollectConfig


@SHARDABLE.register("collect", CollectConfig, "activation collection over a text set, by text")
class CollectShards(Shardable[tuple[Activations, tuple[int, ...]]]):
    """Activation collection over a text set, sharded by text. The driver picks every text's
    positions once (``max_items``'s subsample is over all texts, as in one process); workers
    collect their texts' rows; the merge stacks them in text order. Equal to the single-process
    collection up to float summation order (batches differ)."""

    name = "collect"
    function = staticmethod(collect_activations)

    def prepare(self, lm: LensModel, arguments: Mapping[str, Any]) -> Job:
        texts, config = arguments["texts"], arguments["config"]
        names = tuple(_checked_hooks(lm, texts, arguments["hooks"]))
        chosen = positions_to_collect(
            lm, texts, arguments["positions"], config, exclude=arguments["exclude"]
        )
        if not any(chosen):
            raise UserInputError("no position selected: every position list is empty")
        items = tuple(
            _Text(i, t if isinstance(t, str) else tuple(int(x) for x in t), tuple(c))
            for i, (t, c) in enumerate(zip(texts, chosen, strict=True))
            if c  # a text the subsample left empty is not sent anywhere
        )
        worker_config = config.replace(max_items=None, progress=False)
        return Job(items=items, context=_ShardContext(names, worker_config))

    def run(
        self, lm: LensModel, context: _ShardContext, items: Sequence[_Text]
    ) -> tuple[Activations, tuple[int, ...]]:
        acts = collect_activations(
            lm,
            [list(t.text) if isinstance(t.text, tuple) else t.text for t in items],  # type: ignore[misc]
            context.hooks,
            positions=[list(t.positions) for t in items],
            config=context.config,
        )
        return acts, tuple(t.index for t in items)

    def merge(
        self, lm: LensModel, job: Job, parts: Sequence[tuple[Activations, tuple[int, ...]]]
    ) -> Activations:
        hooks = parts[0][0].hooks
        examples = [torch.tensor(index)[acts.example] for acts, index in parts]
        return dataclasses.replace(
            parts[0][0],
            acts={h: torch.cat([acts.acts[h] for acts, _ in parts]) for h in hooks},
            example=torch.cat(examples),
            position=torch.cat([acts.position for acts, _ in parts]),
            token=torch.cat([acts.token for acts, _ in parts]),
        )

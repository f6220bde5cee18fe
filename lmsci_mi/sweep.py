"""The sweep engine: run many rows of interventions against one cached base run, in few passes.

Patching, tracing, path patching and ablation are *planners*: they describe rows (each row a set of
interventions: replace the activation at a hook with a source, where a mask says) and hand them
here. The engine exploits two facts about a causal transformer:

* a row that intervenes first at layer ``l`` agrees with the base run below ``l``, so it starts
  from the base run's residual stream at ``l`` (rows join a pass at their own layer, so rows of
  layers far apart share one pass without recomputing anything);
* a row whose first change is at position ``p`` leaves every earlier position as it was, so only
  positions ``p..`` are computed, attending to the base run's cached keys and values before ``p``.

Only the positions a readout needs are unembedded, and each block call holds at most a token
budget. Interventions go through the hook registry. With ``grad=True`` the same resume runs with
autograd on, keeping every row, so a caller can differentiate the readout with respect to the
rows' sources (integrated gradients). After ROME's batched tracing and TransformerLens's
``patching`` (which reruns the full model once per patch).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens.cache.key_value_cache_entry import TransformerLensKeyValueCacheEntry
from transformer_lens.hook_points import HookPoint

from lmsci_mi.config import Config, config
from lmsci_mi.errors import UserInputError
from lmsci_mi.hooks import HookFn
from lmsci_mi.model import LensModel
from lmsci_mi.sites import hook_name, layer_of, layout_of
from lmsci_mi.typecheck import shape_checked

__all__ = [
    "BaseRun",
    "Intervention",
    "Pass",
    "PlannedRow",
    "Row",
    "SweepConfig",
    "SweepOutput",
    "SweepStats",
    "plan_passes",
    "resume",
    "run_rows",
]

logger = logging.getLogger(__name__)

Readout = Callable[[Float[Tensor, "row batch ... vocab"]], Tensor]
"""Turns the logits at the answer position of each (row, base sequence) into the sweep's values,
``[row, batch, vocab] -> [row, batch, ...]`` (a metric, a probability, the logits themselves).
With several answer positions per sequence (``answer_positions`` of shape ``[batch, answer]``,
e.g. a teacher-forced multi-token target) the logits are ``[row, batch, answer, vocab]``."""


@config
class SweepConfig(Config):
    """How the engine batches; none of these change a result, only its speed and memory."""

    token_budget: int = field(
        default=4096, metadata={"help": "tokens per block call (memory bound)", "ge": 1}
    )
    pass_overhead_tokens: float = field(
        default=24.0,
        metadata={
            "help": "cost of one block call in token-equivalents, used to decide merges", "ge": 0
        },
    )
    reuse_prefix: bool = field(
        default=True, metadata={"help": "compute only positions from each row's first change on"}
    )


@dataclass(frozen=True)
class Intervention:
    """Replace the activation at ``hook`` with ``source`` wherever ``mask`` is true.

    Both broadcast against the base run's activation at ``hook`` over the whole prompt, batch
    first (a batch axis of 1 broadcasts over the base sequences). A zero or mean ablation is a
    replacement whose source is zeros or the mean.
    """

    hook: str
    source: Tensor
    mask: Tensor


@dataclass(frozen=True)
class Row:
    """One configuration of a sweep: the interventions applied together."""

    interventions: tuple[Intervention, ...]


@dataclass(frozen=True)
class SweepStats:
    """What the engine ran: block calls, token-layers computed, and the least any schedule needs."""

    passes: int
    block_calls: int
    token_layers: int
    token_layers_needed: int
    rows_skipped: int


@dataclass(frozen=True)
class SweepOutput:
    """The readout of every row ``[row, batch, ...]`` (empty without a readout), the captured
    activations ``{hook: [row, batch, ...]}``, and how they were computed."""

    values: Tensor
    captured: dict[str, Tensor]
    stats: SweepStats


@dataclass
class BaseRun:
    """The cached run every row starts from: residual streams, keys/values and activations.

    ``resid[l]`` enters block ``l`` (``resid[n_layers]`` is the final residual stream);
    ``keys[l]``/``values[l]`` are what block ``l``'s attention caches (so a suffix can attend to
    the unchanged prefix); ``acts`` holds the base activation at every hook a row touches.
    ``answer_positions`` is ``[batch]`` (one read position per sequence) or ``[batch, answer]``;
    ``logits`` are read there, ``[batch, vocab]`` or ``[batch, answer, vocab]``.
    """

    tokens: Int[Tensor, "batch pos"]
    resid: list[Tensor]
    keys: list[Tensor]
    values: list[Tensor]
    acts: dict[str, Tensor]
    answer_positions: Int[Tensor, "batch ..."]
    logits: Float[Tensor, "batch ... vocab"]

    @property
    def batch(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def n_pos(self) -> int:
        return int(self.tokens.shape[1])

    @classmethod
    @torch.no_grad()
    @shape_checked
    def record(
        cls,
        lm: LensModel,
        tokens: Int[Tensor, "batch pos"],
        *,
        answer_positions: int | Int[Tensor, " batch"] | Int[Tensor, "batch answer"] = -1,
        capture: Sequence[str] = (),
        interventions: Sequence[Intervention] = (),
    ) -> BaseRun:
        """Run ``tokens`` once and cache it, with ``interventions`` applied to every sequence
        (e.g. noised subject embeddings for causal tracing; any hook, embeddings included)."""
        model, n_layers = lm.model, lm.cfg.n_layers
        tokens = tokens.to(lm.device)
        entries = [_empty_entry(lm, tokens.shape[0]) for _ in range(n_layers)]
        names = [hook_name("resid_pre", layer) for layer in range(n_layers)]
        with lm.hooks.hooks(fwd=[_replacing(i.hook, i.mask, i.source) for i in interventions],
                            label="sweep base"), \
                lm.hooks.capture(sorted(set(names) | set(capture))) as cap:
            resid = model(tokens, stop_at_layer=0)
            for layer, block in enumerate(model.blocks):
                resid = block(resid, past_kv_cache_entry=entries[layer])
        answers = _answer_positions(answer_positions, tokens.shape)
        logits = _read_logits(lm, resid, answers.to(lm.device))
        return cls(
            tokens=tokens,
            resid=[cap[name] for name in names] + [resid],
            keys=[e.past_keys for e in entries],
            values=[e.past_values for e in entries],
            acts={name: cap[name] for name in capture},
            answer_positions=answers,
            logits=logits,
        )


def _empty_entry(lm: LensModel, batch: int) -> TransformerLensKeyValueCacheEntry:
    """An empty cache entry whose head count matches the keys attention will append: one per
    query head when TransformerLens ungroups grouped-query attention (edge patching does)."""
    entry = TransformerLensKeyValueCacheEntry.init_cache_entry(lm.model.cfg, lm.device, batch)
    if lm.model.cfg.ungroup_grouped_query_attention:
        shape = (batch, 0, lm.cfg.n_heads, lm.cfg.d_head)
        entry.past_keys = entry.past_keys.new_empty(shape)
        entry.past_values = entry.past_values.new_empty(shape)
    return entry


def _answer_positions(positions: int | Tensor, shape: torch.Size) -> Tensor:
    batch, n_pos = shape
    if isinstance(positions, int):
        answers = torch.full((batch,), positions, dtype=torch.long)
    elif torch.as_tensor(positions).ndim == 2:
        answers = torch.as_tensor(positions).to(torch.long).expand(batch, -1)
    else:
        answers = torch.as_tensor(positions).to(torch.long).reshape(-1).expand(batch)
    if ((answers >= n_pos) | (answers < -n_pos)).any():
        raise UserInputError(f"answer positions {answers.tolist()} out of range for {n_pos} tokens")
    return (answers % n_pos).to(torch.long)


def _read_logits(lm: LensModel, resid: Tensor, answers: Tensor) -> Tensor:
    """Logits at ``answers`` (``[seq]`` or ``[seq, answer]``) of residual streams ``[seq, pos, d]``:
    ``[seq, vocab]`` or ``[seq, answer, vocab]``. Only those positions are unembedded."""
    rows = torch.arange(resid.shape[0], device=resid.device)
    if answers.ndim == 1:
        return lm.unembed(resid[rows, answers][:, None])[:, 0]
    return lm.unembed(resid[rows[:, None], answers])


# ----------------------------------------------------------------------------- planning


@dataclass(frozen=True)
class PlannedRow:
    """A row with where it starts: its first intervened layer and first changed position."""

    index: int
    row: Row
    layer: int
    prefix: int


@dataclass
class Pass:
    """Rows that run together: they share a prefix length and join at their own layers."""

    rows: list[PlannedRow] = dataclasses.field(default_factory=list)
    prefix: int = 0

    def cost(self, n_layers: int, n_pos: int, batch: int, overhead: float) -> float:
        layers = sorted(r.layer for r in self.rows)
        width = batch * (n_pos - self.prefix)
        return sum(overhead + width * sum(1 for start in layers if start <= layer)
                   for layer in range(layers[0], n_layers + 1))


def _start_layer(hook: str, n_layers: int) -> int:
    layer = layer_of(hook)
    if layer is not None:
        return layer
    if hook.startswith("ln_final."):
        return n_layers  # after every block: only the final norm and unembedding run
    raise ValueError(
        f"the sweep engine resumes inside the blocks; {hook!r} is outside them. Intervene at "
        f"{hook_name('resid_pre', 0)!r} instead of the embeddings."
    )


def _first_change(base: BaseRun, item: Intervention, keep_all: bool = False) -> int:
    """First position where the intervention changes the base activation (n_pos if nowhere);
    with ``keep_all``, the first position its mask selects, whether the value changes or not."""
    act = base.acts[item.hook]
    axis = layout_of(item.hook).position_axis
    mask = item.mask.to(act.device)
    if keep_all:
        changed = mask
    else:
        changed = mask & (item.source.detach().to(device=act.device, dtype=act.dtype) != act)
    changed = changed.expand(torch.broadcast_shapes(changed.shape, act.shape))
    per_position = changed.movedim(axis, 0).reshape(act.shape[axis], -1).any(-1)
    hits = per_position.nonzero()
    return int(hits[0]) if hits.numel() else base.n_pos


def _plan_rows(base: BaseRun, rows: Sequence[Row], n_layers: int, reuse_prefix: bool, *,
               reads_logits: bool, every_position: bool, keep_all: bool = False) -> list[PlannedRow]:
    """Each row's start layer and first changed position. When only the answer positions are
    read, a row that changes nothing up to them is dropped; with captures, every position counts.
    With ``keep_all`` no row is dropped: a row starts where its masks first select a position,
    even if its sources equal the base there (integrated gradients' last step is the base run,
    and its gradient is still wanted)."""
    planned = []
    last_needed = base.n_pos - 1 if every_position else int(base.answer_positions.max())
    # The readout needs the answer positions computed, so no prefix may cover them.
    first_needed = int(base.answer_positions.min()) if reads_logits else base.n_pos
    for index, row in enumerate(rows):
        if not row.interventions:
            raise ValueError(f"row {index} has no intervention")
        changes = [(_first_change(base, item, keep_all), _start_layer(item.hook, n_layers))
                   for item in row.interventions]
        prefix = min(first for first, _ in changes)
        if prefix > last_needed and not keep_all:
            continue  # nothing the readout sees changes: the row reads the base run
        if prefix >= base.n_pos:
            raise ValueError(f"row {index} selects no position: give each intervention a mask "
                             "that is true somewhere")
        prefix = min(prefix, first_needed) if reuse_prefix else 0
        # Interventions below the first one that changes anything see base inputs and write
        # base values (e.g. heads frozen at their clean output): the row can start above them.
        layer = min(start for first, start in changes if first < base.n_pos)
        planned.append(PlannedRow(index, row, layer, prefix))
    return planned


def plan_passes(planned: Sequence[PlannedRow], n_layers: int, n_pos: int, batch: int,
                config: SweepConfig) -> list[Pass]:
    """Group rows into passes: one per prefix length, split by the token budget, then merge
    passes of neighbouring prefixes where the block calls saved outweigh the extra positions."""
    by_prefix: dict[int, list[PlannedRow]] = {}
    for item in sorted(planned, key=lambda r: (r.prefix, r.layer)):
        by_prefix.setdefault(item.prefix, []).append(item)
    passes: list[Pass] = []
    for prefix in sorted(by_prefix, reverse=True):
        per_row = batch * (n_pos - prefix)
        limit = max(1, config.token_budget // per_row)
        group = by_prefix[prefix]
        for start in range(0, len(group), limit):
            candidate = Pass(group[start:start + limit], prefix)
            if passes and _merge_pays(passes[-1], candidate, n_layers, n_pos, batch, config):
                passes[-1] = Pass(passes[-1].rows + candidate.rows, prefix)
            else:
                passes.append(candidate)
    for each in passes:
        each.rows.sort(key=lambda r: r.layer)
    return passes


def _merge_pays(left: Pass, right: Pass, n_layers: int, n_pos: int, batch: int,
                config: SweepConfig) -> bool:
    merged = Pass(left.rows + right.rows, min(left.prefix, right.prefix))
    if len(merged.rows) * batch * (n_pos - merged.prefix) > config.token_budget:
        return False
    cost = lambda p: p.cost(n_layers, n_pos, batch, config.pass_overhead_tokens)  # noqa: E731
    return cost(merged) < cost(left) + cost(right)


# ----------------------------------------------------------------------------- running


def _entry(base: BaseRun, layer: int, prefix: int, n_rows: int) -> TransformerLensKeyValueCacheEntry:
    """Frozen keys/values of the unchanged prefix, repeated for each row of the pass."""
    keys = base.keys[layer][:, :prefix].repeat(n_rows, 1, 1, 1)
    values = base.values[layer][:, :prefix].repeat(n_rows, 1, 1, 1)
    return TransformerLensKeyValueCacheEntry(past_keys=keys, past_values=values, frozen=True)


@shape_checked
def resume(lm: LensModel, base: BaseRun, prefix: int, n_rows: int, *, first_layer: int = 0,
           start: Tensor | None = None) -> Float[Tensor, "row_batch suffix d_model"]:
    """The final residual stream of ``n_rows`` copies of the base run, computed on positions
    ``prefix..`` of blocks ``first_layer..`` only, attending to the base run's keys and values
    before ``prefix``.

    For a caller whose own hooks change the run (edge patching, the integrated-gradients pass):
    they fire on the suffix positions of the blocks run, with ``n_rows × base.batch`` rows; a
    caller starting above layer 0 must change nothing below ``first_layer``. ``start`` replaces
    the stream entering ``first_layer`` (``[n_rows × batch, suffix, d_model]``; default the base
    run's).
    """
    if not 0 <= prefix <= int(base.answer_positions.min()):
        raise ValueError(f"a prefix of {prefix} positions must end before the first answer "
                         f"position {int(base.answer_positions.min())}")
    if start is None:
        start = base.resid[first_layer][:, prefix:].repeat(n_rows, 1, 1)
    resid = start
    for layer in range(first_layer, lm.cfg.n_layers):
        entry = _entry(base, layer, prefix, n_rows) if prefix else None
        resid = lm.model.blocks[layer](resid, past_kv_cache_entry=entry)
    return resid


def _suffix(tensor: Tensor, axis: int, prefix: int) -> Tensor:
    """The positions ``prefix..`` of a tensor (a broadcast axis of size 1 stays as it is)."""
    return tensor if tensor.shape[axis] == 1 else tensor.narrow(axis, prefix, tensor.shape[axis] - prefix)


def _pass_hooks(base: BaseRun, run: Pass) -> list[tuple[str, HookFn]]:
    """One replacing hook per intervened hook name, covering every row of the pass.

    Rows join the batch in order of their start layer, so when a hook at layer ``l`` fires the
    batch holds exactly the rows that started at or below ``l``, each ``base.batch`` sequences.
    """
    per_hook: dict[str, list[tuple[int, Intervention]]] = {}
    n_layers = len(base.keys)
    for slot, planned in enumerate(run.rows):
        for item in planned.row.interventions:
            # Interventions below the row's start layer never fire for it: they are identities
            # (see _plan_rows), and the row is not in the batch yet.
            if _start_layer(item.hook, n_layers) >= planned.layer:
                per_hook.setdefault(item.hook, []).append((slot, item))
    hooks = []
    for name, items in per_hook.items():
        axis = layout_of(name).position_axis
        act = _suffix(base.acts[name], axis, run.prefix)
        here = _start_layer(name, n_layers)
        n_present = sum(1 for r in run.rows if r.layer <= here)
        mask = torch.zeros((n_present, *act.shape), dtype=torch.bool, device=act.device)
        source = act.unsqueeze(0).repeat(n_present, *[1] * act.ndim)
        for slot, item in items:
            chosen = _suffix(item.mask.to(act.device), axis, run.prefix).expand(act.shape)
            mask[slot] |= chosen
            fill = _suffix(item.source.to(device=act.device, dtype=act.dtype), axis, run.prefix)
            source[slot] = torch.where(chosen, fill.expand(act.shape), source[slot])
        hooks.append(_replacing(name, mask.flatten(0, 1), source.flatten(0, 1)))
    return hooks


def _replacing(name: str, mask: Tensor, source: Tensor) -> tuple[str, HookFn]:
    """The engine's one intervention hook: ``source`` where ``mask``, the activation elsewhere."""

    def replace(activation: Tensor, hook: HookPoint) -> Tensor | None:
        return torch.where(mask.to(activation.device), source.to(activation), activation)

    return name, replace


def _run_pass(lm: LensModel, base: BaseRun, run: Pass, readout: Readout | None,
              capture: Sequence[str]) -> tuple[Tensor | None, dict[str, Tensor], int]:
    """Run one pass: the readout ``[row, batch, ...]`` (None without a readout), the captured
    activations ``[row, batch, ...]`` over the whole prompt, and the token-layers computed."""
    model, n_layers, prefix = lm.model, lm.cfg.n_layers, run.prefix
    starts = [r.layer for r in run.rows]
    stop = n_layers if readout is not None else 1 + max(_start_layer(h, n_layers) for h in capture)
    resid: Tensor | None = None
    token_layers = 0
    with lm.hooks.hooks(fwd=_pass_hooks(base, run), label="sweep pass"), \
            lm.hooks.capture(capture) as cap:
        for layer in range(starts[0], min(stop, n_layers) + 1):
            joining = sum(1 for s in starts if s == layer)
            if joining:
                fresh = base.resid[layer][:, prefix:].repeat(joining, 1, 1)
                resid = fresh if resid is None else torch.cat([resid, fresh])
            if layer == min(stop, n_layers):
                break
            assert resid is not None
            entry = _entry(base, layer, prefix, resid.shape[0] // base.batch) if prefix else None
            resid = model.blocks[layer](resid, past_kv_cache_entry=entry)
            assert resid is not None
            token_layers += resid.shape[0] * resid.shape[1]
        values = None
        if readout is not None:
            assert resid is not None
            answers = base.answer_positions - prefix
            answers = answers.repeat(len(run.rows), *[1] * (answers.ndim - 1))
            logits = _read_logits(lm, resid, answers)
            values = readout(logits.reshape(len(run.rows), base.batch, *logits.shape[1:]))
    # A hook below every row's start layer fires in no pass: it keeps the base activation.
    captured = {name: _whole(base, name, cap[name], len(run.rows), prefix) for name in capture if name in cap}
    return values, captured, token_layers


def _whole(base: BaseRun, name: str, computed: Tensor, n_rows: int, prefix: int) -> Tensor:
    """Per-row activations over the whole prompt: the base run's, with each present row's
    computed suffix written in (rows that join above the hook keep the base activation)."""
    axis = layout_of(name).position_axis
    whole = base.acts[name].unsqueeze(0).repeat(n_rows, *[1] * base.acts[name].ndim)
    present = computed.shape[0] // base.batch
    suffix = computed.reshape(present, base.batch, *computed.shape[1:])
    whole[:present].narrow(axis + 1, prefix, base.n_pos - prefix).copy_(suffix)
    return whole


def run_rows(
    lm: LensModel,
    base: BaseRun,
    rows: Sequence[Row],
    readout: Readout | None,
    config: SweepConfig | None = None,
    *,
    capture: Sequence[str] = (),
    grad: bool = False,
) -> SweepOutput:
    """Run every row against ``base`` and read each row's logits at the answer positions.

    Reads the model only; every hook is removed on return or error. A row whose changes cannot
    reach the answer position reads the base run without a forward pass (unless ``grad``).

    Args:
        lm: the model.
        base: the cached base run (:meth:`BaseRun.record`, capturing every hook the rows touch).
        rows: the configurations; each intervention's hook must lie inside the blocks (or be the
            final norm's).
        readout: ``[row, batch, vocab] -> [row, batch, ...]``; None when only ``capture`` is
            wanted (each pass then stops after the highest captured layer).
        config: batching settings.
        capture: hooks whose activation each row produces is returned (captured in the base
            run too); e.g. the receivers' queries of path patching, or probe features.
        grad: run with autograd on and keep every row, even one equal to the base run, so the
            values carry the graph back to the rows' sources: give sources that require grad and
            call ``torch.autograd.grad`` on the values (integrated gradients). Each row still
            starts at its own layer and first masked position, against the cached prefix.

    Returns:
        A :class:`SweepOutput` with values ``[row, batch, ...]`` and the captures ``{hook: [row,
        batch, ...]}`` over the whole prompt.
    """
    config = config or SweepConfig()
    if readout is None and not capture:
        raise ValueError("give a readout, hooks to capture, or both")
    missing = sorted(({i.hook for r in rows for i in r.interventions} | set(capture)) - set(base.acts))
    if missing:
        raise ValueError(f"the base run did not capture {missing}: pass them to BaseRun.record(capture=...)")
    with torch.set_grad_enabled(grad):
        return _run_all(lm, base, rows, readout, config, capture, grad)


def _run_all(lm: LensModel, base: BaseRun, rows: Sequence[Row], readout: Readout | None,
             config: SweepConfig, capture: Sequence[str], grad: bool) -> SweepOutput:
    n_layers = lm.cfg.n_layers
    planned = _plan_rows(base, rows, n_layers, config.reuse_prefix, reads_logits=readout is not None,
                         every_position=bool(capture), keep_all=grad)
    passes = plan_passes(planned, n_layers, base.n_pos, base.batch, config)
    base_value = readout(base.logits[None])[0].detach() if readout is not None else torch.empty(0)
    values = base_value.unsqueeze(0).repeat(len(rows), *[1] * base_value.ndim)
    captured = {name: base.acts[name].unsqueeze(0).repeat(len(rows), *[1] * base.acts[name].ndim)
                for name in capture}
    block_calls = token_layers = 0
    for run in passes:
        out, caps, computed = _run_pass(lm, base, run, readout, capture)
        index = [r.index for r in run.rows]
        if out is not None:
            values[index] = out.to(values.dtype)
        for name, value in caps.items():
            captured[name][index] = value
        token_layers += computed
        block_calls += n_layers - run.rows[0].layer
    needed = sum((n_layers - r.layer) * base.batch * (base.n_pos - r.prefix) for r in planned)
    stats = SweepStats(passes=len(passes), block_calls=block_calls, token_layers=token_layers,
                       token_layers_needed=needed, rows_skipped=len(rows) - len(planned))
    logger.debug("sweep: %s", stats)
    return SweepOutput(values=values, captured=captured, stats=stats)


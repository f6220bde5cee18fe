"""Path patching: how much of a metric flows from a sender through chosen receivers' inputs.

Wang et al. 2022 ("Interpretability in the Wild", §3.1) and Goldowsky-Dill et al. 2023: step 1 runs
the clean prompt with one sender's output taken from the corrupted run while every other head (and
MLP) is frozen at its clean output, and records the receivers' inputs; step 2 writes those inputs
into the clean run and reads the metric. A planner over the sweep engine, batched over senders.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import torch
from jaxtyping import Int
from torch import Tensor

from lmsci_mi.circuits.metrics import Metric, Normalised, pair_metric
from lmsci_mi.circuits.patching import align_pairs, resolve_metric
from lmsci_mi.config import Config, config
from lmsci_mi.data.pairs import PairsArg, accepts_pairs
from lmsci_mi.errors import UserInputError
from lmsci_mi.hooks import Positions, selection_mask
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import Head, hook_name
from lmsci_mi.sweep import BaseRun, Intervention, Readout, Row, SweepConfig, SweepStats, run_rows

if TYPE_CHECKING:
    from pathlib import Path

    from matplotlib.figure import Figure

    from lmsci_mi.model import LensModel

__all__ = [
    "RECEIVER_INPUTS",
    "MLPNode",
    "PathPatchingConfig",
    "PathPatchingResult",
    "PathPlan",
    "Receiver",
    "parse_receiver",
    "parse_sender",
    "path_patch",
    "path_patch_values",
    "plan_paths",
]

RECEIVER_INPUTS: tuple[str, ...] = ("q", "k", "v", "mlp", "logits")
"""What a receiver reads: a head's query, key or value input, an MLP's input, or the logits."""


@dataclass(frozen=True, order=True)
class MLPNode:
    """One MLP block as a node of the graph. It prints ``MLP3``."""

    layer: int

    def __str__(self) -> str:
        return f"MLP{self.layer}"


Sender = Head | MLPNode


@dataclass(frozen=True)
class Receiver:
    """A receiver: a node and the input through which it reads the senders.

    ``node`` is a head (input ``q``, ``k`` or ``v``), an MLP (input ``mlp``) or None for the
    logits (input ``logits``). Under grouped-query attention a head's ``k``/``v`` input is its
    key/value head's, shared with the other query heads of its group.
    """

    node: Head | MLPNode | None
    input: str

    def __str__(self) -> str:
        if self.node is None:
            return "logits"
        if isinstance(self.node, MLPNode) and self.input == "mlp":
            return str(self.node)
        return f"{self.node}.{self.input}"


_HEAD = re.compile(r"^L(\d+)\.H(\d+)(?:[.:](\w+))?$")
_MLP = re.compile(r"^MLP(\d+)(?:[.:](\w+))?$", re.IGNORECASE)
_FORMS = "write heads 'L9.H6', MLPs 'MLP3'"


def parse_sender(node: str | Sender | tuple[int, int]) -> Sender:
    """A sender from ``"L9.H6"``, ``"MLP3"``, a :class:`Head`, an :class:`MLPNode` or ``(layer, head)``.

    >>> parse_sender("L1.H2"), parse_sender("MLP0")
    (Head('L1.H2'), MLPNode(layer=0))
    """
    if isinstance(node, Head | MLPNode):
        return node
    if isinstance(node, tuple):
        return Head.parse(node)
    text = node.strip()
    if (match := _MLP.match(text)) and match.group(2) is None:
        return MLPNode(int(match.group(1)))
    if (match := _HEAD.match(text)) and match.group(3) is None:
        return Head(int(match.group(1)), int(match.group(2)))
    raise UserInputError(f"sender {node!r} is not a head or an MLP; {_FORMS}")


def parse_receiver(node: str | Receiver, head_input: str = "q") -> Receiver:
    """A receiver from ``"L9.H6.q"`` (``.k``, ``.v``; a bare ``"L9.H6"`` reads ``head_input``),
    ``"MLP3"`` or ``"logits"``.

    >>> str(parse_receiver("L1.H0.k")), str(parse_receiver("L1.H0")), str(parse_receiver("MLP0"))
    ('L1.H0.k', 'L1.H0.q', 'MLP0')
    """
    if isinstance(node, Receiver):
        return parse_receiver(str(node)) if node.node is not None else node
    text = node.strip()
    if text.lower() == "logits":
        return Receiver(None, "logits")
    head, mlp = _HEAD.match(text), _MLP.match(text)
    given = head.group(3) if head else mlp.group(2) if mlp else None
    wanted = ("q", "k", "v") if head else ("mlp",)
    if given is not None and given not in wanted:
        which = "a head reads q, k or v" if head else "an MLP reads its input, 'mlp'"
        raise UserInputError(
            f"receiver input {given!r} of {node!r} is not one of {RECEIVER_INPUTS} "
            f"that fits: {which} (e.g. 'L9.H6.q', 'MLP3', 'logits')"
        )
    if head:
        return Receiver(Head(int(head.group(1)), int(head.group(2))), given or head_input)
    if mlp:
        return Receiver(MLPNode(int(mlp.group(1))), "mlp")
    raise UserInputError(
        f"receiver {node!r} is not a head input, an MLP or the logits; {_FORMS} with "
        "the input read, 'L9.H6.q' / '.k' / '.v', 'MLP3' for an MLP's input, or 'logits'"
    )


@config
class PathPatchingConfig(Config):
    """What path patching freezes and how it scores."""

    head_input: str = field(
        default="q",
        metadata={
            "help": "input of a head receiver given without one ('L9.H6')",
            "choices": ("q", "k", "v"),
        },
    )
    freeze: Literal["heads_and_mlps", "heads"] = field(
        default="heads_and_mlps",
        metadata={
            "help": "frozen at their clean output in step 1; 'heads' recomputes the MLPs, "
            "as Wang et al.'s IOI paper does"
        },
    )
    per_receiver: bool = field(
        default=False,
        metadata={"help": "one value per (sender, receiver), not the receivers together"},
    )
    normalise: bool = field(default=False, metadata={"help": "0 = corrupted run, 1 = clean run"})
    answer_position: int = field(default=-1, metadata={"help": "position whose logits are scored"})
    sweep: SweepConfig = field(default_factory=SweepConfig, metadata={"cli": False})


@dataclass(frozen=True)
class PathPlan:
    """Checked senders and receivers and the hooks each step touches.

    Attributes:
        frozen: step 1's intervened hooks in layer order: every head's ``hook_z`` (and MLP's
            ``hook_mlp_out``) that some receiver can read, the senders' own among them.
        captures: the receivers' input hooks (none when the receiver is the logits).
        to_logits: the receiver is the logits, so step 1 reads the metric itself.
    """

    senders: tuple[Sender, ...]
    receivers: tuple[Receiver, ...]
    frozen: tuple[str, ...]
    captures: tuple[str, ...]
    to_logits: bool

    @property
    def base_hooks(self) -> list[str]:
        """What the clean base run must capture."""
        return [*self.frozen, *self.captures]

    @property
    def sender_hooks(self) -> list[str]:
        """What the corrupted run must capture."""
        return sorted({_sender_hook(s) for s in self.senders})


def _order(node: Sender) -> int:
    """Position in the forward order: heads of layer l, then its MLP."""
    return 2 * node.layer + (1 if isinstance(node, MLPNode) else 0)


def _reads_below(receiver: Receiver, n_layers: int, parallel: bool) -> int:
    """The receiver reads every node whose order is below this (GPT-J's parallel MLP reads the
    block's input, as its heads do)."""
    if receiver.node is None:
        return 2 * n_layers
    node = receiver.node
    return 2 * node.layer + (1 if isinstance(node, MLPNode) and not parallel else 0)


def _sender_hook(node: Sender) -> str:
    return (
        hook_name("z", node.layer) if isinstance(node, Head) else hook_name("mlp_out", node.layer)
    )


def _receiver_hook(receiver: Receiver) -> str:
    assert receiver.node is not None
    site = "mlp_in_normed" if receiver.input == "mlp" else receiver.input
    return hook_name(site, receiver.node.layer)


def _check_node(lm: LensModel, node: Head | MLPNode | None, what: str) -> None:
    cfg = lm.cfg
    if node is None:
        return
    if not 0 <= node.layer < cfg.n_layers:
        raise UserInputError(
            f"{what} {node}: layer {node.layer} out of range, the model has {cfg.n_layers}"
        )
    if isinstance(node, Head) and not 0 <= node.head < cfg.n_heads:
        raise UserInputError(
            f"{what} {node}: head {node.head} out of range, the model has {cfg.n_heads} per layer"
        )
    if isinstance(node, MLPNode) and cfg.attn_only:
        raise UserInputError(f"{what} {node}: the model is attention-only and has no MLPs")


def plan_paths(
    lm: LensModel,
    senders: Sequence[str | Sender | tuple[int, int]] | None,
    receivers: Sequence[str | Receiver],
    config: PathPatchingConfig,
) -> PathPlan:
    """Check senders and receivers against the model and plan both steps (nothing runs).

    Args:
        lm: the model.
        senders: heads and MLPs; None for every head that some receiver can read.
        receivers: see :func:`parse_receiver`; the logits cannot be mixed with other receivers.
        config: the frozen set and the default head input.

    Returns:
        A :class:`PathPlan`.

    Raises:
        ValueError: an unknown or out-of-range node, a receiver input not in
            :data:`RECEIVER_INPUTS`, the logits mixed with other receivers, or a sender that
            no receiver can read (it is not below any of them).
    """
    cfg = lm.cfg
    parsed = tuple(dict.fromkeys(parse_receiver(r, config.head_input) for r in receivers))
    if not parsed:
        raise UserInputError("give at least one receiver, e.g. 'logits' or 'L9.H6.q'")
    for receiver in parsed:
        _check_node(lm, receiver.node, "receiver")
    to_logits = any(r.node is None for r in parsed)
    if to_logits and len(parsed) > 1:
        raise UserInputError(
            "the logits cannot be mixed with other receivers (patching the final "
            "stream would overwrite their effect); path patch to them separately"
        )
    parallel = bool(getattr(cfg, "parallel_attn_mlp", False))
    limit = max(_reads_below(r, cfg.n_layers, parallel) for r in parsed)
    if senders is None:
        senders = [Head(layer, h) for layer in range((limit + 1) // 2) for h in range(cfg.n_heads)]
    chosen = tuple(dict.fromkeys(parse_sender(s) for s in senders))
    if not chosen:
        raise UserInputError("give at least one sender, e.g. 'L0.H1' or 'MLP0'")
    for sender in chosen:
        _check_node(lm, sender, "sender")
    late = [str(s) for s in chosen if _order(s) >= limit]
    if late:
        raise UserInputError(
            f"senders {late} are not below any receiver, so they reach none of "
            f"them; senders must come before the receivers {[str(r) for r in parsed]}"
        )
    captures = () if to_logits else tuple(sorted({_receiver_hook(r) for r in parsed}))
    frozen = _frozen_hooks(limit, chosen, config.freeze == "heads_and_mlps" and not cfg.attn_only)
    return PathPlan(chosen, parsed, frozen, captures, to_logits)


def _frozen_hooks(limit: int, senders: tuple[Sender, ...], with_mlps: bool) -> tuple[str, ...]:
    """Every head output (and MLP output) of order below ``limit``, in forward order; an MLP
    sender's own output even when MLPs are recomputed."""
    names = []
    for order in range(limit):
        layer = order // 2
        if order % 2 == 0:
            names.append(hook_name("z", layer))
        elif with_mlps or MLPNode(layer) in senders:
            names.append(hook_name("mlp_out", layer))
    return tuple(names)


# --------------------------------------------------------------------------- the two steps


def _sender_rows(base: BaseRun, corrupted: dict[str, Tensor], plan: PathPlan) -> list[Row]:
    """Step 1, one row per sender: every frozen hook at its clean value, except the sender's
    output, taken from the corrupted run."""
    rows = []
    for sender in plan.senders:
        items = []
        own = _sender_hook(sender)
        for name in plan.frozen:
            source = base.acts[name]
            if name == own and isinstance(sender, Head):
                source = source.clone()
                source[:, :, sender.head] = corrupted[name][:, :, sender.head]
            elif name == own:
                source = corrupted[name]
            items.append(
                Intervention(name, source, torch.ones((1,) * source.ndim, dtype=torch.bool))
            )
        rows.append(Row(tuple(items)))
    return rows


def _head_index(lm: LensModel, receiver: Receiver) -> int | None:
    """The receiver's index on its hook's head axis (a key/value head under GQA)."""
    if not isinstance(receiver.node, Head):
        return None
    if receiver.input == "q":
        return receiver.node.head
    n_kv = getattr(lm.cfg, "n_key_value_heads", None) or lm.cfg.n_heads
    return receiver.node.head // (lm.cfg.n_heads // n_kv)


def _receiver_rows(
    lm: LensModel,
    base: BaseRun,
    captured: dict[str, Tensor],
    plan: PathPlan,
    per_receiver: bool,
    positions: Positions,
) -> list[Row]:
    """Step 2, one row per sender (and receiver): the receivers' inputs recorded in step 1,
    written into the clean run at ``positions``, receivers only."""
    groups = [[r] for r in plan.receivers] if per_receiver else [list(plan.receivers)]
    rows = []
    for index in range(len(plan.senders)):
        for group in groups:
            items = []
            for name in plan.captures:
                heads = [_head_index(lm, r) for r in group if _receiver_hook(r) == name]
                if not heads:
                    continue
                chosen = None if heads == [None] else sorted({h for h in heads if h is not None})
                mask = selection_mask(base.acts[name], name, positions, chosen)
                items.append(Intervention(name, captured[name][index], mask))
            rows.append(Row(tuple(items)))
    return rows


def _added(a: SweepStats, b: SweepStats) -> SweepStats:
    return SweepStats(*(x + y for x, y in zip(vars(a).values(), vars(b).values(), strict=True)))


@torch.no_grad()
def path_patch_values(
    lm: LensModel,
    plan: PathPlan,
    base: BaseRun,
    corrupted: dict[str, Tensor],
    readout: Readout,
    config: PathPatchingConfig,
    *,
    receiver_positions: Positions = None,
) -> tuple[Tensor, SweepStats]:
    """Both steps of path patching over a recorded clean run: the readout per row and prompt.

    The engine's batching applies to each step: a sender's row starts at its layer and computes
    only the positions from its first change on; the receivers' inputs are captured over the
    whole prompt. Reads the model only.

    Args:
        lm: the model.
        plan: from :func:`plan_paths`.
        base: the clean run, recorded with ``capture=plan.base_hooks``.
        corrupted: the corrupted run's activations at ``plan.sender_hooks``.
        readout: the engine's readout, ``[row, batch, vocab] -> [row, batch]``.
        config: ``per_receiver`` and batching.
        receiver_positions: where the receivers' inputs are written (None: every position).

    Returns:
        ``([sender * receiver, batch], stats)``: rows sender-major, one per receiver with
        ``per_receiver`` (the logits count as one receiver), and what the engine ran.
    """
    rows = _sender_rows(base, corrupted, plan)
    if plan.to_logits:
        out = run_rows(lm, base, rows, readout, config.sweep)
        return out.values, out.stats
    step1 = run_rows(lm, base, rows, None, config.sweep, capture=plan.captures)
    step2 = run_rows(
        lm,
        base,
        _receiver_rows(lm, base, step1.captured, plan, config.per_receiver, receiver_positions),
        readout,
        config.sweep,
    )
    return step2.values, _added(step1.stats, step2.stats)


# --------------------------------------------------------------------------- the result


@result_type
class PathPatchingResult(Result):
    """Path patching: the metric with each sender's corrupted output reaching only the receivers.

    ``values`` is ``[sender]`` (the receivers together) or ``[sender, receiver]``
    (``per_receiver``), averaged over prompt pairs; ``per_prompt`` adds a trailing pair axis.

    Attributes:
        per_prompt: ``values`` before the average over pairs.
        receivers: the receivers, as written (``L9.H6.q``, ``MLP3``, ``logits``).
        clean_value / corrupted_value: the metric on the unpatched runs, pair-averaged, in the
            metric's own units.
        normalised: whether ``values`` are normalised (0 = corrupted, 1 = clean).
        metric: a description of the metric.
        work: what the sweep engine ran, both steps together.
    """

    per_prompt: Tensor
    receivers: tuple[str, ...]
    clean_value: float
    corrupted_value: float
    normalised: bool
    metric: str
    work: SweepStats

    @property
    def effects(self) -> Tensor:
        """``values`` minus the clean run's value: how much each path carries (negative when
        the corrupted sender lowers the metric)."""
        return self.values - (1.0 if self.normalised else self.clean_value)

    def top(self, k: int = 10) -> tuple[tuple[Head | str, float], ...]:
        """The ``k`` paths with the largest absolute effect as ``(sender, value)``, largest
        first; the key is a :class:`Head` for a head sender on a ``[sender]`` result, else the
        label (``"MLP3"``, ``"L0.H1 → L9.H6.q"``)."""
        if k < 1:
            raise UserInputError(f"k must be at least 1, not {k}")
        flat = self.effects.flatten()
        senders, receivers = self.axis_labels(0), self.receivers
        out: list[tuple[Head | str, float]] = []
        for index in flat.abs().argsort(descending=True)[:k].tolist():
            value = float(self.values.flatten()[index])
            if self.values.ndim == 2:
                sender, receiver = divmod(index, self.values.shape[1])
                out.append((f"{senders[sender]} → {receivers[receiver]}", value))
                continue
            label = senders[index]
            out.append((Head.parse(label) if _HEAD.match(label) else label, value))
        return tuple(out)

    def summary(self, rows: int = 10) -> str:
        """The clean and corrupted values and the ``rows`` strongest paths."""
        lines = [
            f"path patching into {', '.join(self.receivers)} on {self.meta.model}: "
            f"{self.metric} clean {self.clean_value:.3f}, corrupted {self.corrupted_value:.3f}"
            f"{' (values normalised)' if self.normalised else ''}"
        ]
        lines += [f"  {key!s:>24}: {value:+.4f}" for key, value in self.top(rows)]
        return "\n".join(lines)

    def plot(self, path: str | Path | None = None, *, title: str | None = None) -> Figure:
        """The effect of each path: a (layer × head) heatmap when every sender is a head, a
        sender × receiver heatmap with ``per_receiver``, bars otherwise."""
        from matplotlib.figure import Figure

        from lmsci_mi.viz.plots import heatmap, plot_bars, save_figure

        title = title or f"path patching into {', '.join(self.receivers)[:60]} — {self.meta.model}"
        senders = self.axis_labels(0)
        heads = [Head.parse(s) for s in senders if _HEAD.match(s)]
        if self.values.ndim == 1 and len(heads) == len(senders) > 1:
            grid = torch.zeros(max(h.layer for h in heads) + 1, max(h.head for h in heads) + 1)
            for h, effect in zip(heads, self.effects.tolist(), strict=True):
                grid[h.layer, h.head] = effect
            fig = Figure(
                figsize=(max(5, 0.6 * grid.shape[1] + 2), max(4, 0.25 * grid.shape[0] + 1.5))
            )
            heatmap(
                fig.subplots(),
                grid,
                row_labels=[str(i) for i in range(grid.shape[0])],
                col_labels=Head.axis_labels(grid.shape[1]),
                row_name="sender layer",
                col_name="sender head",
                title=title + "\n(effect; heads not swept 0)",
            )
            fig.tight_layout()
        elif self.values.ndim == 2:
            fig = Figure(
                figsize=(max(5, 0.5 * len(self.receivers) + 3), max(4, 0.25 * len(senders) + 1.5))
            )
            heatmap(
                fig.subplots(),
                self.effects,
                row_labels=senders,
                col_labels=list(self.receivers),
                row_name="sender",
                col_name="receiver",
                title=title + " (effect)",
            )
            fig.tight_layout()
        else:
            fig = plot_bars(
                senders,
                self.effects.tolist(),
                title=title,
                value_label="effect on the metric (patched − clean)",
            )
        if path is not None:
            save_figure(fig, path)
        return fig


def _corrupted_run(
    lm: LensModel, tokens: Tensor, plan: PathPlan, base: BaseRun
) -> tuple[dict[str, Tensor], Tensor]:
    """The senders' corrupted outputs, and the corrupted logits at the answer positions."""
    with lm.hooks.capture(plan.sender_hooks) as cap:
        resid = lm.model(tokens, stop_at_layer=lm.cfg.n_layers)
    rows = torch.arange(resid.shape[0], device=resid.device)
    logits = lm.unembed(resid[rows, base.answer_positions.to(resid.device)])
    return {name: cap[name] for name in plan.sender_hooks}, logits


@accepts_pairs(1)
@torch.no_grad()
def path_patch(
    lm: LensModel,
    pairs: PairsArg,
    metric: Metric | Literal["kl"] | None = None,
    senders: Sequence[str | Sender | tuple[int, int]] | None = None,
    receivers: Sequence[str | Receiver] = ("logits",),
    config: PathPatchingConfig | None = None,
    *,
    answer_positions: int | Int[Tensor, " pair"] | None = None,
    receiver_positions: Positions = None,
) -> PathPatchingResult:
    """Path patching from each sender to the receivers, batched over senders.

    Step 1 runs the clean prompt with the sender's output (``hook_z`` of a head,
    ``hook_mlp_out`` of an MLP) from the corrupted run and every other head, and MLP unless
    ``freeze="heads"``, frozen at its clean output, recording the receivers' inputs; step 2
    writes them into the clean run (``receiver_positions`` only) and scores the metric. To the
    logits, step 1 scores directly: the sender's direct effect through the final norm. A head's
    query is a function of its query input only, so ``hook_q`` stands for the q input (likewise
    k, v); an MLP's input is ``ln2.hook_normalized``. Reads the model only.

    Args:
        lm: the model.
        pairs: :class:`~lmsci_mi.data.pairs.PromptPairs` (or token ids), of one token length;
            ``path_patch(lm, clean, corrupted, metric, ...)`` is deprecated, for one release.
        metric: ``[*config, pair, vocab] -> [*config, pair]`` at the answer position, ``"kl"``
            (KL to the clean run), or None: each pair's logit difference (``LogitDiff.of_pairs``).
        senders: heads and MLPs (``"L0.H1"``, ``"MLP0"``); None for every head below the
            receivers.
        receivers: head inputs (``"L1.H0.q"``, ``.k``, ``.v``), MLPs (``"MLP1"``) or
            ``"logits"`` (alone).
        config: see :class:`PathPatchingConfig`.
        answer_positions: one per pair (overrides the pairs' own and ``config.answer_position``).
        receiver_positions: where receivers' inputs are patched (int, one per pair, a mask, or
            None for every position).

    Returns:
        A :class:`PathPatchingResult`.

    Raises:
        ValueError: see :func:`plan_paths`; clean and corrupted prompts of different lengths.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.data.pairs import PromptPairs
    >>> lm = load_model("toy-2l")
    >>> pairs = PromptPairs("Mary and John: John gave it to", "Mary and John: Mary gave it to",
    ...                     answers=lm.token_id(" Mary"), wrongs=lm.token_id(" John"))
    >>> res = path_patch(lm, pairs, senders=["L0.H1", "MLP0"], receivers=["L1.H2.q"])
    >>> res.axes, res.axis_labels(0), res.receivers
    (('sender',), ['L0.H1', 'MLP0'], ('L1.H2.q',))
    """
    cfg = config or PathPatchingConfig()
    aligned = align_pairs(lm, pairs, None, cfg.answer_position)
    plan = plan_paths(lm, senders, receivers, cfg)
    lm.hooks.resolve(plan.base_hooks + plan.sender_hooks)  # fail before running anything
    answers = aligned.clean_answers if answer_positions is None else answer_positions
    base = BaseRun.record(lm, aligned.clean, answer_positions=answers, capture=plan.base_hooks)
    corrupted_acts, corrupted_logits = _corrupted_run(lm, aligned.corrupted, plan, base)
    raw = resolve_metric(pair_metric(metric, pairs), base.logits)
    scorer = Normalised(raw, base.logits, corrupted_logits) if cfg.normalise else raw
    readout: Readout = lambda logits: scorer(logits).float()  # noqa: E731
    values, stats = path_patch_values(
        lm, plan, base, corrupted_acts, readout, cfg, receiver_positions=receiver_positions
    )
    shape = [len(plan.senders)] + ([len(plan.receivers)] if cfg.per_receiver else [])
    per_prompt = values.cpu().reshape(*shape, -1)
    return PathPatchingResult(
        values=per_prompt.mean(-1),
        axes=("sender", "receiver")[: len(shape)],
        labels=(tuple(map(str, plan.senders)), tuple(map(str, plan.receivers)))[: len(shape)],
        meta=lm.meta(aligned.prompts, data_source=aligned.source, params=cfg.params()),
        per_prompt=per_prompt,
        receivers=tuple(map(str, plan.receivers)),
        clean_value=float(raw(base.logits).float().mean()),
        corrupted_value=float(raw(corrupted_logits).float().mean()),
        normalised=cfg.normalise,
        metric=repr(raw),
        work=stats,
    )

"""The indirect-object-identification circuit (Wang et al. 2022, "Interpretability in the Wild").

Finds name movers and negative name movers (direct logit attribution to IO − S at END, attention
from END to IO and S), S-inhibition heads (path patching from the ABC run into the name movers'
queries), induction and duplicate-token heads (attention at S2) and previous-token heads (at S1+1),
then measures faithfulness by mean-ablating every head outside the circuit over the ABC prompts.
The DLA comes from :func:`lmsci_mi.lenses.logit_contributions` (a one-way use of the lenses'
public API: the lenses know nothing of IOI).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float
from torch import Tensor

from lmsci_mi.circuits.ablation import all_heads, head_means, mean_ablated_logits
from lmsci_mi.circuits.heads import head_axis_labels, top_heads
from lmsci_mi.circuits.path_patching import (
    PathPatchingConfig,
    Receiver,
    path_patch_values,
    plan_paths,
)
from lmsci_mi.config import NOT_IN_NOTES, Config, config, paper
from lmsci_mi.data.ioi import IOIBatch, IOIDataset, ioi_dataset
from lmsci_mi.data.pairs import PromptPairs
from lmsci_mi.errors import UnknownNameError, UserInputError
from lmsci_mi.lenses.dla import direct_logit_attribution, dla_hook_names, logit_contributions
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import Head, hook_name
from lmsci_mi.stats import standard_error
from lmsci_mi.sweep import BaseRun, SweepConfig

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "IOI_ROLES",
    "CircuitHead",
    "IOICircuit",
    "IOIConfig",
    "find_ioi_circuit",
    "ioi_logit_diff",
    "mean_ablated_logit_diff",
    "name_movers_by_dla",
    "path_patch_senders",
    "path_patch_to_queries",
]

log = logging.getLogger(__name__)

IOI_ROLES: tuple[str, ...] = (
    "name_mover",
    "negative_name_mover",
    "s_inhibition",
    "induction",
    "duplicate_token",
    "previous_token",
)


@config
class IOIConfig(Config):
    """The prompts and every threshold of :func:`find_ioi_circuit`.

    ``n_prompts`` and ``seed`` draw the prompts when no dataset is given.
    """

    n_prompts: int = dataclasses.field(
        default=48,
        metadata={
            "help": "IOI prompts, spread over the templates",
            "ge": 1,
            **paper(
                500,
                "Wang et al. 2022, code: redwoodresearch/Easy-Transformer "
                "easy_transformer/ioi_dataset.py IOIDataset(N=500), the class default",
                why="a CPU budget (16–33 s per 24 prompts here): docs/data/ioi.json holds 10 draws "
                "of 24 prompts; benchmarks/ioi.py",
            ),
        },
    )
    seed: int = dataclasses.field(default=0, metadata={"help": "seed of the prompt draw"})
    mover_threshold: float = dataclasses.field(
        default=0.05,
        metadata={
            "help": "name movers: DLA above this share of the logit difference",
            "ge": 0,
            "lt": 1,
            **paper(
                NOT_IN_NOTES,
                "Wang et al. 2022, ICLR 2023, arXiv:2211.00593 (a numeric threshold is not in our "
                "notes)",
            ),
        },
    )
    max_name_movers: int = dataclasses.field(
        default=6, metadata={"help": "at most this many name movers", "ge": 1}
    )
    n_sender_candidates: int = dataclasses.field(
        default=10, metadata={"help": "heads tested by path patching for S-inhibition", "ge": 0}
    )
    s_inhibition_threshold: float = dataclasses.field(
        default=0.05,
        metadata={
            "help": "S-inhibition: relative drop of the logit difference over this",
            "ge": 0,
            "lt": 1,
            **paper(
                NOT_IN_NOTES,
                "Wang et al. 2022, ICLR 2023, arXiv:2211.00593 (a numeric threshold is not in our "
                "notes)",
            ),
        },
    )
    attention_threshold: float = dataclasses.field(
        default=0.15,
        metadata={
            "help": "induction/duplicate/previous-token: attention above this",
            "ge": 0,
            "lt": 1,
            **paper(
                NOT_IN_NOTES,
                "Wang et al. 2022, ICLR 2023, arXiv:2211.00593 (a numeric threshold is not in our "
                "notes)",
            ),
        },
    )
    max_heads_per_class: int = dataclasses.field(
        default=4, metadata={"help": "at most this many heads in every other class", "ge": 1}
    )


_DEFAULT_CONFIG = IOIConfig()


@dataclass(frozen=True)
class CircuitHead:
    """One head of the circuit with its evidence (averages over all prompts).

    Attributes:
        head: which head (``L23.H3``).
        role: one of :data:`IOI_ROLES`.
        dla: direct logit attribution to logit(IO) − logit(S) at END (nats).
        attn_end_io / attn_end_s: attention from END to the IO token / to both S tokens.
        path_patching: relative change of the logit difference when this head's output (from the
            ABC run) reaches only the name movers' queries; NaN when not measured.
        score: the class's own score: attention S2→S1+1 (induction), S2→S1 (duplicate token),
            S1+1→S1 (previous token); the DLA for movers; the path-patching effect for
            S-inhibition.
    """

    head: Head
    role: str
    dla: float
    attn_end_io: float
    attn_end_s: float
    path_patching: float
    score: float


@result_type
class IOICircuit(Result):
    """The IOI circuit found in one model: ``values`` is the DLA ``[layer, head]``.

    Attributes:
        heads: the circuit's heads, by role, with evidence.
        logit_diffs: per prompt, logit(IO) − logit(S) at END, clean model.
        logit_diff: their mean; ``fraction_positive``: share of prompts above 0.
        attn_end_io, attn_end_s, induction_s2, duplicate_s2, previous_s1_plus_1: ``[layer, head]``
            attention evidence; ``path_patching``: ``[layer, head]`` relative effect on the
            logit difference via the name movers' queries (NaN where not tested).
        logit_diff_circuit: mean logit difference with every head outside the circuit
            mean-ablated over the ABC prompts; ``faithfulness`` = that / ``logit_diff``.
        logit_diff_without_name_movers: with only the name movers mean-ablated;
            ``name_mover_removed`` = 1 − that / ``logit_diff``.
    """

    heads: tuple[CircuitHead, ...]
    logit_diffs: Tensor
    logit_diff: float
    fraction_positive: float
    attn_end_io: Tensor
    attn_end_s: Tensor
    induction_s2: Tensor
    duplicate_s2: Tensor
    previous_s1_plus_1: Tensor
    path_patching: Tensor
    logit_diff_circuit: float
    faithfulness: float
    logit_diff_without_name_movers: float
    name_mover_removed: float

    def heads_of(self, role: str) -> tuple[Head, ...]:
        """Every circuit head with this role, in the order found (strongest first)."""
        if role not in IOI_ROLES:
            raise UnknownNameError(f"unknown role {role!r}; roles are {IOI_ROLES}")
        return tuple(h.head for h in self.heads if h.role == role)

    def top(self, k: int = 5) -> tuple[tuple[Head, float], ...]:
        """The ``k`` heads with the largest DLA to IO − S as ``(Head, DLA)``, best first."""
        return top_heads(self.values, k)

    def summary(self, rows: int = 10) -> str:
        """A few lines: heads by class (at most ``rows`` each), logit difference, ablations."""
        n = len(self.logit_diffs)
        se = float(standard_error(self.logit_diffs.float()))
        lines = [
            f"logit diff {self.logit_diff:.2f} ± {se:.2f} (s.e. over prompts; positive for "
            f"{100 * self.fraction_positive:.0f}% of {n} prompts)"
        ]
        for role in IOI_ROLES:
            heads = [h for h in self.heads if h.role == role][:rows]
            shown = ", ".join(f"{h.head} ({h.score:+.2f})" for h in heads) or "none"
            lines.append(f"{role:>20}: {shown}")
        lines.append(
            f"name movers mean-ablated: logit diff {self.logit_diff_without_name_movers:.2f} "
            f"({100 * self.name_mover_removed:.0f}% removed)"
        )
        lines.append(
            f"circuit only (all other heads mean-ablated): logit diff "
            f"{self.logit_diff_circuit:.2f}, faithfulness {100 * self.faithfulness:.0f}%"
        )
        return "\n".join(lines)

    def default_title(self, **options: object) -> str:
        return f"IOI: DLA to IO − S at END — {self.meta.model}"

    def _draw(self, title: str) -> Figure:
        """DLA heatmap with circuit heads marked by the initial of their class."""
        from matplotlib.figure import Figure

        from lmsci_mi.viz.plots import heatmap

        n_layers, n_heads = self.values.shape
        fig = Figure(figsize=(max(5, 0.6 * n_heads + 2), max(4, 0.25 * n_layers + 1.5)))
        ax = fig.subplots()
        heatmap(
            ax, self.values, row_labels=self.axis_labels(0), col_labels=self.axis_labels(1),
            row_name="layer", col_name="head",
            title=title,
        )
        marks = {"name_mover": "N", "negative_name_mover": "−N", "s_inhibition": "SI",
                 "induction": "I", "duplicate_token": "D", "previous_token": "P"}
        for h in self.heads:
            ax.text(h.head.head, h.head.layer, marks[h.role], ha="center", va="center",
                    fontsize=7, color="black", fontweight="bold")
        fig.tight_layout()
        return fig


# --------------------------------------------------------------------------- measurements


def ioi_logit_diff(
    logits: Float[Tensor, "n pos vocab"], batch: IOIBatch
) -> Float[Tensor, " n"]:
    """logit(IO) − logit(S) at END, per prompt."""
    rows = torch.arange(logits.shape[0], device=logits.device)
    end_logits = logits[rows, batch.end.to(logits.device)]
    return (
        end_logits[rows, batch.io_token.to(logits.device)]
        - end_logits[rows, batch.s_token.to(logits.device)]
    ).float()


@torch.no_grad()
def mean_ablated_logit_diff(
    lm: LensModel,
    batch: IOIBatch,
    keep: Sequence[Head | tuple[int, int]] | None = None,
    ablate: Sequence[Head | tuple[int, int]] | None = None,
    *,
    means: dict[str, Tensor] | None = None,
) -> Float[Tensor, " n"]:
    """Logit difference with heads mean-ablated (``hook_z``, mean over the batch's ABC prompts at
    each position; pass ``means`` from :func:`~lmsci_mi.circuits.ablation.head_means` to reuse
    them). Give either the heads to ``keep`` (all others ablated) or those to ``ablate``.
    Hooks go through the registry; the model is unchanged afterwards.
    """
    if (keep is None) == (ablate is None):
        raise UserInputError("give exactly one of keep= or ablate=")
    if keep is not None:
        kept = set(map(Head.parse, keep))
        ablated = [head for head in all_heads(lm) if head not in kept]
    else:
        ablated = list(map(Head.parse, ablate or ()))
    if means is None:
        means = head_means(lm, batch.abc_tokens)
    return ioi_logit_diff(mean_ablated_logits(lm, batch.tokens, ablated, means), batch)


@torch.no_grad()
def name_movers_by_dla(lm: LensModel, pairs: PromptPairs, k: int = 2) -> tuple[tuple[Head, float], ...]:
    """The ``k`` heads with the largest mean direct logit attribution to IO − S at the last token
    of the clean prompts: the name movers' signature (Wang et al. 2022, §3.1), found without the
    rest of :func:`find_ioi_circuit`, e.g. to check that an edge-level circuit holds them.

    The DLA is :func:`lmsci_mi.lenses.direct_logit_attribution` (norm scales frozen at each
    prompt's clean run) of each pair's answer (IO) over its wrong token (S). Reads the model only.

    Args:
        lm: the model.
        pairs: IOI prompt pairs (:func:`lmsci_mi.data.ioi.ioi_str_pairs`); only the clean prompts,
            answers and wrong tokens are read.
        k: how many heads.

    Returns:
        ``((head, mean DLA), ...)``, largest first.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.data.ioi import ioi_str_pairs
    >>> lm = load_model("toy-2l")
    >>> movers = name_movers_by_dla(lm, ioi_str_pairs(lm, 2), k=2)
    >>> len(movers), movers[0][1] >= movers[1][1]
    (2, True)
    """
    decode = lm.tokenizer.decode
    dla = direct_logit_attribution(
        lm, list(pairs.clean), [decode([i]) for i in pairs.answers], [decode([i]) for i in pairs.wrongs]
    )
    return dla.top(k)


def path_patch_senders(
    lm: LensModel,
    batch: IOIBatch,
    senders: Sequence[Head | tuple[int, int]],
    receivers: Sequence[Head | tuple[int, int]],
    config: SweepConfig | None = None,
) -> Float[Tensor, "sender n"]:
    """Path patching (Wang et al. 2022) of many senders at once: each sender's output comes from
    the ABC run and reaches only the receivers' queries at END; returns the logit difference per
    sender and prompt.

    :func:`~lmsci_mi.circuits.path_patching.path_patch_values` with the paper's choices: in
    step 1 only the heads are frozen at their clean output (MLPs are recomputed), and step 2
    writes the receivers' queries (``hook_q``) at END only. Reads the model only.
    """
    paths = PathPatchingConfig(freeze="heads", sweep=config or SweepConfig())
    plan = plan_paths(lm, senders, [Receiver(Head.parse(r), "q") for r in receivers], paths)
    with lm.hooks.capture(plan.sender_hooks) as abc:
        lm.model(batch.abc_tokens, stop_at_layer=1 + max(s.layer for s in plan.senders))
    base = BaseRun.record(lm, batch.tokens, answer_positions=batch.end, capture=plan.base_hooks)
    corrupted = {name: abc[name] for name in plan.sender_hooks}
    return path_patch_values(lm, plan, base, corrupted, _logit_diff_readout(batch), paths,
                             receiver_positions=batch.end)[0]


def _logit_diff_readout(batch: IOIBatch) -> Callable[[Tensor], Tensor]:
    """logit(IO) − logit(S) of each prompt, from the engine's ``[row, n, vocab]`` answer logits."""

    def readout(logits: Tensor) -> Tensor:
        rows = torch.arange(logits.shape[1], device=logits.device)
        io, s = batch.io_token.to(logits.device), batch.s_token.to(logits.device)
        return (logits[:, rows, io] - logits[:, rows, s]).float()

    return readout


def path_patch_to_queries(
    lm: LensModel,
    batch: IOIBatch,
    sender: Head | tuple[int, int],
    receivers: Sequence[Head | tuple[int, int]],
) -> Float[Tensor, " n"]:
    """:func:`path_patch_senders` for one sender: the logit difference per prompt."""
    return path_patch_senders(lm, batch, [sender], receivers)[0]


# --------------------------------------------------------------------------- evidence


@dataclass
class _Evidence:
    """Per-head evidence, averaged over prompts (summed per batch, then divided)."""

    dla: Tensor
    attn_end_io: Tensor
    attn_end_s: Tensor
    induction_s2: Tensor
    duplicate_s2: Tensor
    previous_s1_plus_1: Tensor


@torch.no_grad()
def _batch_evidence(lm: LensModel, batch: IOIBatch) -> tuple[Tensor, _Evidence]:
    cfg = lm.cfg
    pattern_names = [hook_name("pattern", layer) for layer in range(cfg.n_layers)]
    with lm.hooks.capture([*dla_hook_names(lm), *pattern_names]) as cap:
        logits = lm.model(batch.tokens)
    diffs = ioi_logit_diff(logits, batch)
    n = len(batch)
    rows = torch.arange(n, device=lm.device)
    end, io, s1, s2, s1p1 = (
        t.to(lm.device) for t in (batch.end, batch.io_pos, batch.s1_pos, batch.s2_pos, batch.s1_plus_1)
    )
    # Each head's direct effect on logit(IO) − logit(S) at END, with the norm scales frozen at
    # this very run, summed over the batch's prompts.
    parts = logit_contributions(lm, cap, end, batch.io_token, batch.s_token)
    dla = list(parts.heads.sum(0))
    a_io, a_s, ind, dup, prev = ([] for _ in range(5))
    for layer in range(cfg.n_layers):
        pattern = cap[pattern_names[layer]]  # [n, head, q, k]
        at = lambda q, k, pattern=pattern: pattern[rows, :, q, k].sum(0)  # noqa: E731
        a_io.append(at(end, io))
        a_s.append(at(end, s1) + at(end, s2))
        ind.append(at(s2, s1p1))
        dup.append(at(s2, s1))
        prev.append(at(s1p1, s1))
    ev = _Evidence(*(torch.stack(x).float().cpu() for x in (dla, a_io, a_s, ind, dup, prev)))
    return diffs.cpu(), ev


def _collect_evidence(lm: LensModel, dataset: IOIDataset) -> tuple[Tensor, _Evidence]:
    """Clean logit differences of every prompt, and the evidence averaged over all prompts."""
    diffs, sums = [], None
    for batch in dataset.batches:
        d, ev = _batch_evidence(lm, batch)
        diffs.append(d)
        sums = ev if sums is None else _Evidence(
            *(getattr(sums, f.name) + getattr(ev, f.name) for f in dataclasses.fields(_Evidence))
        )
    assert sums is not None
    n_total = len(dataset)
    mean = _Evidence(*(getattr(sums, f.name) / n_total for f in dataclasses.fields(_Evidence)))
    return torch.cat(diffs), mean


def _top_heads(
    values: Tensor, threshold: float, limit: int, allowed: Tensor | None = None
) -> list[Head]:
    """At most ``limit`` heads, best first, whose value exceeds ``threshold`` (among ``allowed``)."""
    masked = values.clone()
    if allowed is not None:
        masked[~allowed] = -torch.inf
    flat = masked.flatten()
    order = flat.argsort(descending=True)[:limit]
    n_heads = values.shape[1]
    return [Head(int(i) // n_heads, int(i) % n_heads) for i in order if flat[i] > threshold]


def _layers_below(values: Tensor, layer: int) -> Tensor:
    """Mask of the ``[layer, head]`` entries in layers below ``layer``."""
    return (torch.arange(values.shape[0]) < layer)[:, None].expand_as(values)


# --------------------------------------------------------------------------- the steps


@dataclass(frozen=True)
class _Classes:
    """The heads of each class, best first, and the path-patching effects behind S-inhibition."""

    name_mover: list[Head]
    negative_name_mover: list[Head]
    s_inhibition: list[Head]
    induction: list[Head]
    duplicate_token: list[Head]
    previous_token: list[Head]
    path_patching: Tensor


def _name_movers(ev: _Evidence, mean_ld: float, config: IOIConfig) -> tuple[list[Head], list[Head]]:
    """Name movers and negative name movers, by DLA relative to the mean logit difference."""
    # No attention filter here: on SmolLM2 the strongest mover (L23.H3) puts more attention on
    # the two S tokens together than on IO and would be dropped; attention is kept as evidence.
    threshold = config.mover_threshold * abs(mean_ld)
    movers = _top_heads(ev.dla, threshold, config.max_name_movers)
    negative = _top_heads(-ev.dla, threshold, config.max_heads_per_class)
    if not movers:
        # A finding about the model on these prompts, reported to the user, not a bug.
        raise UserInputError(
            f"no name movers found: no head's DLA exceeds mover_threshold × |logit diff| "
            f"({mean_ld:+.2f}); check that the model does IOI (a positive logit difference), use "
            "more prompts, or lower mover_threshold")
    return movers, negative


def _path_patching_effects(
    lm: LensModel, dataset: IOIDataset, candidates: list[Head], movers: list[Head], mean_ld: float
) -> Tensor:
    """``[layer, head]`` relative change of the logit difference when each candidate's ABC output
    reaches only the name movers' queries (NaN for heads not tested)."""
    path = torch.full((lm.cfg.n_layers, lm.cfg.n_heads), float("nan"))
    if not candidates:
        return path
    totals = torch.zeros(len(candidates))
    for batch in dataset.batches:
        totals += path_patch_senders(lm, batch, candidates, movers).sum(-1).cpu()
    for sender, total in zip(candidates, totals, strict=True):
        path[sender.layer, sender.head] = (float(total) / len(dataset) - mean_ld) / abs(mean_ld)
    return path


def _assign_classes(
    lm: LensModel, dataset: IOIDataset, ev: _Evidence, mean_ld: float, config: IOIConfig
) -> _Classes:
    """Each class in turn, from the output back: movers, S-inhibition, then the early classes."""
    movers, negative = _name_movers(ev, mean_ld, config)
    first_mover_layer = min(h.layer for h in movers)
    # Path patching is two forward passes per sender and batch, so only the heads that attend
    # most from END to S (what S-inhibition heads do) are tested.
    below_movers = _layers_below(ev.attn_end_s, first_mover_layer)
    candidates = _top_heads(ev.attn_end_s, 0.0, config.n_sender_candidates, below_movers)
    path = _path_patching_effects(lm, dataset, candidates, movers, mean_ld)
    s_inhibition = _top_heads(
        -torch.nan_to_num(path, nan=0.0), config.s_inhibition_threshold, config.max_heads_per_class
    )
    limit, threshold = config.max_heads_per_class, config.attention_threshold
    below_si = _layers_below(ev.dla, max((h.layer for h in s_inhibition), default=first_mover_layer))
    induction = _top_heads(ev.induction_s2, threshold, limit, below_si)
    duplicate = _top_heads(ev.duplicate_s2, threshold, limit, below_si)
    below_ind = _layers_below(ev.dla, max((h.layer for h in induction), default=first_mover_layer))
    previous = _top_heads(ev.previous_s1_plus_1, threshold, limit, below_ind)
    return _Classes(movers, negative, s_inhibition, induction, duplicate, previous, path)


def _circuit_heads(ev: _Evidence, classes: _Classes) -> tuple[CircuitHead, ...]:
    """One :class:`CircuitHead` per head; a head keeps its first (later-in-the-circuit) role."""
    scores = {
        "name_mover": ev.dla, "negative_name_mover": ev.dla, "s_inhibition": classes.path_patching,
        "induction": ev.induction_s2, "duplicate_token": ev.duplicate_s2,
        "previous_token": ev.previous_s1_plus_1,
    }
    heads: list[CircuitHead] = []
    seen: set[Head] = set()
    for role in IOI_ROLES:
        for head in getattr(classes, role):
            if head in seen:
                continue
            seen.add(head)
            at = (head.layer, head.head)
            heads.append(CircuitHead(
                head=head, role=role, dla=float(ev.dla[at]), attn_end_io=float(ev.attn_end_io[at]),
                attn_end_s=float(ev.attn_end_s[at]), path_patching=float(classes.path_patching[at]),
                score=float(scores[role][at]),
            ))
    return tuple(heads)


def _ablation_checks(
    lm: LensModel, dataset: IOIDataset, circuit: Sequence[Head], movers: Sequence[Head]
) -> tuple[float, float]:
    """Mean logit difference with only the circuit kept, and with the name movers ablated."""
    kept, no_movers = [], []
    for batch in dataset.batches:
        means = head_means(lm, batch.abc_tokens)
        kept.append(mean_ablated_logit_diff(lm, batch, keep=circuit, means=means).cpu())
        no_movers.append(mean_ablated_logit_diff(lm, batch, ablate=movers, means=means).cpu())
    return float(torch.cat(kept).mean()), float(torch.cat(no_movers).mean())


@torch.no_grad()
def find_ioi_circuit(
    lm: LensModel, dataset: IOIDataset | None = None, config: IOIConfig = _DEFAULT_CONFIG
) -> IOICircuit:
    """Find the IOI circuit's head classes, with evidence, and measure its faithfulness.

    Steps (Wang et al. 2022, simplified to one criterion per class):
      * name movers: heads whose DLA to IO − S at END exceeds ``mover_threshold`` × the mean
        logit difference (at most ``max_name_movers``, best first); negative name movers: the
        same with negative DLA. Attention from END to IO and S is recorded as evidence;
      * S-inhibition: among the ``n_sender_candidates`` heads below the name movers that
        attend most from END to S, those whose path-patched ABC output, reaching only the
        name movers' queries, lowers the logit difference by more than
        ``s_inhibition_threshold`` (relative);
      * induction (attention S2→S1+1), duplicate token (S2→S1) and previous token
        (S1+1→S1): heads below the S-inhibition heads (previous-token: below the induction
        heads) whose attention exceeds ``attention_threshold``, at most
        ``max_heads_per_class`` each;
      * faithfulness: every head outside the circuit mean-ablated over the ABC prompts of the
        same template, at every position.

    Reads the model only (all hooks go through the registry and are removed).

    Args:
        lm: the model.
        dataset: IOI prompts; by default ``ioi_dataset(lm, config.n_prompts, seed=config.seed)``.
        config: the thresholds.

    Returns:
        :class:`IOICircuit`.
    """
    if dataset is None:
        dataset = ioi_dataset(lm, config.n_prompts, seed=config.seed)
    logit_diffs, ev = _collect_evidence(lm, dataset)
    mean_ld = float(logit_diffs.mean())
    classes = _assign_classes(lm, dataset, ev, mean_ld, config)
    heads = _circuit_heads(ev, classes)
    ld_circuit, ld_no_movers = _ablation_checks(
        lm, dataset, [h.head for h in heads], classes.name_mover
    )
    params = {**config.params(), "n_prompts_used": len(dataset),
              "ablation": "mean over ABC prompts of the same template, per position, hook_z"}
    return IOICircuit(
        values=ev.dla,
        axes=("layer", "head"),
        labels=head_axis_labels(lm.cfg.n_layers, lm.cfg.n_heads),
        meta=lm.meta(dataset.prompts, seed=dataset.seed, params=params,
                     data_source="lmsci_mi.data.ioi templates (ABBA/BABA, ABC corruption)"),
        heads=heads,
        logit_diffs=logit_diffs,
        logit_diff=mean_ld,
        fraction_positive=float((logit_diffs > 0).float().mean()),
        attn_end_io=ev.attn_end_io,
        attn_end_s=ev.attn_end_s,
        induction_s2=ev.induction_s2,
        duplicate_s2=ev.duplicate_s2,
        previous_s1_plus_1=ev.previous_s1_plus_1,
        path_patching=classes.path_patching,
        logit_diff_circuit=ld_circuit,
        faithfulness=ld_circuit / mean_ld,
        logit_diff_without_name_movers=ld_no_movers,
        name_mover_removed=1 - ld_no_movers / mean_ld,
    )

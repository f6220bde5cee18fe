"""CounterFact metrics for fact edits (Meng et al. 2022, §4.2): efficacy, paraphrase and
neighbourhood scores and magnitudes, generation entropy and the score S.

Probabilities compare the mean per-token NLL of each (possibly multi-token) target with its
leading space, tokenised as a continuation of the prompt. Every metric is reported for the
unedited model and the edited one.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import statistics
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float
from torch import Tensor
from tqdm.auto import tqdm

from lmsci_mi.cache import cache_key, cache_root, weights_fingerprint
from lmsci_mi.config import Config, config
from lmsci_mi.editing.fit import check_requests
from lmsci_mi.editing.handle import EditHandle
from lmsci_mi.editing.methods import EDITING_METHODS, method_for
from lmsci_mi.editing.requests import EditRequest
from lmsci_mi.editing.stats import KeyStatistics
from lmsci_mi.errors import UnknownNameError, UserInputError
from lmsci_mi.generation import GenerationConfig, generate
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result, result_type
from lmsci_mi.stats import Interval, bootstrap_each, percentile_bounds

if TYPE_CHECKING:

    from matplotlib.figure import Figure

    from lmsci_mi.cluster import ClusterConfig

__all__ = [
    "GENERATION_TOKENS",
    "METRICS",
    "PER_FACT",
    "EditEvaluation",
    "EditedScores",
    "EvaluationConfig",
    "EvaluationPlan",
    "assemble_evaluation",
    "edited_scores",
    "evaluate_edits",
    "fact_fluency",
    "generation_entropy",
    "next_token_top1",
    "plan_evaluation",
    "target_nll",
    "unedited_scores",
]

PER_FACT = ("ES", "PS", "NS", "EM", "PM", "NM", "GE", "NEG", "REV", "2HOP", "ORL")
"""Columns of :attr:`EditEvaluation.per_fact`: fractions of prompts, probability differences, GE."""

METRICS = ("S", *PER_FACT)
"""Columns of :class:`EditEvaluation` (percent, except GE: n-gram entropy in bits ×100)."""

GENERATION_TOKENS = 50
"""Tokens sampled per rewrite prompt for GE (ROME's papers use 100; 50 keeps an evaluation of 30
facts on a CPU within minutes). GE is comparable only between runs with the same length."""


@config
class EvaluationConfig(Config):
    """How edits are measured.

    Attributes:
        generation_tokens: tokens of the top-5 sampled generation per fact for GE (0 skips GE).
        seed: generation seed (the same for the unedited and the edited model).
    """

    generation_tokens: int = field(
        default=GENERATION_TOKENS,
        metadata={"help": "tokens per generation for GE (0 skips GE)", "ge": 0},
    )
    seed: int = field(default=0, metadata={"help": "generation seed"})


@result_type
class EditEvaluation(Result):
    """CounterFact metrics before and after editing.

    ``values`` is ``[model, metric]``: rows ``("unedited", <method>)``, columns :data:`METRICS`.
    ES/PS/NS are the percentages of prompts where the right target wins (new on rewrite and
    paraphrase prompts, true on neighbours); EM/PM/NM the mean probability differences in points;
    S the harmonic mean of ES, PS, NS; GE the generation entropy (NaN when skipped).

    The "messy knowledge" columns (each on the facts that carry the prompt; NaN when none does):
    NEG, the negated prompt prefers the new target (the negation curse: the edit ignores "not");
    REV, the reverse prompt about the new object prefers the subject (a reversible edit);
    2HOP, the two-hop prompt prefers the answer the edit implies; ORL, the share of the subject's
    other-relation prompts whose top-1 token is no longer their own answer (over-ripple). The
    unedited row is each rate's baseline.

    Attributes:
        per_fact: ``[model, fact, column]`` with the columns :data:`PER_FACT`: ES, PS, NS, NEG,
            REV, 2HOP, ORL as fractions, EM, PM, NM as probability differences, and GE.
        subjects: the edited subjects, one per fact.
        method: the registered method's name.
        fact_layers: per fact, the layers of the edit that installed it.
        n_edits: edit calls made (one per fact for ROME, one per batch for MEMIT).
        seconds_per_edit: mean time of one edit call.
        stats_tokens: text tokens behind the key statistics (given, or asked of the method).
        excluded_neighbours: neighbourhood prompts left out because they name a subject edited in
            the same edit (they test that subject's own edit, not specificity).
    """

    per_fact: Tensor
    subjects: tuple[str, ...]
    method: str
    fact_layers: tuple[tuple[int, ...], ...]
    n_edits: int
    seconds_per_edit: float
    stats_tokens: int
    excluded_neighbours: int

    @classmethod
    def combine(cls, parts: Sequence[EditEvaluation]) -> EditEvaluation:
        """One evaluation from several over disjoint fact sets (e.g. shards run in parallel)."""
        first = parts[0]
        per_fact = torch.cat([p.per_fact for p in parts], dim=1)
        n_edits = sum(p.n_edits for p in parts)
        return dataclasses.replace(
            first,
            values=torch.stack([_summary(per_fact[0]), _summary(per_fact[1])]),
            per_fact=per_fact,
            subjects=tuple(s for p in parts for s in p.subjects),
            fact_layers=tuple(layers for p in parts for layers in p.fact_layers),
            n_edits=n_edits,
            seconds_per_edit=sum(p.seconds_per_edit * p.n_edits for p in parts) / n_edits,
            excluded_neighbours=sum(p.excluded_neighbours for p in parts),
        )

    def metric(self, name: str, *, edited: bool = True) -> float:
        """One number, e.g. ``ev.metric("ES")``."""
        return float(self.values[1 if edited else 0, METRICS.index(name)])

    def interval(
        self, name: str, *, edited: bool = True, samples: int = 2000, level: float = 0.95, seed: int = 0
    ) -> tuple[float, float]:
        """A percentile bootstrap interval of one metric over facts (facts resampled with
        replacement; S recomputed from each resample's ES, PS and NS)."""
        if name not in METRICS:
            raise UnknownNameError(f"unknown metric {name!r}: choose from {METRICS}")
        rows, column = self.per_fact[1 if edited else 0], METRICS.index(name)
        # A resample whose facts all lack the metric (NaN) is left out; all NaN gives NaN bounds.
        values = bootstrap_each(
            lambda d: float(_summary(rows[d])[column]), len(rows), n_resamples=samples, seed=seed
        )
        low, high = percentile_bounds(values, level, nan_policy="omit").tolist()
        return low, high

    def difference(
        self, other: EditEvaluation, name: str, *, edited: bool = True, samples: int = 2000,
        level: float = 0.95, seed: int = 0,
    ) -> Interval:
        """This evaluation's metric minus ``other``'s on the same facts (two configs or methods
        compared), with a paired percentile bootstrap interval: one resample of facts serves
        both, so what the facts share cancels (S recomputed per resample, as :meth:`interval`).

        Raises:
            UserInputError: the two evaluations are not of the same facts in the same order.
        """
        if name not in METRICS:
            raise UnknownNameError(f"unknown metric {name!r}: choose from {METRICS}")
        if self.subjects != other.subjects:
            raise UserInputError(
                f"a paired difference needs the same facts in the same order: {len(self.subjects)} "
                f"vs {len(other.subjects)} facts, first differing subject "
                f"{next((a for a, b in zip(self.subjects, other.subjects, strict=False) if a != b), None)!r}; "
                "evaluate both on one request list"
            )
        side, column = 1 if edited else 0, METRICS.index(name)
        mine, theirs = self.per_fact[side], other.per_fact[side]

        def gap(d: Tensor) -> float:
            return float(_summary(mine[d])[column] - _summary(theirs[d])[column])

        values = bootstrap_each(gap, len(mine), n_resamples=samples, seed=seed)
        low, high = percentile_bounds(values, level, nan_policy="omit").tolist()
        estimate = self.metric(name, edited=edited) - other.metric(name, edited=edited)
        return Interval(estimate, low, high, level, len(mine), "paired percentile bootstrap")

    def default_title(self, **options: object) -> str:
        return f"{self.method} on {len(self.subjects)} facts — {self.meta.model}"

    def _draw(self, title: str) -> Figure:
        """Bars before and after editing: the success rates (S, ES, PS, NS, in %) on the left,
        the mean probability differences (EM, PM, NM, in points) on the right."""
        from matplotlib.figure import Figure

        fig = Figure(figsize=(9, 3.6))
        panels = fig.subplots(1, 2, gridspec_kw={"width_ratios": [4, 3]})
        for ax, names, unit in (
            (panels[0], ("S", "ES", "PS", "NS"), "% of prompts (S: harmonic mean)"),
            (panels[1], ("EM", "PM", "NM"), "mean probability difference (points)"),
        ):
            x = torch.arange(len(names), dtype=torch.float32)
            for i, (label, color) in enumerate(zip(self.labels[0], ("grey", "tab:blue"), strict=False)):
                heights = [float(self.values[i, METRICS.index(n)]) for n in names]
                bars = ax.bar((x + 0.4 * i - 0.2).tolist(), heights, width=0.4, label=label, color=color)
                ax.bar_label(bars, fmt="%.0f", fontsize=7)
            ax.set_xticks(x.tolist(), names)
            ax.set_ylabel(unit, fontsize=8)
            ax.axhline(0, color="grey", linewidth=0.5)
            ax.grid(axis="y", alpha=0.3)
        panels[0].legend(fontsize=8)
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        return fig

    def summary(self, rows: int = 10) -> str:
        """The score S before and after, then a markdown table of both rows (``rows`` unused:
        there are two)."""
        line = (
            f"{self.method} on {self.meta.model}, {len(self.subjects)} facts: S "
            f"{self.metric('S', edited=False):.1f} -> {self.metric('S'):.1f}"
        )
        head = "| model | " + " | ".join(METRICS) + " |"
        rule = "|---|" + "---|" * len(METRICS)
        table = [
            f"| {label} | " + " | ".join(f"{float(v):.1f}" for v in self.values[i]) + " |"
            for i, label in enumerate(self.labels[0])
        ]
        return "\n".join([line, head, rule, *table])


@torch.no_grad()
def target_nll(
    lm: LensModel, prompts: Sequence[str], targets: Sequence[str], *, batch_size: int = 32
) -> Float[Tensor, " pair"]:
    """Mean per-token NLL of each target after its prompt. Reads the model only.

    The prompt is tokenised under the sink policy and the target on its own
    (``lm.continuation_ids``: leading space, no special tokens), so the target is a pure
    continuation and no sink sits in front of it.

    >>> from lmsci_mi import load_model
    >>> target_nll(load_model("toy-2l"), ["The cat sat on the"], [" mat"]).shape
    torch.Size([1])
    """
    out = []
    for start in range(0, len(prompts), batch_size):
        ps, ts = prompts[start : start + batch_size], targets[start : start + batch_size]
        pairs = [(lm.encode(p), lm.continuation_ids(t)) for p, t in zip(ps, ts, strict=True)]
        log_probs = lm(lm.pad_batch([p + t for p, t in pairs]).tokens).float().log_softmax(-1)
        for row, (p, t) in enumerate(pairs):
            pos = torch.arange(len(p) - 1, len(p) - 1 + len(t), device=lm.device)
            gold = torch.tensor(t, device=lm.device)
            out.append(-log_probs[row, pos, gold].mean())
    return torch.stack(out).cpu()


def generation_entropy(texts: Sequence[str]) -> float:
    """ROME's fluency measure: mean over texts of (⅔·H₂ + ⁴⁄₃·H₃)/2 over words, in bits, ×100.

    Repetitive text (a degenerate edit) scores low. Words are ``\\w+`` runs and punctuation marks.

    >>> generation_entropy(["the cat " * 20]) < generation_entropy(["a quick brown fox jumps over the lazy dog"])
    True
    """
    scores = []
    for text in texts:
        words = re.findall(r"\w+|[^\w\s]", text.lower())
        parts = []
        for n, weight in ((2, 2 / 3), (3, 4 / 3)):
            grams = Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))
            total = sum(grams.values())
            h = -sum(c / total * math.log2(c / total) for c in grams.values()) if total else 0.0
            parts.append(weight * h)
        scores.append(100 * sum(parts) / len(parts))
    return statistics.fmean(scores) if scores else float("nan")


def fact_fluency(lm: LensModel, requests: Sequence[EditRequest], evaluation: EvaluationConfig) -> Tensor:
    """GE per fact ``[fact, 1]``: a top-5 sampled continuation of the rewrite prompt (as ROME's
    generate_fast), all facts in one batched call, each from its own stream (:func:`_stream`),
    so the unedited and the edited model draw the same way."""
    if evaluation.generation_tokens == 0:
        return torch.full((len(requests), 1), float("nan"))
    config = GenerationConfig(
        max_new_tokens=evaluation.generation_tokens, temperature=1.0, top_k=5, seed=evaluation.seed
    )
    streams = [_stream(r) for r in requests]
    texts = generate(lm, [r.rewrite_prompt for r in requests], config, streams=streams).texts
    return torch.tensor([[generation_entropy([text])] for text in texts])


@torch.no_grad()
def next_token_top1(lm: LensModel, prompts: Sequence[str], *, batch_size: int = 32) -> Tensor:
    """The top-1 next token id after each prompt (``[prompt]``, on the CPU). Reads the model only.

    >>> from lmsci_mi import load_model
    >>> next_token_top1(load_model("toy-2l"), ["The cat sat on the", "Hi"]).shape
    torch.Size([2])
    """
    out = [torch.empty(0, dtype=torch.long)]
    for start in range(0, len(prompts), batch_size):
        batch = lm.encode_batch(list(prompts[start : start + batch_size]))
        logits = lm(batch.tokens)
        rows = torch.arange(logits.shape[0], device=logits.device)
        out.append(logits[rows, batch.lengths.to(logits.device) - 1].argmax(-1).cpu())
    return torch.cat(out)


def _kept_neighbours(
    requests: Sequence[EditRequest], batch: Sequence[EditRequest]
) -> tuple[list[tuple[str, ...]], int]:
    """Each request's neighbourhood prompts that name no subject edited in ``batch``, and how
    many were left out. A prompt about another edited subject tests that subject's own edit."""
    subjects = {r.subject for r in batch}
    kept = []
    for request in requests:
        others = subjects - {request.subject}
        kept.append(tuple(p for p in request.neighborhood_prompts if not any(s in p for s in others)))
    excluded = sum(len(r.neighborhood_prompts) - len(k) for r, k in zip(requests, kept, strict=True))
    return kept, excluded


# Pairwise checks: (column of PER_FACT, prompts of a request, the answer that should win, the one
# it should beat). Neighbours keep the true answer; every other check asks for the edit's answer.
_PAIRS = (
    ("ES", lambda r, near: [r.rewrite_prompt], "target_new", "target_true"),
    ("PS", lambda r, near: list(r.paraphrase_prompts), "target_new", "target_true"),
    ("NS", lambda r, near: list(near), "target_true", "target_new"),
    ("NEG", lambda r, near: [r.negated_prompt] if r.negated_prompt else [], "target_new", "target_true"),
    ("REV", lambda r, near: [r.reverse_prompt] if r.reverse_prompt else [], "reverse_target_new", "reverse_target_true"),
    ("2HOP", lambda r, near: [r.two_hop_prompt] if r.two_hop_prompt else [], "two_hop_target_new", "two_hop_target_true"),
)


def _fact_scores(
    lm: LensModel,
    requests: Sequence[EditRequest],
    neighbours: Sequence[tuple[str, ...]],
    evaluation: EvaluationConfig,
) -> Tensor:
    """Per fact, the :data:`PER_FACT` columns (fractions and probability differences; NaN where
    a fact has no prompt of a kind), every prompt of every fact in one batched pass."""
    prompts, targets, owners = [], [], []
    for i, (r, near) in enumerate(zip(requests, neighbours, strict=True)):
        for kind, (_, group, win, lose) in enumerate(_PAIRS):
            for p in group(r, near):
                prompts += [p, p]
                targets += [getattr(r, win), getattr(r, lose)]
                owners.append((i, kind))
    nll = target_nll(lm, prompts, targets).view(-1, 2)
    p_win, p_lose = (-nll[:, 0]).exp(), (-nll[:, 1]).exp()
    scores = torch.full((len(requests), len(PER_FACT)), float("nan"))
    where: dict[tuple[int, int], list[int]] = {}
    for j, owner in enumerate(owners):
        where.setdefault(owner, []).append(j)
    for (i, kind), idx in where.items():
        column = PER_FACT.index(_PAIRS[kind][0])
        scores[i, column] = (p_win[idx] > p_lose[idx]).float().mean()
        if kind < 3:  # EM, PM, NM: the mean margin in probability
            scores[i, column + 3] = (p_win[idx] - p_lose[idx]).mean()
    scores[:, PER_FACT.index("ORL")] = _other_relation_leakage(lm, requests)
    scores[:, PER_FACT.index("GE")] = fact_fluency(lm, requests, evaluation)[:, 0]
    return scores


def _other_relation_leakage(lm: LensModel, requests: Sequence[EditRequest]) -> Tensor:
    """Per fact, the share of its other-relation prompts whose top-1 next token is no longer the
    first token of their own answer (NaN without such prompts)."""
    prompts = [p for r in requests for p in r.other_relation_prompts]
    top = next_token_top1(lm, prompts)
    out, at = torch.full((len(requests),), float("nan")), 0
    for i, r in enumerate(requests):
        n = len(r.other_relation_prompts)
        if n:
            gold = torch.tensor([lm.continuation_ids(t)[0] for t in r.other_relation_targets])
            out[i] = (top[at : at + n] != gold).float().mean()
        at += n
    return out


def _summary(per_fact: Tensor) -> Tensor:
    """:data:`METRICS` from per-fact :data:`PER_FACT` rows: means in percent (GE as it is), S the
    harmonic mean of ES, PS and NS."""
    means = torch.nanmean(per_fact, dim=0)
    means = torch.where(torch.isnan(per_fact).all(0), torch.nan, means)
    means[[PER_FACT.index(m) for m in PER_FACT if m != "GE"]] *= 100
    es, ps, ns = (float(means[PER_FACT.index(m)]) for m in ("ES", "PS", "NS"))
    s = statistics.harmonic_mean([es, ps, ns]) if min(es, ps, ns) > 0 else 0.0
    return torch.cat([torch.tensor([s]), means])


def _stream(request: EditRequest) -> int:
    """The random stream a fact's generation draws from: fixed by the fact itself, so the fact
    samples the same way in any evaluation, alone, in a batch or in any subset of a fact set."""
    return int(cache_key(request.rewrite_prompt, request.target_new, length=12), 16)


@torch.no_grad()
def _unedited_scores(
    lm: LensModel,
    requests: Sequence[EditRequest],
    neighbours: Sequence[tuple[str, ...]],
    evaluation: EvaluationConfig,
    use_cache: bool,
) -> Tensor:
    """The unedited model's per-fact scores, cached on disk per fact under the model's weights
    fingerprint and the evaluation settings; the facts not cached yet are scored in one batched
    pass. A ROME, a MEMIT and an AlphaEdit evaluation (or a resumed one) share the baseline."""
    if not use_cache:
        return _fact_scores(lm, requests, neighbours, evaluation)
    folder = cache_root() / "edit-baselines" / cache_key(
        weights_fingerprint(lm), {"version": 2, "columns": PER_FACT, **evaluation.params()}
    )
    paths = [
        folder / f"{cache_key(r.to_json(), list(near))}.pt"
        for r, near in zip(requests, neighbours, strict=True)
    ]
    missing = [i for i, path in enumerate(paths) if not path.exists()]
    if missing:
        fresh = _fact_scores(
            lm, [requests[i] for i in missing], [neighbours[i] for i in missing], evaluation
        )
        folder.mkdir(parents=True, exist_ok=True)
        for row, i in zip(fresh, missing, strict=True):
            partial = paths[i].with_suffix(f".{os.getpid()}.partial")
            torch.save(row.clone(), partial)
            os.replace(partial, paths[i])  # never a half-written entry
    return torch.stack([torch.load(path) for path in paths])


@dataclasses.dataclass(frozen=True)
class EvaluationPlan:
    """What an editing evaluation does, decided (and checked) before any weight changes; what
    :func:`evaluate_edits` and a sharded run (:mod:`lmsci_mi.cluster`) both start from.

    Attributes:
        method: the registered editing method's name; config: its config.
        evaluation: the evaluation settings.
        requests: the facts, in order.
        batches: the facts' indices per edit (one fact per edit for ROME, all in one for MEMIT).
        neighbours: per fact, its neighbourhood prompts that name no other subject of its edit.
        excluded: neighbourhood prompts left out for naming another subject of the same edit.
    """

    method: str
    config: Config
    evaluation: EvaluationConfig
    requests: tuple[EditRequest, ...]
    batches: tuple[tuple[int, ...], ...]
    neighbours: tuple[tuple[str, ...], ...]
    excluded: int


@dataclasses.dataclass(frozen=True)
class EditedScores:
    """The edited model's per-fact scores of some facts, and what their edits were."""

    indices: tuple[int, ...]
    scores: Tensor
    layers: tuple[tuple[int, ...], ...]
    seconds: tuple[float, ...]
    """Seconds of each edit computed here (none when the edit's deltas were given)."""


def plan_evaluation(
    lm: LensModel,
    requests: Sequence[EditRequest],
    config: Config | str = "rome",
    evaluation: EvaluationConfig | None = None,
) -> EvaluationPlan:
    """Check every request and split the facts into edits. Reads nothing but the tokenizer.

    Raises:
        ValueError: a bad request (no target_true, a subject the prompt lacks, a duplicate).
    """
    method, config = method_for(config)
    requests = tuple(requests)
    n = len(requests)
    batches = (
        tuple((i,) for i in range(n))
        if getattr(config, "one_fact_per_edit", False)
        else (tuple(range(n)),)
    )
    for batch in batches:  # all of them before the first edit
        _check_evaluation_requests(lm, [requests[i] for i in batch])
    kept = [_kept_neighbours([requests[i] for i in b], [requests[i] for i in b]) for b in batches]
    return EvaluationPlan(
        method=method.name,
        config=config,
        evaluation=evaluation or EvaluationConfig(),
        requests=requests,
        batches=batches,
        neighbours=tuple(near for batch_kept, _ in kept for near in batch_kept),
        excluded=sum(left_out for _, left_out in kept),
    )


def unedited_scores(
    lm: LensModel, plan: EvaluationPlan, indices: Sequence[int], *, use_cache: bool = True
) -> Tensor:
    """The unedited model's :data:`PER_FACT` rows of the plan's facts ``indices``."""
    return _unedited_scores(
        lm,
        [plan.requests[i] for i in indices],
        [plan.neighbours[i] for i in indices],
        plan.evaluation,
        use_cache,
    )


def edited_scores(
    lm: LensModel,
    plan: EvaluationPlan,
    batches: Sequence[Sequence[int]],
    *,
    stats: KeyStatistics | None = None,
    deltas: Mapping[str, Tensor] | None = None,
) -> EditedScores:
    """Edit, score the edited facts, restore: for each of ``batches`` (facts' indices), the
    plan's method computes the edit; with ``deltas`` (one edit computed elsewhere, which installs
    every fact of the plan) the deltas are applied once and ``batches`` only say which facts to
    score. The weights are as they were afterwards, also on error."""
    scores, layers, seconds, indices = [], [], [], []
    if deltas is not None:
        with EditHandle(lm, deltas, method=plan.method).apply() as handle:
            for batch in batches:
                scores.append(_scores_of(lm, plan, batch))
                layers += [handle.layers] * len(batch)
                indices += batch
        return EditedScores(tuple(indices), torch.cat(scores), tuple(layers), ())
    function = EDITING_METHODS.get(plan.method).function
    for batch in tqdm(batches, desc=f"{plan.method} evaluation", unit="edit", disable=len(batches) < 2):
        start = time.perf_counter()
        with function(lm, [plan.requests[i] for i in batch], plan.config, stats=stats) as handle:
            seconds.append(time.perf_counter() - start)
            layers += [handle.layers] * len(batch)
            scores.append(_scores_of(lm, plan, batch))
        indices += batch
    return EditedScores(tuple(indices), torch.cat(scores), tuple(layers), tuple(seconds))


def _scores_of(lm: LensModel, plan: EvaluationPlan, batch: Sequence[int]) -> Tensor:
    return _fact_scores(
        lm, [plan.requests[i] for i in batch], [plan.neighbours[i] for i in batch], plan.evaluation
    )


def assemble_evaluation(
    lm: LensModel,
    plan: EvaluationPlan,
    before: Tensor,
    after: EditedScores,
    *,
    seconds: Sequence[float],
    stats: KeyStatistics | None = None,
) -> EditEvaluation:
    """The :class:`EditEvaluation` of a plan from its per-fact rows (``before`` in the plan's
    order; ``after`` in any order, every fact once) and the seconds of each edit."""
    if sorted(after.indices) != list(range(len(plan.requests))):
        raise ValueError("edited scores must cover every fact of the plan exactly once")
    order = torch.tensor(after.indices).argsort()
    layers = [after.layers[i] for i in order.tolist()]
    per_fact = torch.stack([before, after.scores[order]])
    config, evaluation = plan.config, plan.evaluation
    return EditEvaluation(
        values=torch.stack([_summary(per_fact[0]), _summary(per_fact[1])]),
        axes=("model", "metric"),
        labels=(("unedited", plan.method), METRICS),
        meta=lm.meta(
            [r.rewrite_prompt for r in plan.requests],
            seed=evaluation.seed,
            data_source="edit requests" if stats is None else f"edit requests; C from {stats.source}",
            params={
                "method": plan.method,
                "n_facts": len(plan.requests),
                **{f"edit.{k}": v for k, v in config.params().items()},
                **{f"evaluation.{k}": v for k, v in evaluation.params().items()},
            },
        ),
        per_fact=per_fact,
        subjects=tuple(r.subject for r in plan.requests),
        method=plan.method,
        fact_layers=tuple(layers),
        n_edits=len(plan.batches),
        seconds_per_edit=statistics.fmean(seconds),
        stats_tokens=stats.n_tokens if stats is not None else int(getattr(config, "stats_tokens", 0)),
        excluded_neighbours=plan.excluded,
    )


def evaluate_edits(
    lm: LensModel,
    requests: Sequence[EditRequest],
    config: Config | str = "rome",
    *,
    stats: KeyStatistics | None = None,
    evaluation: EvaluationConfig | None = None,
    use_cache: bool = True,
    cluster: ClusterConfig | None = None,
) -> EditEvaluation:
    """Edit the facts and measure CounterFact metrics, with the unedited model as baseline.

    The method is the registered one that takes ``config`` (or is named by it). A method whose
    config has ``one_fact_per_edit`` (ROME) edits one fact at a time and restores the weights
    before the next (as in the paper's Table 4); others (MEMIT) edit all facts in one edit.
    Neighbourhood prompts that name another subject of the same edit are left out of NS, for
    both rows, and counted. The model is changed while this runs and left as it was (every edit
    is restored, also on error).

    Args:
        lm: the model.
        requests: facts with ``target_true``, paraphrase and neighbourhood prompts.
        config: the method's config (``ROMEConfig(layer=4)``), or a method name for its
            default config.
        stats: key statistics covering the edited layers (default: each method's own).
        evaluation: :class:`EvaluationConfig` (generation length for GE, seed).
        use_cache: read the unedited model's scores from the on-disk cache (and write them
            there): they depend only on the weights, the facts and ``evaluation``.
        cluster: evaluate the facts in shards on a Ray cluster (or in this process with
            ``address="process"``), :func:`lmsci_mi.cluster.run_sharded`; a batch edit is made
            once here and its deltas shipped. Equal to one process up to float summation order.

    Returns:
        :class:`EditEvaluation`.
    """
    if cluster is not None:
        from lmsci_mi.cluster import run_sharded

        return run_sharded(
            "edit-eval", lm, requests, config,
            stats=stats, evaluation=evaluation, use_cache=use_cache, cluster=cluster,
        )
    plan = plan_evaluation(lm, requests, config, evaluation)
    everything = range(len(plan.requests))
    before = unedited_scores(lm, plan, everything, use_cache=use_cache)
    after = edited_scores(lm, plan, plan.batches, stats=stats)
    return assemble_evaluation(lm, plan, before, after, seconds=after.seconds, stats=stats)


def _check_evaluation_requests(lm: LensModel, requests: Sequence[EditRequest]) -> None:
    check_requests(lm, requests)
    for r in requests:
        if not r.target_true.strip():
            raise UserInputError(f"request for {r.subject!r} has no target_true to compare against")

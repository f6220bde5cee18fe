"""What scaling knowledge neurons does to p(answer), under our measure and Dai et al. 2022's.

Ours: per fact, the mean over its prompts of ``(p_after - p_before) / p_before``; summarised over
facts by mean and median. Dai et al.'s code (``Hunter-DDM/knowledge-neurons``
``src/3_modify_activation.py``, ``src/8_plot_fig_erase_enhance.py``): per relation, the ratio of
means ``mean(p_after - p_before) / mean(p_before)`` over every prompt of the relation's facts,
then the plain average over relations. Intervals are percentile bootstraps over facts (within
relations for Dai et al.'s measure). Also the refinement's sensitivity to the number of prompts.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import torch

from lmsci_mi.errors import UserInputError
from lmsci_mi.knowledge.neurons import (
    KnowledgeNeurons,
    KnowledgeNeuronsConfig,
    NeuronAttribution,
    ScaledProbabilities,
    refine_neurons,
)
from lmsci_mi.stats import Interval, bootstrap_interval, percentile_bounds, resample_counts

__all__ = [
    "ChangeSummary",
    "FactScaling",
    "ParaphraseSensitivity",
    "dai_change",
    "jaccard",
    "paraphrase_sensitivity",
    "summarise_change",
]

Operation = Literal["suppress", "enhance"]


@dataclass(frozen=True)
class FactScaling:
    """One fact's measurements for one neuron set: its relation, whether the set is empty, and
    p(answer) per prompt (:func:`~lmsci_mi.knowledge.neurons.scaled_probabilities`)."""

    relation: str
    has_neurons: bool
    probabilities: ScaledProbabilities


@dataclass(frozen=True)
class ChangeSummary:
    """One neuron set under one operation, over facts, by both measures.

    Attributes:
        mean / median: our per-fact measure (mean over the fact's prompts of the relative
            change), its mean and median over the facts whose set is non-empty, with 95 %
            percentile-bootstrap intervals over those facts.
        n_negative: of those facts, how many have a negative per-fact change.
        dai: Dai et al.'s measure, the average over relations of each relation's ratio of means,
            over every fact (an empty set changes nothing, as a bag without neurons does in their
            code), with a 95 % interval from resampling facts within each relation.
        dai_by_relation: each relation's ratio of means.
    """

    mean: Interval
    median: Interval
    n_negative: int
    dai: Interval
    dai_by_relation: dict[str, float]

    def as_dict(self) -> dict[str, object]:
        """The shape a data file keeps: intervals as ``{"estimate", "ci95"}``."""

        def cell(interval: Interval) -> dict[str, object]:
            return {"estimate": interval.estimate, "ci95": interval.as_list(), "n": interval.n}

        return {
            "mean": cell(self.mean),
            "median": cell(self.median),
            "n_negative": self.n_negative,
            "dai": cell(self.dai),
            "dai_by_relation": dict(self.dai_by_relation),
        }


def _sums(fact: FactScaling, op: Operation) -> tuple[float, float]:
    """``(sum p_before, sum (p_after - p_before))`` over the fact's prompts."""
    before = fact.probabilities.before
    after = getattr(fact.probabilities, op)
    return math.fsum(before), math.fsum(a - b for a, b in zip(after, before, strict=True))


def dai_change(facts: Sequence[FactScaling], op: Operation) -> tuple[float, dict[str, float]]:
    """Dai et al.'s measure: per relation, ``mean(p_after - p_before) / mean(p_before)`` over all
    its facts' prompts (a ratio of means, so the prompts the model is surest of weigh most), then
    the plain average over relations.

    Returns:
        ``(average over relations, {relation: ratio})``.

    >>> a = FactScaling("r1", True, ScaledProbabilities((0.5, 0.1), (0.25, 0.0), (0.5, 0.3)))
    >>> b = FactScaling("r2", True, ScaledProbabilities((0.4,), (0.2,), (0.6,)))
    >>> average, by_relation = dai_change([a, b], "suppress")
    >>> round(by_relation["r1"], 4), round(by_relation["r2"], 4), round(average, 4)
    (-0.5833, -0.5, -0.5417)
    """
    if not facts:
        raise UserInputError("no facts to summarise: measure at least one fact")
    totals: dict[str, list[float]] = {}
    for fact in facts:
        before, delta = _sums(fact, op)
        total = totals.setdefault(fact.relation, [0.0, 0.0])
        total[0] += before
        total[1] += delta
    ratios = {relation: delta / before for relation, (before, delta) in totals.items()}
    return statistics.fmean(ratios.values()), ratios


def _dai_interval(
    facts: Sequence[FactScaling], op: Operation, n_resamples: int, seed: int
) -> Interval:
    """Percentile bootstrap of :func:`dai_change`, resampling facts within each relation (the
    relations are fixed, as they are the units the measure averages over)."""
    estimate, _ = dai_change(facts, op)
    generator = torch.Generator().manual_seed(seed)
    per_relation = []
    for relation in sorted({f.relation for f in facts}):
        sums = torch.tensor([_sums(f, op) for f in facts if f.relation == relation], dtype=torch.float64)
        counts = resample_counts(len(sums), n_resamples, generator=generator)  # [resample, fact]
        weighted = counts @ sums  # [resample, (before, delta)]
        per_relation.append(weighted[:, 1] / weighted[:, 0])
    replicates = torch.stack(per_relation).mean(0)
    low, high = percentile_bounds(replicates).tolist()
    return Interval(estimate, low, high, 0.95, len(facts), "percentile bootstrap within relations")


def summarise_change(
    facts: Sequence[FactScaling], op: Operation, *, n_resamples: int = 10_000, seed: int = 0
) -> ChangeSummary:
    """Both measures of one neuron set under one operation, with 95 % bootstrap intervals.

    Args:
        facts: one :class:`FactScaling` per fact.
        op: ``"suppress"`` (x0) or ``"enhance"`` (x2).
        n_resamples: bootstrap resamples. seed: their seed.

    Returns:
        A :class:`ChangeSummary`; our mean and median are NaN when no fact has a neuron.

    >>> a = FactScaling("r1", True, ScaledProbabilities((0.5, 0.1), (0.25, 0.0), (0.5, 0.3)))
    >>> b = FactScaling("r2", True, ScaledProbabilities((0.4,), (0.2,), (0.6,)))
    >>> s = summarise_change([a, b], "enhance", n_resamples=200)
    >>> round(s.mean.estimate, 4), round(s.dai.estimate, 4), s.n_negative
    (0.75, 0.4167, 0)
    """
    dai = _dai_interval(facts, op, n_resamples, seed)
    per_fact = [getattr(f.probabilities.effect(), op) for f in facts if f.has_neurons]
    if per_fact:
        mean = bootstrap_interval(per_fact, n_resamples=n_resamples, seed=seed)
        median = bootstrap_interval(per_fact, np.median, n_resamples=n_resamples, seed=seed)
        median = replace(median, estimate=float(statistics.median(per_fact)))
    else:
        mean = median = Interval(math.nan, math.nan, math.nan, 0.95, 0, "percentile bootstrap")
    return ChangeSummary(
        mean=mean,
        median=median,
        n_negative=sum(change < 0 for change in per_fact),
        dai=dai,
        dai_by_relation=dai_change(facts, op)[1],
    )


# ----------------------------------------------------------------------------- paraphrase count


def jaccard(a: Sequence[tuple[int, int]], b: Sequence[tuple[int, int]]) -> float:
    """|a ∩ b| / |a ∪ b| of two neuron sets; 1 when both are empty.

    >>> jaccard([(0, 1), (2, 3)], [(2, 3), (4, 5)])
    0.3333333333333333
    """
    left, right = {tuple(n) for n in a}, {tuple(n) for n in b}
    union = left | right
    return len(left & right) / len(union) if union else 1.0


@dataclass(frozen=True)
class ParaphraseSensitivity:
    """One fact's knowledge neurons refined on its first ``k`` prompts, for several ``k``.

    Attributes:
        sizes: the prompt counts ``k``, ascending.
        neurons: ``{k: the refined neurons}``.
        jaccard_to_largest: ``{k: jaccard(neurons[k], neurons[max k])}``.
    """

    sizes: tuple[int, ...]
    neurons: Mapping[int, tuple[tuple[int, int], ...]]
    jaccard_to_largest: Mapping[int, float]


def paraphrase_sensitivity(
    attributions: Sequence[NeuronAttribution],
    sizes: Sequence[int],
    config: KnowledgeNeuronsConfig | None = None,
) -> ParaphraseSensitivity:
    """Refine the knowledge neurons of one fact on its first ``k`` prompts for each ``k`` in
    ``sizes`` (Dai et al. §3.2's rule, same threshold and share), and compare each set with the
    set refined on the most prompts. Costs no model run: the attributions are reused.

    ``min_prompts`` is lowered to ``k`` where ``k`` is smaller, so that two prompts can be
    refined on (a neuron must then pass in both).

    Args:
        attributions: :func:`~lmsci_mi.knowledge.neurons.integrated_gradients` of the fact's
            prompts, in the order their subsets are taken.
        sizes: prompt counts, each at least 2 and at most ``len(attributions)``.
        config: threshold, share and min_prompts.

    Returns:
        A :class:`ParaphraseSensitivity`.
    """
    cfg = config or KnowledgeNeuronsConfig()
    ordered = sorted(set(sizes))
    if not ordered or ordered[0] < 2 or ordered[-1] > len(attributions):
        raise UserInputError(
            f"prompt counts {list(sizes)} must lie in 2..{len(attributions)}: "
            "attribute more paraphrases of the fact, or ask for fewer"
        )
    refined: dict[int, KnowledgeNeurons] = {
        k: refine_neurons(attributions[:k], cfg.replace(min_prompts=min(k, cfg.min_prompts)))
        for k in ordered
    }
    largest = refined[ordered[-1]].neurons
    return ParaphraseSensitivity(
        sizes=tuple(ordered),
        neurons={k: r.neurons for k, r in refined.items()},
        jaccard_to_largest={k: jaccard(r.neurons, largest) for k, r in refined.items()},
    )

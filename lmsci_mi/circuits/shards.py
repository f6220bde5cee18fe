"""The circuit analyses that shard over a cluster (:mod:`lmsci_mi.cluster`): the average indirect
effect over a fact set, by fact, and EAP/EAP-IG edge scores over a prompt set, by prompt pair.

:func:`~lmsci_mi.circuits.aie.average_indirect_effect` and
:func:`~lmsci_mi.circuits.edges.eap.edge_attribution` run these when given ``cluster=``; importing this
module registers them in :data:`~lmsci_mi.cluster.SHARDABLE` (the registry imports it the first
time either name is asked for).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from lmsci_mi.circuits.aie import (
    AIEConfig,
    AverageIndirectEffect,
    FactPlan,
    aggregate_traces,
    average_indirect_effect,
    plan_fact_traces,
    trace_fact,
)
from lmsci_mi.circuits.edges.eap import EAPConfig, EdgeScores, edge_attribution
from lmsci_mi.circuits.edges.patching import batch_metric, edge_pairs
from lmsci_mi.circuits.metrics import pair_metric
from lmsci_mi.circuits.tracing import CausalTrace
from lmsci_mi.cluster.shardable import SHARDABLE, Job, Shardable
from lmsci_mi.data.facts import load_facts
from lmsci_mi.data.pairs import PromptPairs, legacy_arguments
from lmsci_mi.errors import UserInputError

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel

__all__ = ["AIEShards", "EdgeShards"]


@SHARDABLE.register("aie", AIEConfig, "causal tracing's AIE over a fact set, by fact")
class AIEShards(Shardable[list[CausalTrace]]):
    """The driver chooses the facts and each one's trace settings
    (:func:`~lmsci_mi.circuits.aie.plan_fact_traces`), workers trace their facts, the driver
    averages the traces (:func:`~lmsci_mi.circuits.aie.aggregate_traces`). Traces are per fact
    and seeded per fact, so the sharded AIE equals the single-process one exactly."""

    name = "aie"
    function = staticmethod(average_indirect_effect)

    def prepare(self, lm: LensModel, arguments: Mapping[str, Any]) -> Job:
        facts = arguments["facts"]
        fact_list = load_facts(facts) if isinstance(facts, (str, Path)) else list(facts)
        plan = plan_fact_traces(lm, fact_list, arguments["config"])
        return Job(items=tuple(range(len(plan.facts))), context=plan)

    def run(self, lm: LensModel, context: FactPlan, items: Sequence[int]) -> list[CausalTrace]:
        return [trace_fact(lm, context, index) for index in items]

    def merge(
        self, lm: LensModel, job: Job, parts: Sequence[list[CausalTrace]]
    ) -> AverageIndirectEffect:
        plan: FactPlan = job.context
        return aggregate_traces(
            [trace for part in parts for trace in part],
            n_candidates=plan.n_candidates,
            n_known=plan.n_known,
            n_unpaired=plan.n_unpaired,
        )


@dataclass(frozen=True)
class _EdgeContext:
    pairs: PromptPairs
    metric: Any
    config: EAPConfig


@SHARDABLE.register("edges", EAPConfig, "EAP / EAP-IG edge scores over a prompt set, by pair")
class EdgeShards(Shardable[tuple[EdgeScores, int]]):
    """The items are pair indices; every worker gets the pairs (texts, a few kB) and the metric
    once, and scores its pairs with the metric's rows for them. A score is the mean over pairs,
    so the merge weighs each shard's mean by its number of pairs; equal to the single-process
    scores up to float summation order (batches differ)."""

    name = "edges"
    function = staticmethod(edge_attribution)

    def arguments(self, lm: LensModel, *args: Any, **kwargs: Any) -> dict[str, Any]:
        # the deprecated (clean, corrupted, metric, ...) form of edge_attribution still binds
        args, kwargs = legacy_arguments("edge_attribution", 0, args, kwargs)
        return super().arguments(lm, *args, **kwargs)

    def prepare(self, lm: LensModel, arguments: Mapping[str, Any]) -> Job:
        pairs, answer_positions = arguments["pairs"], arguments["answer_positions"]
        if not isinstance(pairs, PromptPairs):
            raise UserInputError(
                "a sharded edge score takes prompt pairs as texts (PromptPairs), not token ids "
                "or a padded batch: each pair is sent to a worker as text"
            )
        if answer_positions is not None:
            pairs = dataclasses.replace(pairs, answer_positions=answer_positions)
        edge_pairs(lm, pairs)  # checks every pair before any worker starts
        metric = pair_metric(arguments["metric"], pairs)
        config = arguments["config"] or EAPConfig()
        return Job(items=tuple(range(len(pairs))), context=_EdgeContext(pairs, metric, config))

    def run(
        self, lm: LensModel, context: _EdgeContext, items: Sequence[int]
    ) -> tuple[EdgeScores, int]:
        metric = context.metric
        if not isinstance(metric, str):  # a metric's per-pair rows (answers) for these pairs
            metric = batch_metric(metric, torch.tensor(list(items)), len(context.pairs))
        scores = edge_attribution(lm, context.pairs[list(items)], metric, context.config)
        return scores, len(items)

    def merge(self, lm: LensModel, job: Job, parts: Sequence[tuple[EdgeScores, int]]) -> EdgeScores:
        total = sum(n for _, n in parts)
        first = parts[0][0]
        values = sum((scores.values * (n / total) for scores, n in parts), start=first.values * 0)
        return dataclasses.replace(
            first,
            values=values,
            meta=dataclasses.replace(first.meta, prompts=job.context.pairs.clean),
            clean_value=sum(s.clean_value * n for s, n in parts) / total,
            corrupted_value=sum(s.corrupted_value * n for s, n in parts) / total,
        )

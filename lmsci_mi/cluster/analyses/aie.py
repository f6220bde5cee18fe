"""The average indirect effect over a fact set, sharded by fact: the driver chooses the facts and
each one's trace settings (:func:`~lmsci_mi.circuits.aie.plan_fact_traces`), workers trace their
facts, the driver averages the traces (:func:`~lmsci_mi.circuits.aie.aggregate_traces`). Traces
are per fact and seeded per fact, so the sharded AIE equals the single-process one exactly."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from lmsci_mi.circuits.aie import (
    AIEConfig,
    AverageIndirectEffect,
    Fact,
    FactPlan,
    aggregate_traces,
    load_fact_set,
    plan_fact_traces,
    trace_fact,
)
from lmsci_mi.circuits.tracing import CausalTrace
from lmsci_mi.cluster.shardable import SHARDABLE, Job, Shardable

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel


@SHARDABLE.register("aie", AIEConfig, "causal tracing's AIE over a fact set, by fact")
class AIEShards(Shardable[list[CausalTrace]]):
    name = "aie"

    def prepare(
        self,
        lm: LensModel,
        facts: Sequence[Fact] | str | Path = "shipped",
        config: AIEConfig | None = None,
    ) -> Job:
        fact_list = load_fact_set(facts) if isinstance(facts, (str, Path)) else list(facts)
        plan = plan_fact_traces(lm, fact_list, config)
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

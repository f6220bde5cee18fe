"""The editing evaluation over a fact set, sharded by fact over a cluster (:mod:`lmsci_mi.cluster`).

For a batch method (MEMIT, AlphaEdit) the driver computes the one edit and ships its deltas; each
worker scores its facts on the unedited model, applies the deltas, scores them edited and
restores. For ROME (one fact per edit) each worker edits and scores its own facts. Per-fact scores
do not depend on their batch-mates (GE samples each fact from its own stream), so the merge equals
one process's evaluation up to float summation order. :func:`~lmsci_mi.editing.evaluate_edits`
runs this when given ``cluster=``; importing this module registers it in
:data:`~lmsci_mi.cluster.SHARDABLE`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from lmsci_mi.cluster.shardable import SHARDABLE, Job, Shardable
from lmsci_mi.editing.methods import EDITING_METHODS
from lmsci_mi.editing.metrics import (
    EditedScores,
    EditEvaluation,
    EvaluationConfig,
    EvaluationPlan,
    assemble_evaluation,
    edited_scores,
    evaluate_edits,
    plan_evaluation,
    unedited_scores,
)

if TYPE_CHECKING:
    from lmsci_mi.editing.stats import KeyStatistics
    from lmsci_mi.model import LensModel

__all__ = ["EditEvalShards"]


@dataclass(frozen=True)
class _Context:
    plan: EvaluationPlan
    deltas: Mapping[str, Tensor] | None
    """A batch edit's deltas, computed on the driver (None: each fact is edited where it is scored)."""
    seconds: tuple[float, ...]
    stats: KeyStatistics | None
    use_cache: bool


@SHARDABLE.register("edit-eval", EvaluationConfig, "the editing evaluation over a fact set, by fact")
class EditEvalShards(Shardable[tuple[Tensor, EditedScores]]):
    """See the module docstring."""

    name = "edit-eval"
    function = staticmethod(evaluate_edits)

    def prepare(self, lm: LensModel, arguments: Mapping[str, Any]) -> Job:
        stats = arguments["stats"]
        plan = plan_evaluation(lm, arguments["requests"], arguments["config"], arguments["evaluation"])
        deltas, seconds = None, ()
        if not getattr(plan.config, "one_fact_per_edit", False):
            # One batch edit for every fact: computed once here, shipped to the workers.
            function = EDITING_METHODS.get(plan.method).function
            start = time.perf_counter()
            with function(lm, list(plan.requests), plan.config, stats=stats) as handle:
                seconds = (time.perf_counter() - start,)
                deltas = {name: d.detach().cpu().clone() for name, d in handle.deltas.items()}
        return Job(
            items=tuple(range(len(plan.requests))),
            context=_Context(plan, deltas, seconds, stats, arguments["use_cache"]),
        )

    def run(self, lm: LensModel, context: _Context, items: Sequence[int]) -> tuple[Tensor, EditedScores]:
        plan = context.plan
        before = unedited_scores(lm, plan, items, use_cache=context.use_cache)
        if context.deltas is not None:
            after = edited_scores(lm, plan, [list(items)], deltas=context.deltas)
        else:  # one fact per edit: the plan's batches are single facts
            after = edited_scores(lm, plan, [[i] for i in items], stats=context.stats)
        return before, after

    def merge(
        self, lm: LensModel, job: Job, parts: Sequence[tuple[Tensor, EditedScores]]
    ) -> EditEvaluation:
        context: _Context = job.context
        after = EditedScores(
            indices=tuple(i for _, part in parts for i in part.indices),
            scores=torch.cat([part.scores for _, part in parts]),
            layers=tuple(layer for _, part in parts for layer in part.layers),
            seconds=tuple(s for _, part in parts for s in part.seconds),
        )
        before = torch.cat([b for b, _ in parts])  # shards are contiguous and in order
        seconds = context.seconds or after.seconds
        return assemble_evaluation(lm, context.plan, before, after, seconds=seconds, stats=context.stats)

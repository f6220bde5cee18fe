"""Edge scores (EAP, EAP-IG) over a prompt set, sharded by prompt pair. A score is the mean over
pairs, so the merge weighs each shard's mean by its number of pairs; equal to the single-process
scores up to float summation order (batches differ)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from lmsci_mi.circuits.eap import EAPConfig, EdgeScores, edge_attribution
from lmsci_mi.circuits.edge_patching import prepare_edge_prompts
from lmsci_mi.cluster.shardable import SHARDABLE, Job, Shardable

if TYPE_CHECKING:
    from lmsci_mi.circuits.metrics import Metric
    from lmsci_mi.model import LensModel


@dataclass(frozen=True)
class _Pair:
    clean: str
    corrupted: str
    answer_position: int | None


@dataclass(frozen=True)
class _Context:
    metric: Any
    config: EAPConfig


@SHARDABLE.register("edges", EAPConfig, "EAP / EAP-IG edge scores over a prompt set, by pair")
class EdgeShards(Shardable[tuple[EdgeScores, int]]):
    name = "edges"

    def prepare(
        self,
        lm: LensModel,
        clean: Sequence[str],
        corrupted: Sequence[str],
        metric: Metric | Literal["kl"],
        config: EAPConfig | None = None,
        *,
        answer_positions: int | Sequence[int] | None = None,
    ) -> Job:
        if isinstance(clean, str) or isinstance(corrupted, str) or not all(
            isinstance(p, str) for p in [*clean, *corrupted]
        ):
            raise ValueError(
                "a sharded edge score takes lists of prompt strings (not one string, token ids "
                "or a padded batch): each pair is sent to a worker as text"
            )
        prepare_edge_prompts(lm, list(clean), list(corrupted), answer_positions)  # checks all pairs
        positions: Sequence[int | None]
        if answer_positions is None or isinstance(answer_positions, int):
            positions = [answer_positions] * len(clean)
        else:
            positions = [int(p) for p in answer_positions]
        items = tuple(_Pair(c, k, p) for c, k, p in zip(clean, corrupted, positions, strict=True))
        return Job(items=items, context=_Context(metric, config or EAPConfig()))

    def run(self, lm: LensModel, context: _Context, items: Sequence[_Pair]) -> tuple[EdgeScores, int]:
        positions = [p.answer_position for p in items]
        scores = edge_attribution(
            lm,
            [p.clean for p in items],
            [p.corrupted for p in items],
            context.metric,
            context.config,
            answer_positions=None if all(p is None for p in positions) else positions,  # type: ignore[arg-type]
        )
        return scores, len(items)

    def merge(self, lm: LensModel, job: Job, parts: Sequence[tuple[EdgeScores, int]]) -> EdgeScores:
        total = sum(n for _, n in parts)
        first = parts[0][0]
        values = sum((scores.values * (n / total) for scores, n in parts), start=first.values * 0)
        return dataclasses.replace(
            first,
            values=values,
            meta=dataclasses.replace(first.meta, prompts=tuple(p.clean for p in job.items)),
            clean_value=sum(s.clean_value * n for s, n in parts) / total,
            corrupted_value=sum(s.corrupted_value * n for s, n in parts) / total,
        )

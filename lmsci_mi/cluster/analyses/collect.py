"""Activation collection (for probes) over a text set, sharded by text. The driver picks every
text's positions once (``max_items``'s subsample is over all texts, as in one process); workers
collect their texts' rows; the merge stacks them in text order. Equal to the single-process
collection up to float summation order (batches differ)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from lmsci_mi.cluster.shardable import SHARDABLE, Job, Shardable
from lmsci_mi.collect import (
    Activations,
    CollectConfig,
    PositionChoice,
    collect_activations,
    positions_to_collect,
)

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel


@dataclass(frozen=True)
class _Text:
    index: int
    text: str | tuple[int, ...]
    positions: tuple[int, ...]


@dataclass(frozen=True)
class _Context:
    hooks: tuple[str, ...]
    config: CollectConfig


@SHARDABLE.register("collect", CollectConfig, "activation collection over a text set, by text")
class CollectShards(Shardable[tuple[Activations, tuple[int, ...]]]):
    name = "collect"

    def prepare(
        self,
        lm: LensModel,
        texts: Sequence[str] | Sequence[Sequence[int]],
        hooks: Sequence[str],
        *,
        positions: PositionChoice = "last",
        config: CollectConfig | None = None,
    ) -> Job:
        config = config or CollectConfig()
        if not texts:
            raise ValueError("collect_activations needs at least one text")
        names = tuple(dict.fromkeys(lm.hooks.resolve(list(hooks))))
        chosen = positions_to_collect(lm, texts, positions, config)
        if not any(chosen):
            raise ValueError("no position selected: every position list is empty")
        items = tuple(
            _Text(i, t if isinstance(t, str) else tuple(int(x) for x in t), tuple(c))
            for i, (t, c) in enumerate(zip(texts, chosen, strict=True))
            if c  # a text the subsample left empty is not sent anywhere
        )
        worker_config = config.replace(max_items=None, progress=False)
        return Job(items=items, context=_Context(names, worker_config))

    def run(
        self, lm: LensModel, context: _Context, items: Sequence[_Text]
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

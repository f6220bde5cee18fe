"""Probing tasks by name: each builds a :class:`~lmsci_mi.data.probing.ProbeDataset` from the
project's own offline data, so ``lmsci-mi probe --task NAME`` and :func:`probe_task` find it here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import TYPE_CHECKING

from lmsci_mi.config import Config, config
from lmsci_mi.data.probing import (
    ProbeDataset,
    bracket_depth_dataset,
    country_dataset,
    subject_number_dataset,
)
from lmsci_mi.errors import UnknownNameError, UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.probes.sweep import ProbeSweep, ProbeSweepConfig, probe_sweep
from lmsci_mi.registry import MethodRegistry

if TYPE_CHECKING:
    from lmsci_mi.cluster import ClusterConfig

__all__ = ["PROBE_TASKS", "ProbeTaskConfig", "probe_task", "task_dataset"]


@config
class ProbeTaskConfig(Config):
    """How many examples a task draws, and with which seed."""

    n_examples: int | None = field(
        default=None,
        # 10 or more, so that the train, validation and test splits each get examples
        metadata={"help": "examples to draw (default: the task's own)", "ge": 10},
    )
    data_seed: int = field(default=0, metadata={"help": "seed of the examples' draw"})


TaskBuilder = Callable[[ProbeTaskConfig], ProbeDataset]
PROBE_TASKS: MethodRegistry[TaskBuilder] = MethodRegistry("probe task")
"""Every probing task by name; each builds its dataset from a :class:`ProbeTaskConfig`."""


@PROBE_TASKS.register(
    "country", ProbeTaskConfig, "a city's country at the city's last token (semantic)"
)
def _country(config: ProbeTaskConfig) -> ProbeDataset:
    return country_dataset(config.n_examples, seed=config.data_seed)


@PROBE_TASKS.register(
    "subject_number",
    ProbeTaskConfig,
    "the subject's grammatical number after an attractor noun (syntactic)",
)
def _subject_number(config: ProbeTaskConfig) -> ProbeDataset:
    return subject_number_dataset(config.n_examples or 2000, seed=config.data_seed)


@PROBE_TASKS.register(
    "bracket_depth",
    ProbeTaskConfig,
    "brackets open at an identifier in a code expression (syntactic)",
)
def _bracket_depth(config: ProbeTaskConfig) -> ProbeDataset:
    return bracket_depth_dataset(config.n_examples or 2000, seed=config.data_seed)


def task_dataset(name: str, config: ProbeTaskConfig = ProbeTaskConfig()) -> ProbeDataset:  # noqa: B008
    """The dataset of task ``name``.

    Raises:
        ValueError: no such task; the message lists the tasks.
    """
    if name not in PROBE_TASKS:
        raise UnknownNameError(f"unknown probe task {name!r}; tasks: {', '.join(PROBE_TASKS.names())}")
    return PROBE_TASKS.get(name).function(config)


def probe_task(
    lm: LensModel,
    name: str,
    config: ProbeSweepConfig = ProbeSweepConfig(),  # noqa: B008
    task_config: ProbeTaskConfig = ProbeTaskConfig(),  # noqa: B008
    *,
    cluster: ClusterConfig | None = None,
) -> ProbeSweep:
    """Run the probe sweep of a registered task on ``lm``: each text read at its probed word's last
    token (or its last token), split by the task's groups. Reads the model only. ``cluster``
    collects the activations in shards on Ray (see :func:`~lmsci_mi.probes.sweep.probe_sweep`)."""
    data = task_dataset(name, task_config)
    positions = (
        "last"
        if data.spans is None
        else [[_last_token(lm, t, s)] for t, s in zip(data.texts, data.spans, strict=True)]
    )
    return probe_sweep(
        lm,
        data.texts,
        data.labels,
        positions=positions,
        groups=data.groups,
        config=config,
        task=name,
        data_source=data.source,
        cluster=cluster,
    )


def _last_token(lm: LensModel, text: str, span: tuple[int, int]) -> int:
    tokens = lm.token_span(text, *span)
    if tokens is None:
        raise UserInputError(f"the probed word {text[span[0] : span[1]]!r} covers no token of {text!r}")
    return tokens[-1]

"""Probes: does a layer's activation linearly encode a property? Linear probes with control tasks
on real models, probe sweeps across layers with export, and DP-feature probes on a synthetic CFG."""

from lmsci_mi.probes.linear import (
    PROBE_KINDS,
    LinearProbe,
    ProbeConfig,
    ProbeFit,
    Split,
    control_labels,
    fit_probe,
    fit_probes,
)
from lmsci_mi.probes.sweep import METRICS, ProbePeak, ProbeSweep, ProbeSweepConfig, probe_sweep
from lmsci_mi.probes.tasks import PROBE_TASKS, ProbeTaskConfig, probe_task, task_dataset

__all__ = [
    "METRICS",
    "PROBE_KINDS",
    "PROBE_TASKS",
    "LinearProbe",
    "ProbeConfig",
    "ProbeFit",
    "ProbePeak",
    "ProbeSweep",
    "ProbeSweepConfig",
    "ProbeTaskConfig",
    "Split",
    "control_labels",
    "fit_probe",
    "fit_probes",
    "probe_sweep",
    "probe_task",
    "task_dataset",
]

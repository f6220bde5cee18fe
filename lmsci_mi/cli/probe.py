"""`lmsci-mi probe`: a linear-probe sweep over layers for a registered task, exported as a table
(CSV, Parquet or JSON) and plotted against layer; `lmsci-mi probe cfg` runs the synthetic-CFG probes."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from lmsci_mi.cli.common import (
    add_cluster_args,
    add_config_args,
    add_model_args,
    add_output_args,
    cluster_from_args,
    config_from_args,
    load_from_args,
    write_outputs,
)
from lmsci_mi.cli.probe_cfg import add_cfg_arguments
from lmsci_mi.cli.tour import StepOutput, TourStep
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.probes.cfg.probing import CFGProbeConfig
from lmsci_mi.probes.sweep import ProbeSweepConfig
from lmsci_mi.probes.tasks import PROBE_TASKS, ProbeTaskConfig


def register(commands: Any) -> None:
    """Add this feature's subcommands to the parser."""
    probe = commands.add_parser(
        "probe",
        help="linear probes per layer, with control tasks; export CSV/Parquet/JSON",
        description="Probe every layer for a task (`--task`, see `--list-tasks`), or run the "
        "synthetic-CFG probes (`lmsci-mi probe cfg`).",
    )
    add_model_args(probe)
    add_output_args(probe)
    probe.add_argument("--task", default=None, help="a registered task (see --list-tasks)")
    probe.add_argument("--list-tasks", action="store_true", help="list the tasks and exit")
    add_config_args(probe, ProbeSweepConfig)
    add_config_args(probe, ProbeTaskConfig)
    add_cluster_args(probe)
    probe.set_defaults(run=_run_probe)
    synthetic = probe.add_subparsers(dest="probe_command", required=False, metavar="cfg")
    add_cfg_arguments(
        synthetic.add_parser(
            "cfg", help="DP-feature probes on a GPT trained on a synthetic CFG (Allen-Zhu & Li)"
        )
    )


def _run_probe(args: argparse.Namespace) -> int:
    from lmsci_mi.probes.tasks import probe_task, task_dataset

    if args.list_tasks:
        for method in PROBE_TASKS:
            print(f"{method.name:16s} {method.description}")
        return 0
    if args.task is None:
        raise UserInputError(
            f"give --task NAME (one of {', '.join(PROBE_TASKS.names())}) or --list-tasks"
        )
    config = config_from_args(ProbeSweepConfig, args)
    task_config = config_from_args(ProbeTaskConfig, args)
    task_dataset(args.task, task_config)  # an unknown task fails before the model loads
    cluster = cluster_from_args(args)
    lm = load_from_args(args)
    result = probe_task(lm, args.task, config, task_config, cluster=cluster)
    print(result.summary())
    write_outputs(result, args)
    return 0


def tour_steps() -> list[TourStep]:
    """Steps this feature adds to `lmsci-mi tour` (see lmsci_mi.cli.tour)."""
    return [
        TourStep(
            "probe",
            "A linear probe per layer: which layers know a city's country, beyond a control task",
            _step_probe,
            'from lmsci_mi.probes.tasks import probe_task; probe_task(lm, "country")',
            seconds=60,
        ),
        TourStep(
            "cfg_probes",
            "DP-feature probes: a GPT trained on a synthetic CFG encodes its parse tree",
            _step_cfg_probes,
            "from lmsci_mi.probes.cfg import CFGProbeConfig, run_cfg_probes; run_cfg_probes("
            "CFGProbeConfig(multihead=False, attention=False, n_samples=100))",
            seconds=35,
            quick=True,
        ),
    ]


def _step_probe(lm: LensModel, out_dir: Path) -> StepOutput:
    """The `country` probe sweep with its control task (Hewitt & Liang selectivity)."""
    from lmsci_mi.probes.tasks import probe_task

    result = probe_task(lm, "country")
    peak = result.peak()
    score = result.score_name
    best = result.axis_labels(0).index(peak.layer)
    low, high = (float(result.metric(m)[best]) for m in ("ci_low", "ci_high"))
    summary = (
        f"peak at layer {peak.layer}: {score} {peak.score:.3f} [95% CI {low:.3f}, {high:.3f}; "
        f"{result.n_test} test examples] (control {peak.control:.3f}, selectivity "
        f"{peak.selectivity:+.3f}, majority class {peak.baseline:.3f})"
    )
    text = (
        f"country probe on {lm.name} ({result.site}; {result.n_train}/{result.n_val}/{result.n_test} "
        f"train/val/test examples)\n{summary}"
    )
    return StepOutput(summary, {"probe_country": result}, text=text)


TOUR_CFG_PROBES = CFGProbeConfig(multihead=False, attention=False, n_samples=100)
"""The tour's CFG probe table: linear probes only, no attention transitions, a 100-string
validity check (``lmsci-mi probe cfg`` runs them all)."""


def _step_cfg_probes(lm: LensModel, out_dir: Path) -> StepOutput:
    """Probe the shipped CFG GPT and its random twin for NT ancestors and boundaries."""
    from lmsci_mi.probes.cfg.probing import TARGETS, run_cfg_probes

    table = run_cfg_probes(TOUR_CFG_PROBES)
    trained, random = table.best(model="trained"), table.best(model="random")
    levels = table.axis_labels(0)
    lines = [
        f"{level}: "
        + ", ".join(
            f"{target} {float(trained[a, t]):.3f} (random {float(random[a, t]):.3f})"
            for t, target in enumerate(TARGETS)
        )
        for a, level in enumerate(levels)
    ]
    ev = table.evaluation
    validity = f"generation validity {ev.validity:.1%} ({ev.n_samples} samples); " if ev else ""
    summary = f"{validity}best-layer linear probes, trained (random weights): " + lines[-1]
    heading = "best-layer linear-probe test accuracy, trained GPT (random weights):"
    text = "\n".join([heading, *lines])
    return StepOutput(summary, {"cfg_probes": table}, text=text)

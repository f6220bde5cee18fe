"""`lmsci-mi probe cfg`: DP-feature probes on a GPT trained on a synthetic CFG (Physics of LMs
Part 1). ``cli/probe.py`` adds the subcommand and hands its parser to :func:`add_cfg_arguments`."""

from __future__ import annotations

import argparse
from pathlib import Path

from lmsci_mi.cli.common import add_config_args, add_output_args, config_from_args, write_outputs
from lmsci_mi.probes.cfg.probing import TARGETS, CFGProbeConfig

__all__ = ["add_cfg_arguments", "run_cfg"]

_EXPORT_SUFFIXES = (".csv", ".parquet", ".json")


def add_cfg_arguments(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` the flags of ``probe cfg`` and make it run :func:`run_cfg`."""
    parser.add_argument(
        "--train",
        action="store_true",
        help="train the CFG GPT when it is not cached (about 10 min on a 2-core CPU)",
    )
    parser.add_argument(
        "--export",
        type=Path,
        default=None,
        help="write the probe table as .csv, .parquet or .json (one row per cell)",
    )
    add_output_args(parser)
    add_config_args(parser, CFGProbeConfig)
    parser.set_defaults(run=run_cfg)


def run_cfg(args: argparse.Namespace) -> int:
    """Train (with ``--train``) or load the CFG GPT, probe it and its random twin, report, export.

    Raises:
        ValueError: an export path with an unsupported suffix, or a bad probe setting.
        FileNotFoundError: the model is not cached and ``--train`` was not given.
    """
    from lmsci_mi.probes.cfg.probing import run_cfg_probes

    if args.export is not None and args.export.suffix.lower() not in _EXPORT_SUFFIXES:
        raise ValueError(f"--export must end in one of {list(_EXPORT_SUFFIXES)}, not {args.export}")
    config = config_from_args(CFGProbeConfig, args)
    table = run_cfg_probes(config, train=args.train, progress=True)
    if table.evaluation is not None:
        ev = table.evaluation
        print(
            f"next-token accuracy {ev.next_token_accuracy:.3f}, generation validity "
            f"{ev.validity:.3f} ({ev.n_samples} samples)"
        )
    trained, random = table.best(model="trained"), table.best(model="random")
    print("best-layer linear-probe accuracy, trained / random weights:")
    for a, level in enumerate(table.axis_labels(0)):
        cells = ", ".join(
            f"{target} {float(trained[a, t]):.3f} / {float(random[a, t]):.3f}"
            for t, target in enumerate(TARGETS)
        )
        print(f"  {level}: {cells}")
    if args.export is not None:
        print(f"exported the table to {table.export(args.export)}")
    write_outputs(table, args)
    return 0

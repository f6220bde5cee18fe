"""`lmsci-mi probe cfg`: DP-feature probes on a GPT trained on a synthetic CFG (Physics of LMs
Part 1). ``cli/probe.py`` adds the subcommand and hands its parser to :func:`add_cfg_arguments`."""

from __future__ import annotations

import argparse

from lmsci_mi.cli.common import add_config_args, add_output_args, config_from_args, write_outputs
from lmsci_mi.probes.cfg.probing import CFGProbeConfig

__all__ = ["add_cfg_arguments", "run_cfg"]


def add_cfg_arguments(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` the flags of ``probe cfg`` and make it run :func:`run_cfg`."""
    parser.add_argument(
        "--train",
        action="store_true",
        help="train the CFG GPT when it is not cached (about 10 min on a 2-core CPU)",
    )
    add_output_args(parser)
    add_config_args(parser, CFGProbeConfig)
    parser.set_defaults(run=run_cfg)


def run_cfg(args: argparse.Namespace) -> int:
    """Train (with ``--train``) or load the CFG GPT, probe it and its random twin, report, write.

    Raises:
        ValueError: a bad probe setting.
        FileNotFoundError: the model is not cached and ``--train`` was not given.
    """
    from lmsci_mi.probes.cfg.probing import run_cfg_probes

    config = config_from_args(CFGProbeConfig, args)
    table = run_cfg_probes(config, train=args.train, progress=True)
    print(table.summary())
    write_outputs(table, args)
    return 0

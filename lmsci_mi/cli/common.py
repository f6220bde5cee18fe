"""Arguments and output helpers shared by every `lmsci-mi` subcommand."""

from __future__ import annotations

import argparse
from pathlib import Path

from lmsci_mi.loading import DEFAULT_MODEL, load_model
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result

__all__ = ["add_model_args", "add_output_args", "load_from_args", "write_outputs"]


def add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help=f"model name or path (default {DEFAULT_MODEL}; `lmsci-mi models` lists them)",
    )
    parser.add_argument("--device", default=None, help="torch device (default: cuda if present)")


def add_output_args(parser: argparse.ArgumentParser, *, plot: bool = True) -> None:
    parser.add_argument("--out", type=Path, default=None, help="save the result here (JSON + safetensors)")
    if plot:
        parser.add_argument("--plot", type=Path, default=None, help="write the result's plot as PNG")


def load_from_args(args: argparse.Namespace) -> LensModel:
    return load_model(args.model, device=args.device)


def write_outputs(result: Result, args: argparse.Namespace) -> None:
    if getattr(args, "out", None) is not None:
        path = result.save(args.out)
        print(f"saved result to {path}")
    if getattr(args, "plot", None) is not None:
        path = result.plot(args.plot)
        print(f"saved plot to {args.plot}")

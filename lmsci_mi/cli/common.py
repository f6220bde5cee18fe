"""Arguments and output helpers shared by every `lmsci-mi` subcommand.

Analysis parameters come from the analysis's config: :func:`add_config_args` adds one flag per
config field (with the field's default and help) and :func:`config_from_args` builds the config
back, so a default is written once, in the config.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from lmsci_mi.config import Config
from lmsci_mi.loading import DEFAULT_MODEL, load_model
from lmsci_mi.model import DEFAULT_SINK, LensModel, SinkChoice
from lmsci_mi.results import Result

__all__ = [
    "add_config_args",
    "add_model_args",
    "add_output_args",
    "config_from_args",
    "load_from_args",
    "parse_sink",
    "write_outputs",
]

C = TypeVar("C", bound=Config)


def parse_sink(text: str) -> SinkChoice:
    """``--sink`` as a sink choice: ``default``, ``none``, a token id (digits) or a token's text.

    >>> parse_sink("none") is None, parse_sink("0"), parse_sink("<|im_start|>")
    (True, 0, '<|im_start|>')
    """
    if text.lower() == "default":
        return DEFAULT_SINK
    if text.lower() == "none":
        return None
    if text.isdigit():
        return int(text)
    return text


def add_model_args(parser: argparse.ArgumentParser, *, default: str | None = DEFAULT_MODEL,
                   default_help: str | None = None) -> None:
    """``--model``, ``--device`` and ``--sink``: which model, where, and its attention sink.

    ``default=None`` with ``default_help`` suits commands whose input names its own model
    (a saved steer).
    """
    parser.add_argument(
        "--model",
        default=default,
        help=f"model name or path (default {default_help or default}; `lmsci-mi models` lists them)",
    )
    parser.add_argument("--device", default=None, help="torch device (default: cuda if present)")
    parser.add_argument(
        "--sink",
        type=parse_sink,
        default=DEFAULT_SINK,
        metavar="default|none|TOKEN",
        help="attention-sink token put before every prompt: the model's default "
        "(<|endoftext|> for SmolLM2), none, a token's text or a token id",
    )


def add_output_args(parser: argparse.ArgumentParser, *, plot: bool = True) -> None:
    parser.add_argument("--out", type=Path, default=None, help="save the result here (JSON + safetensors)")
    if plot:
        parser.add_argument("--plot", type=Path, default=None, help="write the result's plot as PNG")


def add_config_args(
    parser: argparse.ArgumentParser, config_type: type[Config], *, skip: Sequence[str] = ()
) -> None:
    """Add one flag per field of ``config_type`` (``trace_window`` -> ``--trace-window``).

    Fields in ``skip``, and fields with ``metadata["cli"] = False``, get no flag; give them to
    :func:`config_from_args` as overrides.

    >>> from lmsci_mi.config import config
    >>> @config
    ... class Demo(Config):
    ...     noise: float = 3.0
    >>> parser = argparse.ArgumentParser()
    >>> add_config_args(parser, Demo)
    >>> config_from_args(Demo, parser.parse_args(["--noise", "2"]))
    Demo(noise=2.0)
    """
    config_type.add_arguments(parser, skip=skip)


def config_from_args(config_type: type[C], args: argparse.Namespace, **overrides: Any) -> C:
    """The config of parsed arguments, with ``overrides`` for fields that have no flag.

    Raises:
        ValueError: the values fail the config's validation; the message names the field.
    """
    return config_type.from_args(args, **overrides)


def load_from_args(args: argparse.Namespace) -> LensModel:
    return load_model(args.model, device=args.device, sink=getattr(args, "sink", DEFAULT_SINK))


def write_outputs(result: Result, args: argparse.Namespace) -> None:
    if getattr(args, "out", None) is not None:
        path = result.save(args.out)
        print(f"saved result to {path}")
    if getattr(args, "plot", None) is not None:
        path = result.plot(args.plot)
        print(f"saved plot to {args.plot}")

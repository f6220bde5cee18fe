"""CLI flags built from configs: one flag per field, the config's own defaults, and the config back
from the parsed arguments (`cli.common.add_config_args` / `config_from_args`)."""

from __future__ import annotations

import argparse
from dataclasses import field
from typing import Literal

import pytest

from lmsci_mi.cli import main
from lmsci_mi.cli.common import add_config_args, config_from_args
from lmsci_mi.cli.core import TourConfig
from lmsci_mi.config import Config, config


@config
class DemoConfig(Config):
    noise: float = field(default=3.0, metadata={"help": "noise scale"})
    n_samples: int = 10
    window: int | None = None
    layers: tuple[int, ...] = (0, 1)
    kind: Literal["resid", "mlp"] = "resid"
    normalise: bool = False
    metric: object = field(default=None, metadata={"cli": False})

    def validate(self) -> None:
        if self.n_samples < 1:
            raise ValueError(f"n_samples must be at least 1, not {self.n_samples}")


def _parser(**kwargs: object) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_config_args(parser, DemoConfig, **kwargs)  # type: ignore[arg-type]
    return parser


def test_no_flags_give_the_configs_defaults() -> None:
    assert config_from_args(DemoConfig, _parser().parse_args([])) == DemoConfig()


def test_each_field_type_parses() -> None:
    args = _parser().parse_args(
        ["--noise", "0.5", "--n-samples", "3", "--window", "4", "--layers", "2,5",
         "--kind", "mlp", "--normalise"]
    )
    assert config_from_args(DemoConfig, args) == DemoConfig(
        noise=0.5, n_samples=3, window=4, layers=(2, 5), kind="mlp", normalise=True
    )
    assert config_from_args(DemoConfig, _parser().parse_args(["--window", "none"])).window is None


def test_fields_off_the_cli_and_skipped_fields_come_as_overrides() -> None:
    parser = _parser(skip=("noise",))
    flags = {s for a in parser._actions for s in a.option_strings}
    assert "--metric" not in flags and "--noise" not in flags and "--n-samples" in flags
    built = config_from_args(DemoConfig, parser.parse_args([]), noise=1.0, metric="kl")
    assert (built.noise, built.metric) == (1.0, "kl")


def test_malformed_values_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--n-samples", "x"], ["--kind", "attn"], ["--layers", "1,a"]):
        with pytest.raises(SystemExit) as stop:
            _parser().parse_args(argv)
        assert stop.value.code == 2
    with pytest.raises(ValueError, match="n_samples must be at least 1"):
        config_from_args(DemoConfig, _parser().parse_args(["--n-samples", "0"]))


def test_tour_flags_come_from_its_config(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    add_config_args(parser, TourConfig)
    assert config_from_args(TourConfig, parser.parse_args([])) == TourConfig()
    assert config_from_args(TourConfig, parser.parse_args(["--quick"])).quick is True
    assert main(["tour", "--out-dir", " ", "--model", "toy-2l", "--device", "cpu"]) == 2
    assert "out_dir must name a folder" in capsys.readouterr().err

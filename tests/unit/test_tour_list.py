"""`lmsci-mi tour --list-steps`: the tour's plan as JSON, without loading a model (benchmarks/tour.py
records it beside the measured seconds)."""

from __future__ import annotations

import json

import pytest

from lmsci_mi import cli
from lmsci_mi.cli import core, main
from lmsci_mi.cli.tour import collect_steps


def _listed(capsys: pytest.CaptureFixture[str], *flags: str) -> list[dict]:
    assert main(["tour", "--list-steps", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_list_steps_prints_every_step_and_loads_no_model(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_model(*args: object, **kwargs: object) -> None:
        raise AssertionError("--list-steps loaded a model")

    monkeypatch.setattr(core, "load_from_args", no_model)
    steps = collect_steps(cli._FEATURES, quick=False)
    listed = _listed(capsys)
    assert [s["name"] for s in listed] == [s.name for s in steps]
    assert [(s["title"], s["estimate_s"], s["quick"]) for s in listed] == [
        (s.title, s.seconds, s.quick) for s in steps]
    quick = [s.name for s in collect_steps(cli._FEATURES, quick=True)]
    assert [s["name"] for s in listed if s["quick"]] == quick
    assert [s["name"] for s in _listed(capsys, "--quick")] == quick
    assert [s["name"] for s in _listed(capsys, "--steps", "rome,steer")] == ["rome", "steer"]

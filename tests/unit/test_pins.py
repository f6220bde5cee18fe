"""The pins file and its checker (tests/pins.py): every registered pin has a record written by
benchmarks/pins.py, names a test that exists, and the checker fails outside the tolerance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.pins import (
    ABS_FLOOR,
    MEASURES,
    PINS_FILE,
    REL_FLOOR,
    THREAD_FACTOR,
    Measured,
    check_pins,
    tolerance,
)

ROOT = Path(__file__).resolve().parents[2]


def test_every_pin_has_a_record_with_provenance() -> None:
    document = json.loads(PINS_FILE.read_text(encoding="utf-8"))
    assert "benchmarks/pins.py" in document["provenance"]["command"]
    assert set(document["pins"]) == set(MEASURES)
    for name, pin in document["pins"].items():
        path, _, tests = pin["test"].partition("::")
        source = (ROOT / path).read_text(encoding="utf-8")
        for test in tests.split(", ::"):
            assert f"def {test}(" in source, (name, test)
        assert set(pin["tolerance"]) == set(pin["values"]) == set(pin["thread_difference"]), name


def test_tolerance_is_the_thread_difference_times_a_factor_with_floors() -> None:
    assert tolerance(2.0, 1e-3) == pytest.approx(THREAD_FACTOR * 1e-3)
    assert tolerance(2.0, 0.0) == pytest.approx(REL_FLOOR * 2.0)
    assert tolerance([0.0, 0.0], [0.0, 0.0]) == ABS_FLOOR
    assert tolerance([1.0, -3.0], [0.0, 1e-6]) == pytest.approx(REL_FLOOR * 3.0)


def test_check_pins_fails_outside_the_tolerance(monkeypatch: pytest.MonkeyPatch) -> None:
    pins = {"x": {"values": {"a": 1.0, "b": [1.0, 2.0]}, "tolerance": {"a": 1e-3, "b": 1e-3}}}
    monkeypatch.setattr("tests.pins.load_pins", lambda path=PINS_FILE: pins)
    check_pins("x", Measured({"a": 1.0005, "b": [1.0, 2.0009]}))
    with pytest.raises(AssertionError, match=r"pin x\.b"):
        check_pins("x", {"a": 1.0, "b": [1.0, 2.002]})
    with pytest.raises(AssertionError, match="pinned"):
        check_pins("x", {"a": 1.0})
    # TF32 on CUDA: 2 % of the value
    check_pins("x", {"a": 1.01, "b": [1.0, 2.03]}, device="cuda:0")

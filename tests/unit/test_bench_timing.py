"""benchmarks/timing.py, the peer-timing protocol: warm-ups first, alternated rounds, per-side
spread, and a ratio of medians whose interval resamples whole rounds. No model is run."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def timing():
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("bench_timing", BENCHMARKS / "timing.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_timing"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_sides_are_warmed_then_run_once_per_round_in_alternating_order(timing) -> None:
    calls: list[str] = []
    sides = {"a": lambda: calls.append("a") or "A", "b": lambda: calls.append("b") or "B"}
    warm = {"b": lambda: calls.append("warm b")}
    compared = timing.compare(sides, rounds=4, warm=warm, quiet=True)
    assert calls == ["a", "warm b", "a", "b", "b", "a", "a", "b", "b", "a"]
    record = compared.record
    assert record["orders"] == [["a", "b"], ["b", "a"], ["a", "b"], ["b", "a"]]
    assert record["rounds"] == 4 and record["warmups"] == 1 and record["quiet"] is True
    assert [len(record["sides"][s]["seconds"]) for s in "ab"] == [4, 4]
    assert compared.outputs == {"a": "A", "b": "B"}
    assert record["machine"]["cores"] >= 1 and record["machine"]["threads"] >= 1


def test_summary_gives_median_spread_and_quartiles(timing) -> None:
    s = timing.summary([5.0, 1.0, 3.0, 2.0, 4.0])
    assert s["seconds"] == [5.0, 1.0, 3.0, 2.0, 4.0]  # round order kept
    assert (s["median"], s["min"], s["max"], s["q1"], s["q3"]) == (3.0, 1.0, 5.0, 2.0, 4.0)
    assert timing.summary([1.0, 2.0])["median"] == 1.5


def test_the_ratio_is_of_medians_and_its_interval_resamples_rounds(timing) -> None:
    steady = {"rounds": 5, "sides": {"peer": timing.summary([4.0] * 5), "ours": timing.summary([2.0] * 5)}}
    r = timing.ratio(steady, "peer", "ours")
    assert (r["estimate"], r["low"], r["high"], r["rounds"]) == (2.0, 2.0, 2.0, 5)
    # A round where both sides were slow (the machine was busy) moves both: the ratio holds.
    drift = {"rounds": 5, "sides": {"peer": timing.summary([4.0, 4.0, 8.0, 4.0, 4.0]),
                                    "ours": timing.summary([2.0, 2.0, 4.0, 2.0, 2.0])}}
    r = timing.ratio(drift, "peer", "ours")
    assert r["estimate"] == 2.0 and r["low"] <= 2.0 <= r["high"] and r["of"] == "peer / ours"
    noisy = {"rounds": 5, "sides": {"peer": timing.summary([3.0, 5.0, 4.0, 6.0, 2.0]),
                                    "ours": timing.summary([2.0] * 5)}}
    r = timing.ratio(noisy, "peer", "ours")
    assert r["low"] < r["estimate"] == 2.0 < r["high"]


def test_rounds_must_be_positive(timing) -> None:
    with pytest.raises(ValueError, match="rounds"):
        timing.compare({"a": lambda: None}, rounds=0)

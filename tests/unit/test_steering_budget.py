"""Steering strengths at a fluency budget: the largest strength within the perplexity budget, the
candidate chosen among steers, and the symmetric end of a control curve."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from lmsci_mi.results import Meta
from lmsci_mi.steering import (
    ControlCurve,
    at_fluency_budget,
    choose_within_budget,
    symmetric_strength_within_budget,
)
from lmsci_mi.steering.evaluate import METRICS

ROOT = Path(__file__).resolve().parents[2]


def curve(
    strengths: list[float],
    sentiment: list[float],
    perplexity: list[float],
    *,
    unsteered: tuple[float, float] = (0.0, 20.0),
    attributes: tuple[str, ...] = ("c",),
    column: int = 0,
    sentiment_se: list[float] | None = None,
    perplexity_se: list[float] | None = None,
    unsteered_se: tuple[float, float] = (math.nan, math.nan),
) -> ControlCurve:
    """A curve with the given sentiment and perplexity per strength (other metrics 0)."""
    n = len(strengths)
    settings = tuple(tuple(s if j == column else 0.0 for j in range(len(attributes))) for s in strengths)
    errors = tuple((a, 0.0, b, math.nan, math.nan, math.nan) for a, b in zip(
        sentiment_se or [0.0] * n, perplexity_se or [0.0] * n, strict=True))
    return ControlCurve(
        values=torch.tensor([[s, 0.0, p, 0.0, 0.0, 0.0] for s, p in zip(sentiment, perplexity, strict=True)],
                            dtype=torch.float64),
        axes=("setting", "metric"),
        labels=(tuple(f"c={s:+g}" for s in strengths), METRICS),
        meta=Meta(model="demo", sink=None),
        attributes=attributes,
        settings=settings,
        unsteered=(unsteered[0], 0.0, unsteered[1], 0.0, 0.0, 0.0),
        continuations=(),
        errors=errors,
        unsteered_errors=(unsteered_se[0], 0.0, unsteered_se[1], math.nan, math.nan, math.nan),
    )


def test_the_largest_strength_within_the_budget() -> None:
    c = curve([0.0, 1.0, 2.0, 4.0], [0.1, 0.3, 0.5, 0.9], [20.0, 25.0, 30.0, 31.0])
    point = at_fluency_budget(c)
    assert (point.index, point.strength, point.within) == (2, 2.0, True)  # 30 = 1.5 x 20 is within
    assert point.value == pytest.approx(0.5) and point.gain == pytest.approx(0.5)
    assert point.budget_perplexity == 30.0 and point.perplexity == 30.0
    # a looser budget reaches further; the order of the settings does not matter
    assert at_fluency_budget(c, 2.0).strength == 4.0
    shuffled = curve([4.0, 0.0, 2.0, 1.0], [0.9, 0.1, 0.5, 0.3], [31.0, 20.0, 30.0, 25.0])
    assert at_fluency_budget(shuffled).strength == 2.0


def test_a_strength_past_a_bad_one_still_counts() -> None:
    # the rule reads each strength on its own: a perplexity spike at 2 does not hide 4
    c = curve([0.0, 2.0, 4.0], [0.0, 0.2, 0.4], [20.0, 40.0, 29.0])
    assert at_fluency_budget(c).strength == 4.0


def test_no_strength_within_gives_the_weakest() -> None:
    c = curve([1.0, 2.0], [0.3, 0.5], [40.0, 50.0])
    point = at_fluency_budget(c)
    assert (point.strength, point.within) == (1.0, False)


def test_the_strength_of_a_named_steer_among_several() -> None:
    c = curve([0.0, 1.0, 2.0], [0.0, 0.2, 0.4], [20.0, 21.0, 22.0], attributes=("topic", "sentiment"),
              column=1)
    assert at_fluency_budget(c, attribute="sentiment").strength == 2.0
    assert at_fluency_budget(c, attribute="topic").strength == 0.0  # every topic value is 0
    with pytest.raises(ValueError, match="metric"):
        at_fluency_budget(c, metric="fluency")


def test_choosing_among_candidates() -> None:
    ok_low, ok_high, over = (curve([4.0], [s], [p]) for s, p in ((0.2, 22.0), (0.4, 29.0), (0.9, 31.0)))
    assert choose_within_budget({"a": ok_low, "b": ok_high, "c": over}, 20.0) == "b"
    # none within: the least harmful
    assert choose_within_budget({"c": over, "d": curve([4.0], [0.1], [35.0])}, 20.0) == "c"
    with pytest.raises(ValueError):
        choose_within_budget({}, 20.0)


def test_the_symmetric_end_of_a_control_curve() -> None:
    grid = [-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0]
    c = curve(grid, [0.0] * 7, [40.0, 24.0, 21.0, 20.0, 21.0, 29.0, 31.0])
    assert symmetric_strength_within_budget(c) == 1.0
    assert symmetric_strength_within_budget(c, budget=2.5) == 2.0
    assert symmetric_strength_within_budget(c, budget=1.0) == 0.5  # none fits: the smallest
    with pytest.raises(ValueError, match="3"):
        symmetric_strength_within_budget(c, (3.0, 1.0))


def test_the_published_comparison_reads_the_same_points() -> None:
    """docs/data/steering_compare.json's ``at_budget`` rows, re-read from its curves."""
    data = json.loads((ROOT / "docs" / "data" / "steering_compare.json").read_text())
    for method, saved in data["at_budget"].items():
        c = data["curves"][method]
        point = at_fluency_budget(curve(
            c["strengths"], c["sentiment"], c["perplexity"], sentiment_se=c["sentiment_se"],
            perplexity_se=c["perplexity_se"], unsteered=(c["unsteered"][0], c["unsteered"][2])))
        assert point.strength == saved["strength"], method
        assert point.value == pytest.approx(saved["sentiment"], rel=1e-6)
        assert point.value_se == pytest.approx(saved["sentiment_se"], rel=1e-6)
        assert point.perplexity == pytest.approx(saved["perplexity"], rel=1e-6)
        assert point.gain == pytest.approx(saved["gain"], rel=1e-6)
        assert point.budget_perplexity == pytest.approx(saved["budget_perplexity"], rel=1e-6)

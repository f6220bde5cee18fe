"""Renderers of docs/steering.md: the LM-Steer control curve, composition and transfer."""

from __future__ import annotations

from . import MODEL_NAMES, markdown, minus, num, pm, table
from .schemas.steering import CurveRow, SteeringData

COLUMNS = ["sentiment ± s.e.", "topic ± s.e.", "perplexity ± s.e.", "distinct-1", "distinct-2", "distinct-3"]


def _cells(row: CurveRow) -> list[str]:
    """A row's metrics: the means with their standard errors over prompts, distinct-n without."""
    return [
        minus(pm(row["sentiment"], row["sentiment_se"], 3)),
        minus(pm(row["topic"], row["topic_se"], 3)),
        pm(row["perplexity"], row["perplexity_se"], 2),
        *(num(row[f"distinct_{n}"], 3) for n in (1, 2, 3)),
    ]


def _value(x: float) -> str:
    return "0" if x == 0 else minus(f"{x:+g}")


@table("steering_curve")
def steering_curve(data: SteeringData) -> str:
    """benchmarks/steering.py: the sentiment steer's control curve (topic at 0, dummy at 1)."""
    c = data["curve"]
    rows = [["unsteered", *_cells(c["unsteered"])]]
    for r in c["rows"]:
        value = r["setting"]["sentiment"]
        label = "sentiment 0 (dummy only)" if value == 0 else f"sentiment {_value(value)}"
        rows.append([label, *_cells(r)])
    return markdown(["setting", *COLUMNS], rows)


@table("steering_composition")
def steering_composition(data: SteeringData) -> str:
    """benchmarks/steering.py: both steers at once."""
    c = data["composition"]
    rows = [["unsteered", *_cells(c["unsteered"])]]
    for r in c["rows"]:
        v = r["setting"]
        rows.append([f"sentiment {_value(v['sentiment'])}, topic {_value(v['topic'])}", *_cells(r)])
    return markdown(["setting", *COLUMNS], rows)


@table("steering_transfer")
def steering_transfer(data: SteeringData) -> str:
    """benchmarks/steering.py: the steer transferred to Gemma 3 270M, at ±s."""
    t = data["transfer"]
    rows = [["unsteered", *_cells(t["unsteered"])]]
    for r in t["rows"]:
        rows.append([f"sentiment {_value(r['setting']['sentiment'])}", *_cells(r)])
    return markdown([f"setting ({MODEL_NAMES.get(t['to'], t['to'])})", *COLUMNS], rows)

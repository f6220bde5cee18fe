"""Renderers of docs/steering.md: the LM-Steer control curve, composition and transfer; CAA beside
the mean-difference (ActAdd-style) vector."""

from __future__ import annotations

from . import MODEL_NAMES, markdown, minus, num, pm, table
from .schemas.steering import CAAData, CurveRow, IntervalRow, SteeringData

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


CAA_METHODS = {"caa": "CAA (answer letter)", "mean_difference": "mean difference (ActAdd-style)"}
CAA_AB_SHOWN = (-8.0, -4.0, 4.0, 8.0)


def _interval(row: IntervalRow, digits: int = 3, signed: bool = False) -> str:
    sign = "+" if signed else ""
    return minus(f"{row['mean']:{sign}.{digits}f} [{row['low']:{sign}.{digits}f}, {row['high']:{sign}.{digits}f}]")


def _p_letter_a(per_item: list[float]) -> float:
    """Mean p(A) / (p(A) + p(B)) from per-item p(behaviour letter): the bundled items put the
    behaviour at (A) in even items and (B) in odd ones (their files say so; a test checks it)."""
    return sum(p if i % 2 == 0 else 1.0 - p for i, p in enumerate(per_item)) / len(per_item)


@table("caa_ab")
def caa_ab(data: CAAData) -> str:
    """benchmarks/caa.py: the A/B effect, p(behaviour letter) unsteered and its change by multiplier."""
    rows = []
    for behaviour, b in data["behaviours"].items():
        for method, m in b["methods"].items():
            ab = m["ab"]
            zero = ab["multipliers"].index(0.0)
            changes = [_interval(ab["change"][ab["multipliers"].index(x)], signed=True) for x in CAA_AB_SHOWN]
            rows.append([f"{behaviour} ({b['items']['test']} items)", CAA_METHODS.get(method, method),
                         str(m["layer"]), f"{num(m['norm'], 1)} / {num(m['common_norm'], 1)}",
                         _interval(ab["p"][zero]), num(_p_letter_a(ab["per_item"]["0.0"]), 3), *changes])
    return markdown(["behaviour", "method", "layer", "‖v‖ raw / common", "p(behaviour), unsteered", "p(A), unsteered",
                     *(f"change at {_value(x)}" for x in CAA_AB_SHOWN)], rows)


@table("caa_open")
def caa_open(data: CAAData) -> str:
    """benchmarks/caa.py: the open-ended effect, with perplexity and distinct-n, by multiplier."""
    rows = []
    for behaviour, b in data["behaviours"].items():
        for method, m in b["methods"].items():
            o = m["open"]
            for k, x in enumerate(o["multipliers"]):
                rows.append([behaviour, CAA_METHODS.get(method, method), _value(x), _interval(o["score"][k]),
                             _interval(o["change"][k], signed=True), pm(o["perplexity"][k], o["perplexity_se"][k], 1),
                             *(num(o[f"distinct_{n}"][k], 3) for n in (1, 2, 3))])
    return markdown(["behaviour", "method", "multiplier", "behaviour score [95% CI]", "change from 0 [95% CI]",
                     "perplexity ± s.e.", "distinct-1", "distinct-2", "distinct-3"], rows)

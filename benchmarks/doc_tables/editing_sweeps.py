"""Renderer of docs/editing.md's sweep of AlphaEdit's null-space threshold and MEMIT's λ."""

from __future__ import annotations

from . import METHOD_NAMES, ci, markdown, table
from .schemas.editing_sweeps import EditingSweepsData, SweepRow

_SETTING = {"mom2_weight": "λ = {:,.0f}", "nullspace_threshold": "threshold {:g}",
            "nullspace_trace_share": "trace share {:g}"}


def _setting(row: SweepRow, reference: str) -> str:
    text = ", ".join(_SETTING[k].format(v) for k, v in row["changes"].items())
    return f"{METHOD_NAMES[row['method']]}, {text}" + (" (default)" if row["name"] == reference else "")


def _range(values: list[float], digits: int) -> str:
    low, high = min(values), max(values)
    return f"{low:.{digits}f}" if f"{low:.{digits}f}" == f"{high:.{digits}f}" else f"{low:.{digits}f}–{high:.{digits}f}"


@table("editing_sweeps")
def editing_sweeps(data: EditingSweepsData) -> str:
    """benchmarks/editing_sweeps.py: S, ES, PS, NS per setting with intervals, the paired
    differences in S and NS against the method's default, and AlphaEdit's null space over the
    layers (ranges over layers 2-6)."""
    header = ["setting", "S", "ES", "PS", "NS", "S − default", "NS − default", "null-space directions",
              "share of trace(C)", "‖Pk‖/‖k‖ (mean)"]
    rows = [["unedited", *(f"{data['unedited'][m]:.1f}" for m in ("S", "ES", "PS", "NS")), "", "", "", "", ""]]
    for row in data["rows"]:
        reference = data["reference"][row["method"]]
        null = list(row["null_space"].values())
        rows.append([
            _setting(row, reference),
            *(ci(row["metrics"][m], *row["ci95"][m], 1) for m in ("S", "ES", "PS", "NS")),
            *(ci(*row["vs_reference"][m], 1) if m in row["vs_reference"] else "" for m in ("S", "NS")),
            _range([n["direction_share"] for n in null], 2) if null else "",
            _range([n["trace_share"] for n in null], 3) if null else "",
            _range([n["key_norm_kept_mean"] for n in null], 2) if null else "",
        ])
    return markdown(header, rows)

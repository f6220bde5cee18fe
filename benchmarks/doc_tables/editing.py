"""Renderers of docs/editing.md: the editing table, margins, ROME and AlphaEdit layers, sequential editing, cost."""

from __future__ import annotations

import math
import re
import statistics
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from . import METHOD_NAMES, MODEL_NAMES, MODEL_SHORT, bold, ci, markdown, minus, num, pm, sci, table
from .schemas.editing import (
    AlphaEditData,
    AlphaEditTokensData,
    CostRow,
    EditingSpeedData,
    EditingTableData,
    EditRow,
    FactSetsData,
    RebuiltSet,
    RomeFitRun,
    RomeLayersData,
    SequentialEditingData,
)
from .schemas.editing_sweeps import SweepRow


@table("alphaedit_layers")
def alphaedit_layers(data: AlphaEditData) -> str:
    """benchmarks/alphaedit.py: the null space, C's median eigenvalue and the keys kept, per layer."""
    layers = [str(layer) for layer in data["layers"]]

    def per_layer(values: dict, fmt: Callable[[Any], str]) -> str:
        return ", ".join(f"L{layer} {fmt(values[layer])}" for layer in layers)

    return markdown(
        ["", "per layer"],
        [
            [f"null-space dimension (of {data['d_mlp']})", per_layer(data["null_space_dims"], str)],
            [
                "median eigenvalue of C",
                per_layer({k: v["median"] for k, v in data["eigenvalues"].items()},
                          lambda x: num(x, 4)),
            ],
            ["share of the edit's keys kept by P",
             per_layer(data["key_share_kept"], lambda x: num(x, 2))],
        ],
    )


@table("alphaedit_tokens")
def alphaedit_tokens(data: AlphaEditTokensData) -> str:
    """benchmarks/alphaedit.py --token-sweep: the null-space dimension against the token count.

    The sweep's largest count is the default budget (the script runs it last, from the cache)."""
    rows = data["null_space_dims_by_tokens"]
    layers = list(next(iter(rows.values())))
    default = max(rows, key=int)
    return markdown(
        ["tokens", *(f"L{layer}" for layer in layers)],
        [
            [f"{int(tokens):,}" + (" (default)" if tokens == default else ""),
             *(dims[layer] for layer in layers)]
            for tokens, dims in rows.items()
        ],
    )


SEQUENTIAL_ORDER = ("rome", "memit", "alphaedit")
SEQUENTIAL_METRICS = ("ES", "PS", "NS", "specificity")


def _ordered(methods: dict[str, Any]) -> list[str]:
    """The page's order of methods: ROME, MEMIT, AlphaEdit, then any other in the file's order."""
    return [m for m in SEQUENTIAL_ORDER if m in methods] + [m for m in methods if m not in SEQUENTIAL_ORDER]


@table("sequential_editing")
def sequential_editing(data: SequentialEditingData) -> str:
    """benchmarks/sequential_editing.py: every method's every evaluated step, ± one binomial s.e.

    Methods come in the page's order (ROME, MEMIT, AlphaEdit, then any other in the file's order),
    so a run that adds steps or methods changes only the data file."""
    methods = data["methods"]
    names = _ordered(methods)
    rows = []
    for name in names:
        curve = methods[name]
        for step, edits in enumerate(curve["n_edited"]):
            cells = []
            for metric in SEQUENTIAL_METRICS:
                value = curve["metrics"][metric][step]
                # A step without a standard error (a file written before they were kept, or
                # no prompt counted) shows the value alone.
                errors = curve.get("se", {}).get(metric)
                se = errors[step] if errors else math.nan
                cells.append(num(value, 1) if math.isnan(se) else pm(value, se, 1))
            rows.append([
                f"{name} (b={curve['batch_size']})", edits, *cells,
                num(curve["metrics"]["GE"][step], 1), num(curve["seconds"][step], 0),
            ])
    return markdown(
        ["method", "edits", *SEQUENTIAL_METRICS, "GE", "seconds of edits"], rows
    )


WILD_BESIDE = (("ES", "rewrite"), ("PS", "paraphrase"), ("NS", "locality"))
"""Each teacher-forced metric and the WILD-EM rate of the same prompts."""
WILD_AT = 100
"""The step shown besides each method's last: this many edits."""


def _step_cells(curve: dict, step: int) -> list[str]:
    """A step's teacher-forced rate ± s.e. and WILD-EM rate [95 % Wilson] (with its count) side by
    side; "not measured yet" where the file holds no WILD-EM for the step."""
    cells = []
    for metric, wild in WILD_BESIDE:
        errors = curve.get("se", {}).get(metric)
        value, se = curve["metrics"][metric][step], errors[step] if errors else math.nan
        cells.append(num(value, 1) if math.isnan(se) else pm(value, se, 1))
        rate = curve.get("wild", {}).get(wild, [None] * (step + 1))[step]
        if rate is None:
            cells.append("not measured yet")
        else:
            low, high = curve["wild_ci95"][wild][step]
            cells.append(f"{ci(rate, low, high, 1)} (n={curve['wild_n'][wild][step]})")
    return cells


@table("sequential_wild")
def sequential_wild(data: SequentialEditingData) -> str:
    """benchmarks/sequential_editing.py: ES, PS and NS beside WILD-EM's rewrite, paraphrase and
    locality on the same weights, at 100 edits and at each method's last step."""
    methods = data["methods"]
    names = _ordered(methods)
    rows = []
    for name in names:
        curve = methods[name]
        edits = curve["n_edited"]
        steps = [edits.index(WILD_AT)] if WILD_AT in edits[:-1] else []
        for step in [*steps, len(edits) - 1]:
            rows.append([f"{METHOD_NAMES.get(name, name)} (b={curve['batch_size']})", edits[step],
                         *_step_cells(curve, step)])
    return markdown(
        ["method", "edits", "ES ± s.e.", "WILD-EM rewrite [95 % Wilson]", "PS ± s.e.",
         "WILD-EM paraphrase [95 % Wilson]", "NS ± s.e.", "WILD-EM locality [95 % Wilson]"],
        rows,
    )


def _span_of(values: Sequence[float]) -> str:
    low, high = min(values), max(values)
    return num(low, 1) if low == high else f"{num(low, 1)}–{num(high, 1)}"


def _last(curve: dict, metric: str) -> str:
    """The last step's value ± s.e., with how many prompts it counts."""
    value, se = curve["metrics"][metric][-1], curve["se"][metric][-1]
    return f"{pm(value, se, 1)} (of {curve['n'][metric][-1]})"


@table("sequential_findings")
def sequential_findings(data: SequentialEditingData) -> str:
    """benchmarks/sequential_editing.py: what the curves say, every figure from the data."""
    methods, names = data["methods"], _ordered(data["methods"])
    label = {m: METHOD_NAMES.get(m, m) for m in names}
    keep = "; ".join(f"{label[m]} ES {_span_of(methods[m]['metrics']['ES'][1:])}, "
                     f"PS {_span_of(methods[m]['metrics']['PS'][1:])}" for m in names)
    lines = [f"- **Edits kept, teacher-forced**: over the steps after the first edit, {keep} (percent of the facts "
             f"edited so far, up to {max(c['n_edited'][-1] for c in methods.values())} edits).",
             "- **Neighbours at the last step**: NS " + ", ".join(f"{label[m]} {_last(methods[m], 'NS')}" for m in names)
             + "; specificity (the original model's own top-1 kept) "
             + ", ".join(f"{label[m]} {_last(methods[m], 'specificity')}" for m in names) + "."]
    if {"memit", "alphaedit"} <= set(methods):
        lines.append(_alphaedit_over_memit(methods["alphaedit"], methods["memit"]))
    ge = [v for c in methods.values() for v in c["metrics"]["GE"][1:]]
    lines.append(f"- **Fluency**: GE {_span_of(ge)} over every edited step (unedited "
                 f"{num(next(iter(methods.values()))['metrics']['GE'][0], 1)}).")
    if "rome" in methods:
        lines.append(_rome_seconds(methods["rome"]))
    lines += [_wild_gap(label[m], methods[m]) for m in names if methods[m].get("wild")]
    return _prose("\n".join(lines))


def _alphaedit_over_memit(alpha: dict, memit: dict) -> str:
    """Specificity, AlphaEdit minus MEMIT, step by step (the same facts in the same order)."""
    steps = [i for i, n in enumerate(alpha["n_edited"]) if n and n in memit["n_edited"]]
    gaps = [alpha["metrics"]["specificity"][i] - memit["metrics"]["specificity"][memit["n_edited"].index(
        alpha["n_edited"][i])] for i in steps]
    above = sum(g > 0 for g in gaps)
    return (f"- **AlphaEdit against MEMIT on specificity**: above at {above} of {len(gaps)} common steps, the "
            f"differences from {minus(num(min(gaps), 1))} to {minus(num(max(gaps), 1))} points (each value's "
            "binomial s.e. is about "
            f"{num(alpha['se']['specificity'][steps[-1]], 1)}; the paired differences are not tested).")


def _rome_seconds(curve: dict) -> str:
    """ROME's seconds per edit, from the cumulative seconds at each step."""
    n, t = curve["n_edited"], curve["seconds"]
    per = [(t[i] - t[i - 1]) / (n[i] - n[i - 1]) for i in range(1, len(n))]
    return (f"- **ROME's cost**: {_span_of(per)} s per edit (each step's mean); {n[-1]} edits in "
            f"{t[-1]:,.0f} s (one thread, beside other jobs: not speed figures).")


def _wild_gap(name: str, curve: dict) -> str:
    """At the last step: each teacher-forced rate beside WILD-EM's on the same prompts."""
    parts = []
    for metric, wild in WILD_BESIDE:
        rate = curve["wild"][wild][-1]
        if rate is None:
            continue
        low, high = curve["wild_ci95"][wild][-1]
        parts.append(f"{metric} {num(curve['metrics'][metric][-1], 1)} against WILD-EM {wild} {ci(rate, low, high, 1)}")
    said = "; ".join(parts) if parts else "not measured yet"
    return f"- **{name} without teacher forcing** at {curve['n_edited'][-1]} edits: {said}."


@table("sequential_before_38")
def sequential_before_38(data: dict[str, Any]) -> str:
    """benchmarks/sequential_editing.py now and before issue 38 (docs/data/sequential_editing_before_38.json,
    ROME's edit-aware fit and MEMIT's and AlphaEdit's fits of before): each metric at the steps
    both runs evaluated, now (before)."""
    now, before = data["sequential_editing"]["methods"], data["sequential_editing_before_38"]["methods"]
    rows = []
    for name in [m for m in _ordered(now) if m in before]:
        a, b = now[name], before[name]
        for n in [n for n in a["n_edited"] if n and n in b["n_edited"]]:
            i, j = a["n_edited"].index(n), b["n_edited"].index(n)
            rows.append([METHOD_NAMES.get(name, name), n, *(f"{num(a['metrics'][m][i], 1)} ({num(b['metrics'][m][j], 1)})"
                                                           for m in SEQUENTIAL_METRICS)])
    return markdown(["method", "edits", *(f"{m} now (before)" for m in SEQUENTIAL_METRICS)], rows)


# The page's words for the rows benchmarks/editing.py --speed writes; a row it does not know
# keeps the script's own words.
COST_LABELS = {
    "MEMIT, 50 facts in one batch, fit from the subject on": "MEMIT, 50 facts in one batch",
    "MEMIT, 10 facts in one batch, fit from the subject on":
        "MEMIT, 10 facts, fit from the subject on (same run)",
    "MEMIT, 10 facts in one batch, fit over every position (before)":
        "MEMIT, 10 facts, fit over every position (same run: the code before)",
    "evaluation of one fact, GE 50 tokens, baseline computed (ROME edit included)":
        "one fact's evaluation with 50-token GE, unedited baseline computed (edit included)",
    "… the same, the edit excluded": "… the same without the edit",
    "evaluation of one fact, unedited baseline cached (the edit excluded)":
        "one fact's evaluation with 50-token GE, unedited baseline from the cache (edit excluded)",
}
# Which row each of issue 21's "before" figures belongs to (the start of the row's `what`), and
# the word the issue put in front of it.
COST_BEFORE = {
    "one ROME edit": ("rome_edit_s", ""),
    "MEMIT, 50 facts in one batch, fit from the subject on": ("memit_50_facts_s", ""),
    "evaluation of one fact, GE": ("evaluation_one_fact_s", "about "),
}


COST_ORDER = ("one ROME edit", "MEMIT", "AlphaEdit")
"""The page's order of the cost rows by how their ``what`` starts; the evaluation's come last."""


def _cost_rank(row: CostRow) -> int:
    """ROME first, then MEMIT, AlphaEdit beside it, then the evaluation; ties keep the file's order."""
    return next((i for i, start in enumerate(COST_ORDER) if row["what"].startswith(start)), len(COST_ORDER))


@table("editing_cost")
def editing_cost(data: EditingSpeedData) -> str:
    """benchmarks/editing.py --speed: wall and CPU seconds against issue 21's figures and targets."""
    before = data["before_issue_21"]
    rows = []
    for row in sorted(data["rows"], key=_cost_rank):
        what = COST_LABELS.get(row["what"], row["what"])
        each = row.get("wall_s_each")
        if each and what.endswith(")"):
            what = f"{what[:-1]}; {min(each):.1f}–{max(each):.1f})"
        old = ""
        for start, (key, word) in COST_BEFORE.items():
            if row["what"].startswith(start) and key in before:
                old = f"{word}{str(before[key]).replace('-', '–')} s"
        target, met = "", False
        if row["target_s"] is not None:
            met = row["wall_s"] <= row["target_s"]
            target = f"≤ {row['target_s']} s: {'met' if met else 'not met'}"
        cpu = "" if row["cpu_s"] is None else num(row["cpu_s"], 1)
        rows.append([what, old, bold(num(row["wall_s"], 1), met), cpu, target, row["date"]])
    return markdown(
        ["what", "before (issue 21)", "now, wall s", "CPU s", "target", "measured"], rows
    )


def _edit_label(row: EditRow, n_facts: int) -> str:
    if row["model"] == "unedited":
        label = f"{MODEL_NAMES['smollm2-135m']} unedited"
    else:
        how = ("one batch" if row["n_edits"] == 1
               else "one fact at a time" if row["n_edits"] == row["n_facts"]
               else f"{row['n_edits']} edits")
        label = f"+ {_method_name(row['model'])}, {how}"
    return label if row["n_facts"] == n_facts else f"{label} ({row['n_facts']} facts)"


def _method_name(label: str) -> str:
    """A table row's method for a reader: "rome-before-38" is ROME at its defaults before issue 38."""
    base, before = label.removesuffix("-before-38"), label.endswith("-before-38")
    name = METHOD_NAMES.get(base, base)
    return f"{name} (defaults before issue 38)" if before else name


@table("editing_before_38")
def editing_before_38(data: EditingTableData) -> str:
    """benchmarks/editing.py --table --before: each method's new defaults minus its defaults before
    issue 38 on the same facts, in points, with paired 95 % bootstrap intervals."""
    differences = data.get("before_38", {})
    if not differences:
        return markdown(["measured"], [["not yet: `benchmarks/editing.py --table --before`"]])
    metrics = ("S", "ES", "PS", "NS")
    rows = [[METHOD_NAMES.get(name, name), str(next(iter(gaps.values()))["n"]),
             *(ci(gaps[m]["estimate"], gaps[m]["low"], gaps[m]["high"], 1) for m in metrics)]
            for name, gaps in differences.items()]
    return markdown(["method", "facts", *(f"Δ{m} (new − before)" for m in metrics)], rows)


def _direction(gap: dict[str, Any]) -> str:
    """What a paired interval of new − before shows: a gain, a loss, or no difference."""
    return "gain" if gap["low"] > 0 else "loss" if gap["high"] < 0 else "none"


def _gap_text(metric: str, gap: dict[str, Any]) -> str:
    return f"{metric} {minus(ci(gap['estimate'], gap['low'], gap['high'], 1))}"


@table("editing_before_38_findings")
def editing_before_38_findings(data: EditingTableData) -> str:
    """benchmarks/editing.py --table --before: per method, which differences the paired intervals
    show, and for ROME which fit to choose (the new default is the paper's fit, the old the edit-aware)."""
    differences = data.get("before_38", {})
    if not differences:
        return "Not measured yet: `benchmarks/editing.py --table --before memit alphaedit rome`."
    lines = []
    for name, gaps in differences.items():
        shown = {d: [_gap_text(m, g) for m, g in gaps.items() if _direction(g) == d] for d in ("gain", "loss")}
        parts = [f"lower on {_and(shown['loss'])}" if shown["loss"] else "",
                 f"higher on {_and(shown['gain'])}" if shown["gain"] else ""]
        said = "; ".join(p for p in parts if p) or "no difference its intervals can show"
        lines.append(f"- **{METHOD_NAMES.get(name, name)}**: {said} (points, new − before; every other "
                     "interval includes 0).")
    if "rome" in differences:
        lines.append(_rome_fit_choice(differences["rome"], _rows_by_method(data), data["configs"]))
    return _prose("\n".join(lines))


def _rome_fit_choice(gaps: dict[str, dict[str, Any]], rows: dict[str, EditRow],
                     configs: dict[str, dict[str, Any]]) -> str:
    """Which of ROME's two default sets to choose on this model, from the paired ES and PS
    differences; the settings that differ between them are named, since the run varies them together."""
    seconds = [rows[m]["seconds_per_edit"] for m in ("rome", "rome-before-38") if m in rows]
    cost = (f" The fits took {seconds[0]:.1f} s (now) and {seconds[1]:.1f} s (before) per edit "
            "in this run, at one thread beside other jobs (speed figures are under Cost)."
            if len(seconds) == 2 and None not in seconds else "")
    now, before = configs.get("rome", {}), configs.get("rome-before-38", {})
    differ = [k for k in before if k != "config" and now.get(k) != before[k]]
    old = ", ".join(f"{k}={before[k]!r}".replace("'", '"') for k in differ)
    settings = f" (`ROMEConfig({old})`; the runs differ in {_and(differ)} at once, and which of them " \
               "accounts for the difference was not varied)" if differ else ""
    worse = [m for m in ("ES", "PS") if _direction(gaps[m]) == "loss"]
    if worse:
        return (f"- **Choosing ROME's fit**: at the paper's settings ROME installs fewer edits on this model "
                f"than at the defaults before issue 38 ({_and([_gap_text(m, gaps[m]) for m in worse])}); take "
                f"those{settings} when an edit must install and the paper's algorithm is not the point.{cost}")
    return (f"- **Choosing ROME's fit**: the paper's settings are not worse on ES or PS here "
            f"({_gap_text('ES', gaps['ES'])}, {_gap_text('PS', gaps['PS'])}), so the default stays the "
            f"paper's; the defaults before issue 38{settings} are for a fact it leaves uninstalled "
            f"(`lmsci-mi edit` says so).{cost}")


def _metric_cells(row: EditRow, metrics: Sequence[str]) -> list[str]:
    return [ci(row["metrics"][m], *row["ci95"][m], 1) for m in metrics]


@table("editing_table")
def editing_table(data: EditingTableData) -> str:
    """benchmarks/editing.py --table: S, ES, PS, NS and GE with 95 % bootstrap intervals."""
    metrics = ("S", "ES", "PS", "NS", "GE")
    return markdown(
        [f"model + method ({data['n_facts']} facts)", *metrics],
        [[_edit_label(row, data["n_facts"]), *_metric_cells(row, metrics)] for row in data["rows"]],
    )


@table("editing_margins")
def editing_margins(data: EditingTableData) -> str:
    """benchmarks/editing.py --table: the probability margins EM, PM and NM in points."""
    metrics = ("EM", "PM", "NM")
    return markdown(
        ["model + method", *metrics],
        [[_short_label(row, data["n_facts"]), *_metric_cells(row, metrics)] for row in data["rows"]],
    )


def _short_label(row: EditRow, n_facts: int) -> str:
    """The row's model or method, with its fact count when it is not the table's."""
    return row["model"] if row["n_facts"] == n_facts else f"{row['model']} ({row['n_facts']} facts)"


@table("editing_rome_fits")
def editing_rome_fits(data: EditingSpeedData) -> str:
    """benchmarks/editing.py --speed: one ROME edit before (edit-aware fit, padded rows) and after
    (the paper's fit, grouped rows) on the same facts, alternated in one run."""
    fits = data["rome_fits"]
    n = len(fits["facts"])
    rows = []
    for run in fits["runs"]:
        real, padded = sum(run["real_tokens_each"]), sum(run["padded_tokens_each"])
        rows.append([
            run["label"], f"{num(run['median_s'], 1)} ({num(run['min_s'], 1)}–{num(run['max_s'], 1)})",
            num(statistics.median(run["cpu_s_each"]), 1),
            f"{min(run['steps_each'])}–{max(run['steps_each'])}",
            f"{real / n:,.0f} + {padded / n:,.0f} ({100 * run['padding_share']:.0f} %)",
            f"{run['installed']} of {n}",
        ])
    return markdown(
        [f"ROME fit ({n} facts, {fits['threads']} threads, {'quiet' if fits['quiet'] else 'shared CPU'})",
         "wall s, median (min–max)", "CPU s, median", "Adam steps",
         "positions run per edit: real + padded (share)", "installed (p(new) > p(true))"],
        rows,
    )


@table("editing_memit_fits")
def editing_memit_fits(data: EditingSpeedData) -> str:
    """benchmarks/editing.py --speed --memit-only: MEMIT's timed edits, with their fits' steps and
    the positions run (issue 38: the paper's fit in shared passes; the passes of before), and
    AlphaEdit's beside them when the file has them (--speed, --alphaedit-only)."""
    alphaedit = data.get("alphaedit_fits", {}).get("runs", [])
    fits = data.get("memit_fits") or data["alphaedit_fits"]
    runs = [("", run) for run in data.get("memit_fits", {}).get("runs", [])] + [("AlphaEdit: ", r) for r in alphaedit]
    rows = []
    for method, run in runs:
        steps = run["fit_steps_each"]
        rows.append([
            method + run["label"], str(run["n_facts"]), num(run["wall_s"], 1), num(run["cpu_s"], 1),
            f"{min(steps)}–{max(steps)} (mean {statistics.mean(steps):.1f})",
            f"{run['real_tokens']:,} + {run['padded_tokens']:,} ({100 * run['padding_share']:.0f} %)",
            run["date"],
        ])
    return markdown(
        [f"MEMIT{' and AlphaEdit' if alphaedit else ''} ({fits['threads']} thread{'s' if fits['threads'] > 1 else ''}, "
         f"{'quiet' if fits['quiet'] else 'shared CPU'})", "facts", "wall s", "CPU s", "Adam steps per fact",
         "positions run: real + padded (share)", "measured"],
        rows,
    )


@table("editing_floor")
def editing_floor(data: EditingSpeedData) -> str:
    """benchmarks/editing.py --floor: FLOPs per edit over the CPU's matmul rate, for ROME at the
    paper's settings (only the positions it needs) and as implemented before, with the padding
    share, and MEMIT as implemented; beside the measured time and the target."""
    f = data["arithmetic_floor"]
    rate = f["matmul_gflops"]["2"]
    measured = {row["what"]: row["wall_s"] for row in data.get("rows", [])}
    memit_s = next((v for k, v in measured.items() if k.startswith("MEMIT, 50 facts")), None)
    timed = {run["label"]: run["median_s"] for run in data.get("rome_fits", {}).get("runs", [])}
    rows = []
    for fit in f["rome"]:
        gflop = fit["gflop_per_edit"]
        rows.append([
            f"one ROME edit at layer {f['rome_layer']}, {fit['label']} (mean of {len(gflop)} facts)",
            f"{fit['gflop_mean']:,.0f} GFLOP ({min(gflop):,.0f}–{max(gflop):,.0f})",
            f"{100 * fit['padding_share']:.0f} %", f"{num(fit['gflop_mean'] / rate, 1)} s",
            f"{num(timed[fit['label']], 1)} s" if fit["label"] in timed else "", f"≤ {f['rome_target_s']} s",
        ])
    if "memit" not in f:
        rows.append([
            f"MEMIT, 50 facts (as implemented; counted on {f['memit_facts_counted']}, every δ fitted)",
            f"50 × {f['memit_gflop_per_fact']:,.0f} GFLOP", "", f"{f['memit_50_floor_s']:.0f} s",
            "" if memit_s is None else f"{memit_s:.0f} s", f"≤ {f['memit_target_s']} s",
        ])
    for fit in f.get("memit", []):
        per_fact = fit["gflop_per_fact"]
        rows.append([
            f"MEMIT, 50 facts, {fit['label']} (counted on {fit['n_facts']}, every δ fitted)",
            f"50 × {per_fact:,.0f} GFLOP", f"{100 * fit['padding_share']:.0f} %",
            f"{num(50 * per_fact / rate, 0)} s",
            next((f"{v:.0f} s" for k, v in measured.items() if k == f"MEMIT, 50 facts in one batch, {fit['label']}"), ""),
            f"≤ {f['memit_target_s']} s",
        ])
        if "compute_z_gflop_per_fact" in fit:
            code = fit["compute_z_gflop_per_fact"]
            rows.append(["… the same fit as MEMIT's own code runs it (compute_z: rows padded, the whole model, "
                         "logits at every position; the spread not counted)", f"50 × {code:,.0f} GFLOP", "",
                         f"{num(50 * code / rate, 0)} s", "", ""])
    return markdown(
        ["edit", "floating-point operations (counted)", "padded positions", f"this code's count at {num(rate, 1)} GFLOP/s",
         "measured (median, tables above)", "target"],
        rows,
    )


@table("editing_messy")
def editing_messy(data: EditingTableData) -> str:
    """benchmarks/editing.py --table: the four messy-knowledge rates, each over the facts that
    carry its probe (the count in the header; a row on fewer facts says so)."""
    probes = ("NEG", "REV", "2HOP", "ORL")
    first = data["rows"][0]

    def head(m: str) -> str:
        n = first["probe_facts"][m]
        facts = f"{n} fact" + ("" if n == 1 else "s")
        if m == "ORL":
            facts += f", {first['other_relation_prompts']} prompts"
        return f"{m} ({facts})"

    rows = [[_short_label(row, first["n_facts"]), *_metric_cells(row, probes)] for row in data["rows"]]
    return markdown(["model + method", *(head(m) for m in probes)], rows)


@table("rome_layers")
def rome_layers(data: RomeLayersData) -> str:
    """benchmarks/rome_layers.py: ROME at each swept layer; the layer of the best S in bold.

    An interval that is a single point (ES 100 on every fact) is left out."""
    layers = data["layers"]
    best = str(data["best_layer_by_S"])
    unedited = next(iter(layers.values()))["unedited"]["GE"]
    metrics = ("S", "ES", "PS", "NS", "GE")
    rows = []
    for layer, row in layers.items():
        cells = []
        for m in metrics:
            low, high = row[f"{m}_ci"]
            same = num(low, 1) == num(high, 1) == num(row[m], 1)
            cells.append(num(row[m], 1) if same else ci(row[m], low, high, 1))
        cells[0] = bold(cells[0], layer == best)
        rows.append([bold(layer, layer == best), *cells])
    return markdown(["layer", *metrics[:-1], f"GE (unedited {num(unedited, 1)})"], rows)


@table("edit_fact_relations")
def edit_fact_relations(data: FactSetsData) -> str:
    """benchmarks/fact_sets.py: the editing fact set's facts per relation, in the file's order."""
    rows = [[f"`{r['relation']}`", r["words"], r["facts"]] for r in data["edit_facts"]["relations"]]
    return markdown(["relation", "subject → answer", "facts"], rows)


@table("edit_fact_probes")
def edit_fact_probes(data: FactSetsData) -> str:
    """benchmarks/fact_sets.py: how many facts carry each messy-knowledge probe, with the file's
    first example of each."""
    edit = data["edit_facts"]
    messy, ex = edit["messy"], edit["examples"]
    reverse, two_hop = ex["reverse"], ex["two_hop"]
    rows = [
        ["negated", messy["negated"], f"\"{ex['negated']['prompt']}\""],
        ["reverse", messy["reverse"],
         f"\"{reverse['prompt']}\" → \"{reverse['unedited']}\" unedited, "
         f"\"{reverse['reversed']}\" if reversible"],
        ["two-hop", messy["two_hop"],
         f"\"{two_hop['prompt']}\" → \"{two_hop['unedited']}\" unedited, "
         f"\"{two_hop['edited']}\" after \"→{two_hop['edit']}\""],
        ["other relation", f"{messy['other_relation']} ({messy['other_relation_prompts']} prompts)",
         f"\"{ex['other_relation']['prompt']}\" on the `{ex['other_relation']['relation']}` fact"],
    ]
    return markdown(["probe", "facts", "example"], rows)


def _agreement(run: RebuiltSet) -> str:
    """Whether a rebuilt fact set equals the shipped one, and how it differs if not."""
    if run["equal_to_shipped"]:
        return "yes, exactly"
    if not (run["only_shipped"] or run["only_rebuilt"] or run["fields_differing"]):
        return f"the same facts and fields; `p_true` (rounded to 4 places) within {sci(run['max_p_true_difference'])}"
    fields = ", ".join(f"{name} ({n})" for name, n in run["fields_differing"].items())
    return (f"**no**: {len(run['only_shipped'])} facts only shipped, {len(run['only_rebuilt'])} only "
            f"rebuilt" + (f"; fields differing: {fields}" if fields else ""))


@table("fact_set_rebuild")
def fact_set_rebuild(data: FactSetsData) -> str:
    """benchmarks/fact_sets.py --rebuild: both sets selected again on SmolLM2, timed."""
    rebuild = data["rebuild"]
    rows = []
    for key, label in (("known_facts", "`facts.json`"), ("edit_facts", "`edit_facts.json`")):
        shipped, run = data[key], rebuild[key.removeprefix("known_")]
        relations = shipped["relations"]
        rows.append([
            label, len(relations), f"{shipped['n_candidates']:,}", f"{run['n_facts']:,}",
            f"{run['prompts']:,}", f"{run['seconds']:.0f} s ({run['cpu_seconds']:.0f} CPU-s)",
            _agreement(run),
        ])
    return markdown(
        ["fact set", "relations", "candidates", "kept", "prompts through the model",
         f"rebuild ({rebuild['threads']} thread{'s' if rebuild['threads'] > 1 else ''})",
         "equal to the shipped file"],
        rows,
    )


# --- Generated prose of the "Cost" section: every number read from docs/data/editing_speed.json
# (and the model card or the generation timings where a sentence needs them). A sentence whose
# condition the data no longer meets says what the data says instead.

FLOOR_THREADS = "2"
"""The thread count whose matmul rate divides the counted FLOPs (the runs' torch threads)."""


def _prose(text: str, width: int = 100) -> str:
    """Generated prose laid out as the page writes it: each paragraph and each bullet (a line
    starting "- ") filled to ``width``, a bullet's continuation indented under its text; blank
    lines between paragraphs kept. The renderers below write their sentences without caring
    where lines break."""
    out = []
    for paragraph in text.split("\n\n"):
        items = re.split(r"\n(?=- )", paragraph)
        out.append("\n".join(
            textwrap.fill(" ".join(item.split()), width, subsequent_indent="  " if item.startswith("- ") else "",
                          break_long_words=False, break_on_hyphens=False)
            for item in items
        ))
    return "\n\n".join(out)


def _facts_in(what: str, unit: str = "facts") -> int | None:
    """The count a cost row's description states ("MEMIT, 10 facts in one batch" -> 10)."""
    found = re.search(rf"(\d+) {unit}", what)
    return int(found[1]) if found else None


def _row(data: EditingSpeedData, start: str) -> CostRow | None:
    """The first cost row whose description starts so, or None."""
    return next((row for row in data["rows"] if row["what"].startswith(start)), None)


def _target(wall_s: float, target_s: float) -> str:
    return f"{'within' if wall_s <= target_s else 'against'} the {target_s:g} s target"


def _memit_pair(data: EditingSpeedData, n_layers: int) -> str:
    """The 10-fact before/after pair and the 50-fact run of 2026-11-26."""
    after = _row(data, "MEMIT, 10 facts in one batch, fit from the subject on")
    before = _row(data, "MEMIT, 10 facts in one batch, fit over every position")
    big = _row(data, "MEMIT, 50 facts in one batch, fit from the subject on")
    if after is None or before is None or big is None:
        return ""
    n, n_big, top = _facts_in(after["what"]), _facts_in(big["what"]), max(data["memit_layers"])
    met = big["target_s"] is not None and big["wall_s"] <= big["target_s"]
    return (
        f"The \"before\" column is the issue's, measured by an earlier session on this CPU; the {n}-fact\n"
        "MEMIT pair is the before/after measured in one run on the same facts.\n\n"
        f"- **MEMIT's fit is {before['wall_s'] / after['wall_s']:.2f}× faster** on the same {n} facts in the "
        "same run, from\n  recomputing only the positions after the subject (`reuse_prefix`) and leaving "
        f"converged\n  requests out. It stays compute-bound: about {big['wall_s'] / n_big:.1f} s per fact on "
        f"{n_big} facts, each fit's\n  passes running through the {n_layers - top - 1} layers above layer {top}. "
        f"The {big['target_s']:g} s target for {n_big} facts is\n  "
        + ("met." if met else "not met; fewer prefixes or steps would change the method's results, and\n"
           "  were not tried.")
    )


def _memit_paper(data: EditingSpeedData) -> str:
    """MEMIT's timed edit at the paper's fit against its counted arithmetic."""
    floor, fits = data.get("arithmetic_floor"), data.get("memit_fits")
    if not floor or not fits or not fits["runs"]:
        return ""
    run = fits["runs"][0]
    counted = {fit["label"]: fit for fit in floor.get("memit", [])}
    if run["label"] not in counted:
        return ""
    rate, n, fit = floor["matmul_gflops"][FLOOR_THREADS], run["n_facts"], counted[run["label"]]
    old = next((f for f in counted.values() if f["config"]["stop_on"] == "nll"), None)
    steps, early = run["config"]["steps"], run["config"]["early_stop_nll"]
    ran_all = sum(s == steps - 1 for s in run["fit_steps_each"])
    count_s = n * fit["gflop_per_fact"] / rate
    text = (
        f"- **MEMIT on {n} facts at the paper's fit** (compute_z's total-loss stop and decay, the default\n"
        f"  since issue 38), all facts' rows in shared passes, {'quiet' if fits['quiet'] else 'shared CPU'}, "
        f"{fits['threads']} threads: {run['wall_s']:.1f} s,\n  {_target(run['wall_s'], floor['memit_target_s'])}. "
        f"Its counted arithmetic ({fit['n_facts']} of the facts) is {fit['gflop_per_fact']:,.0f} GFLOP\n"
        f"  per fact, {count_s:.0f} s for {n} at the large-matmul rate, so the run goes at about that rate "
        f"(within\n  {math.ceil(100 * abs(run['wall_s'] - count_s) / count_s)} %)"
        + (" and the target sits below the paper's fit's own arithmetic on this CPU"
           if count_s > floor["memit_target_s"] else "")
        + f": {ran_all} of\n  the {n} facts ran all {steps} passes ({steps - 1} updates; the total loss "
        f"rarely falls below {early:g})."
    )
    if old is not None:
        text += (f" The fit of before (stop on the NLL, squared decay) counts\n  {old['gflop_per_fact']:,.0f} "
                 f"GFLOP per fact ({n * old['gflop_per_fact'] / rate:.0f} s)")
    if "compute_z_gflop_per_fact" in fit:
        code = fit["compute_z_gflop_per_fact"]
        text += ("; MEMIT's own code, running every row padded through the whole model\n  with logits at "
                 f"every position, would count {code:,.0f} ({n * code / rate:.0f} s)")
    return text + "."


@table("editing_cost_findings")
def editing_cost_findings(data: dict[str, Any]) -> str:
    """benchmarks/editing.py --speed (with the model card's layer count): what the cost table and
    the MEMIT runs say, and the ROME comparison's opening bullet."""
    speed: EditingSpeedData = data["editing_speed"]
    n_layers = data["model_cards"]["models"][speed["model"]]["n_layers"]
    parts = [_memit_pair(speed, n_layers), _memit_paper(speed)]
    fits = speed.get("rome_fits")
    if fits:
        parts.append(
            f"- **ROME, before and after issue 38**, on the same {len(fits['facts'])} facts, alternated fact "
            "by fact in one run\n  after one untimed edit of each (`rome_fits` in the data file), "
            + ("with nothing else running\n  (quiet)" if fits["quiet"] else "beside other jobs\n  (shared CPU)")
            + f", {fits['threads']} threads."
        )
    return _prose("\n".join(part for part in parts if part))


def _rome_runs(data: EditingSpeedData) -> tuple[RomeFitRun, list[RomeFitRun]]:
    """The edit-aware fit of before and the paper's fits (the default first, then its variants)."""
    runs = data["rome_fits"]["runs"]
    before = next(run for run in runs if run["config"]["fit"] == "edit_aware")
    return before, [run for run in runs if run["config"]["fit"] == "rome"]


def _rome_time(data: EditingSpeedData) -> str:
    """The paper's fit against the edit-aware fit: time, rows, passes, and the floor."""
    before, papers = _rome_runs(data)
    paper, cfg, old = papers[0], papers[0]["config"], before["config"]
    steps = cfg["steps"]
    stopped = sum(s < steps - 1 for run in papers for s in run["steps_each"])
    floor = next((f for f in data.get("arithmetic_floor", {}).get("rome", []) if f["label"] == paper["label"]), None)
    text = (
        f"- **The paper's fit is {'slower' if paper['median_s'] > before['median_s'] else 'faster'} here, "
        f"{paper['median_s']:.1f} s against {before['median_s']:.1f} s (medians).**\n  "
        + ("Its rows have no padding, but" if paper["padding_share"] == 0 else "Its")
        + f" there are {cfg['n_contexts'] + 1} of them ({cfg['n_contexts']} prefixes and the bare prompt, "
        f"against\n  {old['n_contexts']} and the bare prompt), and "
    )
    if stopped == 0:
        text += (
            f"it never stopped early: the total loss it watches (NLL + KL + decay)\n  never fell below "
            f"{cfg['early_stop']:g}" + (", with either decay (third row)" if len(papers) > 1 else "")
            + f", so every edit ran all {steps} passes\n  ({steps - 1} updates); which term keeps it there "
            "was not measured."
        )
    else:
        text += f"its total-loss stop fired on {stopped} of the {sum(len(r['steps_each']) for r in papers)} edits."
    text += (f" The edit-aware fit stopped on the NLL after\n  {min(before['steps_each'])}–"
             f"{max(before['steps_each'])} steps.")
    if floor is not None:
        target = data["arithmetic_floor"]["rome_target_s"]
        least = floor["gflop_mean"] / data["arithmetic_floor"]["matmul_gflops"][FLOOR_THREADS]
        met = paper["median_s"] <= target
        text += (f" So the {target:g} s target is {'met' if met else 'not met'} at the paper's settings; the\n"
                 f"  arithmetic below puts their least time here at {least:.1f} s.")
    return text


def _p_range(values: Sequence[float]) -> str:
    return f"{min(values):.2f}–{max(values):.2f}"


def _rome_installed(data: EditingSpeedData) -> str:
    """Whether each fit installed the facts, and p(new) of each, the paper's outliers apart (facts
    below the edit-aware fit's least p(new))."""
    fits = data["rome_fits"]
    before, papers = _rome_runs(data)
    n, facts, least = len(fits["facts"]), fits["facts"], min(before["p_new_each"])
    every = all(run["installed"] == n for run in fits["runs"])
    low = [i for i, p in enumerate(papers[0]["p_new_each"]) if p < least]
    rest = [p for i, p in enumerate(papers[0]["p_new_each"]) if i not in low]
    outliers = "; ".join(
        f"{papers[0]['p_new_each'][i]:.3f} against p(true) {papers[0]['p_true_each'][i]:.3f} on {facts[i]}"
        + "".join(f" ({run['p_new_each'][i]:.3f} against {run['p_true_each'][i]:.3f} with the decay of before)"
                  for run in papers[1:])
        for i in low
    )
    paper = f"{_p_range(rest)} with the paper's" + (f" on {len(rest)} facts and {outliers}" if low else "")
    installed = ("**Both fits installed all {n} facts**" if every else
                 "**The fits installed " + ", ".join(f"{r['installed']} of {n}" for r in fits["runs"]) + " facts**")
    return (
        f"- {installed.format(n=n)} (p(new) > p(true) after the rewrite prompt,\n"
        f"  `lmsci_mi.editing.installed.target_probabilities`): p(new) {_p_range(before['p_new_each'])} with "
        f"the edit-aware\n  fit; {paper}. With {n} facts the fits cannot be ranked; the 250-fact table ranks "
        "them (Results, \"new\n  minus before issue 38\"). Whether this model needs fewer prefixes or the NLL "
        "stop (the settings\n  that set the time) was not varied."
    )


@table("editing_rome_findings")
def editing_rome_findings(data: EditingSpeedData) -> str:
    """benchmarks/editing.py --speed --rome-only: what the ROME fits' table says: time, steps,
    p(new), padding."""
    before, _ = _rome_runs(data)
    n = len(before["real_tokens_each"])
    padded, real = sum(before["padded_tokens_each"]) / n, sum(before["real_tokens_each"]) / n
    return _prose("\n".join([
        _rome_time(data), _rome_installed(data),
        f"- The padded layout of before ran {100 * before['padding_share']:.0f} % padded positions "
        f"({padded:,.0f} of {padded + real:,.0f} per edit, pad tokens of right-padded rows)"
        + ("; the grouped layout runs none, at the same δ (unit-tested)." if _rome_runs(data)[1][0]["padding_share"] == 0
           else "."),
    ]), width=98)


@table("editing_floor_intro")
def editing_floor_intro(data: EditingSpeedData) -> str:
    """benchmarks/editing.py --floor: how the arithmetic table's counts and rate were taken."""
    return _prose(
        "- **The arithmetic**, counted with torch's `FlopCounterMode` (matmuls only) and divided by the\n"
        f"  rate of a large float32 matmul at {FLOOR_THREADS} threads (probed on a quiet CPU; `--keep-rate` "
        "reuses it),\n  for ROME at the paper's settings running only the positions its fit needs (the default "
        "now)\n  and as implemented before issue 38, with the share of padded positions (pad tokens, and\n"
        "  positions recomputed although δ cannot change them), and for MEMIT as implemented:"
    )


def _rome_floor_sentences(speed: EditingSpeedData, n_layers: int) -> str:
    """ROME's counted arithmetic at the paper's settings, against its measured time and target."""
    floor = speed["arithmetic_floor"]
    before, papers = _rome_runs(speed)
    counted = {fit["label"]: fit for fit in floor["rome"]}
    paper, old = counted[papers[0]["label"]], counted[before["label"]]
    cfg, layer, rate = paper["config"], floor["rome_layer"], floor["matmul_gflops"][FLOOR_THREADS]
    steps, least = cfg["steps"], paper["gflop_mean"] / rate
    every = all(s == steps - 1 for run in papers for s in run["steps_each"])
    positions = {real // steps for real in paper["real_tokens_each"]}
    passes = (f"{steps} passes over {positions.pop()} positions, each" if every and len(positions) == 1
              else f"up to {steps} passes, each")
    reachable = least <= floor["rome_target_s"]
    return (
        f"Our implementation of the paper's settings counts {paper['gflop_mean']:,.0f} GFLOP per edit on "
        f"{MODEL_SHORT.get(speed['model'], speed['model'])}\nat layer {layer} ({passes} through the "
        f"{n_layers - layer - 1} blocks above the layer, forward and backward):\n{least:.1f} s at this rate, "
        f"and the measured {papers[0]['median_s']:.1f} s "
        f"({'quiet' if speed['rome_fits']['quiet'] else 'shared CPU'}) is "
        f"{papers[0]['median_s'] / least:.1f}× that. The count\nis of the fit as it runs: only the positions "
        "from the subject's last token on are recomputed, the\nunembedding runs only where the loss reads it, "
        "and no weight gradient is computed (the weights\nare frozen during the fit), so little of it is work "
        f"the method does not need; what sets it is the\npaper's {cfg['n_contexts'] + 1} rows and {steps} passes"
        + (" (the total-loss stop never fired on these facts)" if every else "")
        + ". Fewer prefixes or\nthe NLL stop would cut it, and need the editing table's comparison behind them. "
        f"The settings\nof before cost {old['gflop_mean']:,.0f} GFLOP, {100 * old['padding_share']:.0f} % of "
        f"whose positions were padding. So one ROME edit in\n{floor['rome_target_s']:g} s is "
        + ("" if reachable else "not ")
        + f"reachable at the paper's settings on this CPU: their counted arithmetic alone\ntakes {least:.1f} s "
        "at the large-matmul rate."
    )


@table("editing_floor_findings")
def editing_floor_findings(data: dict[str, Any]) -> str:
    """benchmarks/editing.py --floor (with the model card's layer count): what the arithmetic
    table says of ROME's least time and of MEMIT's measured time against its count."""
    speed: EditingSpeedData = data["editing_speed"]
    n_layers = data["model_cards"]["models"][speed["model"]]["n_layers"]
    floor = speed["arithmetic_floor"]
    text = _rome_floor_sentences(speed, n_layers)
    runs = {run["label"]: run for run in speed.get("memit_fits", {}).get("runs", [])}
    for fit in floor.get("memit", []):
        if fit["label"] not in runs:
            continue
        run = runs[fit["label"]]
        count_s = run["n_facts"] * fit["gflop_per_fact"] / floor["matmul_gflops"][FLOOR_THREADS]
        text += (f" MEMIT's rows\nwere counted on {fit['n_facts']} facts on {floor['date']}; its measured "
                 f"{run['n_facts']}-fact time is within\n"
                 f"{math.ceil(100 * abs(run['wall_s'] - count_s) / count_s)} % of its count, because its "
                 "shared passes make large matmuls.")
    return _prose(text, width=98)


@table("editing_evaluation_cost")
def editing_evaluation_cost(data: dict[str, Any]) -> str:
    """benchmarks/editing.py --speed with benchmarks/generation.py: what one fact's evaluation
    costs, its generation's share, and the cached baseline against the target."""
    speed, generation = data["editing_speed"], data["generation"]
    computed = _row(speed, "evaluation of one fact, GE")
    cached = _row(speed, "evaluation of one fact, unedited baseline cached")
    tokens = _facts_in(computed["what"], "tokens") if computed else None
    per_token = generation["seconds_per_step"]["lmsci_mi.generate"]["1"]
    text = ("- **The evaluation** batches every prompt of a fact set in one pass and samples all facts'\n"
            "  generations together through the core sampler.")
    if tokens:
        text += (f" For one fact alone, the {tokens}-token generation at\n  batch size 1 costs about "
                 f"{per_token:.1f} s per token (`docs/data/generation.json`), so about {tokens * per_token:.0f} s "
                 "of\n  an evaluation.")
    text += " It runs twice (unedited and edited) when the unedited baseline is not cached, once\n  when it is"
    if cached is not None:
        text += f": {cached['wall_s']:.1f} s" + (f", {_target(cached['wall_s'], cached['target_s'])}"
                                                  if cached["target_s"] is not None else "")
    return _prose(text + ". The baseline is cached per fact and model on first use, so an editing table or a "
                  "second evaluation of the same facts pays it once.")


# --- Generated prose under the editing_sweeps table (docs/data/editing_sweeps.json, with C's
# eigenvalues from docs/data/alphaedit.json when both were taken on the same key statistics).

PAPER_SETTINGS = {
    ("mom2_weight", 15000.0): "the paper's GPT-J value",
    ("mom2_weight", 20000.0): "the paper's GPT-2 XL value",
    ("nullspace_threshold", 0.01): "the paper's footnote value",
}
"""The papers' own settings (Meng et al. 2023, Fang et al. 2025), named where the sweep has them:
citations, not measurements."""


def _e(x: float) -> str:
    """A threshold as the page writes it: 2e-2."""
    mantissa, exponent = f"{x:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _gap(values: Sequence[float]) -> str:
    """A paired difference in words: "8.9 lower [−15.6, −3.5]", "the same (0.0 [−1.1, 1.3])"."""
    estimate, low, high = values
    interval = minus(f"[{low:.1f}, {high:.1f}]")
    if f"{abs(estimate):.1f}" == "0.0":
        return f"the same (0.0 {interval})"
    words = f"{abs(estimate):.1f} {'higher' if estimate > 0 else 'lower'}"
    return words + (f", an interval that includes 0 {interval}" if low <= 0 <= high else f" {interval}")


def _shares(row: SweepRow, key: str, layers: Sequence[str] | None = None) -> str:
    """A null-space share over the layers, in percent: "79–90"; one decimal below 10 %."""
    values = [100 * v[key] for layer, v in row["null_space"].items() if layers is None or layer in layers]
    digits = 1 if max(values) < 5 else 0
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return low if low == high else f"{low}–{high}"


def _named(row: SweepRow) -> str:
    key, value = next(iter(row["changes"].items()))
    label = PAPER_SETTINGS.get((key, float(value)))
    shown = f"{value:,.0f}" if key == "mom2_weight" else _e(value)
    return f"{shown} ({label})" if label and key == "mom2_weight" else (f"{label} {shown}" if label else shown)


def _moves(metric: str, old: float, new: float, start: bool = True) -> str:
    verb = "falls" if new < old else "rises"
    return f"{metric} {verb} from {old:.1f} to {new:.1f}" if start else f"{metric} from {old:.1f} to {new:.1f}"


def _sweep_memit(rows: list[SweepRow], reference: SweepRow) -> str:
    lam = reference["changes"]["mom2_weight"]
    larger = sorted((r for r in rows if r["changes"]["mom2_weight"] > lam), key=lambda r: r["changes"]["mom2_weight"])
    smaller = [r for r in rows if r["changes"]["mom2_weight"] < lam]
    first, ref = (larger[0], reference["metrics"]) if larger else (None, reference["metrics"])
    trade = first is not None and first["vs_reference"]["S"][0] < 0 < first["vs_reference"]["NS"][0]
    text = ("- **MEMIT: λ trades installed facts for neighbours, and the paper's λ installs fewer.**" if trade
            else "- **MEMIT's λ, swept.**")
    if first is not None:
        m = first["metrics"]
        text += (f" At {_named(first)} {_moves('ES', ref['ES'], m['ES'])} and {_moves('PS', ref['PS'], m['PS'], False)}"
                 f" while {_moves('NS', ref['NS'], m['NS'])}; S is {_gap(first['vs_reference']['S'])}.")
    for row in [*larger[1:], *smaller]:
        text += f" At {_named(row)} S is {_gap(row['vs_reference']['S'])}."
    better = [r for r in rows if r is not reference and r["vs_reference"]["S"][1] > 0]
    return text + (f" So the default stays {lam:,.0f}." if not better else "")


def _sweep_default(default: SweepRow, rows: list[SweepRow], alphaedit: dict | None) -> str:
    """The default null space, a layer whose trace share is under half the next one's apart."""
    trace = sorted(default["null_space"].items(), key=lambda kv: kv[1]["trace_share"])
    apart = trace[0][0] if len(trace) > 1 and trace[0][1]["trace_share"] < trace[1][1]["trace_share"] / 2 else None
    rest = [layer for layer in default["null_space"] if layer != apart]
    where = f" at layers {rest[0]}–{rest[-1]}" if apart else ""
    text = (f"- **AlphaEdit's default null space holds {_shares(default, 'trace_share', rest)} % of C's energy"
            f"{where}.** At the code's {_e(default['changes']['nullspace_threshold'])} it is "
            f"{_shares(default, 'direction_share')} % of the directions")
    if apart:
        layer = default["null_space"][apart]
        text += f"; at layer {apart} it holds {100 * layer['trace_share']:.1f} % of trace(C)"
        if alphaedit and apart in alphaedit["eigenvalues"]:
            eig = alphaedit["eigenvalues"][apart]
            text += (f", where C's largest eigenvalue is {eig['max']:.0f} against a median of {eig['median']:.3f} "
                     "(`alphaedit.json`, the same key statistics)")
    text += f"; P keeps {_shares(default, 'key_norm_kept_mean')} % of the edit keys' norm."
    for row in rows:
        key, value = next(iter(row["changes"].items()))
        if row is not default and (key, float(value)) in PAPER_SETTINGS:
            text += (f" At {_named(row)}, {_shares(row, 'direction_share')} % of the directions and "
                     f"{_shares(row, 'trace_share', rest)} % of the trace{where}: S is {_gap(row['vs_reference']['S'])}.")
    return text


def _sweep_smallest(row: SweepRow, reference: SweepRow) -> str:
    """AlphaEdit's smallest threshold: the null space and the trade it makes."""
    m, ref = row["metrics"], reference["metrics"]
    return (
        "- **A null space that holds less of C moves AlphaEdit as a larger λ moves MEMIT.** At "
        f"{_e(row['changes']['nullspace_threshold'])} ({_shares(row, 'direction_share')} % of the directions, "
        f"{_shares(row, 'trace_share')} % of the trace; P keeps {_shares(row, 'key_norm_kept_mean')} % of the "
        f"keys' norm) {_moves('ES', ref['ES'], m['ES'])} and {_moves('PS', ref['PS'], m['PS'], False)}, "
        f"{_moves('NS', ref['NS'], m['NS'])} ({_gap(row['vs_reference']['NS'])}), and S is "
        f"{_gap(row['vs_reference']['S'])}."
    )


def _sweep_trace_share(rows: list[SweepRow], alphaedit_rows: list[SweepRow], reference: SweepRow) -> str:
    """The trace-share rule's rows, smallest share first, and whether any setting beats the default."""
    text = "- **The trace-share rule spans the same trade-off.**"
    for i, row in enumerate(sorted(rows, key=lambda r: r["changes"]["nullspace_trace_share"])):
        share = f"{100 * row['changes']['nullspace_trace_share']:g} %"
        gaps = f"S {_gap(row['vs_reference']['S'])} and NS {_gap(row['vs_reference']['NS'])}"
        if i == 0:
            text += (f" A null space holding {share} of trace(C) ({_shares(row, 'direction_share')} % of the "
                     f"directions) gives ES {row['metrics']['ES']:.1f} and NS {row['metrics']['NS']:.1f} ({gaps});")
        else:
            text += f" {share} ({_shares(row, 'direction_share')} % of the directions) gives {gaps};"
    text = text.rstrip(";") + "."
    above = [r for r in alphaedit_rows if r is not reference and r["vs_reference"]["S"][1] > 0]
    default = _e(reference["changes"]["nullspace_threshold"])
    if above:
        return text + " " + ", ".join(_named(r) for r in above) + f" has an S above the code's {default}'s."
    return (text + f" No setting's S is above the code's {default} by an interval that excludes 0, so the "
            "default stays the code's value; the trace share is there for models whose keys sit on another scale.")


@table("editing_sweeps_findings")
def editing_sweeps_findings(data: dict[str, Any]) -> str:
    """benchmarks/editing_sweeps.py (with C's eigenvalues from benchmarks/alphaedit.py when both
    read the same key statistics): what the λ and null-space sweep says, every number from it."""
    sweeps, alphaedit = data["editing_sweeps"], data["alphaedit"]
    same_c = all(alphaedit.get(k) == sweeps[k] for k in ("model", "stats_tokens", "stats_source"))
    rows, ref_names = sweeps["rows"], sweeps["reference"]
    by_method = {m: [r for r in rows if r["method"] == m] for m in ref_names}
    refs = {m: next(r for r in by_method[m] if r["name"] == name) for m, name in ref_names.items()}
    thresholds = [r for r in by_method["alphaedit"] if "nullspace_threshold" in r["changes"]]
    shares = [r for r in by_method["alphaedit"] if "nullspace_trace_share" in r["changes"]]
    smallest = min(thresholds, key=lambda r: r["changes"]["nullspace_threshold"])
    return _prose("\n".join([
        _sweep_memit(by_method["memit"], refs["memit"]),
        _sweep_default(refs["alphaedit"], thresholds, alphaedit if same_c else None),
        _sweep_smallest(smallest, refs["alphaedit"]),
        _sweep_trace_share(shares, by_method["alphaedit"], refs["alphaedit"]),
    ]))


# --- the editing table's findings (benchmarks/editing.py --table) ---------------------------------


def _rows_by_method(data: EditingTableData) -> dict[str, EditRow]:
    return {row["model"]: row for row in data["rows"]}


def _overlap(a: EditRow, b: EditRow, metric: str) -> bool:
    (low_a, high_a), (low_b, high_b) = a["ci95"][metric], b["ci95"][metric]
    return low_a <= high_b and low_b <= high_a


def _cell(row: EditRow, metric: str) -> str:
    return ci(row["metrics"][metric], *row["ci95"][metric], 1)


def _rome_fit(config: dict[str, Any]) -> str:
    """Which ROME fit a table row ran: the paper's, or the edit-aware fit of before issue 38."""
    if config.get("fit", "edit_aware" if config.get("edit_aware") else "rome") == "rome":
        return f"the paper's fit ({config.get('n_contexts')} prefixes, up to {config.get('steps')} steps)"
    return "the edit-aware fit and the settings of before issue 38"


@table("editing_table_intro")
def editing_table_intro(data: EditingTableData) -> str:
    """benchmarks/editing.py --table: what the table ran (facts, C's tokens, GE's length, ROME's fit)."""
    rows = _rows_by_method(data)
    rome = (f" ROME edits one fact at a time and restores between facts, with "
            f"**{_rome_fit(data['configs']['rome'])}**." if "rome" in rows else "")
    before = ([_method_name(m) for m in data.get("before_38", {})])
    also = (f" {' and '.join(before)} also run at their defaults before issue 38 on the same facts "
            "(rows '(defaults before issue 38)'; the paired differences below)." if before else "")
    return _prose(
        f"The editing table on the first {data['n_facts']} facts of the editing fact set in a seeded "
        f"random order (all 13 relations), C from {data['stats_tokens']:,} tokens, GE of "
        f"{data['generation_tokens']} tokens, every row with a 95 % percentile-bootstrap interval over "
        f"facts. MEMIT and AlphaEdit install all {data['n_facts']} facts in one edit.{rome}{also}")


def _batch_findings(rows: dict[str, EditRow], n: int) -> list[str]:
    memit, alpha = rows.get("memit"), rows.get("alphaedit")
    if memit is None or alpha is None:
        return []
    s_overlap = "overlap" if _overlap(memit, alpha, "S") else "do not overlap"
    margins = "just touch or overlap" if _overlap(memit, alpha, "EM") else "are apart"
    larger = "AlphaEdit's" if alpha["metrics"]["EM"] > memit["metrics"]["EM"] else "MEMIT's"
    return [
        f"- **Both batch methods install {n} facts in one edit**: ES {num(memit['metrics']['ES'], 1)} "
        f"(MEMIT) and {num(alpha['metrics']['ES'], 1)} (AlphaEdit), PS {num(memit['metrics']['PS'], 1)} "
        f"and {num(alpha['metrics']['PS'], 1)}. Their S intervals {s_overlap} ({_cell(memit, 'S')} and "
        f"{_cell(alpha, 'S')}); {larger} margins are larger (EM {num(alpha['metrics']['EM'], 1)} against "
        f"{num(memit['metrics']['EM'], 1)}, PM {num(alpha['metrics']['PM'], 1)} against "
        f"{num(memit['metrics']['PM'], 1)}), with intervals that {margins}.",
        f"- **NS falls to {num(memit['metrics']['NS'], 1)} (MEMIT) and {num(alpha['metrics']['NS'], 1)} "
        f"(AlphaEdit)** ({num(rows['unedited']['metrics']['NS'], 1)} unedited): one edit of {n} facts "
        f"moves about one in {100 / max(100 - memit['metrics']['NS'], 1e-9):.0f} neighbourhood prompts "
        "about held-out subjects. The threshold sweep below varies what AlphaEdit adds.",
    ]


def _rome_findings(rows: dict[str, EditRow]) -> list[str]:
    rome = rows.get("rome")
    if rome is None:
        return []
    m = rome["metrics"]
    batch = [rows[k] for k in ("memit", "alphaedit") if k in rows]
    above = [METHOD_NAMES.get(b["model"], b["model"]) for b in batch
             if rome["ci95"]["S"][0] > b["ci95"]["S"][1]]
    overlaps = [METHOD_NAMES.get(b["model"], b["model"]) for b in batch if _overlap(rome, b, "S")]
    compare = (f"above {' and '.join(above)}'s S" if above else "not above the batch methods' S")
    if overlaps:
        compare += f", its interval overlapping {' and '.join(overlaps)}'s"
    return [f"- **ROME, one fact at a time**: ES {num(m['ES'], 1)}, PS {num(m['PS'], 1)}, NS "
            f"{num(m['NS'], 1)} (S {_cell(rome, 'S')}: {compare}); margins EM {num(m['EM'], 1)}, PM "
            f"{num(m['PM'], 1)}, NM {num(m['NM'], 1)}: each fact is edited alone, so no neighbour shares "
            "its edit with the others."]


@table("editing_table_findings")
def editing_table_findings(data: EditingTableData) -> str:
    """benchmarks/editing.py --table: what the table and margins say, each sentence from the data."""
    rows = _rows_by_method(data)
    unedited = rows["unedited"]
    edited = [r for r in data["rows"] if r["model"] != "unedited"]
    in_ge = [_short_label(r, data["n_facts"]) for r in edited if _overlap(r, unedited, "GE")]
    ge = (f"- **GE stays within the unedited interval** for {len(in_ge)} of {len(edited)} edited rows"
          + (f" (not: {', '.join(_short_label(r, data['n_facts']) for r in edited if not _overlap(r, unedited, 'GE'))})"
             if len(in_ge) < len(edited) else "") + ".")
    seconds = ", ".join(f"{_method_name(r['model'])} {r['seconds_per_edit']:.1f} s" for r in edited
                        if r["seconds_per_edit"] is not None)
    cost = (f"- Seconds per edit (`seconds_per_edit` in the data): {seconds} (a batch method's one edit "
            f"installs all {data['n_facts']} facts; ROME's is per fact). At one thread beside other jobs: "
            "not speed figures (see Cost).")
    return _prose("\n".join([*_batch_findings(rows, data["n_facts"]), ge, *_rome_findings(rows), cost]))


def _and(items: Sequence[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _span(values: Sequence[int]) -> str:
    """"24" when every method gives the same count, else "min–max"."""
    return str(min(values)) if min(values) == max(values) else f"{min(values)}–{max(values)}"


@table("editing_messy_findings")
def editing_messy_findings(data: EditingTableData) -> str:
    """benchmarks/editing.py --table: the messy-knowledge reading, each rate from the data."""
    rows = _rows_by_method(data)
    edited = [r for r in data["rows"] if r["model"] != "unedited" and not r["model"].endswith("-before-38")]
    names = _and([f"{num(r['metrics']['NEG'], 1)} % ({_method_name(r['model'])})" for r in edited])
    probes = data["rows"][0]["probe_facts"]
    rev = [r for r in edited if r["metrics"]["REV"] > 0]
    hop = [round(r["metrics"]["2HOP"] * probes["2HOP"] / 100) for r in edited]
    orl = [r["metrics"]["ORL"] for r in edited]
    rev_text = ("none is reversed by any method" if not rev else
                "reversed by " + ", ".join(_method_name(r["model"]) for r in rev))
    return _prose("\n".join([
        "What the \"messy knowledge\" story expects, and what SmolLM2 shows:",
        f"- **Negation curse** (expected: an edit of \"X is in Y\" also moves \"X is not in Y\"): on "
        f"{names} of the negated prompts the new target beats the true one after the edit "
        f"({num(rows['unedited']['metrics']['NEG'], 1)} % before).",
        f"- **Reversal curse** (expected: learning \"A is B\" does not give \"B is A\"): on the "
        f"{probes['REV']} facts with a reverse probe, {rev_text}. So few facts are a small sample; "
        "country → capital is the set's only one-to-one relation.",
        f"- **Two-hop consequences** (expected to fail often): {_span(hop)} of the {probes['2HOP']} "
        "two-hop facts move to the answer the edit implies (by method). The two-hop "
        "prompt shares the subject and most of its wording with the edited one, so this may be the "
        "subject's new association rather than reasoning over it.",
        f"- **Over-ripple** (the edit leaks into unrelated relations of X): on average "
        f"{_span([round(x) for x in orl])} % of a fact's other-relation prompts lose their top-1 answer "
        f"after the edit ({rows['unedited']['other_relation_prompts']} prompts on {probes['ORL']} "
        "facts): the edit rewrites what the model says about the subject beyond the edited relation.",
    ]))

"""Renderers of docs/editing.md: the editing table, margins, ROME and AlphaEdit layers, sequential editing, cost."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from . import METHOD_NAMES, MODEL_NAMES, bold, ci, markdown, num, pm, sci, table
from .schemas.editing import (
    AlphaEditData,
    AlphaEditTokensData,
    CostRow,
    EditingSpeedData,
    EditingTableData,
    EditRow,
    FactSetsData,
    RebuiltSet,
    RomeLayersData,
    SequentialEditingData,
)


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


@table("sequential_editing")
def sequential_editing(data: SequentialEditingData) -> str:
    """benchmarks/sequential_editing.py: every method's every evaluated step, ± one binomial s.e.

    Methods come in the page's order (ROME, MEMIT, AlphaEdit, then any other in the file's order),
    so a run that adds steps or methods changes only the data file."""
    methods = data["methods"]
    names = [m for m in SEQUENTIAL_ORDER if m in methods] + [
        m for m in methods if m not in SEQUENTIAL_ORDER
    ]
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
    names = [m for m in SEQUENTIAL_ORDER if m in methods] + [m for m in methods if m not in SEQUENTIAL_ORDER]
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
    metrics = ("S", "ES", "PS", "NS")
    rows = [[METHOD_NAMES.get(name, name), str(next(iter(gaps.values()))["n"]),
             *(ci(gaps[m]["estimate"], gaps[m]["low"], gaps[m]["high"], 1) for m in metrics)]
            for name, gaps in differences.items()]
    return markdown(["method", "facts", *(f"Δ{m} (new − before)" for m in metrics)], rows)


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

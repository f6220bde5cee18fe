"""The measured tables of README.md and docs/, each rendered from the JSON file a benchmark writes.

One function per table, ``NAME(data) -> str``, returns the markdown table (header, separator and
rows). ``data`` is the parsed data file; a block that names several files gets one dict keyed by
each file's stem, in the order the block lists them. ``scripts/doc_tables.py`` finds the blocks
in the pages and puts each table in place. Only the standard library is used, so the check that
the pages agree with their data runs in a fraction of a second.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

Renderer = Callable[[Any], str]
RENDERERS: dict[str, Renderer] = {}
"""Every table renderer by the name its blocks use."""

MODEL_NAMES = {"smollm2-135m": "SmolLM2-135M", "gemma3-270m": "Gemma 3 270M"}
MODEL_SHORT = {"smollm2-135m": "SmolLM2", "gemma3-270m": "Gemma 3"}
METHOD_NAMES = {"rome": "ROME", "memit": "MEMIT", "alphaedit": "AlphaEdit"}


def table(name: str) -> Callable[[Renderer], Renderer]:
    """Register a renderer under ``name``; a second renderer of the same name is a mistake."""

    def register(fn: Renderer) -> Renderer:
        if name in RENDERERS:
            raise ValueError(f"two doc-table renderers named {name!r}")
        RENDERERS[name] = fn
        return fn

    return register


def markdown(header: Sequence[object], rows: Iterable[Sequence[object]]) -> str:
    """A markdown table; every row must have the header's number of cells."""
    def line(cells: Sequence[object]) -> str:
        # An empty cell is written "| |", as the hand-written tables have it.
        return "|" + "|".join(f" {c} " if str(c) else " " for c in cells) + "|"

    lines = [line(header), "|" + "---|" * len(header)]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"a row of {len(row)} cells under a header of {len(header)}: {row}")
        lines.append(line(row))
    return "\n".join(lines)


def num(x: float, digits: int) -> str:
    return f"{x:.{digits}f}"


def ci(x: float, low: float, high: float, digits: int) -> str:
    """``x [low, high]``."""
    return f"{x:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def pm(x: float, se: float, digits: int) -> str:
    """``x ± se``."""
    return f"{x:.{digits}f} ± {se:.{digits}f}"


def minus(text: str) -> str:
    """Typographic minus signs, as the pages that use them write numbers."""
    return text.replace("-", "−")


def sci(x: float) -> str:
    """Two significant digits in e-notation without the exponent's padding: 2.7e-5."""
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def strength(x: float) -> str:
    """A steering strength as the curves list it: 0, 0.25, 4."""
    return f"{x:g}"


def bold(text: str, on: bool = True) -> str:
    return f"**{text}**" if on else text


# ---------------------------------------------------------------- editing (docs/editing.md)


@table("alphaedit_layers")
def alphaedit_layers(data: dict) -> str:
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
def alphaedit_tokens(data: dict) -> str:
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
def sequential_editing(data: dict) -> str:
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


# The page's words for the rows benchmarks/editing.py --speed writes; a row it does not know
# keeps the script's own words.
COST_LABELS = {
    "one ROME edit, layer 4 (mean of 5 facts)": "one ROME edit at layer 4 (mean of 5 facts)",
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


def _cost_rank(row: dict) -> int:
    """ROME first, then MEMIT, then the evaluation (the page's order); ties keep the file's."""
    what = row["what"]
    return 0 if what.startswith("one ROME edit") else 1 if what.startswith("MEMIT") else 2


@table("editing_cost")
def editing_cost(data: dict) -> str:
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


def _edit_label(row: dict, n_facts: int) -> str:
    if row["model"] == "unedited":
        label = f"{MODEL_NAMES['smollm2-135m']} unedited"
    else:
        how = ("one batch" if row["n_edits"] == 1
               else "one fact at a time" if row["n_edits"] == row["n_facts"]
               else f"{row['n_edits']} edits")
        label = f"+ {METHOD_NAMES.get(row['model'], row['model'])}, {how}"
    return label if row["n_facts"] == n_facts else f"{label} ({row['n_facts']} facts)"


def _metric_cells(row: dict, metrics: Sequence[str]) -> list[str]:
    return [ci(row["metrics"][m], *row["ci95"][m], 1) for m in metrics]


@table("editing_table")
def editing_table(data: dict) -> str:
    """benchmarks/editing.py --table: S, ES, PS, NS and GE with 95 % bootstrap intervals."""
    metrics = ("S", "ES", "PS", "NS", "GE")
    return markdown(
        [f"model + method ({data['n_facts']} facts)", *metrics],
        [[_edit_label(row, data["n_facts"]), *_metric_cells(row, metrics)] for row in data["rows"]],
    )


@table("editing_margins")
def editing_margins(data: dict) -> str:
    """benchmarks/editing.py --table: the probability margins EM, PM and NM in points."""
    metrics = ("EM", "PM", "NM")
    return markdown(
        ["model + method", *metrics],
        [[row["model"], *_metric_cells(row, metrics)] for row in data["rows"]],
    )


@table("rome_layers")
def rome_layers(data: dict) -> str:
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


# ---------------------------------------------------------------- circuits and edges


# The page's words for the forms benchmarks/patching.py --only nnsight writes.
NNSIGHT_LABELS = {
    "nnsight, one trace per patch (loop)": "nnsight, one trace per patch (270 traces)",
    "nnsight batched, 270 invokes per trace (1 traces)": "nnsight batched, 270 invokes in one trace",
}


@table("patching_nnsight")
def patching_nnsight(data: dict) -> str:
    """benchmarks/patching.py --only nnsight: the head sweep in nnsight's forms against lmsci-mi."""
    run = data["sections"]["nnsight"]
    best = re.search(r"best of \d+", run["lmsci_mi_timing"])
    ours = 'lmsci-mi `patch_activations(site="z", positions="all")`' + (
        f" ({best.group(0)})" if best else ""
    )
    rows = [[ours, num(run["lmsci_mi_seconds"], 2), "1.0×", "—"]]
    rows += [
        [NNSIGHT_LABELS.get(p["form"], p["form"]), num(p["seconds"], 2),
         bold(f"{p['ratio_vs_lmsci_mi']:.1f}×"), sci(p["max_abs_diff"])]
        for p in run["peers"]
    ]
    return markdown(["form", "s", "× lmsci-mi", "max abs diff vs lmsci-mi"], rows)


EAP_IG_STEPS = 5
"""benchmarks/edges.py scores with EAP-IG at m = 5 (MIB's default); edges.json does not record m."""
EDGES_TARGET_FRACTION = 5.0
"""The edge budget (%) of the 0.75 faithfulness target."""


def _curves(data: dict) -> dict[str, dict]:
    return {key.removeprefix("curve_"): curve for key, curve in data.items()
            if key.startswith("curve_")}


@table("edges_timing")
def edges_timing(data: dict) -> str:
    """benchmarks/edges.py: scoring, curve and exact-patching times against their targets."""
    curve_s = [curve["seconds"] for curve in _curves(data).values()]
    exact = data["exact_200"]
    equal = "values equal" if exact["max_abs_diff"] == 0 else f"max diff {sci(exact['max_abs_diff'])}"
    return markdown(
        ["step", "time", "target"],
        [
            [f"EAP-IG (m = {EAP_IG_STEPS}) over all {data['edges']:,} edges",
             f"{num(data['seconds_EAP-IG'], 1)} s", "≤ 60 s"],
            ["EAP over all edges", f"{num(data['seconds_EAP'], 1)} s", ""],
            [f"one {len(data['fractions'])}-point faithfulness curve (exact edge patching, "
             f"{data['prompts']} prompts), per curve",
             f"{num(min(curve_s), 1)}–{num(max(curve_s), 1)} s", "≤ 60 s"],
            [f"{exact['edges']} single-edge circuits, exact: batched evaluator vs one batched "
             "forward per edge",
             f"{num(exact['batched_s'], 1)} s vs {num(exact['per_edge_pass_s'], 0)} s "
             f"({exact['speedup']:.1f}×; {equal})", "≥ 5×"],
        ],
    )


@table("edges_faithfulness")
def edges_faithfulness(data: dict) -> str:
    """benchmarks/edges.py: normalised faithfulness at MIB's budgets, CPR and CMD, per scoring
    method and pruning; the EAP-IG greedy curve with its interval, bold at the target budget."""
    fractions = data["fractions"]
    curves = _curves(data)
    blank = ["", ""]
    rows = [["edges kept (greedy)", *(f"{k:,}" for k in curves["EAP-IG_greedy"]["kept"]), *blank]]
    for key, curve in curves.items():
        method, prune = key.rsplit("_", 1)
        cells = [
            bold(num(f, 2), key == "EAP-IG_greedy" and x == EDGES_TARGET_FRACTION)
            for x, f in zip(fractions, curve["faithfulness"], strict=True)
        ]
        label = f"{method}, {'top-n' if prune == 'topn' else prune}"
        rows.append([label, *cells, num(curve["cpr"], 3), num(curve["cmd"], 3)])
        if key == "EAP-IG_greedy":
            rows.append(["95 % interval", *(
                num(low, 2) if num(low, 2) == num(high, 2) else f"{num(low, 2)}–{num(high, 2)}"
                for low, high in curve["ci95"]
            ), *blank])
    return markdown(["% of edges", *(f"{x:g}" for x in fractions), "CPR", "CMD"], rows)


@table("edges_ig_steps")
def edges_ig_steps(data: dict) -> str:
    """benchmarks/edges.py --stage steps: EAP-IG greedy circuits by integration steps m; the best
    faithfulness at the target budget in bold."""
    main = data["curve_EAP-IG_greedy"]
    runs = {str(EAP_IG_STEPS): {
        "seconds": data["seconds_EAP-IG"],
        "fractions": data["fractions"],
        "faithfulness": main["faithfulness"],
        "ci95": main["ci95"],
        "has_name_movers_5pct": data["eap_ig_5pct"]["has_name_movers"],
    }, **data["eap_ig_steps"]}
    shown = next(iter(data["eap_ig_steps"].values()))["fractions"]

    def at(run: dict, fraction: float) -> tuple[float, float, float]:
        i = run["fractions"].index(fraction)
        return run["faithfulness"][i], *run["ci95"][i]

    best = max(at(run, EDGES_TARGET_FRACTION)[0] for run in runs.values())
    rows = []
    for m, run in runs.items():
        cells = [
            bold(ci(*at(run, x), 2), x == EDGES_TARGET_FRACTION and at(run, x)[0] == best)
            for x in shown
        ]
        movers = "both" if run["has_name_movers_5pct"] else "not both"
        rows.append([m, f"{num(run['seconds'], 1)} s", *cells, movers])
    return markdown(
        ["m", "scoring time", *(f"{x:g} %" for x in shown),
         f"name movers in the {EDGES_TARGET_FRACTION:g} % circuit"],
        rows,
    )


AUTO_CIRCUIT = "auto-circuit 1.0.1"
"""The version benchmarks/peers_auto_circuit.py ran against (the peers venv's; not in the file)."""


@table("edges_auto_circuit")
def edges_auto_circuit(data: dict) -> str:
    """benchmarks/peers_auto_circuit.py: EAP and exact patching against auto-circuit."""
    t = data["timing"]
    model = t["model"].split(" (")[0]

    def row(label: str, key: str) -> list[str]:
        return [label, f"{num(t[key]['lmsci_mi'], 1)} s", f"{num(t[key]['auto_circuit'], 1)} s",
                f"{t[key]['ratio']:.1f}× faster"]

    return markdown(
        [f"{model}, {t['edges']:,} edges, {t['prompts']} prompts × {t['tokens']} tokens",
         "lmsci-mi", AUTO_CIRCUIT, "ratio"],
        [row("EAP over all edges", "eap_s"),
         row("exact patching of 10 circuits (MIB budgets, top-n)", "patch_10_circuits_s")],
    )


# ---------------------------------------------------------------- knowledge


def _agreement(model: str) -> Renderer:
    def render(data: dict) -> str:
        rows = data["models"][model]["agreement"]
        return markdown(
            ["layer", "agreement", "shuffled"],
            [[r["layer"], pm(r["agreement"], r["agreement_se"], 3),
              pm(r["shuffled"], r["shuffled_se"], 3)] for r in rows],
        )

    render.__doc__ = f"benchmarks/kv_memories.py: {model}'s key-value agreement per layer, ± s.e."
    return render


table("kv_agreement_smollm2")(_agreement("smollm2-135m"))
table("kv_agreement_gemma3")(_agreement("gemma3-270m"))


def _share(x: float) -> str:
    """A share in per cent: one decimal below 100 %, whole per cent above."""
    return f"{100 * x:.1f} %" if x < 1 else f"{100 * x:.0f} %"


@table("kv_eiffel")
def kv_eiffel(data: dict) -> str:
    """benchmarks/kv_memories.py --part eiffel: the Eiffel fact's sub-updates, one column a model."""
    models = [m for m, entry in data["models"].items() if "eiffel_subupdates" in entry]
    runs = [data["models"][m]["eiffel_subupdates"] for m in models]
    first = runs[0]

    def neurons(run: dict, key: str) -> str:
        return ", ".join(minus(f"{name} {effect:+.2f}") for name, effect, _ in run[key][:3])

    rows = [
        [f'logit of "{first["target"]}"', *(num(r["logit"], 2) for r in runs)],
        ["MLPs' net direct contribution", *(minus(f"{r['mlp_total']:+.2f}") for r in runs)],
        [f"{first['top_k']} most raising neurons, share of that net",
         *(_share(r["top_share"]) for r in runs)],
        [f"{first['top_k']} largest either way, share of all sub-updates' absolute size",
         *(_share(r["mass_share"]) for r in runs)],
        ["neurons that raise it most", *(neurons(r, "raise") for r in runs)],
        ["neurons that lower it most", *(neurons(r, "lower") for r in runs)],
    ]
    return markdown(["", *(MODEL_SHORT.get(m, m) for m in models)], rows)


@table("kn_speed")
def kn_speed(data: dict) -> str:
    """benchmarks/knowledge_neurons.py --speed: integrated gradients against the package's scheme."""
    speed = data["speed"]
    ours = speed["ours_s"]
    runs = ", ".join(num(s, 2) for s in ours)
    return markdown(
        ["scheme", "wall s"],
        [[f"`integrated_gradients` (best of {len(ours)})", f"{num(min(ours), 2)} (runs: {runs})"],
         ["package scheme", num(speed["package_scheme_s"], 1)]],
    )


def _relative(x: float) -> str:
    return minus(f"{100 * x:+.1f}")


@table("kn_table")
def kn_table(data: dict) -> str:
    """benchmarks/knowledge_neurons.py --table: mean relative change of p(answer), 95 % intervals."""
    t = data["table"]
    own = f"the fact's {t['prompts_per_fact']} prompts"
    labels = {
        "knowledge": ("knowledge neurons", own),
        "random": ("random neurons, same layers and number", own),
        "other_facts": ("knowledge neurons", f"{t['other_facts_per_fact']} facts of other relations"),
    }
    rows = []
    for key, cell in t["cells"].items():
        rows.append([*labels[key], *(
            f"{_relative(cell[op]['mean'])} % [{_relative(cell[op]['ci95'][0])}, "
            f"{_relative(cell[op]['ci95'][1])}]"
            for op in ("suppress", "enhance")
        )])
    return markdown(["neurons scaled", "prompts measured", "suppress (×0)", "enhance (×2)"], rows)


# ---------------------------------------------------------------- lenses


@table("tuned_lens_kl")
def tuned_lens_kl(data: dict) -> str:
    """benchmarks/tuned_lens.py: KL(final ‖ lens) per layer, logit and tuned lens, per held-out set."""
    sets = data["sets"]
    rows = []
    for layer in range(len(sets[0]["logit_kl"])):
        cells = []
        for s in sets:
            cells += [pm(s["logit_kl"][layer], s["logit_se"][layer], 3),
                      pm(s["tuned_kl"][layer], s["tuned_se"][layer], 3)]
        rows.append([layer, *cells])
    header = ["layer"]
    for s in sets:
        header += [f"{s['set']}: logit", "tuned"]
    return markdown(header, rows)


# ---------------------------------------------------------------- representations


@table("concepts_cosines")
def concepts_cosines(data: dict) -> str:
    """benchmarks/concepts.py: the mean |cosine| between concepts, one row a model's file."""
    rows = []
    for doc in data.values():
        c = doc["inner_products"]["mean_abs_cosine_between_concepts"]
        rows.append([
            MODEL_NAMES.get(doc["model"], doc["model"]), f"{doc['n_vocabulary_tokens']:,}",
            ci(c["causal"], *c["causal_ci95"], 3), ci(c["euclidean"], *c["euclidean_ci95"], 3),
            num(c["random_directions"], 3), num(c["shared_word_floor_mean_abs"], 3),
        ])
    return markdown(
        ["model", "vocabulary tokens", "mean abs cosine, causal [95% CI]", "Euclidean [95% CI]",
         "random directions", "shared-word floor"],
        rows,
    )


@table("concepts_table")
def concepts_table(data: dict) -> str:
    """benchmarks/concepts.py: per concept, one row a model: held-out projections, intervention."""
    docs = list(data.values())
    rows = []
    for concept in docs[0]["concepts"]:
        for doc in docs:
            r = next((r for r in doc["concepts"] if r["concept"] == concept["concept"]), None)
            if r is None:  # a concept the model's tokenizer left out
                continue
            rows.append([
                r["label"], doc["model"].split("-")[0],
                f"{r['n_pairs_single_token']} / {r['n_pairs_listed']}", r["n_heldout"],
                ci(r["heldout_projection_mean"], *r["heldout_projection_ci95"], 2),
                pm(r["random_projection_mean"], r["random_projection_sd"], 2),
                num(r["heldout_above_random_p95"], 2),
                ci(r["intervention_own_change"], *r["intervention_own_ci95"], 1),
                num(r["intervention_mean_abs_change_on_others"], 2),
            ])
    return markdown(
        ["concept", "model", "pairs (single-token / listed)", "held-out",
         "held-out projection [95% CI]", "random pairs mean ± s.d.", "share > random p95",
         "own Δ logit gap [95% CI]", "others' mean abs Δ"],
        rows,
    )


@table("reading")
def reading(data: dict) -> str:
    """benchmarks/reading.py: each method's layer chosen on dev and its test accuracies."""
    rows = []
    for contrast, c in data["contrasts"].items():
        for method, m in c["methods"].items():
            rows.append([
                contrast, method, m["chosen_layer"],
                ci(m["chosen_test_pairwise"], *m["chosen_test_pairwise_ci95"], 2),
                ci(m["chosen_test_unpaired"], *m["chosen_test_unpaired_ci95"], 2),
                c["n_test"],
            ])
    return markdown(
        ["contrast", "method", "layer (chosen on dev)", "test pairwise [95% CI]",
         "test unpaired [95% CI]", "test pairs"],
        rows,
    )


STEERING_ORDER = ("lm_steer", "caa", "sae")


def _steering_label(data: dict, method: str) -> str:
    if method == "lm_steer":
        return "LM-Steer (the shipped steer)"
    if method == "caa":
        return f"CAA vector (layer {data['caa']['layer']}, × mean difference)"
    if method == "sae":
        return f"SAE feature {data['sae']['feature']} (× typical max)"
    return method


@table("steering_compare")
def steering_compare(data: dict) -> str:
    """benchmarks/steering_compare.py: each method at its largest strength within the budget."""
    base = next(iter(data["curves"].values()))
    # ControlCurve's columns: sentiment, topic, perplexity, distinct-1, -2, -3.
    unsteered, errors = base["unsteered"], base["unsteered_se"]
    rows = [["unsteered", "", pm(unsteered[0], errors[0], 3), "", pm(unsteered[2], errors[2], 1),
             num(unsteered[4], 3)]]
    for method in STEERING_ORDER:
        b = data["at_budget"][method]
        rows.append([
            _steering_label(data, method), strength(b["strength"]),
            pm(b["sentiment"], b["sentiment_se"], 3), f"{b['gain']:+.3f}",
            pm(b["perplexity"], b["perplexity_se"], 1), num(b["distinct_2"], 3),
        ])
    return markdown(
        ["method", "strength within budget", "sentiment ± s.e.", "gain over unsteered",
         "perplexity ± s.e.", "distinct-2"],
        rows,
    )


@table("steering_compare_curves")
def steering_compare_curves(data: dict) -> str:
    """benchmarks/steering_compare.py: each method's whole curve, sentiment (perplexity)."""
    rows = []
    for method in STEERING_ORDER:
        c = data["curves"][method]
        points = zip(c["strengths"], c["sentiment"], c["perplexity"], strict=True)
        rows.append([
            _steering_label(data, method),
            ", ".join(f"{strength(s)}: {num(y, 2)} ({num(p, 1)})" for s, y, p in points),
        ])
    return markdown(["method", "strengths → sentiment (perplexity)"], rows)


@table("parity")
def parity(data: dict) -> str:
    """benchmarks/parity.py: lmsci-mi against Hugging Face per model and precision."""
    rows = []
    for doc in data.values():
        for name, r in doc["comparisons"].items():
            rows.append([
                MODEL_SHORT.get(doc["model"], doc["model"]), name, f"{r['max_abs_logprob_diff']:.1e}",
                f"{r['mean_abs_logprob_diff']:.1e}", f"{100 * r['top1_agreement']:.1f} %",
                # float32's KL is float noise either side of 0 (-5e-9 on SmolLM2).
                "< 1e-7" if abs(r["mean_kl"]) < 1e-7 else f"{r['mean_kl']:.1e}",
                f"{doc['n_prompts']} / {r['positions']}",
            ])
    return markdown(
        ["model", "comparison", "largest abs Δ log p", "mean abs Δ log p", "top-1 agrees",
         "mean KL", "prompts / positions"],
        rows,
    )


@table("tour")
def tour(data: dict) -> str:
    """benchmarks/tour.py: the tour's wall time, warm, --quick and from a fresh clone."""
    rows = []
    for run in data["runs"].values():
        rows.append([
            run["run"], f"{run['wall_s']:.0f} s", f"{run['steps_s']:.0f} s ({run['n_steps']} steps)",
            f"{run['before_steps_s']:.0f} s", f"{run['report_bytes'] / 1e6:.1f} MB", run["date"],
        ])
    return markdown(
        ["run (one each)", "wall", "of which steps", "before the first step", "report", "measured"],
        rows,
    )


@table("ioi_seeds")
def ioi_seeds(data: dict) -> str:
    """benchmarks/ioi.py: the IOI circuit's figures per prompt draw, and their spread over draws."""
    rows = []
    for r in data["runs"]:
        rows.append([
            str(r["seed"]), pm(r["logit_diff"], r["logit_diff_se"], 2),
            f"{r['fraction_positive'] * r['n_prompts']:.0f} of {r['n_prompts']}",
            f"{100 * r['faithfulness']:.0f} %", f"{100 * r['name_mover_removed']:.0f} %", str(r["n_heads"]),
        ])
    s = data["summary"]

    def spread(key: str, scale: float, digits: int, unit: str = "") -> str:
        x = s[key]
        sd = "" if x["sd"] is None else f" ± {scale * x['sd']:.{digits}f}"
        return f"**{scale * x['mean']:.{digits}f}{sd}{unit}**"

    rows.append([
        f"mean ± s.d. over {s['n_seeds']} draws", spread("logit_diff", 1, 2),
        spread("fraction_positive", 100, 0, " %"), spread("faithfulness", 100, 0, " %"),
        spread("name_mover_removed", 100, 0, " %"), spread("n_heads", 1, 1),
    ])
    return markdown(
        ["seed", "logit diff (± s.e. over prompts)", "positive", "faithfulness",
         "name movers remove", "circuit heads"],
        rows,
    )


@table("ioi_heads")
def ioi_heads(data: dict) -> str:
    """benchmarks/ioi.py: for each class, the heads and in how many draws each was put there."""
    n = data["summary"]["n_seeds"]
    rows = []
    for role, counts in data["summary"]["heads_by_class"].items():
        label = "S-inhibition" if role == "s_inhibition" else role.replace("_", " ")
        rows.append([label, ", ".join(f"{h} ({c}/{n})" for h, c in counts.items())])
    return markdown(["class", f"heads (draws of {n} that class them so)"], rows)


def _by_selectivity(data: dict) -> list[tuple[str, dict]]:
    """The probing tasks, most selective first (the order the page discusses them in)."""
    return sorted(data["tasks"].items(), key=lambda kv: -kv[1]["selectivity"])


@table("probes")
def probes(data: dict) -> str:
    """benchmarks/probes.py --skip-speed: each probing task's peak layer, accuracy and selectivity."""
    rows = []
    for name, t in _by_selectivity(data):
        selective = t["selectivity"] > 0
        rows.append([
            f"`{name}`", str(t["peak_layer"]),
            f"{bold(num(t['accuracy'], 3), selective)} [{num(t['ci95'][0], 3)}, {num(t['ci95'][1], 3)}]",
            num(t["control"], 3), bold(minus(f"{t['selectivity']:+.3f}"), selective), num(t["majority"], 3),
            f"{t['n_train']}/{t['n_val']}/{t['n_test']}", f"{t['seconds']:.0f}",
        ])
    return markdown(
        ["task", "peak layer", "test accuracy [95% CI]", "control accuracy", "selectivity",
         "majority class", "train/val/test", "seconds (one torch thread, not quiet)" if data["threads"] == 1 else "seconds (not quiet)"],
        rows,
    )


@table("probes_layers")
def probes_layers(data: dict) -> str:
    """benchmarks/probes.py --skip-speed: accuracy per layer and the control task's, as text."""
    lines = ["```"]
    for name, t in _by_selectivity(data):
        lines.append(f"{name:<15} " + " ".join(f"{v:.2f}" for v in t["per_layer"]))
        lines.append(f"{'  control':<15} " + " ".join(f"{v:.2f}" for v in t["control_per_layer"]))
    lines.append("```")
    return "\n".join(lines)


@table("induction")
def induction(data: dict) -> str:
    """benchmarks/induction.py: induction scores and the ablation test, seed 0 and over draws."""
    s, first = data["summary"], data["runs"][0]
    n = len(data["runs"])

    def spread(x: dict, digits: int) -> str:
        return pm(x["mean"], x["sd"] or 0.0, digits)

    rows = [[f"{head} induction score", num(first["scores"][head], 2), spread(x, 2)]
            for head, x in s["top_heads_of_seed_0"].items()]
    rows += [
        [f"heads above {data['threshold']:g}", str(len(first["heads_above"])), spread(s["n_heads_above"], 1)],
        ["second-half loss (nats), clean", num(first["loss_clean"], 2), spread(s["loss_clean"], 2)],
        ["… those heads mean-ablated", num(first["loss_ablated"], 2), spread(s["loss_ablated"], 2)],
        [f"… as many random other heads ablated (mean of {data['random_draws']} draws)",
         num(first["loss_random"], 2), spread(s["loss_random"], 2)],
    ]
    seqs = data["sequences"]
    return markdown(
        ["figure", f"seed 0 ({seqs['n']} sequences)", f"mean ± s.d. over {n} draws of {seqs['n']}"], rows
    )


@table("sae_heldout")
def sae_heldout(data: dict) -> str:
    """benchmarks/sae_massive_activations.py: the SAE's explained variance on held-out tokens."""
    m = data["massive"]
    rows = []
    for key, label in [
        ("without_massive", f"explained variance without the {m['n_tokens']} massive-activation tokens (see below)"),
        ("all", f"explained variance, sae-lens's definition, all tokens (the {m['n_tokens']} massive-activation "
                f"tokens hold {100 * m['variance_share']:.1f}% of the variance)"),
    ]:
        r = data[key]
        value = f"{r['explained_variance']:.3f} [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]"
        rows.append([label, bold(value, key == "without_massive"), f"{r['n_tokens']:,} / {r['n_texts']}"])
    b = data["bootstrap"]
    return markdown(
        ["held-out statistic", f"value [95% CI, {b['resamples']:,} resamples of the texts]", "tokens / texts"], rows
    )


@table("tour_steps")
def tour_steps(data: dict) -> str:
    """benchmarks/tour.py: each step of the tour, its estimate and its measured seconds."""
    runs = data["runs"]

    def seconds(run: str, title: str) -> str:
        value = runs.get(run, {}).get("step_seconds", {}).get(title)
        return "not measured" if value is None else f"{value:.1f} s"

    rows = [
        [step["name"], "yes" if step["quick"] else "", f"{step['estimate_s']} s",
         seconds("warm", step["title"]), seconds("fresh", step["title"]), step["title"]]
        for step in data["steps"]
    ]
    return markdown(["step", "quick", "estimate", "warm", "fresh caches", "what it shows"], rows)


@table("test_suite")
def test_suite(data: dict) -> str:
    """benchmarks/suite_time.py: the README's test command, fast part and whole suite."""
    rows = []
    for run in data["runs"].values():
        counts = ", ".join(f"{n:,} {kind}" for kind, n in run["counts"].items())
        minutes = f" ({run['pytest_s'] / 60:.1f} min)" if run["pytest_s"] >= 600 else ""
        rows.append([run["run"], counts, f"{run['pytest_s']:.0f} s{minutes}", f"{run['wall_s']:.0f} s",
                     run["date"]])
    return markdown(["command", "tests", "pytest's time", "wall", "measured"], rows)

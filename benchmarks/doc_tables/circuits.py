"""Renderers of docs/circuits.md, docs/edges.md and docs/ioi.md: patching, edge discovery, IOI and induction."""

from __future__ import annotations

import re

from . import bold, ci, markdown, num, pm, sci, table

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

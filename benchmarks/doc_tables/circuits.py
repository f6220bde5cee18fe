"""Renderers of docs/circuits.md, docs/edges.md and docs/ioi.md: patching, edge discovery, IOI and induction."""

from __future__ import annotations

from collections import Counter

from . import bold, ci, markdown, num, pm, sci, table
from .schemas.circuits import (
    AIEData,
    CausalTraceData,
    EdgesData,
    GuardNullData,
    GuardRate,
    GuardTrace,
    InductionData,
    IOIData,
    PatchingData,
)
from .schemas.project import PublishedEAPData

EAP_IG_STEPS = 5
"""benchmarks/edges.py scores with EAP-IG at m = 5 (MIB's default); edges.json does not record m."""
EDGES_TARGET_FRACTION = 5.0
"""The edge budget (%) of the 0.75 faithfulness target."""


def _curves(data: EdgesData) -> dict[str, dict]:
    return {key.removeprefix("curve_"): curve for key, curve in data.items()
            if key.startswith("curve_")}


@table("edges_timing")
def edges_timing(data: EdgesData) -> str:
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
def edges_faithfulness(data: EdgesData) -> str:
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
def edges_ig_steps(data: EdgesData) -> str:
    """benchmarks/edges.py --stage steps: EAP-IG greedy circuits by integration steps m; the best
    faithfulness at the target budget in bold."""
    main = data["curve_EAP-IG_greedy"]
    runs = {str(EAP_IG_STEPS): {
        "seconds": data["seconds_EAP-IG"],
        "fractions": data["fractions"],
        "faithfulness": main["faithfulness"],
        "ci95": main["ci95"],
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
        rows.append([m, f"{num(run['seconds'], 1)} s", *cells])
    # No "name movers in the circuit" column: the 5 % circuit holds most heads (184 of 270 at
    # m = 5), so holding both name movers says little, and the other runs do not record their heads.
    return markdown(["m", "scoring time", *(f"{x:g} %" for x in shown)], rows)


PUBLISHED_FRACTIONS = (0.5, 1.0, 2.0, 5.0)
"""The edge budgets (%) at which the published GPT-2 curve is shown beside ours."""


def published_near(data: PublishedEAPData, fraction: float, method: str) -> tuple[int, float]:
    """The released row whose circuit for ``method`` is nearest ``fraction`` % of the edges: its
    edges kept and its normalised faithfulness (the file has rows at fixed edge counts, not at
    fractions)."""
    target = fraction / 100 * data["total_edges"]
    row = min(data["rows"], key=lambda r: abs(r["edges"][method] - target))
    return row["edges"][method], row["faithfulness"][method]


def published_source(data: PublishedEAPData) -> str:
    """Where the published numbers come from: repository, commit and file."""
    return f"`{data['path']}` of `{data['repository']}` at {data['commit'][:7]}"


@table("published_eap_ig")
def published_eap_ig(data: PublishedEAPData) -> str:
    """benchmarks/published_eap_ig.py: Hanna et al.'s released GPT-2 IOI curve, one file, at the
    rows nearest our budgets, and the file's largest circuits."""
    methods = list(data["rows"][0]["edges"])
    total = data["total_edges"]

    def cells(edges: int, value: float) -> list[str]:
        return [f"{edges:,} ({100 * edges / total:.1f} %)", num(value, 2)]

    rows = []
    for fraction in PUBLISHED_FRACTIONS:
        rows.append([f"{fraction:g} %", *(c for m in methods for c in cells(*published_near(data, fraction, m)))])
    last = data["rows"][-1]
    rows.append(["the file's largest", *(c for m in methods for c in cells(last["edges"][m], last["faithfulness"][m]))])
    header = ["nearest to", *(h for m in methods for h in (f"{m} edges kept", f"{m} faithfulness"))]
    return markdown(header, rows)


@table("ioi_seeds")
def ioi_seeds(data: IOIData) -> str:
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
def ioi_heads(data: IOIData) -> str:
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
def induction(data: InductionData) -> str:
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


# GPT-2 small's IOI circuit, Wang et al. 2022 ("Interpretability in the Wild"), Fig. 2 and §3;
# the same 26 heads as ACDC's `acdc/ioi/utils.py::IOI_CIRCUIT` lists them.
GPT2_IOI_HEADS = {
    "name_mover": "L9.H9, L10.H0, L9.H6",
    "backup_name_mover": "L10.H10, L10.H6, L10.H2, L10.H1, L11.H2, L9.H7, L9.H0, L11.H9",
    "negative_name_mover": "L10.H7, L11.H10",
    "s_inhibition": "L7.H3, L7.H9, L8.H6, L8.H10",
    "induction": "L5.H5, L5.H8, L5.H9, L6.H9",
    "duplicate_token": "L0.H1, L0.H10, L3.H0",
    "previous_token": "L2.H2, L4.H11",
}
IOI_CLASS_ROWS = (
    ("name_mover", "name movers"), ("backup_name_mover", "backup name movers"),
    ("negative_name_mover", "negative name movers"), ("s_inhibition", "S-inhibition"),
    ("induction", "induction"), ("duplicate_token", "duplicate token"),
    ("previous_token", "previous token"),
)
IOI_ATTENTION_EVIDENCE = {
    "induction": "attention S2→S1+1", "duplicate_token": "attention S2→S1",
    "previous_token": "attention S1+1→S1",
}
IOI_ATTENTION_THRESHOLD = 0.15
"""``IOIConfig.attention_threshold``'s default: END→IO attention above it is listed as evidence."""


def _signed(x: float, digits: int = 2) -> str:
    return f"{x:+.{digits}f}".replace("-", "−")


@table("ioi_classes")
def ioi_classes(data: IOIData) -> str:
    """benchmarks/ioi.py: seed 0's circuit, each head with its class's score and the evidence,
    beside GPT-2 small's heads (Wang et al. 2022)."""
    run = data["runs"][0]
    by_role: dict[str, list[dict]] = {}
    for h in run["heads"]:
        by_role.setdefault(h["role"], []).append(h)
    rows = []
    for role, label in IOI_CLASS_ROWS:
        heads = by_role.get(role, [])
        if role in ("name_mover", "negative_name_mover"):
            shown = ", ".join(
                f"{h['head']} ({'DLA ' if i == 0 and role == 'name_mover' else ''}{_signed(h['dla'])})"
                for i, h in enumerate(heads))
            if role == "name_mover":
                seen = [h for h in heads if h["attn_end_io"] > IOI_ATTENTION_THRESHOLD]
                seen.sort(key=lambda h: -h["attn_end_io"])
                evidence = "END→IO attention: " + ", ".join(
                    f"{h['head']} {num(h['attn_end_io'], 2)}" for h in seen)
            else:
                top = max(heads, key=lambda h: h["attn_end_io"])
                evidence = f"{top['head']} attends END→IO {num(top['attn_end_io'], 2)}"
        elif role == "backup_name_mover":
            shown = "not separated (the finder has no backup step)"
            head, dla = run["top_dla_outside_circuit"][0]
            evidence = f"{head} ({_signed(dla)}) is next in DLA"
        elif role == "s_inhibition":
            shown = ", ".join(f"{h['head']} ({_signed(100 * h['path_patching'], 0)}%)" for h in heads)
            values = [num(h["attn_end_s"], 2) for h in heads]
            evidence = "END→S attention " + (
                " and ".join(values) if len(values) <= 2 else ", ".join(values))
        else:
            shown = ", ".join(f"{h['head']} ({num(h['score'], 2)})" for h in heads)
            evidence = IOI_ATTENTION_EVIDENCE[role]
        rows.append([label, shown or "none", evidence, GPT2_IOI_HEADS[role]])
    return markdown(
        ["class", f"SmolLM2-135M heads (score), seed {run['seed']}", "evidence",
         "GPT-2 small (Wang et al. 2022, Fig. 2, §3)"],
        rows,
    )


AIE_MODELS = {"smollm2-135m": "SmolLM2-135M", "gemma3-270m": "Gemma 3 270M"}
AIE_SAMPLES = {"smollm2-gaussian": 5}
"""Noise samples of benchmarks/aie.py's Gaussian piece (``PIECES``), for a data file written
before it recorded ``n_samples``."""
AIE_NOISE_SD = 3
"""ROME's σ: this many standard deviations of the subject embeddings (``TraceConfig``'s default)."""
AIE_KINDS = {"resid": "resid", "mlp": "MLP", "attn": "attention", "sever_mlp": "MLP severed",
             "sever_attn": "attention severed"}


AIE_THREADS_BEFORE = 2
"""Torch threads of the pieces traced before the data file recorded ``threads``."""


def _aie_traced(run: dict) -> str:
    """How many facts a run traced, and how they were chosen."""
    if run.get("n_cap") is not None:
        return (f"{run['n_facts']} (the first {run['n_facts']} of the {run['n_planned']} planned; "
                "cut to fit the compute budget)")
    if run["n_facts"] < run["n_known"] - run["n_unpaired"]:
        traced = f"{run['n_facts']} (the first {run['n_facts']} known"
        traced += " and paired)" if run["corruption"] == "str" else ")"
    else:
        traced = f"{run['n_facts']} ({run['n_known']} of {run['n_candidates']} known top-1"
        traced += f", {run['n_unpaired']} without an STR partner)" if run["n_unpaired"] else ")"
    if not run.get("complete", True):
        traced += f", PARTIAL of {run['n_planned']}"
    return traced


def _aie_window(run: dict) -> str:
    """The mlp/attn window in layers, and the rule when it came from the model's depth."""
    if not {"mlp", "attn"} & set(run["kinds"]):
        return "–"
    rule = run.get("window_rule")
    return f"{run['window']} (= {rule})" if rule else str(run["window"])


@table("aie_runs")
def aie_runs(data: AIEData) -> str:
    """benchmarks/aie.py --write: each run's model, corruption, window, facts traced and cost."""
    rows = []
    for name, run in data.items():
        if not isinstance(run, dict) or "corruption" not in run:
            continue
        metric = "logit diff" if run["metric"] == "logit_diff" else "p(target)"
        if run["corruption"] == "gaussian":
            samples = run.get("n_samples", AIE_SAMPLES.get(name))
            how = (f"GN {AIE_NOISE_SD}σ (σ = {num(run['noise_scale'], 3)}), {samples} samples, {metric}")
        else:
            how = f"STR, {metric}"
        kinds = ", ".join(AIE_KINDS.get(k, k) for k in run["kinds"])
        cost = "" if run.get("seconds_per_fact") is None else num(run["seconds_per_fact"], 1)
        threads = run.get("threads") or AIE_THREADS_BEFORE
        rows.append([name, AIE_MODELS.get(run["model"], run["model"]), how, kinds, _aie_window(run),
                     _aie_traced(run), threads, cost])
    return markdown(
        ["run", "model", "corruption, metric", "restored", "MLP/attention window (layers)",
         "facts traced", "torch threads", "s per fact (wall, setup included)"],
        rows,
    )


def aie_groups(data: AIEData) -> dict[str, list[dict]]:
    """Runs with their localisation, by model and corruption, widest window first."""
    groups: dict[str, list[dict]] = {}
    for run in data.values():
        if isinstance(run, dict) and "localisation" in run:
            groups.setdefault(f"{run['model']}/{run['corruption']}", []).append(run)
    return {k: sorted(v, key=lambda r: -r["window"]) for k, v in groups.items()}


def _aie_point(p: dict, digits: int, share: bool = True) -> str:
    """A window's value: its centre and layers, AIE ± band, and its share of the gap."""
    span = f"{p['layers'][0]}" if p["layers"][0] == p["layers"][1] else f"{p['layers'][0]}–{p['layers'][1]}"
    out = f"{p['layer']} ({span}): {pm(p['aie'], p['band95'], digits)}"
    return out + (f", {round(100 * p['of_gap'])} %" if share else "")


@table("aie_windows")
def aie_windows(data: AIEData) -> str:
    """benchmarks/aie.py --write: where the MLP and attention effects peak at each window."""
    rows = []
    for runs in aie_groups(data).values():
        for run in runs:
            loc, d = run["localisation"], 1 if run["metric"] == "logit_diff" else 2
            who = f"{AIE_MODELS.get(run['model'], run['model'])}, {'STR' if run['corruption'] == 'str' else 'GN'}"
            bump = "yes" if loc["mlp_middle_bump"] else "no"
            rows.append([who, run["window"], run["n_facts"], num(loc["gap"], d),
                         _aie_point(loc["mlp_peak"], d), _aie_point(loc["mlp_peak_without_layer_0"], d),
                         f"{bump}: {_aie_point(loc['mlp_middle_max'], d, False)} vs "
                         f"{_aie_point(loc['mlp_before_middle'], d, False)}",
                         _aie_point(loc["attn_peak"], d), _aie_point(loc["attn_half"], d)])
    return markdown(
        ["model, corruption", "window", "facts", "gap (clean − corrupted)",
         "MLP at last subject: peak, centre (layers): AIE ± 95 %, % of gap",
         "MLP: largest window without layer 0", "MLP: mid-layer peak? (largest in the middle third vs largest before it)",
         "attention at last token: peak", "attention: first window reaching half the peak"],
        rows,
    )


def _aie_finding(runs: list[dict]) -> str:
    """One model and corruption's bullet: the MLP and attention effects at every window."""
    first, d = runs[0], 1 if runs[0]["metric"] == "logit_diff" else 2
    unit = " logits" if d == 1 else " in p"
    who = f"{AIE_MODELS.get(first['model'], first['model'])}, {'STR' if first['corruption'] == 'str' else 'Gaussian noise'}"
    facts = ", ".join(f"{r['n_facts']} at window {r['window']} (gap {num(r['localisation']['gap'], d)})"
                      for r in runs)  # widest first
    single = next((r["curves"]["mlp"]["last subject"] for r in runs if r["window"] == 1), None)
    mlp, attn = [], []
    for r in runs:
        loc = r["localisation"]
        p, w0 = loc["mlp_peak"], loc["mlp_peak_without_layer_0"]
        # Single layers' effects added over the window's layers: does a window sum its layers?
        added = "" if single is None or r["window"] == 1 else (
            f", its layers' single-layer effects added: {num(sum(single[w0['layers'][0]:w0['layers'][1] + 1]), d)}")
        where = f"layer {p['layer']}" if r["window"] == 1 else f"centre {p['layer']} (layers {p['layers'][0]}–{p['layers'][1]})"
        mid = "a mid-layer peak" if loc["mlp_middle_bump"] else "no mid-layer peak"
        mlp.append(f"window {r['window']}: largest at {where}, {pm(p['aie'], p['band95'], d)}{unit} "
                   f"({round(100 * p['of_gap'])} % of the gap); without layer 0 at most "
                   f"{num(w0['aie'], d)} ({round(100 * w0['of_gap'])} %, {'layer' if r['window'] == 1 else 'centre'} "
                   f"{w0['layer']}{added}); {mid}")
        a, h = loc["attn_peak"], loc["attn_half"]
        attn.append(f"window {r['window']}: peak at {'layer' if r['window'] == 1 else 'centre'} {a['layer']} "
                    f"({pm(a['aie'], a['band95'], d)}{unit}), half of it first at {h['layer']}")
    return (f"- **{who}** (facts: {facts}; the gap is clean − corrupted, in {'logits' if d == 1 else 'p'}). "
            f"MLP at the last subject token — {'; '.join(mlp)}. Attention at the last token — "
            f"{'; '.join(attn)}.")


@table("aie_findings")
def aie_findings(data: AIEData) -> str:
    """benchmarks/aie.py --write: the page's conclusions, every number read from the runs."""
    return "\n".join(_aie_finding(runs) for runs in aie_groups(data).values())


@table("aie_gaussian")
def aie_gaussian(data: AIEData) -> str:
    """benchmarks/aie.py --write: the Gaussian-noise runs' setting, σ and clean/corrupted means per
    fact set (runs on the same facts share one clause)."""
    runs = [r for group in aie_groups(data).values() for r in group if r["corruption"] == "gaussian"]
    if not runs:
        return "No Gaussian-noise run yet."
    first = runs[0]
    samples = next((r["n_samples"] for r in runs if r.get("n_samples")), None)
    sets: dict[tuple, list[dict]] = {}
    for run in runs:
        sets.setdefault((run["model"], run["n_facts"], run["clean_mean"], run["corrupted_mean"]), []).append(run)
    means = "; ".join(
        f"clean {num(clean, 3)}, corrupted {num(corrupted, 3)} on the {n} facts of the "
        + " and ".join(f"{r['window']}-layer" for r in group) + (" runs" if len(group) > 1 else " run")
        for (_, n, clean, corrupted), group in sets.items()
    )
    return (f"**Gaussian noise (σ = 3 × the subject-embedding std = {num(first['noise_scale'], 3)}"
            + (f", {samples} samples" if samples else "")
            + f", p(target); {means}; ± is the 95 % band over facts).**")


@table("aie_stream")
def aie_stream(data: AIEData) -> str:
    """benchmarks/aie.py --write: where the restored stream hands the fact from the last subject
    token to the last token, per run that restores the stream beside MLP and attention."""
    lines = []
    for runs in aie_groups(data).values():
        for run in (r for r in runs if "resid" in r["kinds"]):
            subject, last = run["curves"]["resid"]["last subject"], run["curves"]["resid"]["last token"]
            d, unit = (1, " logits") if run["metric"] == "logit_diff" else (2, " in p")
            hand = next(i for i in range(len(last)) if last[i] >= subject[i])
            held, taken = subject[1:hand], last[hand:]
            lines.append(
                f"- **{AIE_MODELS.get(run['model'], run['model'])}, "
                f"{'STR' if run['corruption'] == 'str' else 'Gaussian noise'} ({run['n_facts']} facts).** "
                f"The last subject token's stream restores {num(min(held), d)}–{num(max(held), d)}{unit} "
                f"after layers 1–{hand - 1}; the last token's stream takes over from layer {hand} "
                f"({num(min(taken), d)}–{num(max(taken), d)}{unit} to the last layer)."
            )
    return "\n".join(lines)


@table("patching_trace_attribution")
def patching_trace_attribution(data: PatchingData) -> str:
    """benchmarks/patching.py (c) and (d): the batched causal trace against a naive loop, and
    attribution patching over all heads against exact head patching."""
    tr, at = data["sections"]["trace"], data["sections"]["attribution"]
    return markdown(
        ["measurement", "lmsci-mi", "against", "ratio", "agreement"],
        [
            [f"(c) {tr['sweep']}", f"{num(tr['lmsci_mi_s'], 1)} s (prefix floor {num(tr['prefix_floor_s'], 1)} s)",
             f"naive loop, one forward pass per restoration: {num(tr['naive_s'], 1)} s (timed on "
             f"{tr['naive_timed_layers']} layers, extrapolated)", bold(f"{tr['speedup']:.1f}×"),
             f"max abs diff {sci(tr['max_abs_diff'])}"],
            [f"(d) attribution patching over all {at['heads']} heads", f"{num(at['seconds'], 2)} s",
             f"one forward pass: {num(at['forward_s'], 3)} s", bold(f"{at['forward_pass_equivalents']:.1f} forward passes"),
             f"Spearman vs exact head patching {num(at['spearman_vs_exact'], 3)}"],
        ],
    )


@table("causal_trace_eiffel")
def causal_trace_eiffel(data: CausalTraceData) -> str:
    """benchmarks/causal_trace.py: the one-prompt trace's clean and corrupted p(target) and the
    largest restoration per site, ± one standard error over the noise samples."""
    s, n, w = data["summary"], data["noise_samples"], data["window"]

    def code(token: str) -> str:
        return f"`{token}`"

    def row(what: str, cell: dict, layer: str = "after layer") -> list[str]:
        return [what, code(cell["token"]), f"{layer} {cell['layer']}", pm(cell["value"], cell["se"], 3)]

    target = data["target"]
    # The last token's residual: where it first holds half the clean probability (its best layer
    # is trivially the last, which is the clean run itself).
    half, resid, final = s["resid_last_token_half_from"], data["kinds"].index("resid"), len(data["tokens"]) - 1
    last_resid = [layer[final] for layer in data["values"][resid]]
    last_se = [layer[final] for layer in data["se"][resid]]
    return markdown(
        ["state restored", "token", "best layer", f'p("{target}") ± s.e. ({n} noise samples)'],
        [
            ["none: the clean run", "", "", num(data["clean_prob"], 3)],
            ["none: the subject noised", "", "", pm(data["corrupted_prob"], data["corrupted_se"], 3)],
            row("residual stream, first subject token", s["resid_first_subject"]),
            row("residual stream, middle subject token", s["resid_middle_subject"]),
            row("residual stream, last subject token", s["resid_last_subject"]),
            ["residual stream, last token", code(s["resid_last_token_top"]["token"]),
             f"after layer {half} (the first with half the clean p or more; below it at most "
             f"{num(max(last_resid[:half]), 3)})", pm(last_resid[half], last_se[half], 3)],
            row(f"attention ({w}-layer window)", s["attn_last_token"], "window centred on"),
            row(f"MLP ({w}-layer window), middle subject token", s["mlp_middle_subject"], "window centred on"),
            row(f"MLP ({w}-layer window), last subject token", s["mlp_last_subject"], "window centred on"),
        ],
    )


@table("ioi_tour")
def ioi_tour(data: IOIData) -> str:
    """benchmarks/ioi.py --tour: the tour's draw beside the seeded draws' mean ± s.d., and how
    many seeded draws put each of its heads in the same class."""
    t, summary = data["tour"], data["summary"]
    seeds, by_class = summary["n_seeds"], summary["heads_by_class"]

    def spread(key: str, digits: int, percent: bool = False) -> str:
        f = summary[key]
        scale = 100 if percent else 1
        return f"{num(f['mean'] * scale, digits)} ± {num(f['sd'] * scale, digits)}"

    heads = "; ".join(
        f"{role.replace('_', ' ')}: " + ", ".join(f"{h} ({by_class.get(role, {}).get(h, 0)}/{seeds})" for h in hs)
        for role, hs in t["classes"].items()
    )
    missed = [f"{h} ({role.replace('_', ' ')})" for role, counts in by_class.items()
              for h, n in counts.items() if n == seeds and h not in t["classes"].get(role, [])]
    return markdown(
        ["draw", "logit diff", "faithfulness", "name movers remove", "heads (seeded draws that class them so)",
         f"in all {seeds} seeded draws, not in this one"],
        [
            [f"the tour's ({t['n_prompts']} prompts)", pm(t["logit_diff"], t["logit_diff_se"], 2),
             f"{100 * t['faithfulness']:.1f} %", f"{100 * t['name_mover_removed']:.1f} %", heads,
             ", ".join(missed) or "none"],
            [f"{seeds} seeded draws of {data['n_prompts']} (mean ± s.d.)", spread("logit_diff", 2),
             spread("faithfulness", 1, True) + " %", spread("name_mover_removed", 1, True) + " %", "", ""],
        ],
    )


# GPT-2 small's IOI heads per class (Wang et al. 2022, the circuit as ACDC's and auto-circuit's
# code list it: acdc/ioi/utils.py::IOI_CIRCUIT), as relative depth layer / 12: quoted, not measured.
GPT2_DEPTH = {
    "name_mover": "0.75–0.83",
    "s_inhibition": "0.58–0.67",
    "induction": "0.42–0.50",
    "negative_name_mover": "0.83–0.92",
}
DEPTH_CLASSES = {"name_mover": "name movers", "s_inhibition": "S-inhibition", "induction": "induction",
                 "negative_name_mover": "negative movers"}


@table("ioi_depth")
def ioi_depth(data: IOIData) -> str:
    """benchmarks/ioi.py: the relative depth (layer ÷ layers) of every head of seed 0's classes,
    grouped by layer, beside GPT-2 small's quoted range."""
    n, classes = data["n_layers"], data["runs"][0]["classes"]
    rows = []
    for role, label in DEPTH_CLASSES.items():
        by_layer: dict[int, list[str]] = {}
        for head in classes.get(role, []):
            layer, index = head[1:].split(".H")
            by_layer.setdefault(int(layer), []).append(f"H{index}")
        cells = [f"{num(layer / n, 2)} (L{layer}: {', '.join(sorted(heads, key=lambda h: int(h[1:])))})"
                 for layer, heads in sorted(by_layer.items())]
        rows.append([label, GPT2_DEPTH[role], "; ".join(cells)])
    return markdown(["class", "GPT-2 small (quoted)", "SmolLM2, seed 0 (layer ÷ 30: heads)".replace("30", str(n))], rows)


@table("causal_trace_mlp_seeds")
def causal_trace_mlp_seeds(data: CausalTraceData) -> str:
    """benchmarks/causal_trace.py: the MLP-only trace ``traced_layer`` runs, per noise seed: its
    peak at the last subject token, the effect over the corrupted run ± the paired standard error,
    and whether the guard before issue 37 (effect above two standard errors) accepted it; the
    current guard's verdicts are ``guard_eiffel``'s."""
    rows = []
    for r in data["mlp_only"]:
        ratio = r["effect"] / r["se"]
        rows.append([r["seed"], r["layer"], pm(r["effect"], r["se"], 4), num(ratio, 1),
                     f"{100 * r['effect'] / r['gap']:.1f} %", "yes" if ratio > 2 else "no"])
    return markdown(["noise seed", "peak layer", "effect ± s.e.", "effect / s.e.",
                     "share of the clean − corrupted gap", "above 2 s.e. (the old guard)"], rows)


def _share(r: GuardRate) -> str:
    low, high = r["interval"]
    return f"{r['accepted']} / {r['n']} = {100 * r['rate']:.1f} % [{100 * low:.1f}, {100 * high:.1f}]"


GUARD_SETS = (
    ("null", "no fact: a random target (clean p < {max_clean_p:g}), draw 0 (seen before the material gap)"),
    ("null_fresh", "no fact: fresh random targets (draw 1, held out)"),
    ("made_up", "no fact: a made-up subject, its clean top-1, draw 0 (held out from the material gap)"),
    ("made_up_fresh", "no fact: fresh made-up subjects, draw 1 (held out from both conditions)"),
    ("known", "known facts, clean top-1 (the true answer): the power"),
    ("eiffel", "the editing fact (Eiffel Tower), noise seeds 0-3"),
)


@table("guard_null")
def guard_null(data: GuardNullData) -> str:
    """benchmarks/guard_null.py: the share of traces each traced-layer guard accepts, on traces
    with no fact (the false-positive rate), on known facts (the power) and on the editing fact's
    noise seeds, Wilson 95 %."""
    alpha = data["alpha"]
    guards = ("old", "peak", "gap", "gap_and_peak", "material", "guard", "confident")
    return markdown(
        ["traces (MLP, last subject token)", "old guard: peak > 2 s.e. of its layer",
         f"peak: max-over-layers sign-flip p ≤ {alpha:g}", f"gap: clean > corrupted, sign-flip p ≤ {alpha:g}",
         "gap and peak (the guard before the material gap)",
         f"material gap: ≥ {data['min_gap']:g} and ≥ {data['min_gap_share']:.0%} of the clean p",
         "gap, material gap and peak (`traced_layer`)",
         f"`traced_layer` and a confident answer, clean p ≥ {data['confident_p']:g} (measured only)"],
        [[label.format(**data), *(_share(data[name][guard]) for guard in guards)] for name, label in GUARD_SETS],
    )


@table("guard_null_accepts")
def guard_null_accepts(data: GuardNullData) -> str:
    """benchmarks/guard_null.py: every random-target trace that the gap and peak tests accept,
    and whether ``traced_layer`` (the material gap too) does."""
    rows = [[draw, f"{t['prompt']} → {t['target']!r}", sci(t["clean_prob"]), sci(t["corrupted_prob"]),
             f"{(t['clean_prob'] - t['corrupted_prob']) / t['clean_prob']:.0%}", f"{t['gap_p_value']:.3g}",
             f"{t['p_value']:.3g}", "yes" if t["accepted"] else "no (refused)"]
            for name, draw in (("null", 0), ("null_fresh", 1)) for t in data[name]["traces"] if t["gap_peak_accepted"]]
    return markdown(["draw", "prompt → random target", "clean p", "corrupted p (mean)", "gap ÷ clean p",
                     "gap sign-flip p", "peak sign-flip p", "`traced_layer` accepts"], rows)


@table("guard_made_up")
def guard_made_up(data: GuardNullData) -> str:
    """benchmarks/guard_null.py: the made-up-subject traces (both draws) per prompt template:
    what ``traced_layer`` accepts, with and without a confident answer, and the commonest clean
    top-1 answers among those it accepts."""
    traces = data["made_up"]["traces"] + data["made_up_fresh"]["traces"]
    by_template: dict[str, list[GuardTrace]] = {}
    for t in traces:
        by_template.setdefault(t["prompt"].replace(t["subject"], "{}", 1), []).append(t)
    rows = []
    for template, group in by_template.items():
        accepted = [t for t in group if t["accepted"]]
        answers = Counter(t["target"] for t in accepted).most_common(4)
        median = sorted(t["clean_prob"] for t in accepted)[len(accepted) // 2] if accepted else float("nan")
        rows.append([f"`{template}`", len(group), sum(t["gap_peak_accepted"] for t in group), len(accepted),
                     num(median, 2), sum(t["confident_accepted"] for t in group),
                     ", ".join(f"{a!r} ({n})" for a, n in answers)])
    return markdown(["template (made-up subject)", "traces", "gap and peak", "`traced_layer` accepts",
                     "median clean p of those", f"… and clean p ≥ {data['confident_p']:g}",
                     "commonest answers it accepts (count)"], rows)


@table("guard_eiffel")
def guard_eiffel(data: GuardNullData) -> str:
    """benchmarks/guard_null.py: the editing fact's guard trace per noise seed, every guard."""
    def yes(accepted: bool) -> str:
        return "yes" if accepted else "no"

    rows = [[t["seed"], t["layer"], pm(t["effect"], t["se"], 4), yes(t["old_accepted"]),
             f"{t['p_value']:.3g}", f"{t['clean_prob']:.3f} − {t['corrupted_prob']:.3f}",
             f"{t['gap_p_value']:.3g}", yes(t["material_accepted"]), "yes" if t["accepted"] else "no (refused)"]
            for t in data["eiffel"]["traces"]]
    samples = data["noise_samples"]
    return markdown(["noise seed", "peak layer", "effect ± s.e.", "old guard (> 2 s.e.)",
                     f"peak sign-flip p ({samples} samples)", "p clean − corrupted",
                     f"gap sign-flip p ({samples} samples)", "material gap", "`traced_layer` accepts"], rows)

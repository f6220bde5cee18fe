"""Renderers of docs/graphs.md (issue 41): the per-layer transcoder quality tables
(docs/data/transcoders_<model>.json, benchmarks/transcoders.py) and our attribution graphs against
circuit-tracer's (docs/data/graphs_vs_circuit_tracer.json, benchmarks/graphs_vs_circuit_tracer.py).
A transcoder file not written yet renders as "not yet: <the command that writes it>"."""

from __future__ import annotations

from typing import Any

from . import MODEL_NAMES, ci, markdown, minus, num, sci, table
from .peers import ratio, run_words, seconds
from .schemas.graphs_peer import GraphsPeerData
from .schemas.icl_vectors import IntervalRecord
from .schemas.transcoders import TranscodersData

TRANSCODERS = "PYTHONPATH=. python benchmarks/transcoders.py --model {model} --threads 1"
NAMES = {**MODEL_NAMES, "cfg-gpt": "CFG GPT (shipped)", "ct-llama": "random Llama-shaped toy (circuit-tracer's test model)"}


def _iv(r: IntervalRecord, digits: int = 3) -> str:
    return ci(r["estimate"], r["low"], r["high"], digits)


def _files(data: Any) -> list[tuple[str, TranscodersData | None]]:
    if isinstance(data, dict) and all(str(k).startswith("transcoders_") for k in data):
        return [(stem.removeprefix("transcoders_"), doc) for stem, doc in data.items()]
    return [(data["transcoders"]["model"], data)]


def _model_rows(model: str, doc: TranscodersData | None, width: int) -> list[list[str]]:
    name = NAMES.get(model, model)
    if doc is None:
        return [[name, f"not yet: `{TRANSCODERS.format(model=model)}`", *[""] * (width - 2)]]
    rows = []
    for r in doc["rows"]:
        met = "yes" if r["layer"] in doc["layers_meeting_target"] else "no"
        rows.append([name, str(r["layer"]), _iv(r["explained_variance"]), _iv(r["l0"], 1),
                     _iv(r["dead_fraction"]), _iv(r["loss_recovered"]), met,
                     f"{r['steps']:,} × {doc['train']['batch_size']:,}",
                     f"{r['train_seconds'] / 60:.1f} (+{r['harvest_seconds'] / 60:.1f} harvest)"])
    missing = doc["transcoders"]["layers_missing"]
    if missing:
        rows.append([name, ", ".join(map(str, missing)), "not yet trained (the run's budget ran out; "
                     "rerun to go on)", *[""] * (width - 3)])
    return rows


@table("transcoder_quality", missing_ok=True)
def transcoder_quality(data: Any) -> str:
    """Per model and layer: explained variance, L0, dead fraction, loss recovered when spliced in
    (95 % bootstrap intervals over held-out texts), the target, and the training cost."""
    header = ["model", "layer", "explained variance", "L0", "dead fraction", "loss recovered",
              "≥ 0.8 at L0 ≤ 64", "steps × tokens a step", "training minutes"]
    rows = [row for model, doc in _files(data) for row in _model_rows(model, doc, len(header))]
    return markdown(header, rows)


def _spans(layers: list[int]) -> str:
    return ", ".join(map(str, layers)) or "none"


@table("transcoder_findings", missing_ok=True)
def transcoder_findings(data: Any) -> str:
    """Per model with a file: the layers that meet the target, and those whose transcoder loses
    more than zero-ablating the MLP would (loss recovered below 0), with the build's total cost."""
    lines = []
    for model, doc in _files(data):
        if doc is None:
            continue
        rows = doc["rows"]
        worse = [r["layer"] for r in rows if r["loss_recovered"]["estimate"] < 0]
        recovered = sorted(r["loss_recovered"]["estimate"] for r in rows)
        minutes = sum(r["train_seconds"] + r["harvest_seconds"] for r in rows) / 60
        lines.append(
            f"- {NAMES.get(model, model)}: {len(doc['layers_meeting_target'])} of {len(rows)} layers meet the "
            f"target ({_spans(doc['layers_meeting_target'])}); the median layer recovers "
            f"{minus(num(recovered[len(recovered) // 2], 2))} of the loss; below 0, worse than removing the MLP: "
            f"{_spans(worse)}. Training and harvest: {minutes:.0f} minutes at "
            f"{'one thread' if rows[0]['threads'] == 1 else str(rows[0]['threads']) + ' threads'}.")
    return "\n".join(lines)


@table("transcoder_builds", missing_ok=True)
def transcoder_builds(data: Any) -> str:
    """Per model: the set's shape, data, held-out texts, compact size and why the preset differs
    from the paper's recipe."""
    header = ["model", "latents × layers", "sites", "data", "held-out texts", "compact form", "why this preset"]
    rows = []
    for model, doc in _files(data):
        if doc is None:
            rows.append([NAMES.get(model, model), f"not yet: `{TRANSCODERS.format(model=model)}`", *[""] * 5])
            continue
        t = doc["transcoders"]
        size = "–" if t["compact_bytes"] is None else f"{t['compact_bytes'] / 2**20:.1f} MB"
        rows.append([NAMES.get(model, model), f"{t['d_transcoder']:,} × {len(t['layers_built'])}",
                     f"`{t['input_site']}` → `{t['output_site']}`", doc["data_source"].split(" of grammar")[0],
                     str(doc["held_out_texts"]), size, doc["preset_reason"]])
    return markdown(header, rows)


@table("graphs_vs_circuit_tracer")
def graphs_vs_circuit_tracer(data: GraphsPeerData) -> str:
    """Per shared model: the adjacency agreement with circuit-tracer, time and peak memory."""
    header = ["model (layers, latents)", "nodes (ours / peer)", "max abs. diff (max abs. value)", "max rel. diff",
              "within atol, rtol", "seconds: lmsci-mi", "seconds: circuit-tracer", "circuit-tracer / lmsci-mi",
              "peak MB: lmsci-mi / circuit-tracer"]
    rows = []
    for model, m in data["models"].items():
        a, sides, mem = m["agreement"], m["timing"]["sides"], m["memory"]
        opts = m["options"]  # both sides ran them; say where they leave circuit-tracer's defaults
        unusual = ([f"at most {opts['max_feature_nodes']:,} feature nodes"] if opts.get("max_feature_nodes") else []) \
            + ([f"batch {opts['batch_size']}"] if opts.get("batch_size", 512) != 512 else [])
        rows.append([f"{NAMES.get(model, model)} ({m['layers']}, {m['d_transcoder']:,}"
                     f"{'; ' + ', '.join(unusual) if unusual else ''})",
                     f"{a['nodes_ours']} / {a['nodes_peer']}", f"{sci(a['max_abs_diff'])} ({num(a['max_abs_value'], 1)})",
                     sci(a["max_rel_diff"]), f"{'yes' if a['within_tolerance'] else 'no'} ({a['atol']:g}, {a['rtol']:g})",
                     seconds(sides["lmsci_mi"], 3), seconds(sides["circuit_tracer"], 3), ratio(m["ratio"]),
                     f"{num(mem['lmsci_mi']['median_peak_mb'], 0)} / {num(mem['circuit_tracer']['median_peak_mb'], 0)}"])
    return markdown(header, rows) + "\n\n" + run_words([m["timing"] for m in data["models"].values()])


GRAPHS_CFG = "PYTHONPATH=. python benchmarks/graphs_cfg.py --threads 1"


def _share(s: dict[str, Any]) -> str:
    return f"{s['selective']} of {s['n']}: {_iv(s['share'], 2)}"


@table("graphs_cfg", missing_ok=True)
def graphs_cfg(data: Any) -> str:
    """The CFG GPT's graphs: scores over sentences, size, and the graph features' selectivity for
    the grammar's non-terminals against every live feature's."""
    if data is None or "graphs_cfg" in data:
        doc = None if data is None else data["graphs_cfg"]
        if doc is None:
            return f"not yet: `{GRAPHS_CFG}`"
        data = doc
    a = data["alignment"]
    rows = [
        ["replacement score", f"{_iv(data['scores']['replacement'])} over {data['n_graphs']} sentences"],
        ["completeness score", _iv(data["scores"]["completeness"])],
        ["feature nodes per graph (active)", f"{data['graph_size']['n_features']:.0f} ({data['graph_size']['n_active']:.0f})"],
        ["features kept by pruning, per graph", f"{data['kept_per_graph']:.1f}"],
        [f"graph features selective for an NT target (AUROC ≥ {data['auroc_threshold']:g})", _share(a["graph_features"])],
        ["every live feature, the same", _share(a["live_features"])],
        [f"graph features pure for an NT target (≥ {a['purity']:g} of the ≥ {a['min_support']} tokens they fire on)",
         _share(a["graph_features_pure"])],
        ["every live feature, the same", _share(a["live_features_pure"])],
    ]
    head = markdown(["CFG GPT", "measured"], rows)
    targets = markdown(["target", "best AUROC: a graph feature", "best AUROC: any live feature",
                        "purest graph feature", "purest live feature", "purest terminal (token identity)"],
                       [[t["target"], num(t["best_graph_feature"], 3), num(t["best_live_feature"], 3),
                         num(t["purest_graph_feature"], 3), num(t["purest_live_feature"], 3),
                         num(t["purest_terminal"], 3)]
                        for t in a["per_target"]])
    return (f"{head}\n\nPer target ({data['n_label_sentences']} held-out sentences, "
            f"{data['n_label_tokens']:,} tokens):\n\n{targets}")


@table("graphs_memory")
def graphs_memory(data: Any) -> str:
    """Peak memory and seconds of one graph by prompt length and batch size (the CFG GPT)."""
    rows = [[f"{r['length']}", f"{r['feature_nodes']:,}", f"{r['batch_size']}",
             "–" if r["peak_mb"] is None else f"{r['peak_mb']:,.0f}", "–" if r["extra_mb"] is None else f"{max(r['extra_mb'], 0.0) + 0.0:,.0f}",
             f"{r['seconds']:.2f}"] for r in data["rows"]]
    machine = "a shared machine (other jobs running): the seconds are not quiet" if data["shared_machine"] else "a quiet machine"
    return (markdown(["prompt tokens", "feature nodes", "batch size", "peak MB", "over the memory before, MB", "seconds"], rows)
            + f"\n\nOne run each, one thread, {machine}; memory is the process's peak resident set (VmHWM).")


GRAPHS_SMOLLM2 = "PYTHONPATH=. OMP_NUM_THREADS=1 python benchmarks/graphs_smollm2.py --threads 1"
FACT_CLAIMS = (
    ("graph_subject_share", "MLP influence at the subject's last token (share of it and the last token)",
     "trace_subject_share", "the trace's MLP effect there (the same share of the two peaks)"),
    ("graph_peak_layer", "layer of the graph's MLP peak at the subject's last token",
     "trace_peak_layer", "layer of the trace's MLP peak there"),
    ("layer_spearman_trace", "Spearman over layers, graph vs trace, at the subject's last token", None, ""),
    ("kn_layer_share", "graph MLP influence at the last token in the knowledge neurons' layers",
     "kn_layer_baseline", "those layers' share of all layers"),
    ("layer_spearman_kn", "Spearman over layers, graph vs the neurons' attribution mass, last token", None, ""),
)
IOI_CLAIMS = (
    ("circuit_mlp_share", "graph MLP influence in the EAP-IG circuit's MLP layers",
     "circuit_mlp_baseline", "those layers' share of all layers"),
    ("layer_spearman_eap_ig", "Spearman over layers, graph MLP influence vs EAP-IG's MLP scores", None, ""),
    ("io_over_subject", "prompts whose indirect object's token node outweighs both subject mentions", None, ""),
)


def _claim_rows(claims: dict[str, Any], spec: tuple) -> list[list[str]]:
    def cell(key: str | None) -> str:
        if key is None:
            return ""
        c = claims[key]
        return _iv(c, 2) if "low" in c else num(c["estimate"], 2)

    return [[what, cell(key), other_what, cell(other)] for key, what, other, other_what in spec]


@table("graphs_smollm2", missing_ok=True)
def graphs_smollm2(data: Any) -> str:
    """SmolLM2's fact and IOI graphs beside the trace, the knowledge neurons and EAP-IG: each
    claim's mean over facts or prompts with its 95 % bootstrap interval, and both sets' scores."""
    if data is None or set(data) == {"graphs_smollm2"}:  # a missing file arrives keyed by its stem
        data = None if data is None else data["graphs_smollm2"]
    if data is None:
        return f"not yet: `{GRAPHS_SMOLLM2}` (after SmolLM2's transcoders)"
    header = ["the graph says", "mean [95 %]", "the other method says", "mean [95 %]"]
    facts, ioi = data["fact_claims"], data["ioi_claims"]
    n_facts, n_prompts = len(data["facts"]), len(data["ioi_prompts"])
    eap = data["eap_ig"]
    of = data.get("n_facts_of_relation", n_facts)  # --n-facts takes the first N in the shipped order
    subset = f", the first {n_facts} of {of} in the shipped order" if of != n_facts else ""
    pairs = data.get("n_ioi_pairs", n_prompts)
    graphed = f", graphs on the first {n_prompts} of the {pairs} that EAP-IG scores" if pairs != n_prompts else ""
    scores = markdown(["graphs", "replacement score", "completeness score", "feature nodes"],
                      [[f"{n_facts} {data['relation']} facts{subset}", _iv(data["fact_scores"]["replacement"], 3),
                        _iv(data["fact_scores"]["completeness"], 3), num(data["fact_scores"]["n_features"]["estimate"], 0)],
                       [f"{n_prompts} IOI prompts{graphed}", _iv(data["ioi_scores"]["replacement"], 3),
                        _iv(data["ioi_scores"]["completeness"], 3), num(data["ioi_scores"]["n_features"]["estimate"], 0)]])
    return (f"{scores}\n\nThe facts ({n_facts}, {data['relation']}{subset}):\n\n{markdown(header, _claim_rows(facts, FACT_CLAIMS))}"
            f"\n\nIOI ({n_prompts} prompts{graphed}; EAP-IG's greedy circuit at 5 %: {eap['edges']} edges, faithfulness "
            f"{minus(num(eap['faithfulness'], 2))}, MLP layers {', '.join(map(str, eap['mlp_layers'])) or 'none'}):\n\n"
            f"{markdown(header, _claim_rows(ioi, IOI_CLAIMS))}")

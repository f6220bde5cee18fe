"""SmolLM2's attribution graphs beside the component-level methods (issue 41): the Eiffel Tower
-> Paris facts beside the causal trace and the knowledge neurons, and the IOI graphs beside the
EAP-IG circuit; the replacement and completeness scores of both sets (docs/graphs.md).

    PYTHONPATH=. OMP_NUM_THREADS=1 python benchmarks/graphs_smollm2.py --threads 1   # needs SmolLM2's transcoders
    PYTHONPATH=. OMP_NUM_THREADS=1 python benchmarks/graphs_smollm2.py --threads 1 --methods-only   # meanwhile
    PYTHONPATH=. python benchmarks/graphs_smollm2.py --quick    # toy-2l, random transcoders, seconds (out/quick/)

The transcoders are ``load_transcoders``'s (build them first: benchmarks/transcoders.py --model
smollm2-135m). Each graph targets the answer's logit alone (the fact's true answer, IOI's indirect
object), at circuit-tracer's other defaults (``GRAPH_CONFIG``). A node's influence is
circuit-tracer's (every path to the logit, ``AttributionGraph.node_influence``). A layer's **MLP
influence** at a position is that of its feature nodes plus its error node there: the whole MLP
output the trace restores or EAP-IG scores, the error being the part the transcoder misses.

**Facts** (the shipped facts of one relation, ``--relation``, one-token answers): per fact,

- *where*: the share of the MLP influence at the subject's last token, of that at the subject's
  last token and the last token together; the trace's counterpart is the same share of the MLP
  rows' indirect effect (restored minus corrupted, ROME's trace, window 10), its largest layer at
  each of the two positions;
- *which layers*: the Spearman correlation over layers of the graph's MLP influence at the
  subject's last token with the trace's MLP effect there, and the layer where each peaks;
- *the knowledge neurons* (Dai et al.'s, at the last token): the Spearman correlation over layers
  of the graph's MLP influence at the last token with the neurons' attribution mass (the sum of
  the integrated-gradients scores above zero on the fact's rewrite prompt), and the share of that
  influence in the layers that hold a knowledge neuron beside those layers' share of all layers.

**IOI** (``ioi_str_pairs``: the prompts and the STR corruption of benchmarks/edges.py): EAP-IG
(m = 5) on the pairs, its greedy circuit at 5 % of the edges, and one graph per prompt: the share of
the graph's MLP influence (summed over positions) in the circuit's MLP layers beside their share
of all layers; the Spearman correlation over layers of the graph's MLP influence with the
circuit's MLP node scores (the |score| of the edges that leave each MLP); and among the input
tokens, the share of prompts whose indirect object's token node has more influence than the two
mentions of the subject (the IOI account: name movers copy the indirect object from its position).

Every figure over facts or prompts has a 95 % percentile-bootstrap interval over them. Each
graph, trace, neuron set and the EAP-IG circuit are cached, so a killed run resumes; the
component-level side needs no transcoder, so ``--methods-only`` computes it while the transcoders
are built. ``--n-facts N`` takes the relation's first N facts in the shipped order, ``--n-ioi-graphs N``
graphs the first N IOI prompts (EAP-IG still scores all of them); the page says so.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import harness
import numpy as np
import torch

from lmsci_mi import LensModel, load_model
from lmsci_mi.circuits.attribution import spearman as rank_correlation
from lmsci_mi.circuits.edges import CurveConfig, EAPConfig, edge_attribution, faithfulness_curve
from lmsci_mi.circuits.edges.pruning import node_map
from lmsci_mi.circuits.graphs import AttributionGraph, GraphConfig, attribution_graph
from lmsci_mi.circuits.tracing import TraceConfig, causal_trace
from lmsci_mi.data.facts import Fact, load_facts
from lmsci_mi.data.ioi import ioi_str_pairs
from lmsci_mi.knowledge.neurons import KnowledgeNeuronsConfig, knowledge_neurons
from lmsci_mi.stats import bootstrap_interval
from lmsci_mi.transcoders import TranscoderSet, load_transcoders

GRAPH_CONFIG = GraphConfig(batch_size=64)
CIRCUIT_PERCENT = 5.0


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--relation", default="landmark_city", help="the facts' relation (the Eiffel Tower's)")
    parser.add_argument("--n-prompts", type=int, default=16,
                        help="IOI pairs for EAP-IG (each graphed too, unless --n-ioi-graphs)")
    parser.add_argument("--n-facts", type=int, default=None,
                        help="the relation's first N one-token facts, in the shipped order (default: all)")
    parser.add_argument("--n-ioi-graphs", type=int, default=None,
                        help="graph the first N of the IOI prompts (default: all; EAP-IG uses all)")
    parser.add_argument("--methods-only", action="store_true",
                        help="only the trace, the knowledge neurons and EAP-IG (no transcoder needed), cached")
    parser.add_argument("--resamples", type=int, default=2000)


# --- what a graph says ----------------------------------------------------------------------------


def mlp_influence(graph: AttributionGraph) -> np.ndarray:
    """``[layer, position]``: each MLP's influence on the logit, its feature nodes' plus its error
    node's (circuit-tracer's node influence)."""
    lay, influence = graph.layout, graph.node_influence().double()
    grid = influence[lay.error_start : lay.token_start].reshape(lay.n_layers, lay.n_pos).clone()
    feats = graph.features.long()
    grid.index_put_((feats[:, 0], feats[:, 1]), influence[: lay.n_features], accumulate=True)
    return grid.numpy()


def token_influence(graph: AttributionGraph) -> np.ndarray:
    """``[position]``: each input token node's influence on the logit."""
    lay = graph.layout
    return graph.node_influence()[lay.token_start : lay.logit_start].double().numpy()


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation over layers (ties share their mean rank; NaN when one is constant)."""
    return rank_correlation(torch.tensor(np.asarray(a, dtype=float)), torch.tensor(np.asarray(b, dtype=float)))


def graph_scores(graph: AttributionGraph) -> dict[str, float]:
    scores = graph.scores()
    return {"replacement": scores.replacement, "completeness": scores.completeness,
            "n_features": graph.layout.n_features, "n_active": graph.n_active}


# --- facts ----------------------------------------------------------------------------------------


def relation_facts(lm: LensModel, relation: str) -> list[Fact]:
    """The shipped facts of ``relation`` whose true answer is one token (the knowledge neurons'
    and the graph's target)."""
    facts = [f for f in load_facts("facts") if f.relation == relation
             and len(lm.continuation_ids(f.target_true)) == 1]
    if not facts:
        raise SystemExit(f"no shipped fact of relation {relation!r} with a one-token answer")
    return facts


def fact_methods(lm: LensModel, fact: Fact) -> dict[str, Any]:
    """One fact's causal trace (MLP rows) and knowledge neurons, reduced to per-layer profiles:
    the component-level side, which needs no transcoder."""
    trace = causal_trace(lm, fact.rewrite_prompt, fact.subject, TraceConfig(target=fact.target_true, kinds=("mlp",)))
    neurons = knowledge_neurons(lm, fact, config=KnowledgeNeuronsConfig())
    kn_mass = neurons.scores[0].clamp(min=0).sum(-1)  # [layer] on the rewrite prompt
    effect = (trace.values[0] - trace.corrupted_value).double().numpy()  # [layer, position]
    return {"subject_last": trace.subject_positions[-1], "n_tokens": trace.values.shape[-1],
            "trace_mlp": effect.tolist(), "kn_layers": sorted({layer for layer, _ in neurons.neurons}),
            "kn_mass": {int(layer): float(m) for layer, m in zip(neurons.layers, kn_mass, strict=True)}}


def fact_item(lm: LensModel, tcs: TranscoderSet, fact: Fact, methods: dict[str, Any]) -> dict[str, Any]:
    """One fact's graph beside its trace and knowledge neurons (``fact_methods``)."""
    prompt, answer = fact.rewrite_prompt, lm.continuation_ids(fact.target_true)[0]
    graph = attribution_graph(lm, tcs, prompt, GRAPH_CONFIG, targets=[answer])
    if methods["n_tokens"] != len(graph.tokens):
        raise RuntimeError(f"{prompt!r}: the trace and the graph tokenise differently")
    return {"subject": fact.subject, "prompt": prompt, "target": fact.target_true,
            "positions": {"subject_last": methods["subject_last"], "last": len(graph.tokens) - 1},
            "graph_mlp": mlp_influence(graph).tolist(), "trace_mlp": methods["trace_mlp"],
            "kn_layers": methods["kn_layers"], "kn_mass": methods["kn_mass"], **graph_scores(graph)}


def fact_claims(item: dict[str, Any]) -> dict[str, float]:
    """What the graph and the two methods say of one fact (see the module docstring)."""
    graph, trace = np.asarray(item["graph_mlp"]), np.asarray(item["trace_mlp"])
    s, last = item["positions"]["subject_last"], item["positions"]["last"]
    n_layers = graph.shape[0]
    kn_mass = np.array([item["kn_mass"].get(str(layer), item["kn_mass"].get(layer, 0.0)) for layer in range(n_layers)])
    kn_layers = item["kn_layers"]
    return {
        "graph_subject_share": graph[:, s].sum() / (graph[:, s].sum() + graph[:, last].sum()),
        "trace_subject_share": trace[:, s].max() / (trace[:, s].max() + max(trace[:, last].max(), 0.0)),
        "layer_spearman_trace": spearman(graph[:, s], trace[:, s]),
        "graph_peak_layer": float(graph[:, s].argmax()), "trace_peak_layer": float(trace[:, s].argmax()),
        "layer_spearman_kn": spearman(graph[:, last], kn_mass),
        "kn_layer_share": graph[kn_layers, last].sum() / graph[:, last].sum() if kn_layers else float("nan"),
        "kn_layer_baseline": len(kn_layers) / n_layers,
    }


# --- IOI ------------------------------------------------------------------------------------------


def eap_ig_circuit(lm: LensModel, pairs: Any) -> dict[str, Any]:
    """EAP-IG (m = 5) on the pairs, its greedy circuit at ``CIRCUIT_PERCENT`` of the edges: the
    circuit's MLP layers, its faithfulness, and per layer the |score| of the edges leaving the MLP."""
    scored = edge_attribution(lm, pairs, config=EAPConfig(method="EAP-IG", steps=5))
    curve = faithfulness_curve(lm, scored.graph, scored, pairs,
                               config=CurveConfig(fractions=(1.0, CIRCUIT_PERCENT), n_bootstrap=0))
    circuit = curve.circuit(CIRCUIT_PERCENT)
    names = node_map(scored.graph).names
    senders = list(circuit.axis_labels(0))
    score = scored.values.abs()
    per_layer = [float(score[senders.index(f"MLP{layer}")].sum()) if f"MLP{layer}" in senders else 0.0
                 for layer in range(lm.cfg.n_layers)]
    mlps = sorted(int(n.removeprefix("MLP")) for n in circuit.node_names() if n.startswith("MLP"))
    return {"mlp_layers": mlps, "mlp_scores": per_layer, "faithfulness": circuit.faithfulness,
            "edges": circuit.n_edges, "nodes": len(circuit.node_names()), "n_nodes": len(names)}


def ioi_item(lm: LensModel, tcs: TranscoderSet, prompt: str, io: int, s: int) -> dict[str, Any]:
    """One IOI prompt's graph on the indirect object's logit: MLP influence per layer, and the
    token nodes' influence at the indirect object and the subject's two mentions."""
    graph = attribution_graph(lm, tcs, prompt, GRAPH_CONFIG, targets=[io])
    tokens, tokens_influence = graph.tokens.tolist(), token_influence(graph)
    s_positions = [p for p, t in enumerate(tokens) if t == s]
    io_positions = [p for p, t in enumerate(tokens) if t == io]
    if len(io_positions) != 1 or len(s_positions) != 2:
        raise RuntimeError(f"{prompt!r}: expected one indirect object and two subject mentions")
    return {"prompt": prompt, "graph_mlp": mlp_influence(graph).sum(1).tolist(),
            "io_influence": float(tokens_influence[io_positions[0]]),
            "s_influence": [float(tokens_influence[p]) for p in s_positions], **graph_scores(graph)}


def ioi_claims(item: dict[str, Any], circuit: dict[str, Any]) -> dict[str, float]:
    graph, mlps = np.asarray(item["graph_mlp"]), circuit["mlp_layers"]
    return {"circuit_mlp_share": graph[mlps].sum() / graph.sum() if mlps else float("nan"),
            "circuit_mlp_baseline": len(mlps) / len(graph),
            "layer_spearman_eap_ig": spearman(graph, circuit["mlp_scores"]),
            "io_over_subject": float(item["io_influence"] > max(item["s_influence"]))}


# --- the run --------------------------------------------------------------------------------------


def summarise(rows: list[dict[str, float]], resamples: int) -> dict[str, dict[str, Any]]:
    """Each claim's mean over items with a 95 % percentile-bootstrap interval (NaNs left out)."""
    out = {}
    for key in rows[0]:
        values = torch.tensor([r[key] for r in rows if not np.isnan(r[key])], dtype=torch.float64)
        out[key] = (bootstrap_interval(values, n_resamples=resamples, seed=0).as_dict() if len(values) > 1
                    else {"estimate": float(values.mean()) if len(values) else float("nan"), "n": len(values)})
    return out


def transcoders_for(lm: LensModel, quick: bool) -> TranscoderSet:
    return TranscoderSet.random(lm, 64, seed=0) if quick else load_transcoders(lm)


def main() -> None:
    run = harness.start(__doc__, __file__, threads=1, flags=add_flags, out=harness.DATA / "graphs_smollm2.json")
    args = run.args
    torch.set_grad_enabled(True)
    with run.timed("load"):
        lm = load_model("toy-2l" if run.quick else args.model)
    cache = run.cache(exclude=["resamples", "methods_only", "n_facts", "n_ioi_graphs"])
    every = relation_facts(lm, args.relation)
    facts = every[: 2 if run.quick else args.n_facts]
    pairs = ioi_str_pairs(lm, 4 if run.quick else args.n_prompts, seed=0)
    # the component-level side first, each item cached: it needs no transcoder, so
    # --methods-only runs it while the transcoders are still being built
    with run.timed("trace and knowledge neurons"):
        methods = [cache.get(f"methods-{i:02d}", lambda f=f: fact_methods(lm, f)) for i, f in enumerate(facts)]
    with run.timed("eap-ig"):
        circuit = cache.get("eap-ig", lambda: eap_ig_circuit(lm, pairs))
    if args.methods_only:
        print(f"the trace, the knowledge neurons ({len(facts)} facts) and EAP-IG are cached; run again without "
              "--methods-only for the graphs")
        return
    with run.timed("load transcoders"):
        tcs = transcoders_for(lm, run.quick)
    with run.timed("fact graphs"):
        fact_items = [cache.get(f"fact-{i:02d}", lambda f=f, m=m: fact_item(lm, tcs, f, m))
                      for i, (f, m) in enumerate(zip(facts, methods, strict=True))]
    with run.timed("ioi graphs"):
        ioi_items = [cache.get(f"ioi-{i:02d}", lambda i=i: ioi_item(lm, tcs, pairs.clean[i], pairs.answers[i],
                                                                     pairs.wrongs[i]))
                     for i in range(len(pairs.clean))[: args.n_ioi_graphs]]
    run.write(record(lm, args, fact_items, ioi_items, circuit, pairs.source, run.quick) | {
        "n_facts_of_relation": len(every), "n_ioi_pairs": len(pairs.clean)})


def record(lm: LensModel, args: argparse.Namespace, fact_items: list[dict[str, Any]],
           ioi_items: list[dict[str, Any]], circuit: dict[str, Any], source: str, quick: bool) -> dict[str, Any]:
    """The data file: per fact and prompt the claims, their summaries, and both sets' scores."""
    def scores(items: list[dict[str, Any]]) -> dict[str, Any]:
        return summarise([{k: float(i[k]) for k in ("replacement", "completeness", "n_features")} for i in items],
                         args.resamples)

    facts = [fact_claims(i) for i in fact_items]
    ioi = [ioi_claims(i, circuit) for i in ioi_items]
    return {
        "model": lm.name, "transcoders": "random (--quick)" if quick else "the smollm2-135m preset",
        "graph_config": GRAPH_CONFIG.params(), "relation": args.relation, "n_layers": lm.cfg.n_layers,
        "facts": [{"subject": i["subject"], "prompt": i["prompt"], "target": i["target"],
                   "kn_layers": i["kn_layers"], **c} for i, c in zip(fact_items, facts, strict=True)],
        "fact_claims": summarise(facts, args.resamples), "fact_scores": scores(fact_items),
        "ioi_source": source, "eap_ig": {k: v for k, v in circuit.items() if k != "mlp_scores"},
        "ioi_prompts": [{"prompt": i["prompt"], **c} for i, c in zip(ioi_items, ioi, strict=True)],
        "ioi_claims": summarise(ioi, args.resamples), "ioi_scores": scores(ioi_items),
    }


if __name__ == "__main__":
    main()

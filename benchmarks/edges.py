"""Benchmark: edge-level circuit discovery on SmolLM2 IOI (EAP, EAP-IG, faithfulness curves).

On SmolLM2-135M, 32 IOI prompts, STR corruption (S2 -> a third name), logit difference IO - S,
the ungrouped graph (123,211 edges, EAP-IG's and MIB's GQA layout), in one run:
  (a) EAP-IG (m = 5) and EAP over all edges: seconds (target <= 60 s for EAP-IG);
  (b) faithfulness curves at MIB's 10 edge budgets for EAP and EAP-IG, greedy and top-n pruning:
      seconds per curve (target <= 60 s), the curves, CPR and CMD (linear fraction axis, MIB);
  (c) the EAP-IG greedy circuit at 5 % of edges: faithfulness (target >= 0.75) and whether it holds
      the two strongest name movers by direct logit attribution;
  (d) exact scoring of 200 edges (each patched alone): the batched evaluator vs one batched forward
      pass per edge (target >= 5x);
  (e) EAP-IG with m = 10 and 20 steps: faithfulness of the greedy circuits at 1, 5 and 10 %.
Each stage is cached under out/bench_edges/ and skipped when its file exists (``--fresh`` redoes
all), so the run resumes where it stopped. Writes docs/data/edges.json and docs/img/edges_*.png.

    PYTHONPATH=. .venv/bin/python benchmarks/edges.py            # all stages
    PYTHONPATH=. .venv/bin/python benchmarks/edges.py --stage scores
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from lmsci_mi import load_model
from lmsci_mi.circuits.eap import EAPConfig, EdgeScores, edge_attribution
from lmsci_mi.circuits.edge_patching import evaluate_circuits
from lmsci_mi.circuits.faithfulness import (
    MIB_FRACTIONS,
    CurveConfig,
    FaithfulnessCurve,
    faithfulness_curve,
    plot_faithfulness_curves,
)
from lmsci_mi.circuits.graph import edge_graph
from lmsci_mi.data.ioi import TextPairs, ioi_str_pairs
from lmsci_mi.lenses import direct_logit_attribution
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result
from lmsci_mi.viz.plots import save_figure

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "out" / "bench_edges"
DATA = ROOT / "docs" / "data" / "edges.json"
IMG = ROOT / "docs" / "img"
N_PROMPTS = 32
METHODS = {"EAP-IG": EAPConfig(method="EAP-IG", steps=5), "EAP": EAPConfig(method="EAP")}


def _cached(name: str, make):
    """A stage's JSON-able output, computed once and kept under out/bench_edges/."""
    path = CACHE / f"{name}.json"
    if path.exists():
        return json.loads(path.read_text())
    value = make()
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=1))
    return value


def _scores(lm: LensModel, pairs: TextPairs, method: str) -> tuple[EdgeScores, float]:
    path = CACHE / f"scores_{method}.json"
    if path.exists():
        meta = json.loads((CACHE / f"scores_{method}_time.json").read_text())
        return Result.load(path), meta["seconds"]  # type: ignore[return-value]
    start = time.perf_counter()
    scores = edge_attribution(
        lm, list(pairs.clean), list(pairs.corrupted), pairs.metric(), METHODS[method]
    )
    seconds = time.perf_counter() - start
    CACHE.mkdir(parents=True, exist_ok=True)
    scores.save(path)
    (CACHE / f"scores_{method}_time.json").write_text(json.dumps({"seconds": seconds}))
    return scores, seconds


def _curve(
    lm: LensModel, pairs: TextPairs, scores: EdgeScores, method: str, prune: str
) -> tuple[FaithfulnessCurve, float]:
    path = CACHE / f"curve_{method}_{prune}.json"
    if path.exists():
        meta = json.loads((CACHE / f"curve_{method}_{prune}_time.json").read_text())
        return Result.load(path), meta["seconds"]  # type: ignore[return-value]
    config = CurveConfig(prune=prune)  # type: ignore[arg-type]
    label = "EAP-IG (m=5)" if method == "EAP-IG" else "EAP"
    start = time.perf_counter()
    curve = faithfulness_curve(
        lm,
        scores.graph,
        scores,
        list(pairs.clean),
        list(pairs.corrupted),
        pairs.metric(),
        config,
        label=label,
    )
    seconds = time.perf_counter() - start
    curve.save(path)
    (CACHE / f"curve_{method}_{prune}_time.json").write_text(json.dumps({"seconds": seconds}))
    return curve, seconds


def name_movers_by_dla(lm: LensModel, pairs: TextPairs, k: int = 2) -> list[tuple[str, float]]:
    """The ``k`` heads with the largest mean direct logit attribution to IO − S at the last token
    (:func:`lmsci_mi.lenses.direct_logit_attribution`, norm scales frozen per prompt)."""
    tokens = [lm.tokenizer.decode([i]) for i in (*pairs.answers, *pairs.wrongs)]
    n = len(pairs.clean)
    dla = direct_logit_attribution(lm, list(pairs.clean), tokens[:n], tokens[n:])
    return [(str(head), value) for head, value in dla.top(k)]


def exact_edge_scoring(
    lm: LensModel, pairs: TextPairs, scores: EdgeScores, n_edges: int = 200
) -> dict[str, float]:
    """Each of the top ``n_edges`` EAP-IG edges cut alone (all other edges kept): the batched
    evaluator (16 circuits a pass, each pass from the clean run's prefix and the first cut layer)
    against one batched forward pass per edge over the whole model and prompt (``reuse=False``,
    one circuit a pass; 20 edges timed and scaled to ``n_edges``)."""
    graph = scores.graph
    flat = scores.values.abs().masked_fill(~graph.real, -1).flatten().argsort(descending=True)
    width = graph.n_receivers
    masks = graph.full_mask().repeat(n_edges, 1, 1)
    for i, index in enumerate(flat[:n_edges].tolist()):
        masks[i, index // width, index % width] = False
    args = (lm, graph, masks, list(pairs.clean), list(pairs.corrupted), pairs.metric())
    torch.set_grad_enabled(False)  # exact patching needs no gradients
    start = time.perf_counter()
    batched = evaluate_circuits(*args, batch_size=N_PROMPTS, circuits_per_pass=16)
    t_batched = time.perf_counter() - start
    n_loop = 20  # one pass per edge is slow: time 20 edges and scale to 200
    start = time.perf_counter()
    looped = evaluate_circuits(
        lm,
        graph,
        masks[:n_loop],
        list(pairs.clean),
        list(pairs.corrupted),
        pairs.metric(),
        batch_size=N_PROMPTS,
        circuits_per_pass=1,
        reuse=False,
    )
    t_loop = (time.perf_counter() - start) * n_edges / n_loop
    return {
        "edges": n_edges,
        "batched_s": t_batched,
        "per_edge_pass_s": t_loop,
        "per_edge_measured_edges": n_loop,
        "speedup": t_loop / t_batched,
        "max_abs_diff": float((batched.values[:n_loop] - looped.values).abs().max()),
    }


def more_steps(lm: LensModel, pairs: TextPairs, steps: int) -> dict:
    """EAP-IG with more integration steps: seconds, and the greedy circuits' faithfulness at 1, 5
    and 10 % of edges with their 95 % bootstrap intervals (does m = 5 limit the 5 % circuit?)."""
    start = time.perf_counter()
    scores = edge_attribution(
        lm, list(pairs.clean), list(pairs.corrupted), pairs.metric(),
        EAPConfig(method="EAP-IG", steps=steps),
    )  # fmt: skip
    seconds = time.perf_counter() - start
    curve = faithfulness_curve(
        lm, scores.graph, scores, list(pairs.clean), list(pairs.corrupted), pairs.metric(),
        CurveConfig(fractions=(1.0, 5.0, 10.0)), label=f"EAP-IG (m={steps})",
    )  # fmt: skip
    interval = curve.interval.tolist() if curve.interval is not None else None
    movers = _cached("movers", lambda: name_movers_by_dla(lm, pairs))
    heads = {str(h) for h in curve.circuit(5.0).heads()}
    return {"seconds": seconds, "fractions": [1.0, 5.0, 10.0], "faithfulness": curve.values.tolist(),
            "ci95": interval, "has_name_movers_5pct": all(m in heads for m, _ in movers)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--stage", choices=("scores", "curves", "movers", "exact", "steps", "all"), default="all"
    )
    parser.add_argument("--fresh", action="store_true", help="drop the cached stages first")
    args = parser.parse_args()
    if args.fresh and CACHE.exists():
        for path in CACHE.iterdir():
            path.unlink()
    torch.set_grad_enabled(True)
    lm = load_model("smollm2-135m")
    pairs = ioi_str_pairs(lm, N_PROMPTS, seed=0)
    graph = edge_graph(lm)
    # each stage adds its keys to the data file, so stages run as separate (locked) pieces
    out: dict = json.loads(DATA.read_text()) if DATA.exists() else {}
    out |= {
        "model": lm.name,
        "prompts": N_PROMPTS,
        "corruption": pairs.source,
        "graph": graph.describe(),
        "edges": graph.n_edges,
        "fractions": list(MIB_FRACTIONS),
        "metric": "logit difference IO - S at the last token",
        "cpr_cmd_axis": "fraction of edges as a proportion (0.001 .. 1), linear, trapezoid (MIB)",
    }
    scores = {}
    for method in METHODS:
        scores[method], seconds = _scores(lm, pairs, method)
        out[f"seconds_{method}"] = seconds
    if args.stage == "scores":
        return
    curves = {}
    if args.stage in ("curves", "all"):
        for method in METHODS:
            for prune in ("greedy", "topn"):
                curve, seconds = _curve(lm, pairs, scores[method], method, prune)
                curves[(method, prune)] = curve
                out[f"curve_{method}_{prune}"] = {
                    "faithfulness": curve.values.tolist(),
                    "kept": list(curve.kept),
                    "ci95": curve.interval.tolist() if curve.interval is not None else None,
                    "cpr": curve.cpr,
                    "cmd": curve.cmd,
                    "seconds": seconds,
                    "clean": curve.clean_value,
                    "corrupted": curve.corrupted_value,
                }
        IMG.mkdir(parents=True, exist_ok=True)
        save_figure(
            plot_faithfulness_curves(
                list(curves.values()), title=f"SmolLM2-135M IOI (STR), {N_PROMPTS} prompts"
            ),
            IMG / "edges_curves.png",
        )
        c5 = curves[("EAP-IG", "greedy")].circuit(5.0)
        heads = {str(h) for h in c5.heads()}
        out["eap_ig_5pct"] = {
            "faithfulness": c5.faithfulness,
            "edges": c5.n_edges,
            "nodes": len(c5.node_names()),
            "heads": sorted(heads),
        }
        view = curves[("EAP-IG", "greedy")].circuit(0.2)
        save_figure(view.plot(), IMG / "edges_circuit.png")
        (IMG / "edges_circuit.svg").write_text(view.to_svg())
        out["circuit_view"] = {
            "fraction": 0.2,
            "edges": view.n_edges,
            "nodes": len(view.node_names()),
        }
    if args.stage in ("movers", "all"):
        movers = _cached("movers", lambda: name_movers_by_dla(lm, pairs))
        out["name_movers_dla"] = movers
        if "eap_ig_5pct" in out:
            out["eap_ig_5pct"]["has_name_movers"] = all(
                m in out["eap_ig_5pct"]["heads"] for m, _ in movers
            )
    if args.stage in ("exact", "all"):
        out["exact_200"] = _cached("exact", lambda: exact_edge_scoring(lm, pairs, scores["EAP-IG"]))
    if args.stage in ("steps", "all"):
        out["eap_ig_steps"] = {str(m): _cached(f"steps_{m}", lambda m=m: more_steps(lm, pairs, m))
                               for m in (10, 20)}  # fmt: skip
    peers = ROOT / "docs" / "data" / "edges_peers.json"
    if peers.exists():
        out["peers"] = json.loads(peers.read_text())
    DATA.parent.mkdir(parents=True, exist_ok=True)
    DATA.write_text(json.dumps(out, indent=1))
    _print_table(out)


def _print_table(out: dict) -> None:
    print(f"{out['graph']}; {out['prompts']} prompts; {out['corruption']}")
    for method in METHODS:
        print(
            f"{method:>7} scores: {out[f'seconds_{method}']:.1f} s (target <= 60 s for EAP-IG: "
            f"ratio {out[f'seconds_{method}'] / 60:.2f})"
        )
    for key, value in out.items():
        if key.startswith("curve_"):
            f = " ".join(f"{x:.2f}" for x in value["faithfulness"])
            print(
                f"{key[6:]:>15}: {value['seconds']:.1f} s (ratio to 60 s {value['seconds'] / 60:.2f}); "
                f"CPR {value['cpr']:.3f} CMD {value['cmd']:.3f}; f = {f}"
            )
    if "eap_ig_5pct" in out:
        print(f"EAP-IG greedy 5 %: {out['eap_ig_5pct']}")
    if "name_movers_dla" in out:
        print(f"name movers by DLA: {out['name_movers_dla']}")
    for m, row in out.get("eap_ig_steps", {}).items():
        print(f"EAP-IG m={m}: {row['seconds']:.1f} s; greedy f at 1/5/10 % = "
              + " ".join(f"{x:.3f}" for x in row["faithfulness"]))  # fmt: skip
    if "exact_200" in out:
        e = out["exact_200"]
        print(
            f"200 edges exact: batched {e['batched_s']:.1f} s, one pass per edge {e['per_edge_pass_s']:.1f} s "
            f"-> {e['speedup']:.1f}x (max |diff| {e['max_abs_diff']:.2g})"
        )


if __name__ == "__main__":
    main()

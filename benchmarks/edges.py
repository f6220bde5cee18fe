"""Benchmark: edge-level circuit discovery on SmolLM2 IOI (EAP, EAP-IG, faithfulness curves).

On SmolLM2-135M, 32 IOI prompts, STR corruption (S2 -> a third name), logit difference IO - S,
the ungrouped graph (123,211 edges, EAP-IG's and MIB's GQA layout), in one run:
  (a) EAP-IG (m = 5) and EAP over all edges: seconds (target <= 60 s for EAP-IG);
  (b) faithfulness curves at MIB's 10 edge budgets for EAP and EAP-IG, greedy and top-n pruning:
      seconds per curve (target <= 60 s), the curves, CPR and CMD (linear fraction axis, MIB);
  (c) the EAP-IG greedy circuit at 5 % of edges: faithfulness (target >= 0.75) and whether it holds
      the two strongest name movers by direct logit attribution (``name_movers_by_dla``);
  (d) exact scoring of 200 edges (each patched alone): the batched evaluator vs one batched forward
      pass per edge (target >= 5x);
  (e) EAP-IG with m = 10 and 20 steps: faithfulness of the greedy circuits at 1, 5 and 10 %.
Each stage's output is kept in the harness's per-item cache and skipped when there (``--fresh``
redoes all), so the run resumes where it stopped. Writes docs/data/edges.json (each stage adds its
keys to the file) and docs/img/edges_*.png (beside --out when it is another file).

    PYTHONPATH=. .venv/bin/python benchmarks/edges.py            # all stages
    PYTHONPATH=. .venv/bin/python benchmarks/edges.py --stage scores
    PYTHONPATH=. python benchmarks/edges.py --quick --model toy-2l   # a check: 4 prompts, m = 2, 3
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import harness
import torch
from doc_tables import MODEL_NAMES
from doc_tables.schemas.circuits import EdgeCurve, EdgeExact, EdgesData, EdgeSteps

from lmsci_mi import LensModel, load_model
from lmsci_mi.circuits.edges.eap import EAPConfig, EdgeScores, edge_attribution
from lmsci_mi.circuits.edges.faithfulness import (
    MIB_FRACTIONS,
    CurveConfig,
    FaithfulnessCurve,
    faithfulness_curve,
    plot_faithfulness_curves,
)
from lmsci_mi.circuits.edges.graph import edge_graph
from lmsci_mi.circuits.edges.patching import evaluate_circuits
from lmsci_mi.circuits.ioi import name_movers_by_dla
from lmsci_mi.data.ioi import ioi_str_pairs
from lmsci_mi.data.pairs import PromptPairs
from lmsci_mi.results import Result
from lmsci_mi.viz.plots import save_figure

DATA = harness.DATA / "edges.json"
IMG = harness.ROOT / "docs" / "img"
N_PROMPTS = 32
METHODS = {"EAP-IG": EAPConfig(method="EAP-IG", steps=5), "EAP": EAPConfig(method="EAP")}
PRUNING = ("greedy", "topn")
STAGES = ("scores", "curves", "movers", "exact", "steps", "all")
R = TypeVar("R", bound=Result)


@dataclass(frozen=True)
class Setup:
    """What every stage reads: the model, the prompt pairs, the cache and the run's sizes."""

    lm: LensModel
    pairs: PromptPairs
    cache: harness.ItemCache
    exact_edges: int
    exact_looped: int
    """Single-edge circuits timed one pass each (scaled to ``exact_edges``)."""
    more_steps: tuple[int, ...]


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stage", choices=STAGES, default="all")
    parser.add_argument("--model", default="smollm2-135m")


def timed_result(cache: harness.ItemCache, item: str, compute: Callable[[], R]) -> tuple[R, float]:
    """A result and the seconds it took, computed once: the result is saved with
    :meth:`Result.save` and its seconds last, which marks the item done."""
    path, seconds = cache.path(item), cache.load(f"{item}_seconds")
    if seconds is not None:
        return Result.load(path), seconds  # type: ignore[return-value]
    start = time.perf_counter()
    result = compute()
    seconds = time.perf_counter() - start
    result.save(path)
    cache.save(f"{item}_seconds", seconds)
    return result, seconds


def scores(s: Setup, method: str) -> tuple[EdgeScores, float]:
    return timed_result(s.cache, f"scores_{method}", lambda: edge_attribution(
        s.lm, s.pairs, config=METHODS[method]))


def curve(s: Setup, scored: EdgeScores, method: str, prune: str) -> tuple[FaithfulnessCurve, float]:
    label = "EAP-IG (m=5)" if method == "EAP-IG" else "EAP"
    return timed_result(s.cache, f"curve_{method}_{prune}", lambda: faithfulness_curve(
        s.lm, scored.graph, scored, s.pairs, config=CurveConfig(prune=prune), label=label))  # type: ignore[arg-type]


def movers(s: Setup) -> list[tuple[str, float]]:
    return s.cache.get("movers", lambda: [(str(h), v) for h, v in name_movers_by_dla(s.lm, s.pairs)])


def curve_record(c: FaithfulnessCurve, seconds: float) -> EdgeCurve:
    return EdgeCurve(
        faithfulness=c.values.tolist(), kept=list(c.kept),
        ci95=c.interval.tolist() if c.interval is not None else None, cpr=c.cpr, cmd=c.cmd,
        seconds=seconds, clean=c.clean_value, corrupted=c.corrupted_value,
    )


def stage_curves(s: Setup, scored: dict[str, EdgeScores], out: EdgesData, img: Path) -> None:
    """(b) and (c): every curve, their figure, the 5 % circuit and the 0.2 % view."""
    curves = {}
    for method in METHODS:
        for prune in PRUNING:
            curves[method, prune], seconds = curve(s, scored[method], method, prune)
            out[f"curve_{method}_{prune}"] = curve_record(curves[method, prune], seconds)  # type: ignore[literal-required]
    img.mkdir(parents=True, exist_ok=True)
    title = f"{MODEL_NAMES.get(s.lm.name, s.lm.name)} IOI (STR), {len(s.pairs.clean)} prompts"
    save_figure(plot_faithfulness_curves(list(curves.values()), title=title), img / "edges_curves.png")
    c5 = curves["EAP-IG", "greedy"].circuit(5.0)
    out["eap_ig_5pct"] = {"faithfulness": c5.faithfulness, "edges": c5.n_edges,
                          "nodes": len(c5.node_names()), "heads": sorted({str(h) for h in c5.heads()})}
    view = curves["EAP-IG", "greedy"].circuit(0.2)
    save_figure(view.plot(), img / "edges_circuit.png")
    (img / "edges_circuit.svg").write_text(view.to_svg())
    out["circuit_view"] = {"fraction": 0.2, "edges": view.n_edges, "nodes": len(view.node_names())}


def exact_edge_scoring(s: Setup, scored: EdgeScores) -> EdgeExact:
    """Each of the top EAP-IG edges cut alone (all other edges kept): the batched evaluator (16
    circuits a pass, each pass from the clean run's prefix and the first cut layer) against one
    batched forward pass per edge over the whole model and prompt (``reuse=False``, one circuit a
    pass; ``exact_looped`` edges timed and scaled)."""
    graph, n = scored.graph, s.exact_edges
    flat = scored.values.abs().masked_fill(~graph.real, -1).flatten().argsort(descending=True)
    width = graph.n_receivers
    masks = graph.full_mask().repeat(n, 1, 1)
    for i, index in enumerate(flat[:n].tolist()):
        masks[i, index // width, index % width] = False
    p = s.pairs
    torch.set_grad_enabled(False)  # exact patching needs no gradients
    start = time.perf_counter()
    batched = evaluate_circuits(s.lm, graph, masks, p, batch_size=len(p), circuits_per_pass=16)
    t_batched = time.perf_counter() - start
    start = time.perf_counter()
    looped = evaluate_circuits(s.lm, graph, masks[: s.exact_looped], p,
                               batch_size=len(p), circuits_per_pass=1, reuse=False)
    t_loop = (time.perf_counter() - start) * n / s.exact_looped
    return EdgeExact(edges=n, batched_s=t_batched, per_edge_pass_s=t_loop,
                     per_edge_measured_edges=s.exact_looped, speedup=t_loop / t_batched,
                     max_abs_diff=float((batched.values[: s.exact_looped] - looped.values).abs().max()))


def more_steps(s: Setup, steps: int) -> EdgeSteps:
    """EAP-IG with more integration steps: seconds, and the greedy circuits' faithfulness at 1, 5
    and 10 % of edges with their 95 % bootstrap intervals (does m = 5 limit the 5 % circuit?)."""
    start = time.perf_counter()
    scored = edge_attribution(s.lm, s.pairs, config=EAPConfig(method="EAP-IG", steps=steps))
    seconds = time.perf_counter() - start
    c = faithfulness_curve(s.lm, scored.graph, scored, s.pairs,
                           config=CurveConfig(fractions=(1.0, 5.0, 10.0)), label=f"EAP-IG (m={steps})")
    heads = {str(h) for h in c.circuit(5.0).heads()}
    return EdgeSteps(seconds=seconds, fractions=[1.0, 5.0, 10.0], faithfulness=c.values.tolist(),
                     ci95=c.interval.tolist() if c.interval is not None else None,
                     has_name_movers_5pct=all(m in heads for m, _ in movers(s)))


def setup(run: harness.Run) -> Setup:
    torch.set_grad_enabled(True)
    lm = load_model(run.args.model)
    pairs = ioi_str_pairs(lm, 4 if run.quick else N_PROMPTS, seed=0)
    return Setup(lm=lm, pairs=pairs, cache=run.cache(exclude=["stage"]),
                 exact_edges=20 if run.quick else 200, exact_looped=4 if run.quick else 20,
                 more_steps=(2, 3) if run.quick else (10, 20))


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags, out=DATA)
    stage = run.args.stage
    s = setup(run)
    graph = edge_graph(s.lm)
    out: EdgesData = harness.read_json(run.out, default={})
    out |= {"model": s.lm.name, "prompts": len(s.pairs.clean), "corruption": s.pairs.source,
            "graph": graph.describe(), "edges": graph.n_edges, "fractions": list(MIB_FRACTIONS),
            "metric": "logit difference IO - S at the last token",
            "cpr_cmd_axis": "fraction of edges as a proportion (0.001 .. 1), linear, trapezoid (MIB)"}
    scored = {}
    for method in METHODS:
        scored[method], out[f"seconds_{method}"] = scores(s, method)  # type: ignore[literal-required]
    if stage in ("curves", "all"):
        stage_curves(s, scored, out, IMG if run.out == DATA else run.out.parent)
    if stage in ("movers", "all"):
        out["name_movers_dla"] = found = movers(s)
        if "eap_ig_5pct" in out:
            out["eap_ig_5pct"]["has_name_movers"] = all(m in out["eap_ig_5pct"]["heads"] for m, _ in found)
    if stage in ("exact", "all"):
        out["exact_200"] = s.cache.get("exact", lambda: exact_edge_scoring(s, scored["EAP-IG"]))
    if stage in ("steps", "all"):
        out["eap_ig_steps"] = {str(m): s.cache.get(f"steps_{m}", lambda m=m: more_steps(s, m)) for m in s.more_steps}
    if (peers := harness.DATA / "edges_peers.json").exists():
        out["peers"] = harness.read_json(peers)
    run.write(out)
    print_table(out)


def print_table(out: EdgesData) -> None:
    print(f"{out['graph']}; {out['prompts']} prompts; {out['corruption']}")
    for method in METHODS:
        seconds = out[f"seconds_{method}"]  # type: ignore[literal-required]
        print(f"{method:>7} scores: {seconds:.1f} s (target <= 60 s for EAP-IG: ratio {seconds / 60:.2f})")
    for key, value in out.items():
        if key.startswith("curve_"):
            f = " ".join(f"{x:.2f}" for x in value["faithfulness"])
            print(f"{key[6:]:>15}: {value['seconds']:.1f} s (ratio to 60 s {value['seconds'] / 60:.2f}); "
                  f"CPR {value['cpr']:.3f} CMD {value['cmd']:.3f}; f = {f}")
    if "eap_ig_5pct" in out:
        print(f"EAP-IG greedy 5 %: {out['eap_ig_5pct']}")
    if "name_movers_dla" in out:
        print(f"name movers by DLA: {out['name_movers_dla']}")
    for m, row in out.get("eap_ig_steps", {}).items():
        print(f"EAP-IG m={m}: {row['seconds']:.1f} s; greedy f at 1/5/10 % = "
              + " ".join(f"{x:.3f}" for x in row["faithfulness"]))
    if "exact_200" in out:
        e = out["exact_200"]
        print(f"{e['edges']} edges exact: batched {e['batched_s']:.1f} s, one pass per edge "
              f"{e['per_edge_pass_s']:.1f} s -> {e['speedup']:.1f}x (max |diff| {e['max_abs_diff']:.2g})")


if __name__ == "__main__":
    main()

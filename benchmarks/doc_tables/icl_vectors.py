"""Renderer of docs/icl.md's task- and function-vector table, from docs/data/icl_vectors_<model>.json
(benchmarks/icl_vectors.py): per task and method, the held-out zero-shot, ICL, vector and random
accuracies and the share of the ICL gain recovered, at the layer chosen on dev."""

from __future__ import annotations

from . import ci, markdown, minus, table
from .schemas.icl_vectors import ICLVectorsData, IntervalRecord

METHODS = {"task_vector": "task vector (replace)", "function_vector": "function vector (add)"}


def _cell(record: IntervalRecord, digits: int = 2) -> str:
    if record["estimate"] is None or record["low"] is None:
        return "— (no ICL gain)"
    return minus(ci(record["estimate"], record["low"], record["high"], digits))


@table("icl_vectors")
def icl_vectors(data: ICLVectorsData) -> str:
    """Task × method: held-out accuracies [95 % bootstrap interval over prompts] and shares."""
    rows = []
    for task in data["tasks"]:
        for method, entry in data["results"].get(task, {}).items():
            r = entry["report"]
            rows.append([f"`{task}`", METHODS.get(method, method), str(r["n"]), _cell(r["zero_shot"]),
                         _cell(r["icl"]), f"{_cell(r['vector'])} (L{r['best_layer']})", _cell(r["random"]),
                         _cell(r["share"]), _cell(r["random_share"])])
    return markdown(["task", "method", "n", "zero-shot", "ICL", "vector (layer chosen on dev)",
                     "random, same norm", "share of the ICL gain", "random's share"], rows)


def _short(method: str) -> str:
    """'task vector' from 'task vector (replace)'."""
    return METHODS.get(method, method).split(" (")[0]


def _above(share: IntervalRecord, random: IntervalRecord) -> bool:
    """The vector's share interval lies wholly above the random control's."""
    return share["low"] is not None and random["high"] is not None and share["low"] > random["high"]


def _by_method(data: ICLVectorsData, method: str) -> str:
    """How many tasks one method recovers above random, and its largest share at any dev layer."""
    entries = [data["results"][t][method] for t in data["tasks"] if method in data["results"].get(t, {})]
    above = sum(_above(e["report"]["share"], e["report"]["random_share"]) for e in entries)
    best = max((v for e in entries for v in e["curves"]["dev"]["share"] if v is not None), default=None)
    return (f"{_short(method)} above random on {above} of {len(entries)} tasks"
            + ("" if best is None else f" (its largest share at any layer on dev: {minus(f'{best:.2f}')})"))


@table("icl_vectors_findings")
def icl_vectors_findings(data: ICLVectorsData) -> str:
    """Which tasks a vector recovers above its random control (the acceptance's count), by method,
    and where ICL itself barely beats zero-shot, so there is little gain to recover."""
    recovered: dict[str, list[str]] = {}
    weak = []
    for task in data["tasks"]:
        for method, entry in data["results"].get(task, {}).items():
            r = entry["report"]
            if _above(r["share"], r["random_share"]):
                share = minus(f"{r['share']['estimate']:.2f}")
                recovered.setdefault(task, []).append(f"{_short(method)} {share}")
            if r["icl"]["low"] is not None and r["zero_shot"]["high"] is not None \
                    and r["icl"]["low"] <= r["zero_shot"]["high"]:
                weak.append(f"{task} ({_short(method)})")
    lines = [f"- A vector recovers a share of the ICL gain above its random control's interval on "
             f"{len(recovered)} of {len(data['tasks'])} tasks"
             + (": " + "; ".join(f"{t} ({', '.join(v)})" for t, v in recovered.items()) if recovered else "")
             + "."]
    lines.append("- By method: " + "; ".join(_by_method(data, m) for m in METHODS) + ".")
    missing = [t for t in data["tasks"] if t not in recovered]
    if missing:
        lines.append(f"- Not recovered above random: {', '.join(missing)}.")
    if weak:
        lines.append("- ICL's interval overlaps zero-shot's (little gain to recover) on " + ", ".join(weak) + ".")
    return "\n".join(lines)

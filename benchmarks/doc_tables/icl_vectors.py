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

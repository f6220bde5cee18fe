"""Renderers of each paper-named method's defaults beside its paper's (docs/lenses.md, aie.md,
edges.md, knowledge_neurons.md, steering.md, sae.md, ioi.md, probes.md, representations.md, icl.md,
outliers.md, graphs.md), from docs/data/paper_defaults.json, which benchmarks/paper_defaults.py writes from the configs' field
metadata."""

from __future__ import annotations

from . import markdown, table
from .schemas.project import PaperDefaultRow, PaperDefaultsData

METHODS = ("tuned_lens", "causal_tracing", "eap", "knowledge_neurons", "lm_steer", "caa", "sae", "logit_lens",
           "ioi", "probes", "concepts", "reading", "rome", "memit", "icl_kernel", "task_vectors", "function_vectors",
           "icl_regression", "massive_activations", "super_weights", "outlier_ablations", "sink_scores",
           "lambda_mask", "nll_by_position", "transcoders", "attribution_graphs")
"""The methods with a table, by their key in the data file; each is a renderer ``paper_defaults_<key>``."""


def _value(x: object) -> str:
    if isinstance(x, list | tuple):
        return ", ".join(_value(v) for v in x)
    return f"{x:g}" if isinstance(x, float) else f"{x:,}" if isinstance(x, int) and not isinstance(x, bool) else str(x)


NOT_IN_NOTES = "not in our notes"
"""``lmsci_mi.config.NOT_IN_NOTES``: the paper's value is unknown here, so whether ours differs is too."""


def _differs(row: PaperDefaultRow) -> str:
    return "unknown" if row["paper"] == NOT_IN_NOTES else "yes" if row["differs"] else "no"


def _render(data: PaperDefaultsData, key: str) -> str:
    rows = [
        [f"`{r['config']}.{r['field']}`", _value(r["ours"]), _value(r["paper"]), r["paper_source"],
         _differs(r), r["why"] or ("—" if r["differs"] and r["paper"] != NOT_IN_NOTES else "")]
        for r in data["methods"][key]["rows"]
    ]
    return markdown(["field", "ours", "paper", "paper's value from", "differs", "data behind ours"], rows)


def _register(key: str) -> None:
    @table(f"paper_defaults_{key}")
    def render(data: PaperDefaultsData) -> str:
        return _render(data, key)

    render.__doc__ = f"benchmarks/paper_defaults.py: {key}'s defaults beside its paper's."


for _key in METHODS:
    _register(_key)

"""Renderers of docs/icl.md's kernel-regression section, from docs/data/icl_kernel_<model>.json
(benchmarks/icl_kernel.py): the held-out table laid out like the tutorial's (task columns), and the
tutorial's and the paper's GPT-J rows quoted with their sources."""

from __future__ import annotations

from . import MODEL_NAMES, ci, markdown, num, table
from .schemas.icl_kernel import ICLKernelData, KRCell

WEIGHTINGS = {"span_max": "span max, the paper's", "label": "label token, the tutorial's"}


def _row_name(key: str, data: ICLKernelData) -> str:
    """``icl`` -> "SmolLM2-135M ICL"; ``task_best:span_max:agreement`` -> its words."""
    if key == "icl":
        return f"{MODEL_NAMES.get(data['model'], data['model'])} ICL"
    if key == "baseline":
        config = data["kernel_config"]
        words = {"char_ngram": f"character {config['ngram']}-gram cosine", "bag_of_words": "bag-of-words cosine",
                 "prediction": "predicted similarity P(o|x)ᵀP(o|x')"}
        return f"baseline KR ({words.get(config['similarity'], config['similarity'])})"
    which, weighting, *agreement = key.split(":")
    chosen = "task-specific" if which == "task_best" else "overall"
    name = f"{chosen} best head KR ({WEIGHTINGS.get(weighting, weighting)})"
    return name + (": agreement with ICL" if agreement else "")


def _cell(cell: KRCell) -> str:
    text = ci(cell["estimate"], cell["low"], cell["high"], 2)
    return f"{text} {cell['head']}" if cell["head"] else text


@table("icl_kernel")
def icl_kernel(data: ICLKernelData) -> str:
    """Held-out accuracy (or agreement with the model's ICL answer) with 95% Wilson intervals; a
    head row names the dev-chosen head of each task."""
    tasks = data["tasks"]
    header = ["held-out prompts", *[f"{t} (n={data['n_prompts'][t]['held_out']})" for t in tasks]]
    rows = [[_row_name(row["key"], data), *[_cell(row["cells"][t]) for t in tasks]] for row in data["rows"]]
    return markdown(header, rows)


@table("icl_kernel_quoted")
def icl_kernel_quoted(data: ICLKernelData) -> str:
    """The tutorial's table and the paper's Table 2 as published (GPT-J-6B, their tasks)."""
    blocks = []
    for quoted in data["quoted"].values():
        header = ["quoted", *quoted["tasks"]]
        rows = [[name, *[num(v, 3) for v in values]] for name, values in quoted["rows"].items()]
        blocks.append(f"{quoted['source']}; {quoted['setting']}.\n\n{markdown(header, rows)}")
    return "\n\n".join(blocks)

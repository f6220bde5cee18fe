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


def _cells(data: ICLKernelData, key: str) -> dict[str, KRCell]:
    return next(row["cells"] for row in data["rows"] if row["key"] == key)


def _apart(a: KRCell, b: KRCell) -> int:
    """1 when ``a``'s interval lies above ``b``'s, -1 below, 0 when they overlap."""
    return 1 if a["low"] > b["high"] else -1 if a["high"] < b["low"] else 0


def _quoted_agreement(data: ICLKernelData) -> str:
    """The range of the paper's Table 2 agreement row (ICL output reconstruction)."""
    values = [v for quoted in data["quoted"].values() for name, row in quoted["rows"].items()
              if "agreement" in name for v in row]
    return f"{min(values):.2f}–{max(values):.2f}" if values else "(not quoted)"


ONE_ANSWER = 0.9
"""A model that gives one answer on this share of a task's prompts or more barely uses the demonstrations."""


def _one_answer(data: ICLKernelData) -> list[str]:
    """Where the model gives (nearly) one answer to every prompt, a head that votes that label agrees
    with it by default: the agreement is no evidence there."""
    answers = data.get("model_answers", {})
    flat = {t: a for t, a in answers.items() if a["share"] >= ONE_ANSWER}
    if not flat:
        return []
    return ["- Where the explanation says little: the model answers one label on "
            + ", ".join(f"{t} ('{a['label']}' on {a['share']:.0%} of {a['n']} prompts)" for t, a in flat.items())
            + "; a head voting that label agrees with it by default, so agreement there is no evidence."]


@table("icl_kernel_findings")
def icl_kernel_findings(data: ICLKernelData) -> str:
    """Per task, whether ICL beats the baseline and whether the paper's best head reconstructs the
    model's ICL accuracy (intervals overlap) or falls short; where the explanation fails, it says so."""
    icl, base, head = (_cells(data, k) for k in ("icl", "baseline", "task_best:span_max"))
    agree = _cells(data, "task_best:span_max:agreement")
    learns = [t for t in data["tasks"] if _apart(icl[t], base[t]) == 1]
    holds = [t for t in learns if _apart(head[t], icl[t]) == 0]
    short = [t for t in learns if _apart(head[t], icl[t]) == -1]
    others = [t for t in data["tasks"] if t not in learns]
    lines = [
        f"- ICL above the character-overlap baseline (intervals apart) on {len(learns)} of "
        f"{len(data['tasks'])} tasks: {', '.join(learns) or 'none'}"
        + (f"; not apart from it on {', '.join(others)}." if others else "."),
        f"- On those {len(learns)}, the paper's best head (span maximum, chosen on dev) has an interval "
        f"overlapping the model's ICL accuracy on {', '.join(holds) or 'no task'}"
        + (f", and below it on {', '.join(short)}: there one head does not explain the model's ICL."
           if short else "; one head's kernel regression reconstructs the model's accuracy there, "
           f"within intervals of ±{max((c['high'] - c['low']) / 2 for c in head.values()):.2f} at most."),
        "- Agreement of that head with the model's own answer: "
        + ", ".join(f"{t} {num(agree[t]['estimate'], 2)} ({agree[t]['head']})" for t in data["tasks"])
        + f". The paper's GPT-J head agrees {_quoted_agreement(data)} on its tasks (quoted below).",
        *_one_answer(data),
        f"- Attention logit vs predicted similarity (§5.3): the largest |r| of any head is "
        f"{max(abs(v) for _, v in data['pearson']['top']):.2f} ({data['pearson']['top'][0][0]}); "
        "the paper also finds these correlations low in absolute value.",
    ]
    return "\n".join(lines)

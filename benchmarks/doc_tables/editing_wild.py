"""Renderers of docs/editing.md's "Judged without teacher forcing": WILD-EM beside ES/PS/NS."""

from __future__ import annotations

from . import METHOD_NAMES, MODEL_NAMES, ci, markdown, table
from .schemas.editing_wild import EditingWildData, WildRow


def _label(row: WildRow, data: EditingWildData) -> str:
    if row["model"] == "unedited":
        label = f"{MODEL_NAMES.get(data['model'], data['model'])} unedited"
    else:
        how = "one fact at a time" if row["n_edits"] == row["n_facts"] else "one batch"
        label = f"+ {METHOD_NAMES.get(row['model'], row['model'])}, {how}"
    return label if row["n_facts"] == data["n_facts"] else f"{label} (first {row['n_facts']} facts)"


def _cell(row: WildRow, metric: str) -> str:
    return ci(row["metrics"][metric], *row["ci95"][metric], 1)


@table("editing_wild")
def editing_wild(data: EditingWildData) -> str:
    """benchmarks/editing_wild.py: teacher-forced ES/PS/NS and WILD-EM of the same edits, the
    paired gaps, each with a 95 % interval over facts."""
    header = [f"model + method ({data['n_facts']} facts)", "ES", "WILD-EM rewrite", "ES − rewrite",
              "PS", "WILD-EM paraphrase", "PS − paraphrase", "NS", "WILD locality", "says the true answer"]
    rows = []
    for row in data["rows"]:
        gap = {name: ci(g["estimate"], g["low"], g["high"], 1) for name, g in row["gaps"].items()}
        rows.append([_label(row, data), _cell(row, "ES"), _cell(row, "rewrite"), gap["ES - rewrite"],
                     _cell(row, "PS"), _cell(row, "paraphrase"), gap["PS - paraphrase"], _cell(row, "NS"),
                     _cell(row, "locality"), _cell(row, "true_answer")])
    return markdown(header, rows)


def _text(text: str) -> str:
    """A generation in a table cell: quoted, its pipes escaped, empty shown as such."""
    return f"`{text.strip()}`".replace("|", "\\|") if text.strip() else "(empty)"


@table("editing_wild_examples")
def editing_wild_examples(data: EditingWildData) -> str:
    """benchmarks/editing_wild.py: the first five facts' rewrite prompts and greedy generations,
    unedited and after each method's edit (cut before the stop)."""
    methods = list(data["generations"])
    first = min((data["generations"][m] for m in methods), key=len)[:5]
    rows = [[f"{ex['prompt']} → {ex['target_new'].strip()}", _text(ex["unedited"]),
             *(_text(data["generations"][m][i]["edited"]) for m in methods)]
            for i, ex in enumerate(first)]
    return markdown(["rewrite prompt → new target", "unedited", *(METHOD_NAMES.get(m, m) for m in methods)], rows)


def _gap_words(gap: dict) -> str:
    where = "above 0" if gap["low"] > 0 else "including 0" if gap["high"] >= 0 else "below 0"
    return f"{ci(gap['estimate'], gap['low'], gap['high'], 1)} ({where})"


@table("editing_wild_findings")
def editing_wild_findings(data: EditingWildData) -> str:
    """benchmarks/editing_wild.py: per method, what generating the answer costs against teacher
    forcing, and the two locality judgements side by side (points, 95 % intervals over facts)."""
    lines = []
    for row in data["rows"]:
        if row["model"] == "unedited":
            continue
        gaps = row["gaps"]
        lines.append(
            f"- {_label(row, data).removeprefix('+ ')}: ES − WILD-EM rewrite {_gap_words(gaps['ES - rewrite'])}, "
            f"PS − WILD-EM paraphrase {_gap_words(gaps['PS - paraphrase'])}; NS {_cell(row, 'NS')} against "
            f"WILD locality {_cell(row, 'locality')} on {row['prompts']['neighbour']} neighbour prompts "
            f"(generations token for token the unedited model's up to the stop)."
        )
    return "\n".join(lines)

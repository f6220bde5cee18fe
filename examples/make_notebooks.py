"""Write the example notebooks (and, with --execute, run them offline so their outputs are saved).

    .venv/bin/python examples/make_notebooks.py --execute [--only heads|probes]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HEADS = [
    ("md", "# Looking at attention heads\n\nInduction, previous-token and duplicate-token heads "
           "in SmolLM2-135M and in a toy model trained to have them, with circuitsvis views that "
           "work offline. Everything here runs on CPU in a few minutes."),
    ("code", "import os\nos.environ['HF_HUB_OFFLINE'] = '1'\n"
             "from IPython.display import HTML, Image\n"
             "from lmsci_mi import load_model\n"
             "from lmsci_mi.circuits.heads import HeadScoreConfig, induction_scores, "
             "previous_token_scores, composition_scores\n"
             "from lmsci_mi.circuits.toy_induction import load_toy_induction, training_record\n"
             "from lmsci_mi.data.repeated_tokens import repeated_random_tokens\n"
             "from lmsci_mi.sites import Head\n"
             "from lmsci_mi.viz.attention import attention_html\n"
             "lm = load_model('smollm2-135m')\nlm"),
    ("md", "## Induction scores on repeated random tokens\n\nOne batched forward pass scores "
           "all 270 heads: the share of attention from each second-half token to the token "
           "after its first copy."),
    ("code", "scores = induction_scores(lm, config=HeadScoreConfig(n_sequences=8, half_length=12))\n"
             "print(scores.top(6))\n"
             "scores.plot('heads_induction_heatmap.png')\n"
             "Image('heads_induction_heatmap.png')"),
    ("md", "## What the top induction heads look at\n\n`attention_html` returns circuitsvis's "
           "self-contained page (`local_src`), so it renders with no network."),
    ("code", "tokens = repeated_random_tokens(1, 12, vocab=(1000, 10000), sink_token_id=0, seed=3)\n"
             "top = [(head.layer, head.head) for head, _ in scores.top(3)]\n"
             "HTML(attention_html(lm, tokens[0], top))"),
    ("md", "## Previous-token heads on a sentence"),
    ("code", "prev = previous_token_scores(\n"
             "    lm, config=HeadScoreConfig(n_sequences=8, half_length=12, exclude_bos=True))\n"
             "print(prev.top(4))\n"
             "HTML(attention_html(lm, 'When Mary and John went to the store, John gave a drink to', "
             "[(head.layer, head.head) for head, _ in prev.top(2)]))"),
    ("md", "## The toy model with a known answer\n\nA 2-layer attention-only transformer "
           "trained on repeated random tokens (cached after the first run). Its layer-1 "
           "induction head should K-compose with a layer-0 previous-token head."),
    ("code", "toy = load_toy_induction()\nprint('training cost:', training_record())\n"
             "toy_ind = induction_scores(toy, config=HeadScoreConfig(n_sequences=50))\n"
             "toy_prev = previous_token_scores(toy, config=HeadScoreConfig(n_sequences=50))\n"
             "print('induction:', toy_ind.top(2))\nprint('previous token:', toy_prev.top(2))\n"
             "k = composition_scores(toy, 'K')\n"
             "best, _ = toy_ind.top(1)[0]\n"
             "print('K-composition into', best, ':',\n"
             "      [round(k.score(Head(0, h), best), 3) for h in range(toy.cfg.n_heads)])\n"
             "toy_ind.plot('heads_toy_induction.png')\n"
             "Image('heads_toy_induction.png')"),
]


PROBES = [
    ("md", "# Probing SmolLM2 across layers\n\nDoes the residual stream after each layer linearly "
           "encode a city's country (read at the city's last token), or the number of a sentence's "
           "subject? Each layer gets an L2-regularised logistic probe, its strength chosen on a "
           "validation split, and a control task (Hewitt & Liang 2019): the same probe trained to "
           "give each word type a random label. Selectivity = accuracy − control accuracy."),
    ("code", "import os\nos.environ['HF_HUB_OFFLINE'] = '1'\n"
             "from IPython.display import Image\n"
             "from lmsci_mi import load_model\n"
             "from lmsci_mi.probes import ProbeSweepConfig, probe_task, task_dataset\n"
             "lm = load_model('smollm2-135m')\n"
             "data = task_dataset('country')\n"
             "print(len(data), 'examples;', data.source)\nprint(data.texts[0], '->', data.labels[0])"),
    ("code", "sweep = probe_task(lm, 'country')\n"
             "print(sweep.peak())\n"
             "sweep.plot('probes_country.png')\nImage('probes_country.png')"),
    ("md", "The table has one row per layer; export it to CSV, Parquet or JSON for your own analysis."),
    ("code", "frame = sweep.to_dataframe()\n"
             "sweep.export('probes_country.parquet')\n"
             "frame[['layer', 'accuracy', 'control_accuracy', 'selectivity', 'majority', 'ci_low', "
             "'ci_high']].round(3).head(12)"),
    ("md", "## A syntactic property: the subject's number, read after an attractor noun"),
    ("code", "number = probe_task(lm, 'subject_number')\nprint(number.peak())\n"
             "number.plot('probes_subject_number.png')\nImage('probes_subject_number.png')"),
]

NOTEBOOKS = {"heads": HEADS, "probes": PROBES}


def build(cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    nb = new_notebook()
    nb.cells = [new_markdown_cell(src) if kind == "md" else new_code_cell(src) for kind, src in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--execute", action="store_true")
    parser.add_argument("--only", choices=sorted(NOTEBOOKS), default=None)
    args = parser.parse_args()
    for name, cells in NOTEBOOKS.items():
        if args.only not in (None, name):
            continue
        path = Path(__file__).with_name(f"{name}.ipynb")
        nb = build(cells)
        if args.execute:
            from nbclient import NotebookClient

            NotebookClient(nb, timeout=1200, kernel_name="python3",
                           resources={"metadata": {"path": str(path.parent)}}).execute()
        nbformat.write(nb, path)
        print("wrote", path)


if __name__ == "__main__":
    main()

"""Write examples/heads.ipynb (and, with --execute, run it offline so its outputs are saved).

    .venv/bin/python examples/make_heads_notebook.py --execute
"""

from __future__ import annotations

import argparse
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

CELLS = [
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


def build() -> nbformat.NotebookNode:
    nb = new_notebook()
    nb.cells = [new_markdown_cell(src) if kind == "md" else new_code_cell(src) for kind, src in CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--execute", action="store_true")
    args = parser.parse_args()
    path = Path(__file__).with_name("heads.ipynb")
    nb = build()
    if args.execute:
        from nbclient import NotebookClient

        NotebookClient(nb, timeout=1200, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    nbformat.write(nb, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

"""Hanna et al. 2024's released EAP / EAP-IG faithfulness curve on GPT-2 small IOI, read from ONE file.

The paper ("Have Faith in Faithfulness", COLM 2024) has no table of these numbers; its repository
releases the data of its plots. Two files hold EAP and EAP-IG columns for GPT-2 IOI:
``results/pareto/gpt2/csv/ioi.csv`` (written by ``pareto.py``) and
``results/real/gpt2/csv/ioi.csv`` (written by ``get_real_values.py``, beside activation patching).
They disagree (in the second, EAP stays near 0 up to about 1,300 edges; in the first, only up to
about 160). We quote the first alone, because it is the one the paper's Figure 3
(``results/real_pareto_combined/plot_real_pareto_normalized.py``) and Figure 1 read for their EAP and
EAP-IG curves (as do ``results/pareto/plot_pareto*.py``); Figure 3's script reads the second only for
its activation-patching curves, and no plotting script of the repository reads its EAP columns.

    git clone https://github.com/hannamw/eap-ig-faithfulness /tmp/eap-ig-faithfulness
    PYTHONPATH=. python benchmarks/published_eap_ig.py --repo /tmp/eap-ig-faithfulness
    # writes docs/data/published_eap_ig.json

Nothing here runs a model: the script copies the published numbers, normalised as the paper's
plotting scripts normalise them, with the repository commit and path as their provenance.
"""

from __future__ import annotations

import argparse
import csv
import io
import subprocess
import sys
from pathlib import Path

import harness
from doc_tables.schemas.project import PublishedCurveRow, PublishedEAPData

REPOSITORY = "hannamw/eap-ig-faithfulness"
PATH = "results/pareto/gpt2/csv/ioi.csv"
METHODS = ("EAP", "EAP-IG")


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo", type=Path, required=True, help=f"a git clone of {REPOSITORY}")
    parser.add_argument("--commit", default="HEAD", help="the commit to read (default: HEAD)")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def read_rows(text: str) -> tuple[float, float, list[PublishedCurveRow]]:
    """The CSV's clean and corrupted baselines and its rows, each method's loss normalised."""
    rows = list(csv.DictReader(io.StringIO(text)))
    clean, corrupted = float(rows[0]["baseline"]), float(rows[0]["corrupted_baseline"])
    out = [PublishedCurveRow(
        target_edges=int(r["edges"]),
        edges={m: int(r[f"edges_{m}"]) for m in METHODS},
        faithfulness={m: (float(r[f"loss_{m}"]) - corrupted) / (clean - corrupted) for m in METHODS},
    ) for r in rows]
    return clean, corrupted, out


def main() -> int:
    run = harness.start(__doc__, __file__, threads=1, flags=add_flags)
    repo, commit = run.args.repo, _git(run.args.repo, "rev-parse", run.args.commit).strip()
    clean, corrupted, rows = read_rows(_git(repo, "show", f"{commit}:{PATH}"))
    run.write(PublishedEAPData(
        repository=REPOSITORY, commit=commit, path=PATH,
        read_by="results/real_pareto_combined/plot_real_pareto_normalized.py (the paper's Figure 3: "
                "EAP, EAP-IG and EAP-IG-KL from this file)",
        why_this_file="the file the paper's plots read for EAP and EAP-IG; results/real/gpt2/csv/ioi.csv "
                      "has other EAP and EAP-IG columns (EAP near 0 up to about 1,300 edges) that none "
                      "of the repository's plotting scripts reads",
        model="gpt2 (GPT-2 small)", task="IOI, logit difference", prompts=1000, total_edges=32491,
        integration_steps=5, baseline=clean, corrupted_baseline=corrupted, rows=rows,
    ))
    return 0


if __name__ == "__main__":
    sys.exit(main())

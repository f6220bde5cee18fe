"""The shipped SAE against the one it was compacted from: sizes, and explained variance, L0 and
agreement of the active features on held-out tokens and on training rows that did not pick the
live features.

    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/sae_shipped.py --harvest float32

Builds the compact form first (:func:`build_shipped_sae`: reads the cached SAE, or trains it).
Writes docs/data/sae_shipped.json (sizes, live features, and per token set and SAE the explained
variance, L0, the tokens whose active features differ and the reconstruction gap), the data of
docs/sae.md's "Expanded vs original" table.

``--harvest float32`` trains and compacts the same SAE with its training activations harvested
in float32 instead of the shipped settings' bfloat16 autocast, which CPUs without AMX run about
6x slower (about 25 minutes in all on 2 cores instead of well over an hour). It measures what
compaction loses on a sibling of the shipped SAE, in its own cache folder; the default settings'
cache is left alone. Either way the comparison itself runs in float32. ``--quick`` compares on
20 rows of each token set.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path

import harness
import torch
from doc_tables.schemas.sae import SAEShippedData, ShippedRow

from lmsci_mi import LensModel, load_model
from lmsci_mi.sae import LensSAE, SAEDataConfig, SAETrainConfig, cached_sae_path, sae_corpus
from lmsci_mi.sae.build import LIVE_TRAIN_ROWS, build_shipped_sae
from lmsci_mi.sae.compact import expand_sae
from lmsci_mi.sae.stats import feature_summary
from lmsci_mi.sae.train import harvest

UNSEEN_ROWS = 200
RECORD_KEYS = ("costs", "explained_variance", "l0", "dead_fraction", "loss_clean", "loss_sae",
               "loss_zero", "n_tokens")
"""The training run's own record (stats.json) copied into the data file."""


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--harvest", choices=("bfloat16", "float32"), default="bfloat16",
        help="the training harvest's precision (bfloat16: the shipped SAE's settings)",
    )


@torch.no_grad()
def agreement(a: LensSAE, b: LensSAE, acts: torch.Tensor) -> tuple[float, float]:
    """(fraction of tokens whose active feature sets differ, relative reconstruction gap)."""
    differ, gap, norm = 0, 0.0, 0.0
    for start in range(0, len(acts), 4096):
        x = acts[start : start + 4096].float()
        fa, fb = a.encode(x), b.encode(x)
        differ += int(((fa > 0) != (fb > 0)).any(-1).sum())
        gap += float((a.decode(fa) - b.decode(fb)).pow(2).sum())
        norm += float((a.decode(fa) - x).pow(2).sum())
    return differ / len(acts), (gap / max(norm, 1e-12)) ** 0.5


def token_sets(lm: LensModel, original: LensSAE, rows: int | None) -> dict[str, list]:
    """The held-out rows, and training rows after those that picked the live features."""
    corpus = sae_corpus(lm, SAEDataConfig(), fingerprint=original.model_fingerprint)
    unseen = f"training rows {LIVE_TRAIN_ROWS}..{LIVE_TRAIN_ROWS + UNSEEN_ROWS}"
    sets = {"held-out": corpus.held_out,
            unseen: corpus.train[LIVE_TRAIN_ROWS : LIVE_TRAIN_ROWS + UNSEEN_ROWS]}
    return {name: texts[:rows] for name, texts in sets.items()}


def compare(lm: LensModel, original: LensSAE, expanded: LensSAE, sets: dict[str, list]) -> list[ShippedRow]:
    """Both SAEs on each token set (a float32 harvest)."""
    rows = []
    for name, texts in sets.items():
        acts = harvest(lm, texts, original.hook, None, progress=False)
        for label, sae in (("original float32", original), ("compact form, expanded", expanded)):
            ev, l0, _, _ = feature_summary(sae, acts)
            differ, gap = agreement(original, sae, acts)
            print(f"| {name} ({len(acts)}) | {label} | {ev:.4f} | {l0:.1f} | {differ:.4%} | {gap:.4f} |")
            rows.append(ShippedRow(tokens=name, n_tokens=len(acts), sae=label, explained_variance=ev, l0=l0,
                                   active_set_differs=differ, reconstruction_gap=gap))
    return rows


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags)
    train = SAETrainConfig()
    if run.args.harvest == "float32":
        train = dataclasses.replace(train, autocast=None)
    with run.timed("build") as build:
        files = build_shipped_sae(train=train)
    for path in files:
        print(f"  {path.name:<34} {path.stat().st_size / 1e6:8.3f} MB")
    with run.timed("load"):
        lm = load_model("smollm2-135m")
    folder = cached_sae_path(lm, SAEDataConfig(), train)
    original = LensSAE.load(folder, lm.device)
    with tempfile.TemporaryDirectory() as scratch:
        expanded = LensSAE.load(expand_sae(files[0].parent, Path(scratch) / "sae"), lm.device)
    print(f"live features: {expanded.info['shipped']['live_features']} of {expanded.d_sae}")
    with run.timed("compare"):
        rows = compare(lm, original, expanded, token_sets(lm, original, 20 if run.quick else None))
    record = json.loads((folder / "stats.json").read_text())["result"]
    run.write(SAEShippedData(
        model=lm.name, hook=original.hook, d_sae=expanded.d_sae,
        live_features=expanded.info["shipped"]["live_features"], live_train_rows=LIVE_TRAIN_ROWS,
        shipped_mb=sum(p.stat().st_size for p in files) / 1e6,
        original_weights_mb=(folder / "sae_weights.safetensors").stat().st_size / 1e6,
        training_harvest=run.args.harvest,
        training_record={k: v for k, v in record.items() if k in RECORD_KEYS},
        comparison_harvest="float32", build_seconds=build.seconds, seconds=sum(run.timings.values()), rows=rows,
    ))


if __name__ == "__main__":
    main()

"""The shipped SAE against the one it was compacted from: sizes, and explained variance, L0 and
agreement of the active features on held-out tokens and on training rows that did not pick the
live features.

    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python benchmarks/sae_shipped.py --harvest float32

Builds the compact form first (:func:`build_shipped_sae`: reads the cached SAE, or trains it).
Writes docs/data/sae_shipped.json (sizes, live features, and per token set and SAE the explained
variance, L0, the tokens whose active features differ and the reconstruction gap), the data of
docs/sae.md's "Expanded vs original" table.

``--harvest float32`` trains and compacts the same SAE with its training activations harvested
in float32 instead of the shipped settings' bfloat16 autocast, which CPUs without AMX run about
6x slower (about 25 minutes in all on 2 cores instead of well over an hour). It measures what
compaction loses on a sibling of the shipped SAE, in its own cache folder; the default settings'
cache is left alone. Either way the comparison itself runs in float32.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import tempfile
import time
from pathlib import Path

import torch

from lmsci_mi import load_model
from lmsci_mi.sae import LensSAE, SAEDataConfig, SAETrainConfig, cached_sae_path
from lmsci_mi.sae.build import LIVE_TRAIN_ROWS, build_shipped_sae
from lmsci_mi.sae.compact import expand_sae
from lmsci_mi.sae.data import sae_corpus
from lmsci_mi.sae.stats import feature_summary
from lmsci_mi.sae.train import harvest

UNSEEN_ROWS = 200
DATA = Path(__file__).resolve().parent.parent / "docs" / "data" / "sae_shipped.json"


@torch.no_grad()
def _agreement(a: LensSAE, b: LensSAE, acts: torch.Tensor) -> tuple[float, float]:
    """(fraction of tokens whose active feature sets differ, relative reconstruction gap)."""
    differ, gap, norm = 0, 0.0, 0.0
    for start in range(0, len(acts), 4096):
        x = acts[start : start + 4096].float()
        fa, fb = a.encode(x), b.encode(x)
        differ += int(((fa > 0) != (fb > 0)).any(-1).sum())
        gap += float((a.decode(fa) - b.decode(fb)).pow(2).sum())
        norm += float((a.decode(fa) - x).pow(2).sum())
    return differ / len(acts), (gap / max(norm, 1e-12)) ** 0.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--harvest", choices=("bfloat16", "float32"), default="bfloat16",
        help="the training harvest's precision (bfloat16: the shipped SAE's settings)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    train = SAETrainConfig()
    if args.harvest == "float32":
        train = dataclasses.replace(train, autocast=None)
    start = time.perf_counter()
    files = build_shipped_sae(train=train)
    build_seconds = time.perf_counter() - start
    print(f"compact form built in {time.perf_counter() - start:.0f} s:")
    for path in files:
        print(f"  {path.name:<34} {path.stat().st_size / 1e6:8.3f} MB")
    print(f"  {'total':<34} {sum(p.stat().st_size for p in files) / 1e6:8.3f} MB")
    lm = load_model("smollm2-135m")
    folder = cached_sae_path(lm, SAEDataConfig(), train)
    print(
        f"original sae_weights.safetensors: {(folder / 'sae_weights.safetensors').stat().st_size / 1e6:.1f} MB"
    )
    original = LensSAE.load(folder, lm.device)
    with tempfile.TemporaryDirectory() as scratch:
        expanded = LensSAE.load(expand_sae(files[0].parent, Path(scratch) / "sae"), lm.device)
    print(f"live features: {expanded.info['shipped']['live_features']} of {expanded.d_sae}")
    corpus = sae_corpus(lm, SAEDataConfig(), fingerprint=original.model_fingerprint)
    sets = {
        "held-out": corpus.held_out,
        f"training rows {LIVE_TRAIN_ROWS}..{LIVE_TRAIN_ROWS + UNSEEN_ROWS}": corpus.train[
            LIVE_TRAIN_ROWS : LIVE_TRAIN_ROWS + UNSEEN_ROWS
        ],
    }
    print(
        "\n| tokens | SAE | explained variance | L0 | tokens whose active set differs | "
        "reconstruction gap / error |"
    )
    print("|---|---|---|---|---|---|")
    rows_out = []
    for name, rows in sets.items():
        acts = harvest(lm, rows, original.hook, None, progress=False)
        for label, sae in (("original float32", original), ("compact form, expanded", expanded)):
            ev, l0, _, _ = feature_summary(sae, acts)
            differ, gap = _agreement(original, sae, acts)
            print(
                f"| {name} ({len(acts)}) | {label} | {ev:.4f} | {l0:.1f} | {differ:.4%} | {gap:.4f} |"
            )
            rows_out.append({"tokens": name, "n_tokens": len(acts), "sae": label, "explained_variance": ev,
                             "l0": l0, "active_set_differs": differ, "reconstruction_gap": gap})
    data = {
        "model": lm.name,
        "hook": original.hook,
        "date": datetime.date.today().isoformat(),
        "d_sae": expanded.d_sae,
        "live_features": expanded.info["shipped"]["live_features"],
        "live_train_rows": LIVE_TRAIN_ROWS,
        "shipped_mb": sum(p.stat().st_size for p in files) / 1e6,
        "original_weights_mb": (folder / "sae_weights.safetensors").stat().st_size / 1e6,
        "training_harvest": args.harvest,
        # the training run's own record (costs, held-out statistics of the float32 SAE)
        "training_record": {
            k: v for k, v in json.loads((folder / "stats.json").read_text())["result"].items()
            if k in ("costs", "explained_variance", "l0", "dead_fraction", "loss_clean", "loss_sae",
                     "loss_zero", "n_tokens")
        },
        "comparison_harvest": "float32",
        "build_seconds": build_seconds,
        "torch_threads": torch.get_num_threads(),
        "seconds": time.perf_counter() - start,
        "rows": rows_out,
    }
    DATA.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {DATA}")


if __name__ == "__main__":
    main()

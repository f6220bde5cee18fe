"""AlphaEdit on SmolLM2-135M, a first look (issue 21 goes further): the null space the default
threshold leaves per layer, the share of the edit's keys the projection keeps, and whether one
batch of facts installs.

    PYTHONPATH=. .venv/bin/python benchmarks/alphaedit.py [--facts 5]

Writes docs/data/alphaedit.json. The key statistics are MEMIT's (read from the cache when there).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from lmsci_mi import load_model
from lmsci_mi.editing import AlphaEditHyperParams, alphaedit_edit, default_memit_layers, load_facts
from lmsci_mi.editing.stats import StatsConfig, key_statistics
from lmsci_mi.model import LensModel

OUT = Path(__file__).resolve().parent.parent / "docs" / "data" / "alphaedit.json"


@torch.no_grad()
def p_new(lm: LensModel, requests: list) -> list[float]:
    """p(target_new's first token) after each rewrite prompt."""
    out = []
    for r in requests:
        logits = lm(lm.encode_batch([r.rewrite_prompt]).tokens)[0, -1]
        out.append(float(logits.softmax(-1)[lm.continuation_ids(r.target_new)[0]]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--facts", type=int, default=5, help="the first N shipped facts, one batch")
    args = parser.parse_args()
    lm = load_model("smollm2-135m")
    hp = AlphaEditHyperParams()
    layers = default_memit_layers(lm)
    stats = key_statistics(lm, layers, StatsConfig(n_tokens=hp.stats_tokens))
    spectra = stats.spectra()
    facts = load_facts()[: args.facts]
    before = p_new(lm, facts)
    start = time.perf_counter()
    handle = alphaedit_edit(lm, facts, hp, stats=stats)
    seconds = time.perf_counter() - start
    after = p_new(lm, facts)
    handle.restore()
    data = {
        "model": lm.name,
        "layers": list(layers),
        "config": hp.params(),
        "stats_tokens": stats.n_tokens,
        "stats_source": stats.source,
        "d_mlp": lm.cfg.d_mlp,
        "eigenvalues": {
            str(layer): {"max": float(s[0]), "median": float(s[len(s) // 2]), "min": float(s[-1])}
            for layer, s in zip(layers, spectra, strict=True)
        },
        "null_space_dims": {str(k): v for k, v in handle.details["null_space_dims"].items()},
        "key_share_kept": {str(k): v for k, v in handle.details["key_share_kept"].items()},
        "facts": [f.subject for f in facts],
        "p_new_before": before,
        "p_new_after": after,
        "seconds": seconds,
    }
    OUT.write_text(json.dumps(data, indent=1))
    print(json.dumps({k: data[k] for k in ("null_space_dims", "key_share_kept", "seconds")}))
    print("p(new) before", [round(x, 3) for x in before], "after", [round(x, 3) for x in after])


if __name__ == "__main__":
    main()

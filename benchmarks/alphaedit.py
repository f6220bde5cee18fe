"""AlphaEdit on SmolLM2-135M, a first look (issue 21 goes further): the null space the default
threshold leaves per layer, the share of the edit's keys the projection keeps, and whether one
batch of facts installs.

    PYTHONPATH=. .venv/bin/python benchmarks/alphaedit.py [--facts 5]
    PYTHONPATH=. .venv/bin/python benchmarks/alphaedit.py --token-sweep   # null space vs tokens

Writes docs/data/alphaedit.json. The key statistics are MEMIT's (read from the cache when there).
--token-sweep computes the statistics afresh from the first 2k, 5k, 10k and 20k tokens of the
same text (the 50k default from the cache) and writes, per layer, the null-space dimension at the
default threshold to docs/data/alphaedit_tokens.json: the projector is only as good as C.
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


def token_sweep(lm: LensModel) -> None:
    import tempfile

    from lmsci_mi.editing.alphaedit import null_space_projector

    hp = AlphaEditHyperParams()
    layers = list(default_memit_layers(lm))
    rows = {}
    with tempfile.TemporaryDirectory() as scratch:
        for n_tokens in (2_000, 5_000, 10_000, 20_000, hp.stats_tokens):
            fresh = n_tokens != hp.stats_tokens
            stats = key_statistics(lm, layers, StatsConfig(n_tokens=n_tokens), use_cache=not fresh,
                                   cache_dir=Path(scratch) if fresh else None)
            dims = {str(layer): null_space_projector(stats.for_layer(layer), hp.nullspace_threshold)[1]
                    for layer in layers}
            rows[str(stats.n_tokens)] = dims
            print(f"{stats.n_tokens} tokens of {stats.source}: null-space dims {dims}", flush=True)
    data = {
        "model": lm.name, "threshold": hp.nullspace_threshold, "d_mlp": lm.cfg.d_mlp,
        "source": stats.source, "null_space_dims_by_tokens": rows,
    }
    (OUT.parent / "alphaedit_tokens.json").write_text(json.dumps(data, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--facts", type=int, default=5, help="the first N shipped facts, one batch")
    parser.add_argument("--token-sweep", action="store_true", help="null space against the token count")
    args = parser.parse_args()
    lm = load_model("smollm2-135m")
    if args.token_sweep:
        token_sweep(lm)
        return
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

"""How much of the SAE's explained variance comes from massive activations (SmolLM2, layer 15).

A few tokens right after the sink carry residual norms >10x the median; they hold almost all the
variance, so sae-lens's EV over all tokens is dominated by them. This prints EV with and without them,
each with a 95% bootstrap interval over the held-out texts (tokens of one text are not independent,
so whole texts are resampled), and writes them to docs/data/sae_heldout.json.

    PYTHONPATH=. python benchmarks/sae_massive_activations.py   # alone on the machine; about a minute
"""

import datetime
import json
import time
from collections import Counter
from pathlib import Path

import torch

from lmsci_mi import load_model
from lmsci_mi.collect import CollectConfig, collect_activations
from lmsci_mi.sae import (
    LensSAE,
    SAEDataConfig,
    SAETrainConfig,
    cached_sae_path,
    sae_corpus,
)
from lmsci_mi.sae.stats import feature_summary

t = time.time()
lm = load_model("smollm2-135m")
folder = cached_sae_path(lm, SAEDataConfig(), SAETrainConfig())
sae = LensSAE.load(folder, lm.device)
corpus = sae_corpus(lm, SAEDataConfig(), fingerprint=sae.model_fingerprint)
acts = collect_activations(
    lm, corpus.held_out, [sae.hook], positions="all", config=CollectConfig(progress=False)
)
x = acts.acts[sae.hook]
norm = x.norm(dim=-1)
med = norm.median()
big = norm > 10 * med
print(
    f"held-out tokens {len(x)}; median norm {float(med):.1f}; tokens with norm > 10x median: {int(big.sum())}"
)
strs = lm.to_str_tokens(acts.token[big].tolist())
print(
    "their tokens:",
    Counter(strs).most_common(8),
    "positions:",
    Counter(acts.position[big].tolist()).most_common(5),
)
mean = x.mean(0)
dev = (x - mean).pow(2).sum(-1)
print(f"share of variance in those tokens: {float(dev[big].sum() / dev.sum()):.3f}")
BOOTSTRAP, SEED = 2000, 0


@torch.no_grad()
def explained_variance_interval(rows: torch.Tensor) -> tuple[float, float, float]:
    """EV over ``rows`` as ``feature_summary`` defines it, and its 95% bootstrap interval over texts."""
    xs = x[rows].float()
    err = torch.cat([(c - sae.decode(sae.encode(c))).pow(2).sum(-1) for c in xs.split(4096)])
    examples = acts.example[rows]
    ids, index = examples.unique(return_inverse=True)
    k = len(ids)

    def per_text(values: torch.Tensor) -> torch.Tensor:
        out = torch.zeros((k, *values.shape[1:]), dtype=torch.float64)
        return out.index_add_(0, index, values.double())

    n, e, sq, s1 = (per_text(torch.ones(len(xs))), per_text(err), per_text(xs.pow(2).sum(-1)),
                    per_text(xs))

    def ev(w: torch.Tensor) -> torch.Tensor:  # w: [draws, texts] counts
        tokens = w @ n
        mean = (w @ s1) / tokens[:, None]
        variance = (w @ sq) / tokens - mean.pow(2).sum(-1)
        return 1 - ((w @ e) / tokens) / variance

    point = float(ev(torch.ones(1, k, dtype=torch.float64))[0])
    generator = torch.Generator().manual_seed(SEED)
    draws = torch.randint(0, k, (BOOTSTRAP, k), generator=generator)
    w = torch.zeros(BOOTSTRAP, k, dtype=torch.float64).scatter_add_(
        1, draws, torch.ones(BOOTSTRAP, k, dtype=torch.float64)
    )
    low, high = torch.quantile(ev(w), torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
    return point, low, high


results = {}
for key, name, rows in [("all", "all tokens", torch.ones_like(big)), ("without_massive", "without the massive ones", ~big)]:
    ev, l0, density, _ = feature_summary(sae, x[rows])
    point, low, high = explained_variance_interval(rows)
    print(f"EV {name}: {ev:.3f} [{low:.3f}, {high:.3f}] (L0 {l0:.1f}, n {int(rows.sum())})")
    results[key] = {"explained_variance": ev, "ci95": [low, high], "l0": l0, "n_tokens": int(rows.sum()),
                    "n_texts": int(acts.example[rows].unique().numel())}
out = Path(__file__).resolve().parent.parent / "docs" / "data" / "sae_heldout.json"
out.write_text(json.dumps({
    "model": "smollm2-135m", "hook": sae.hook, "date": datetime.date.today().isoformat(),
    "massive": {"rule": "residual norm > 10x the median", "n_tokens": int(big.sum()),
                "variance_share": float(dev[big].sum() / dev.sum()), "median_norm": float(med),
                "max_norm": float(norm.max())},
    "bootstrap": {"resamples": BOOTSTRAP, "over": "held-out texts", "seed": SEED},
    **results,
}, indent=1) + "\n")
print(f"wrote {out}; {time.time() - t:.0f} s")

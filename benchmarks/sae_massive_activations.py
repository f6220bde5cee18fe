"""How much of the SAE's explained variance comes from massive activations (SmolLM2, layer 15).

A few tokens right after the sink carry residual norms >10x the median; they hold almost all the
variance, so sae-lens's EV over all tokens is dominated by them. This prints EV with and without them.

    PYTHONPATH=. python benchmarks/sae_massive_activations.py   # under the heavy lock; about a minute
"""

import time
from collections import Counter

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
for name, rows in [("all tokens", torch.ones_like(big)), ("without the massive ones", ~big)]:
    ev, l0, density, _ = feature_summary(sae, x[rows])
    print(f"EV {name}: {ev:.3f} (L0 {l0:.1f}, n {int(rows.sum())})")
print(f"{time.time() - t:.0f} s")

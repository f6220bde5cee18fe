"""How much of the SAE's explained variance comes from massive activations (SmolLM2, layer 15).

A few tokens right after the sink carry residual norms >10x the median; they hold almost all the
variance, so sae-lens's EV over all tokens is dominated by them. This prints EV with and without them,
each with a 95% bootstrap interval over the held-out texts (tokens of one text are not independent,
so whole texts are resampled), and writes them to docs/data/sae_heldout.json.

It also measures the SAE's other held-out statistics on the same tokens, each with the same
bootstrap over texts: EV on a bfloat16 harvest (the training harvest's autocast), L0, the dead
fraction, and the next-token loss clean / with the reconstruction spliced in / with the site
zero-ablated (per text, so the loss increase gets an interval). The SAE is the one in the cache
(with the default settings the shipped one, expanded: its live features in float16); the training
run's own record (stats.json, measured on the float32 SAE before compaction, and its costs) is
copied beside them for comparison.

    PYTHONPATH=. python benchmarks/sae_massive_activations.py              # alone on the machine
    PYTHONPATH=. python benchmarks/sae_massive_activations.py --no-losses  # skip the 3 loss passes
"""

import argparse
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
    SAEStats,
    SAETrainConfig,
    cached_sae_path,
    sae_corpus,
)
from lmsci_mi.sae.shipped import restore_shipped_sae
from lmsci_mi.sae.stats import feature_summary, reconstruction_loss

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--no-losses", action="store_true", help="skip the three next-token loss passes")
args = parser.parse_args()
t = time.time()
lm = load_model("smollm2-135m")
folder = cached_sae_path(lm, SAEDataConfig(), SAETrainConfig())
restore_shipped_sae(folder)
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


def resample_weights(k: int) -> torch.Tensor:
    """``[BOOTSTRAP, k]`` counts of each of ``k`` texts in each seeded resample."""
    generator = torch.Generator().manual_seed(SEED)
    draws = torch.randint(0, k, (BOOTSTRAP, k), generator=generator)
    return torch.zeros(BOOTSTRAP, k, dtype=torch.float64).scatter_add_(
        1, draws, torch.ones(BOOTSTRAP, k, dtype=torch.float64)
    )


def interval(values: torch.Tensor) -> list[float]:
    return torch.quantile(values, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()


@torch.no_grad()
def explained_variance_interval(rows: torch.Tensor, source: torch.Tensor | None = None) -> tuple[float, float, float]:
    """EV over ``rows`` as ``feature_summary`` defines it, and its 95% bootstrap interval over texts
    (of ``source``'s activations: the float32 harvest unless given)."""
    xs = (x if source is None else source)[rows].float()
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
    low, high = interval(ev(resample_weights(k)))
    return point, low, high


results = {}
for key, name, rows in [("all", "all tokens", torch.ones_like(big)), ("without_massive", "without the massive ones", ~big)]:
    ev, l0, density, _ = feature_summary(sae, x[rows])
    point, low, high = explained_variance_interval(rows)
    print(f"EV {name}: {ev:.3f} [{low:.3f}, {high:.3f}] (L0 {l0:.1f}, n {int(rows.sum())})")
    results[key] = {"explained_variance": ev, "ci95": [low, high], "l0": l0, "n_tokens": int(rows.sum()),
                    "n_texts": int(acts.example[rows].unique().numel())}
# The other held-out statistics, on all held-out tokens (the sae-lens convention the training
# record uses).
everything = torch.ones_like(big)
_, l0, density, _ = feature_summary(sae, x)
low_acts = collect_activations(
    lm, corpus.held_out, [sae.hook], positions="all",
    config=CollectConfig(progress=False, autocast="bfloat16"),
).acts[sae.hook]
assert len(low_acts) == len(x)
point, low, high = explained_variance_interval(everything, low_acts)
other = {
    "explained_variance_bfloat16": {"value": point, "ci95": [low, high]},
    "l0": l0,
    "dead_fraction": float((density == 0).double().mean()),
    "dead_features": int((density == 0).sum()),
    "n_tokens": len(x),
    "n_texts": len(corpus.held_out),
}
print(f"EV on a bfloat16 harvest {point:.4f} [{low:.4f}, {high:.4f}]; L0 {l0:.1f}; dead {other['dead_features']}")

if not args.no_losses:
    # Per text: mean loss times its targets (every position after the sink predicts; the sink's
    # own prediction never sees the SAE), so the texts can be resampled.
    t_loss = time.time()
    targets = torch.tensor([max(len(r) - 2, 0) for r in corpus.held_out], dtype=torch.float64)
    per_text = {
        mode: torch.tensor([reconstruction_loss(lm, sae, [r], mode) for r in corpus.held_out], dtype=torch.float64)
        * targets
        for mode in ("clean", "sae", "zero")
    }
    w = torch.cat([torch.ones(1, len(targets), dtype=torch.float64), resample_weights(len(targets))])
    mean = {mode: (w @ v) / (w @ targets) for mode, v in per_text.items()}
    increase = mean["sae"] - mean["clean"]
    recovered = (mean["zero"] - mean["sae"]) / (mean["zero"] - mean["clean"])
    other["loss"] = {
        **{mode: float(m[0]) for mode, m in mean.items()},
        "increase": float(increase[0]), "increase_ci95": interval(increase[1:]),
        "fraction_recovered": float(recovered[0]), "fraction_recovered_ci95": interval(recovered[1:]),
        "n_targets": int(targets.sum()), "seconds": time.time() - t_loss,
    }
    print(f"loss clean / SAE / zero: {other['loss']['clean']:.3f} / {other['loss']['sae']:.3f} / "
          f"{other['loss']['zero']:.3f}; increase {other['loss']['increase']:+.3f} "
          f"[{other['loss']['increase_ci95'][0]:+.3f}, {other['loss']['increase_ci95'][1]:+.3f}]")

record = SAEStats.load(folder / "stats.json")
training_record = {
    "source": "stats.json of the SAE's cache folder: measured by the training run on the float32 SAE "
              "before compaction, on the held-out tokens of that run",
    "explained_variance": record.explained_variance,
    "explained_variance_bfloat16": record.explained_variance_autocast,
    "l0": record.l0, "dead_fraction": record.dead_fraction,
    "loss": {"clean": record.loss_clean, "sae": record.loss_sae, "zero": record.loss_zero,
             "increase": record.loss_increase, "fraction_recovered": record.fraction_recovered},
    "n_tokens": record.n_tokens, "costs": record.costs,
}
out = Path(__file__).resolve().parent.parent / "docs" / "data" / "sae_heldout.json"
out.write_text(json.dumps({
    "model": "smollm2-135m", "hook": sae.hook, "date": datetime.date.today().isoformat(),
    "massive": {"rule": "residual norm > 10x the median", "n_tokens": int(big.sum()),
                "variance_share": float(dev[big].sum() / dev.sum()), "median_norm": float(med),
                "max_norm": float(norm.max())},
    "bootstrap": {"resamples": BOOTSTRAP, "over": "held-out texts", "seed": SEED},
    **results,
    "sae": {"folder": folder.name, "shipped": sae.info.get("shipped", {}).get("dtype"),
            "live_features": sae.info.get("shipped", {}).get("live_features"), "d_sae": sae.d_sae},
    "other": other,
    "training_record": training_record,
    "seconds": time.time() - t,
}, indent=1) + "\n")
print(f"wrote {out}; {time.time() - t:.0f} s")

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
    PYTHONPATH=. python benchmarks/sae_massive_activations.py --quick      # 20 held-out texts

Each loss pass (about 4 minutes) is cached as it finishes, so a stopped run resumes.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import harness
import torch
from doc_tables.schemas.sae import (
    HeldoutEV,
    HeldoutLoss,
    HeldoutOther,
    HeldoutSAE,
    Massive,
    SAEHeldoutData,
    TrainingRecord,
)

from lmsci_mi import LensModel, load_model
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
from lmsci_mi.stats import percentile_bounds, resample_counts

BOOTSTRAP, SEED = 2000, 0
"""Resamples of the held-out texts behind every interval, and their seed."""
MASSIVE = 10.0
"""A token is massive when its residual norm exceeds this multiple of the median."""
RECORD_SOURCE = ("stats.json of the SAE's cache folder: measured by the training run on the float32 SAE "
                 "before compaction, on the held-out tokens of that run")


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--no-losses", action="store_true", help="skip the three next-token loss passes")


def harvest(lm: LensModel, sae: LensSAE, texts: Sequence, autocast: str | None = None):
    """The SAE site's activations of every held-out token (with its text and position)."""
    config = CollectConfig(progress=False, autocast=autocast)
    return collect_activations(lm, list(texts), [sae.hook], positions="all", config=config)


def interval(replicates: torch.Tensor) -> list[float]:
    return percentile_bounds(replicates).tolist()


@torch.no_grad()
def explained_variance_interval(sae: LensSAE, xs: torch.Tensor, texts: torch.Tensor) -> tuple[float, list[float]]:
    """EV of ``xs`` as ``feature_summary`` defines it, and its 95% bootstrap interval over texts
    (``texts``: each token's text): per-text sums, reweighted by each resample's text counts."""
    xs = xs.float()
    err = torch.cat([(c - sae.decode(sae.encode(c))).pow(2).sum(-1) for c in xs.split(4096)])
    ids, index = texts.unique(return_inverse=True)
    k = len(ids)

    def per_text(values: torch.Tensor) -> torch.Tensor:
        out = torch.zeros((k, *values.shape[1:]), dtype=torch.float64)
        return out.index_add_(0, index, values.double())

    n, e, sq, s1 = per_text(torch.ones(len(xs))), per_text(err), per_text(xs.pow(2).sum(-1)), per_text(xs)

    def ev(w: torch.Tensor) -> torch.Tensor:  # w: [draws, texts] counts
        tokens = w @ n
        mean = (w @ s1) / tokens[:, None]
        variance = (w @ sq) / tokens - mean.pow(2).sum(-1)
        return 1 - ((w @ e) / tokens) / variance

    point = float(ev(torch.ones(1, k, dtype=torch.float64))[0])
    return point, interval(ev(resample_counts(k, BOOTSTRAP, seed=SEED)))


def massive_tokens(lm: LensModel, acts, x: torch.Tensor) -> tuple[torch.Tensor, Massive]:
    """The tokens whose norm exceeds ``MASSIVE`` times the median, and their share of the variance."""
    norm = x.norm(dim=-1)
    med = norm.median()
    big = norm > MASSIVE * med
    share = (x - x.mean(0)).pow(2).sum(-1)
    print(f"held-out tokens {len(x)}; median norm {float(med):.1f}; norm > {MASSIVE:g}x median: {int(big.sum())}; "
          f"their tokens {Counter(lm.to_str_tokens(acts.token[big].tolist())).most_common(8)}, positions "
          f"{Counter(acts.position[big].tolist()).most_common(5)}; variance share "
          f"{float(share[big].sum() / share.sum()):.3f}")
    return big, Massive(rule=f"residual norm > {MASSIVE:g}x the median", n_tokens=int(big.sum()),
                        variance_share=float(share[big].sum() / share.sum()), median_norm=float(med),
                        max_norm=float(norm.max()))


def heldout_ev(sae: LensSAE, acts, x: torch.Tensor, rows: torch.Tensor, name: str) -> HeldoutEV:
    ev, l0, _, _ = feature_summary(sae, x[rows])
    _, ci95 = explained_variance_interval(sae, x[rows], acts.example[rows])
    print(f"EV {name}: {ev:.3f} [{ci95[0]:.3f}, {ci95[1]:.3f}] (L0 {l0:.1f}, n {int(rows.sum())})")
    return HeldoutEV(explained_variance=ev, ci95=ci95, l0=l0, n_tokens=int(rows.sum()),
                     n_texts=int(acts.example[rows].unique().numel()))


def other_statistics(lm: LensModel, sae: LensSAE, acts, x: torch.Tensor, texts: Sequence) -> HeldoutOther:
    """On all held-out tokens (the sae-lens convention the training record uses): EV on a
    bfloat16 harvest with its interval, L0 and the dead features."""
    _, l0, density, _ = feature_summary(sae, x)
    low = harvest(lm, sae, texts, autocast="bfloat16").acts[sae.hook]
    assert len(low) == len(x)
    point, ci95 = explained_variance_interval(sae, low, acts.example)
    print(f"EV on a bfloat16 harvest {point:.4f} [{ci95[0]:.4f}, {ci95[1]:.4f}]; L0 {l0:.1f}; "
          f"dead {int((density == 0).sum())}")
    return HeldoutOther(explained_variance_bfloat16={"value": point, "ci95": ci95}, l0=l0,
                        dead_fraction=float((density == 0).double().mean()),
                        dead_features=int((density == 0).sum()), n_tokens=len(x), n_texts=len(texts))


def loss_statistics(lm: LensModel, sae: LensSAE, texts: Sequence, cache: harness.ItemCache) -> HeldoutLoss:
    """Next-token loss clean / SAE spliced in / site zero-ablated, pooled over texts, with the
    increase and the share recovered resampled by text. Per text: mean loss times its targets
    (every position after the sink predicts; the sink's own prediction never sees the SAE)."""
    began = time.perf_counter()
    targets = torch.tensor([max(len(r) - 2, 0) for r in texts], dtype=torch.float64)
    per_text = {
        mode: torch.tensor(cache.get(f"loss-{mode}", lambda mode=mode: [
            reconstruction_loss(lm, sae, [r], mode) for r in texts]), dtype=torch.float64) * targets
        for mode in ("clean", "sae", "zero")
    }
    w = torch.cat([torch.ones(1, len(targets), dtype=torch.float64), resample_counts(len(targets), BOOTSTRAP, seed=SEED)])
    mean = {mode: (w @ v) / (w @ targets) for mode, v in per_text.items()}
    increase = mean["sae"] - mean["clean"]
    recovered = (mean["zero"] - mean["sae"]) / (mean["zero"] - mean["clean"])
    loss = HeldoutLoss(
        **{mode: float(m[0]) for mode, m in mean.items()},
        increase=float(increase[0]), increase_ci95=interval(increase[1:]),
        fraction_recovered=float(recovered[0]), fraction_recovered_ci95=interval(recovered[1:]),
        n_targets=int(targets.sum()), seconds=time.perf_counter() - began,
    )
    print(f"loss clean / SAE / zero: {loss['clean']:.3f} / {loss['sae']:.3f} / {loss['zero']:.3f}; increase "
          f"{loss['increase']:+.3f} [{loss['increase_ci95'][0]:+.3f}, {loss['increase_ci95'][1]:+.3f}]")
    return loss


def training_record(folder: Path) -> TrainingRecord:
    record = SAEStats.load(folder / "stats.json")
    return TrainingRecord(
        source=RECORD_SOURCE, explained_variance=record.explained_variance,
        explained_variance_bfloat16=record.explained_variance_autocast, l0=record.l0,
        dead_fraction=record.dead_fraction,
        loss={"clean": record.loss_clean, "sae": record.loss_sae, "zero": record.loss_zero,
              "increase": record.loss_increase, "fraction_recovered": record.fraction_recovered},
        n_tokens=record.n_tokens, costs=record.costs,
    )


def main() -> None:
    began = time.perf_counter()
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags, out=harness.DATA / "sae_heldout.json")
    lm = load_model(run.args.model)
    folder = cached_sae_path(lm, SAEDataConfig(), SAETrainConfig())
    restore_shipped_sae(folder)
    sae = LensSAE.load(folder, lm.device)
    texts = sae_corpus(lm, SAEDataConfig(), fingerprint=sae.model_fingerprint).held_out
    texts = texts[:20] if run.quick else texts
    with run.timed("harvest"):
        acts = harvest(lm, sae, texts)
    x = acts.acts[sae.hook]
    big, massive = massive_tokens(lm, acts, x)
    results = {key: heldout_ev(sae, acts, x, rows, name) for key, name, rows in [
        ("all", "all tokens", torch.ones_like(big)), ("without_massive", "without the massive ones", ~big)]}
    with run.timed("other"):
        other = other_statistics(lm, sae, acts, x, texts)
    if not run.args.no_losses:
        with run.timed("losses"):
            other["loss"] = loss_statistics(lm, sae, texts, run.cache({**run.settings(exclude=["no_losses"]),
                                                                        "sae": folder.name}))
    shipped = sae.info.get("shipped", {})
    run.write(SAEHeldoutData(
        model=lm.name, hook=sae.hook, massive=massive,
        bootstrap={"resamples": BOOTSTRAP, "over": "held-out texts", "seed": SEED},
        all=results["all"], without_massive=results["without_massive"],
        sae=HeldoutSAE(folder=folder.name, shipped=shipped.get("dtype"), live_features=shipped.get("live_features"),
                       d_sae=sae.d_sae),
        other=other, training_record=training_record(folder), seconds=time.perf_counter() - began,
    ))


if __name__ == "__main__":
    main()

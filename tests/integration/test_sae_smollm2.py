"""SAEs on SmolLM2: a small training run through sae-lens, the KV-cache invariance of steering and
clamping on the real model, and the acceptance numbers of the full cached SAE (when trained)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.generation import GenerationConfig, generate
from lmsci_mi.sae import (
    LensSAE,
    SAEDataConfig,
    SAEStats,
    SAETrainConfig,
    cached_sae_path,
    clamp_sae_feature,
    steer_with_sae_feature,
    train_sae,
)

pytestmark = pytest.mark.slow

SMALL_DATA = SAEDataConfig(corpus_tokens=24_000, generations=0)
SMALL_TRAIN = SAETrainConfig(d_sae=1024, k=32, training_samples=300_000, progress=False)


@pytest.fixture(scope="module")
def small(smollm2: LensModel) -> tuple[LensSAE, SAEStats]:
    # In the on-disk cache (5 MB), like the model and the editing statistics: trained once per
    # machine (80 s), loaded in a second by every later run of the suite.
    return train_sae(smollm2, SMALL_DATA, SMALL_TRAIN)


def test_a_small_sae_recovers_most_of_the_loss(small: tuple[LensSAE, SAEStats]) -> None:
    """A minute of training recovers most of the next-token loss that zero-ablating the site
    costs; L0 is k by construction. Measured 2026-11-27 on 1,774 held-out tokens: L0 32, losses
    2.70 < 6.98 < 16.27 nats, fraction recovered 0.685 (the bound 0.5 leaves 0.18 of room for
    another machine's float sums and cache rebuild; one seed, no spread measured)."""
    _, stats = small
    assert stats.l0 <= 32
    assert stats.loss_clean < stats.loss_sae < stats.loss_zero
    assert stats.fraction_recovered > 0.5


@pytest.mark.xfail(
    strict=True,
    reason="measured EV -0.19 at this budget (2026-11-27): a few massive-activation tokens at "
    "position 1 dominate the variance of a small held-out set; see docs/sae.md. Strict, so the "
    "suite says when that stops being true.",
)
def test_a_small_sae_explains_most_of_the_variance(small: tuple[LensSAE, SAEStats]) -> None:
    assert small[1].explained_variance > 0.5


def test_kv_cache_invariance_on_smollm2(
    clean_smollm2: LensModel, small: tuple[LensSAE, SAEStats]
) -> None:
    lm, (sae, stats) = clean_smollm2, small
    feature = int(stats.values.argmax())  # the densest feature: it fires on these prompts
    prompts = ["The weather today is", "My favourite recipe uses", "In the beginning"]
    greedy = GenerationConfig(max_new_tokens=10, temperature=0.0)
    for context in (
        lambda: steer_with_sae_feature(lm, sae, feature, 4.0),
        lambda: clamp_sae_feature(lm, sae, feature, 0.0, mode="where_active"),
        lambda: clamp_sae_feature(lm, sae, feature, 3.0),
    ):
        with context():
            cached = generate(lm, prompts, greedy)
            uncached = generate(lm, prompts, greedy, use_kv_cache=False)
        assert cached.tokens == uncached.tokens


def test_the_full_sae_meets_the_acceptance_numbers(smollm2: LensModel) -> None:
    """The default SAE (`lmsci-mi sae train`, benchmarks/sae.py): EV >= 0.7 at L0 <= 64."""
    folder = cached_sae_path(smollm2, SAEDataConfig(), SAETrainConfig())
    if not (Path(folder) / "stats.json").is_file():
        pytest.skip("the default SAE is not trained yet: run `lmsci-mi sae train`")
    stats = SAEStats.load(folder / "stats.json")
    assert stats.l0 <= 64 and stats.explained_variance >= 0.7
    sae = LensSAE.load(folder)
    assert torch.equal(sae.feature_scale, stats.feature_scale)

"""SAEs on SmolLM2: a small training run through sae-lens, the KV-cache invariance of steering and
clamping on the real model, and the shipped SAE's explained variance measured on held-out rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmsci_mi import LensModel, load_model
from lmsci_mi.collect import CollectConfig, collect_activations
from lmsci_mi.generation import GenerationConfig, generate
from lmsci_mi.sae import (
    LensSAE,
    SAEDataConfig,
    SAEStats,
    SAETrainConfig,
    clamp_sae_feature,
    load_trained_sae,
    sae_corpus,
    steer_with_sae_feature,
    train_sae,
)
from lmsci_mi.sae.stats import feature_summary

pytestmark = pytest.mark.slow

SMALL_DATA = SAEDataConfig(corpus_tokens=24_000, generations=0)
SMALL_TRAIN = SAETrainConfig(d_sae=1024, k=32, training_samples=300_000, progress=False)
HELD_OUT_ROWS = Path(__file__).parents[1] / "data" / "sae_held_out_rows.json"


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


def test_the_full_sae_explains_the_variance_without_massive_activations(smollm2: LensModel) -> None:
    """docs/sae.md: the default SAE (shipped; `lmsci-mi sae train`) explains 0.744 of the variance
    of its 24,787 held-out tokens once the 35 massive-activation tokens (norm > 10x the median) are
    left out, at L0 48 (target: EV >= 0.7 at L0 <= 64). Measured here, not read from stats.json,
    on the first 16 of its 217 held-out rows (1,559 tokens, one of them massive; the rows are
    stored in tests/data because building the corpus that splits them off takes 85 s).

    benchmarks/sae_massive_activations.py's computation on these rows: EV 0.7485, L0 48.0. Over
    the 10 disjoint 16-row blocks of the held-out rows: EV mean 0.745, s.d. 0.012, min 0.723, max
    0.772 (0.744 on all 217 rows, as documented). The bounds are the measured value ± 3 s.d."""
    sae = load_trained_sae(smollm2)  # the shipped SAE: expanded, never trained here
    rows = json.loads(HELD_OUT_ROWS.read_text(encoding="utf-8"))["rows"]
    assert len(rows) == 16
    acts = collect_activations(
        smollm2, rows, [sae.hook], positions="all", config=CollectConfig(progress=False)
    )
    x = acts.acts[sae.hook]
    norm = x.norm(dim=-1)
    massive = norm > 10 * norm.median()
    assert len(x) == 1559 and int(massive.sum()) == 1
    explained, l0, _, _ = feature_summary(sae, x[~massive])
    assert 0.711 < explained < 0.786 and l0 <= 64, (explained, l0)
    # With the massive token in (sae-lens's all-token EV) it is 0.778 here and 0.995 on all the
    # held-out tokens: the one token, position 1, carries much of the variance.
    assert feature_summary(sae, x)[0] > explained


def save_held_out_rows() -> None:
    """Write the first 16 held-out rows of the default SAE's corpus to tests/data (the corpus of
    the shipped SAE: `PYTHONPATH=. python -c "from tests.integration.test_sae_smollm2 import
    save_held_out_rows; save_held_out_rows()"`)."""
    lm = load_model("smollm2-135m")
    sae = load_trained_sae(lm)
    corpus = sae_corpus(lm, SAEDataConfig(), fingerprint=sae.model_fingerprint)
    HELD_OUT_ROWS.write_text(json.dumps({"rows": corpus.held_out[:16]}), encoding="utf-8")

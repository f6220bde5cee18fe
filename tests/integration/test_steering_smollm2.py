"""LM-Steer on the bundled SmolLM2 with the shipped sentiment steer (package data, copied into the
cache: no training): its control curve at the documented values, its highlights fall on the
sentiment words, and steered generation is the same with and without the KV cache on the real
model. The control curve is pinned (tests/data/pins.json, benchmarks/pins.py); the band over
sampling seeds is a separate robustness check."""

from __future__ import annotations

import pytest

from lmsci_mi import LensModel
from lmsci_mi.data.steering_texts import neutral_prompts, steering_texts
from lmsci_mi.generation import GenerationConfig
from lmsci_mi.steering import (
    HighlightConfig,
    LMSteer,
    generate_steered,
    highlight_keywords,
    train_steer,
)
from tests.pins import Measured, check_pins, measure

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sentiment_steer(smollm2: LensModel) -> LMSteer:
    # The default config of the sentiment texts is the shipped steer: train_steer restores it.
    steer, run = train_steer(smollm2, steering_texts("sentiment"))
    assert run.final_loss < run.unsteered_loss
    return steer


@pytest.fixture(scope="module")
def curve(smollm2: LensModel, sentiment_steer: LMSteer) -> Measured:
    """The shipped steer at s = -0.5, 0, +0.5 (docs/steering.md's curve, docs/data/steering.json,
    is of another steer, see below): 24 prompts, 20 tokens, T = 1, top-p 0.9, sampling seed 0."""
    return measure("steering", smollm2, steer=sentiment_steer)


def test_the_shipped_steer_controls_sentiment_at_half_a_unit(
    clean_smollm2: LensModel, curve: Measured
) -> None:
    """Sentiment rises with the steer's value; the sampled curve (seed 0) is pinned."""
    negative, zero, positive = curve.values["sentiment"]  # type: ignore[misc]
    assert negative < zero < positive, (negative, zero, positive)
    check_pins("steering", curve, clean_smollm2.device)


def test_the_shipped_steer_robustness_band(curve: Measured) -> None:
    """Robustness, not the pin. Measured on this subset with sampling seeds 0, 1, 2: sentiment
    at -0.5 / 0 / +0.5 = -0.17 / +0.31 / +0.64, -0.30 / +0.24 / +0.64, -0.15 / +0.14 / +0.62 (rising
    at every seed); gap 0.809 / 0.940 / 0.765 (s.d. 0.091); perplexity ratio at -0.5 1.95 / 1.91 /
    1.47 (s.d. 0.27), at +0.5 1.36 / 1.31 / 1.45 (s.d. 0.07). Bands: seed 0's value ± 3 s.d.

    The doc's curve is of another steer (benchmarks/steering.py: sentiment and topic, 200 steps
    of 512 tokens), not the shipped one (sentiment, 300 steps of 1,024): the shipped steer's -0.5
    side costs more perplexity (1.5-1.95x here) than the doc's steer does (1.50x at -0.5 in
    docs/data/steering.json). The bands are this steer's measured spread.
    """
    negative, _, positive = curve.values["sentiment"]  # type: ignore[misc]
    assert 0.54 < positive - negative < 1.08, (negative, positive)
    ratio_negative, _, ratio_positive = curve.values["perplexity_ratio"]  # type: ignore[misc]
    assert 1.15 < ratio_negative < 2.75, ratio_negative
    assert 1.15 < ratio_positive < 1.57, ratio_positive


def test_highlights_fall_on_the_sentiment_words(
    clean_smollm2: LensModel, sentiment_steer: LMSteer
) -> None:
    config = HighlightConfig(max_spans=2, max_length=3)
    good = highlight_keywords(
        clean_smollm2,
        sentiment_steer,
        "The staff were wonderful and the food was delicious.",
        config,
    )
    assert any("wonderful" in s or "delicious" in s for s in good.span_texts()), good.span_texts()
    # a negative value asks for the evidence of the other pole
    bad = highlight_keywords(
        clean_smollm2,
        sentiment_steer,
        "The staff were rude and the food was disgusting.",
        config.replace(value=-config.value),
    )
    assert any("rude" in s or "disgusting" in s for s in bad.span_texts()), bad.span_texts()


def test_steered_generation_with_and_without_the_cache(
    clean_smollm2: LensModel, sentiment_steer: LMSteer
) -> None:
    prompts = list(neutral_prompts()[:3])
    greedy = GenerationConfig(max_new_tokens=8, temperature=0.0)
    cached = generate_steered(clean_smollm2, prompts, sentiment_steer, [2.0], greedy)
    uncached = generate_steered(
        clean_smollm2, prompts, sentiment_steer, [2.0], greedy, use_kv_cache=False
    )
    assert cached.tokens == uncached.tokens

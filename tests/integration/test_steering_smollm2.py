"""LM-Steer on the bundled SmolLM2 with a small training budget: the sentiment steer moves the
sentiment of continuations both ways, its highlights fall on the sentiment words, and steered
generation is the same with and without the KV cache on the real model."""

from __future__ import annotations

import pytest

from lmsci_mi import LensModel
from lmsci_mi.data.steering_texts import neutral_prompts, steering_texts
from lmsci_mi.generation import GenerationConfig
from lmsci_mi.steering import (
    HighlightConfig,
    LMSteer,
    LMSteerConfig,
    SteerTrainConfig,
    generate_steered,
    highlight_keywords,
    train_steer,
)
from lmsci_mi.steering.evaluate import sentiment_scores

pytestmark = pytest.mark.slow

SMALL = SteerTrainConfig(steps=80, batch_tokens=512, progress=False)
"""About a minute and a half of training on two CPU cores (the benchmark trains longer)."""


@pytest.fixture(scope="module")
def sentiment_steer(smollm2: LensModel) -> LMSteer:
    steer, run = train_steer(smollm2, steering_texts("sentiment"), LMSteerConfig(), SMALL)
    assert run.final_loss < run.unsteered_loss  # the dummy alone absorbs part of the domain shift
    return steer


def _mean_sentiment(lm: LensModel, steer: LMSteer, value: float) -> float:
    prompts = list(neutral_prompts()[:24])
    config = GenerationConfig(max_new_tokens=16, top_p=0.9)
    ids = generate_steered(lm, prompts, steer, [value], config).tokens
    return sum(sentiment_scores([lm.tokenizer.decode(i) for i in ids])) / len(ids)


def test_the_sentiment_steer_moves_sentiment_both_ways(
    clean_smollm2: LensModel, sentiment_steer: LMSteer
) -> None:
    negative = _mean_sentiment(clean_smollm2, sentiment_steer, -10.0)
    positive = _mean_sentiment(clean_smollm2, sentiment_steer, 10.0)
    assert positive - negative > 0.3, (negative, positive)


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
    cached = generate_steered(clean_smollm2, prompts, sentiment_steer, [8.0], greedy)
    uncached = generate_steered(
        clean_smollm2, prompts, sentiment_steer, [8.0], greedy, use_kv_cache=False
    )
    assert cached.tokens == uncached.tokens

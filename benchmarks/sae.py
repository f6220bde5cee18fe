"""Full SAE run on SmolLM2-135M: train a TopK SAE at blocks.15.hook_resid_post with sae-lens, measure
it on held-out tokens, browse its features, and test steering with a feature chosen by its tokens.

    python benchmarks/sae.py                  # everything (cached: a rerun prints at once)
    python benchmarks/sae.py --html out.html  # also write the feature browser

The SAE, its statistics, the feature cards and the steering tables are cached under the cache
folder ($LMSCI_MI_CACHE), keyed by the settings. Run it alone on the machine: it times training.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


from lmsci_mi import load_model
from lmsci_mi.data.steering_texts import neutral_prompts, topic_lexicon
from lmsci_mi.sae import (
    FeatureCards,
    FrequencyConfig,
    SAEDataConfig,
    SAETrainConfig,
    SteeringFrequency,
    cached_sae_path,
    feature_cards,
    find_features,
    sae_corpus,
    steering_frequency,
    train_sae,
)

DATA = SAEDataConfig()
TRAIN = SAETrainConfig()
CARD_ROWS = 800
"""Corpus rows (about 100k tokens: the held-out rows, then training rows) scanned for contexts."""
COEFFICIENTS = (4.0, 8.0)
"""Steering coefficients, in units of the feature's typical maximum activation."""
N_PROMPTS = 30
"""Neutral prompts per condition (cached generation costs seconds per step on two cores)."""
WORD_LISTS = {
    "food": sorted(topic_lexicon()["food"]),
    "code": ["def", "return", "import", "class", "self", "None", "True", "False"],
    "feeling": ["happy", "sad", "love", "great", "good", "bad", "wonderful", "terrible"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--html", type=Path, default=None, help="write the feature browser here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    lm = load_model("smollm2-135m")

    start = time.perf_counter()
    sae, stats = train_sae(lm, DATA, TRAIN)
    folder = cached_sae_path(lm, DATA, TRAIN)
    print(f"SAE: {folder} ({time.perf_counter() - start:.0f} s this run)\n")
    print(stats.summary(), "\n")

    cards_path = folder / f"cards-{CARD_ROWS}.json"
    if cards_path.is_file():
        cards = FeatureCards.load(cards_path)
    else:
        corpus = sae_corpus(lm, DATA, fingerprint=sae.model_fingerprint)
        start = time.perf_counter()
        cards = feature_cards(lm, sae, (corpus.held_out + corpus.train)[:CARD_ROWS])
        print(f"feature cards of all {sae.d_sae} features: {time.perf_counter() - start:.0f} s")
        cards.save(cards_path)
    alive = cards.density > 0
    print(
        f"cards over {cards.n_tokens} tokens; features that fire there: {int(alive.sum())} / "
        f"{len(alive)}\n"
    )

    chosen: dict[str, int] = {}
    for name, words in WORD_LISTS.items():
        matches = [
            f for f in find_features(cards, words, contexts=False) if f not in chosen.values()
        ]
        if matches:
            chosen[name] = matches[0]
            print(f"[{name}] {len(matches)} features promote a word of the list; the first:")
            print(cards.describe(matches[0], contexts=5), "\n")
    if args.html is not None:
        shown = list(chosen.values()) + [f for f in range(20) if f not in chosen.values()]
        print(f"feature browser: {cards.select(shown).save_html(args.html)}\n")

    # The feature to steer with: the first one that promotes a food word; failing that, the live
    # feature whose top promoted token has the largest logit.
    best = int((cards.promoted_logits[:, 0] * alive).argmax())
    feature = chosen.get("food", best)
    prompts = list(neutral_prompts())[:N_PROMPTS]
    for coefficient in COEFFICIENTS:
        config = FrequencyConfig(coefficient=coefficient)
        path = folder / f"frequency-{feature}-{coefficient:g}.json"
        if path.is_file():
            table = SteeringFrequency.load(path)
        else:
            start = time.perf_counter()
            table = steering_frequency(lm, sae, feature, prompts, config, alive=alive)
            print(f"({time.perf_counter() - start:.0f} s)")
            table.save(path)
        print(
            f"steering with feature {feature}, coefficient {coefficient:g}, {len(prompts)} prompts, "
            f"{config.new_tokens} tokens each; token set: {' '.join(table.token_set)}"
        )
        print(table.summary())
        for label, samples in zip(table.axis_labels(0), table.samples, strict=True):
            print(f"  {label}: {prompts[0]!r} -> {samples[0]!r}")
        print()


if __name__ == "__main__":
    main()

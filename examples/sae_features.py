"""Train a sparse autoencoder on SmolLM2 offline, browse its features, and steer and clamp one.

1. Train a TopK SAE with sae-lens on the residual stream after block 15 (the text is the
   project's corpus plus seeded generations of the model; about 25 minutes on two CPU cores,
   cached, so a rerun is instant; the default SAE ships with lmsci-mi, so a first run expands it
   into the cache instead of training). Print its statistics on held-out tokens.
2. Build feature cards (top contexts, density, promoted tokens) and find features by words.
3. Steer with a feature chosen by its promoted tokens, during cached generation.
4. Clamp the same feature to zero where it fires, keeping the SAE's error term.
5. Write the feature browser as an offline HTML page.

    .venv/bin/python examples/sae_features.py [--out out/sae_features]
    .venv/bin/python examples/sae_features.py --quick    # the shipped SAE, a small sample

``--quick`` (or ``LMSCI_MI_QUICK=1``, as the test suite sets) runs the same steps with the SAE that
ships with lmsci-mi (never training) on a small sample of prose and shorter generations.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from lmsci_mi import load_model
from lmsci_mi.config import quick_mode
from lmsci_mi.data.steering_texts import topic_lexicon
from lmsci_mi.data.text_corpus import text_chunks
from lmsci_mi.sae import (
    FeatureConfig,
    SAEDataConfig,
    SAEStats,
    SAETrainConfig,
    clamp_sae_feature,
    feature_cards,
    find_features,
    load_trained_sae,
    sae_corpus,
    steer_with_sae_feature,
    train_sae,
)

QUICK_TOKENS = 6_000
"""Quick mode's prose sample for the feature cards (the full run scans 400 rows of its corpus)."""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("out/sae_features"))
    parser.add_argument(
        "--quick",
        action="store_true",
        default=quick_mode(),
        help="the shipped SAE on a small sample, short generations (about a minute)",
    )
    args = parser.parse_args()
    lm = load_model("smollm2-135m")

    # 1. Train (cached; the default SAE ships) and measure. Quick mode only loads it.
    if args.quick:
        sae = load_trained_sae(lm)
        stats = SAEStats.load(Path(sae.source) / "stats.json")
    else:
        sae, stats = train_sae(lm, SAEDataConfig(), SAETrainConfig())
    print(stats.summary(), "\n")

    # 2. Feature cards over part of the corpus; find features that promote food words.
    if args.quick:
        rows = text_chunks(lm, QUICK_TOKENS).tolist()
    else:
        corpus = sae_corpus(lm, SAEDataConfig(), fingerprint=sae.model_fingerprint)
        rows = (corpus.held_out + corpus.train)[:400]
    cards = feature_cards(lm, sae, rows, config=FeatureConfig(contexts=5))
    food = find_features(cards, sorted(topic_lexicon()["food"]), contexts=False)
    feature = food[0] if food else int(cards.density.argmax())
    print(f"{len(food)} features promote a food word; showing feature {feature}:")
    print(cards.describe(feature), "\n")

    # 3. Steer with it (coefficient in units of its typical maximum activation).
    prompt = "The weather today is"
    n_new = 15 if args.quick else 30
    print("unsteered:", prompt + lm.generate(prompt, n_new))
    with steer_with_sae_feature(lm, sae, feature, 4.0):
        print(f"steered with feature {feature} x4:", prompt + lm.generate(prompt, n_new))

    # 4. Clamp it to zero where it fires (everything else, the error term included, is kept).
    with clamp_sae_feature(lm, sae, feature, 0.0, mode="where_active"):
        print(f"feature {feature} clamped to 0:", prompt + lm.generate(prompt, n_new))

    # 5. The feature browser, offline.
    shown = [feature, *(f for f in food[:10] if f != feature)]
    page = cards.select(shown).save_html(args.out / "features.html")
    print(f"\nfeature browser: {page}")


if __name__ == "__main__":
    main()

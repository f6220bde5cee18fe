"""Train a sparse autoencoder on SmolLM2 offline, browse its features, and steer and clamp one.

1. Train a TopK SAE with sae-lens on the residual stream after block 15 (the text is the
   project's corpus plus seeded generations of the model; about 20 minutes on two CPU cores,
   cached, so a rerun is instant). Print its statistics on held-out tokens.
2. Build feature cards (top contexts, density, promoted tokens) and find features by words.
3. Steer with a feature chosen by its promoted tokens, during cached generation.
4. Clamp the same feature to zero where it fires, keeping the SAE's error term.
5. Write the feature browser as an offline HTML page.

    .venv/bin/python examples/sae_features.py [--out out/sae_features]
    .venv/bin/python examples/sae_features.py --quick    # toy model, tiny SAE, seconds

``--quick`` (or ``LMSCI_SAE_QUICK=1``) runs the same steps on the random toy model with a tiny
SAE, as the test suite does.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from lmsci_mi import load_model
from lmsci_mi.data.steering_texts import topic_lexicon
from lmsci_mi.steering.sae import (
    FeatureConfig,
    SAEDataConfig,
    SAETrainConfig,
    clamp_sae_feature,
    feature_cards,
    find_features,
    sae_corpus,
    steer_with_sae_feature,
    train_sae,
)

QUICK_DATA = SAEDataConfig(corpus_tokens=3000, seq_len=64, generations=0)
QUICK_TRAIN = SAETrainConfig(
    layer=1, d_sae=128, k=8, training_samples=8192, batch_size=512, autocast=None
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("out/sae_features"))
    parser.add_argument(
        "--quick",
        action="store_true",
        default=os.environ.get("LMSCI_SAE_QUICK") == "1",
        help="toy model and a tiny SAE (seconds)",
    )
    args = parser.parse_args()

    if args.quick:
        lm = load_model("toy-2l")
        data, train, rows_for_cards = QUICK_DATA, QUICK_TRAIN, 40
    else:
        lm = load_model("smollm2-135m")
        data, train, rows_for_cards = SAEDataConfig(), SAETrainConfig(), 400

    # 1. Train (cached) and measure.
    sae, stats = train_sae(lm, data, train)
    print(stats.table(), "\n")

    # 2. Feature cards over part of the corpus; find features that promote food words.
    corpus = sae_corpus(lm, data, fingerprint=sae.model_fingerprint)
    rows = (corpus.held_out + corpus.train)[:rows_for_cards]
    cards = feature_cards(lm, sae, rows, config=FeatureConfig(contexts=5))
    food = find_features(cards, sorted(topic_lexicon()["food"]), contexts=False)
    feature = food[0] if food else int(cards.density.argmax())
    print(f"{len(food)} features promote a food word; showing feature {feature}:")
    print(cards.describe(feature), "\n")

    # 3. Steer with it (coefficient in units of its typical maximum activation).
    prompt = "The weather today is"
    print("unsteered:", prompt + lm.generate(prompt, 30))
    with steer_with_sae_feature(lm, sae, feature, 4.0):
        print(f"steered with feature {feature} x4:", prompt + lm.generate(prompt, 30))

    # 4. Clamp it to zero where it fires (everything else, the error term included, is kept).
    with clamp_sae_feature(lm, sae, feature, 0.0, mode="where_active"):
        print(f"feature {feature} clamped to 0:", prompt + lm.generate(prompt, 30))

    # 5. The feature browser, offline.
    shown = [feature, *(f for f in food[:10] if f != feature)]
    page = cards.select(shown).save_html(args.out / "features.html")
    print(f"\nfeature browser: {page}")


if __name__ == "__main__":
    main()

"""Full SAE run on SmolLM2-135M: train a TopK SAE at blocks.15.hook_resid_post with sae-lens, measure
it on held-out tokens, browse its features, and test steering with a feature chosen by its tokens.

    python benchmarks/sae.py                  # everything (cached: a rerun prints at once)
    python benchmarks/sae.py --html out.html  # also write the feature browser

The SAE, its statistics, the feature cards and the steering tables are cached under the cache
folder ($LMSCI_MI_CACHE), keyed by the settings. With the default settings the SAE is the shipped
one (expanded from lmsci_mi/data/artefacts/ on first use), so nothing is trained; a retrain
(scripts/build_artefacts.py sae --retrain) takes some 25 minutes. Run it alone on the machine.
Writes the steering frequency table to docs/data/sae_steering.json (shares with standard errors
over prompts).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


import torch

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
OUT = Path(__file__).resolve().parent.parent / "docs" / "data" / "sae_steering.json"


def _se(x: torch.Tensor) -> float:
    """Standard error of the mean of ``x`` (one value per prompt)."""
    return float(x.double().std() / len(x) ** 0.5)


def frequency_json(table: SteeringFrequency) -> dict:
    """One coefficient's table: per condition the mean share over prompts with its standard error,
    the share of prompts with a hit, and the steered-minus-unsteered difference with its paired
    standard error (every condition samples the same prompts with the same seed)."""
    shares = table.values.double()
    rows = {}
    conditions = zip(("unsteered", "feature", "control"), table.axis_labels(0), shares, table.samples, strict=True)
    for key, label, row, samples in conditions:
        rows[key] = {
            "label": label,
            "share": float(row.mean()),
            "se": _se(row),
            "prompts_hit": float((row > 0).double().mean()),
            "minus_unsteered": float((row - shares[0]).mean()),
            "minus_unsteered_se": _se(row - shares[0]) if key != "unsteered" else 0.0,
            "sample": samples[0],
        }
    return {"coefficient": table.coefficient, "conditions": rows}


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
    tables = []
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
        tables.append((table, config))

    food = set(WORD_LISTS["food"])
    row = cards.features.index(feature)
    first = tables[0][0]
    OUT.write_text(json.dumps({
        "model": lm.name,
        "command": "PYTHONPATH=. .venv/bin/python benchmarks/sae.py",
        "date": datetime.date.today().isoformat(),
        "sae": {"folder": folder.name, "hook": sae.hook, "d_sae": sae.d_sae,
                "shipped": sae.info.get("shipped", {}).get("dtype") is not None,
                "live_features": sae.info.get("shipped", {}).get("live_features")},
        "cards": {"rows": CARD_ROWS, "n_tokens": cards.n_tokens, "features_firing": int(alive.sum()),
                  "features": len(alive)},
        "feature": {
            "index": feature,
            "rule": "find_features(cards, the bundled food lexicon, contexts=False)[0]: the live feature "
                    "with the most food words among its 10 promoted tokens (ties: lowest index)"
                    if "food" in chosen else "the live feature whose top promoted token has the largest logit",
            "matched_words": sorted(t.strip() for t in cards.promoted[row] if t.strip().lower() in food),
            "density": float(cards.density[row]),
            "typical_max": float(cards.scale[row]),
            "token_set": list(first.token_set),
        },
        "features_by_word_list": {
            name: {"index": f, "words": WORD_LISTS[name] if name != "food" else "the bundled food lexicon",
                   "density": float(cards.density[cards.features.index(f)]),
                   "typical_max": float(cards.scale[cards.features.index(f)]),
                   "promoted": list(cards.promoted[cards.features.index(f)]),
                   "contexts": cards.context_texts(f)[:5]}
            for name, f in chosen.items()
        },
        "control": {"index": first.control, "drawn_among": int(alive.sum()),
                    "rule": "random.Random(seed).choice over the features that fire on the card tokens, the steered one left out"},
        "prompts": {"n": len(prompts), "source": "the first bundled neutral prompts"},
        "sampling": {"new_tokens": tables[0][1].new_tokens, "temperature": tables[0][1].temperature,
                     "top_p": tables[0][1].top_p, "seed": tables[0][1].seed, "samples_per_prompt": 1,
                     "sampler": "lmsci_mi.generation.generate (one seeded stream per prompt)"},
        "statistic": "share of generated tokens in the feature's top-20 promoted tokens, per prompt; "
                     "mean over prompts ± standard error over prompts",
        "coefficients": [frequency_json(t) for t, _ in tables],
    }, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()

"""Full SAE run on SmolLM2-135M: the SAE at blocks.15.hook_resid_post (trained with sae-lens, or
the shipped one), its statistics, feature cards, and steering with a feature chosen by its tokens.

    PYTHONPATH=. python benchmarks/sae.py                  # docs/data/sae_steering.json
    PYTHONPATH=. python benchmarks/sae.py --html out.html  # also write the feature browser
    PYTHONPATH=. python benchmarks/sae.py --quick          # 100 card rows, 4 prompts, one coefficient

With the default settings the SAE is the shipped one (expanded from lmsci_mi/data/artefacts/ on
first use), so nothing is trained; a retrain (scripts/build_artefacts.py sae --retrain) takes some
25 minutes. The feature cards and each steering table are cached as they finish (the harness's
per-item cache, keyed by the settings and the SAE's folder), so a rerun prints at once. Run it
alone on the machine. Writes the steering frequency table (shares with standard errors over
prompts, paired differences from the unsteered samples) to docs/data/sae_steering.json.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import harness
from doc_tables.schemas.sae import (
    CardsInfo,
    FrequencyCondition,
    FrequencyTable,
    SAEInfo,
    SAESteeringData,
    SteeredFeature,
    WordListFeature,
)

from lmsci_mi import LensModel, load_model
from lmsci_mi.data.steering_texts import neutral_prompts, topic_lexicon
from lmsci_mi.sae import (
    FeatureCards,
    FrequencyConfig,
    LensSAE,
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
from lmsci_mi.stats import mean_se

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
FOOD_RULE = ("find_features(cards, the bundled food lexicon, contexts=False)[0]: the live feature with "
             "the most food words among its 10 promoted tokens (ties: lowest index)")
FALLBACK_RULE = "the live feature whose top promoted token has the largest logit"
CONTROL_RULE = ("random.Random(seed).choice over the features that fire on the card tokens, the steered "
                "one left out")
STATISTIC = ("share of generated tokens in the feature's top-20 promoted tokens, per prompt; mean over "
             "prompts ± standard error over prompts")


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--html", type=Path, default=None, help="write the feature browser here")


def cards_of(lm: LensModel, sae: LensSAE, rows: int) -> FeatureCards:
    """Every feature's card from the first ``rows`` corpus rows (held-out rows first)."""
    corpus = sae_corpus(lm, DATA, fingerprint=sae.model_fingerprint)
    return feature_cards(lm, sae, (corpus.held_out + corpus.train)[:rows])


def choose_features(cards: FeatureCards) -> dict[str, int]:
    """Per word list, the first feature that promotes one of its words (each feature once)."""
    chosen: dict[str, int] = {}
    for name, words in WORD_LISTS.items():
        matches = [f for f in find_features(cards, words, contexts=False) if f not in chosen.values()]
        if matches:
            chosen[name] = matches[0]
            print(f"[{name}] {len(matches)} features promote a word of the list; the first:")
            print(cards.describe(matches[0], contexts=5), "\n")
    return chosen


def frequency_json(table: SteeringFrequency) -> FrequencyTable:
    """One coefficient's table: per condition the mean share over prompts with its standard error,
    the share of prompts with a hit, and the steered-minus-unsteered difference with its paired
    standard error (every condition samples the same prompts with the same seed)."""
    shares = table.values.double()
    rows = {}
    conditions = zip(("unsteered", "feature", "control"), table.axis_labels(0), shares, table.samples, strict=True)
    for key, label, row, samples in conditions:
        share, paired = mean_se(row), mean_se(row - shares[0])
        rows[key] = FrequencyCondition(
            label=label, share=share.mean, se=share.se, prompts_hit=float((row > 0).double().mean()),
            minus_unsteered=paired.mean, minus_unsteered_se=paired.se if key != "unsteered" else 0.0,
            sample=samples[0],
        )
    return FrequencyTable(coefficient=table.coefficient, conditions=rows)


def feature_record(cards: FeatureCards, feature: int, words: list[str] | str) -> WordListFeature:
    row = cards.features.index(feature)
    return WordListFeature(index=feature, words=words, density=float(cards.density[row]),
                           typical_max=float(cards.scale[row]), promoted=list(cards.promoted[row]),
                           contexts=cards.context_texts(feature)[:5])


def steered_record(cards: FeatureCards, feature: int, by_food: bool, first: SteeringFrequency) -> SteeredFeature:
    food = set(WORD_LISTS["food"])
    row = cards.features.index(feature)
    return SteeredFeature(
        index=feature, rule=FOOD_RULE if by_food else FALLBACK_RULE,
        matched_words=sorted(t.strip() for t in cards.promoted[row] if t.strip().lower() in food),
        density=float(cards.density[row]), typical_max=float(cards.scale[row]), token_set=list(first.token_set),
    )


@dataclass(frozen=True)
class Measured:
    """What the run measured, for the data file."""

    sae: LensSAE
    folder: Path
    cards: FeatureCards
    card_rows: int
    chosen: dict[str, int]
    feature: int
    tables: list[SteeringFrequency]
    prompts: list[str]


def document(model: str, m: Measured) -> SAESteeringData:
    alive = int((m.cards.density > 0).sum())
    config = FrequencyConfig().generation
    shipped = m.sae.info.get("shipped", {})
    return SAESteeringData(
        model=model,
        sae=SAEInfo(folder=m.folder.name, hook=m.sae.hook, d_sae=m.sae.d_sae,
                    shipped=shipped.get("dtype") is not None, live_features=shipped.get("live_features")),
        cards=CardsInfo(rows=m.card_rows, n_tokens=m.cards.n_tokens, features_firing=alive,
                        features=len(m.cards.density)),
        feature=steered_record(m.cards, m.feature, "food" in m.chosen, m.tables[0]),
        features_by_word_list={
            name: feature_record(m.cards, f, WORD_LISTS[name] if name != "food" else "the bundled food lexicon")
            for name, f in m.chosen.items()},
        control={"index": m.tables[0].control, "drawn_among": alive, "rule": CONTROL_RULE},
        prompts={"n": len(m.prompts), "source": "the first bundled neutral prompts"},
        sampling={"new_tokens": config.max_new_tokens, "temperature": config.temperature, "top_p": config.top_p,
                  "seed": config.seed, "samples_per_prompt": 1,
                  "sampler": "lmsci_mi.generation.generate (one seeded stream per prompt)"},
        statistic=STATISTIC,
        coefficients=[frequency_json(t) for t in m.tables],
    )


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags)
    card_rows, n_prompts, coefficients = (100, 4, COEFFICIENTS[:1]) if run.quick else (CARD_ROWS, N_PROMPTS, COEFFICIENTS)
    lm = load_model(run.args.model)
    with run.timed("sae"):
        sae, stats = train_sae(lm, DATA, TRAIN)
    folder = cached_sae_path(lm, DATA, TRAIN)
    print(f"SAE: {folder}\n\n{stats.summary()}\n")
    cache = run.cache({**run.settings(exclude=["html"]), "sae": folder.name})
    with run.timed("cards"):
        cards = cache.result(f"cards-{card_rows}", lambda: cards_of(lm, sae, card_rows))
    alive = cards.density > 0
    print(f"cards over {cards.n_tokens} tokens; features that fire there: {int(alive.sum())} / {len(alive)}\n")
    chosen = choose_features(cards)
    if run.args.html is not None:
        shown = list(chosen.values()) + [f for f in range(20) if f not in chosen.values()]
        print(f"feature browser: {cards.select(shown).save_html(run.args.html)}\n")
    # The feature to steer with: the first one that promotes a food word; failing that, the live
    # feature whose top promoted token has the largest logit.
    feature = chosen.get("food", int((cards.promoted_logits[:, 0] * alive).argmax()))
    prompts = list(neutral_prompts())[:n_prompts]
    tables = []
    for c in coefficients:
        with run.timed("steering"):
            table = cache.result(f"frequency-{feature}-{c:g}", lambda c=c: steering_frequency(
                lm, sae, feature, prompts, FrequencyConfig(coefficient=c), alive=alive))
        print(f"steering with feature {feature}, coefficient {c:g}, {len(prompts)} prompts; token set: "
              f"{' '.join(table.token_set)}\n{table.summary()}\n")
        tables.append(table)
    run.write(document(lm.name, Measured(sae, folder, cards, card_rows, chosen, feature, tables, prompts)))


if __name__ == "__main__":
    main()

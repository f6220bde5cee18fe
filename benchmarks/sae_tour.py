"""The tour's SAE step, measured: the figures docs/sae.md quotes for ``lmsci-mi tour``'s step ``sae``.

    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/sae_tour.py        # docs/data/sae_tour.json

Runs what the tour's step runs (``lmsci_mi.sae.feature_overview`` of the shipped SAE's feature
``TOUR_FEATURE`` = 212: its card on the standard library's prose, and its steering frequency on 6
neutral prompts) and writes docs/data/sae_tour.json: the card's token count and the feature's
density there, its top contexts, the share of promoted tokens per condition with its standard
error over the prompts and the paired difference from the unsteered run, the random control
feature and the pool it is drawn from (the features alive in the SAE's ``stats.json``), and the
step's seconds. About a minute.

Six prompts × 30 tokens are the tour's quick look; ``benchmarks/sae.py`` measures the same
feature on 30 prompts at two coefficients. The shipped SAE belongs to SmolLM2: there is no toy
run (``--quick`` runs the step on 2 prompts and 1,000 tokens).
"""

from __future__ import annotations

import argparse

import harness
import torch
from doc_tables.schemas import MeanSE
from doc_tables.schemas.sae import SAETourData, TourCard, TourSteering

from lmsci_mi import load_model
from lmsci_mi.sae import (
    FeatureOverview,
    FeatureOverviewConfig,
    FrequencyConfig,
    feature_overview,
    load_trained_sae,
)
from lmsci_mi.sae.overview import TOUR_FEATURE
from lmsci_mi.stats import mean_se


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2-135m", help="a model with a shipped or cached SAE")


def share(values: torch.Tensor) -> MeanSE:
    """Mean ± standard error over prompts."""
    m = mean_se(values)
    return MeanSE(mean=m.mean, se=m.se)


def card(look: FeatureOverview, config: FeatureOverviewConfig) -> TourCard:
    cards = look.cards
    return TourCard(tokens_asked=config.n_tokens, n_tokens=int(cards.n_tokens),
                    density=float(cards.density[0]), contexts=list(cards.context_texts(look.feature)))


def steering(look: FeatureOverview, config: FeatureOverviewConfig) -> TourSteering:
    """Each condition's share of promoted tokens, and feature and control minus unsteered, paired
    prompt by prompt."""
    table = look.frequency
    values = table.values.double()  # [condition, prompt]
    return TourSteering(
        prompts=config.n_prompts, new_tokens=FrequencyConfig().generation.max_new_tokens,  # the step's defaults
        coefficient=table.coefficient, conditions=list(table.axis_labels(0)),
        share=[share(row) for row in values], minus_unsteered=[share(row - values[0]) for row in values[1:]],
        control=table.control, control_pool=look.control_pool, token_set=list(table.token_set),
    )


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags)
    config = FeatureOverviewConfig(n_tokens=1000, n_prompts=2) if run.quick else FeatureOverviewConfig()
    lm = load_model(run.args.model)
    with run.timed("load") as load:
        sae = load_trained_sae(lm)
    with run.timed("step") as step:
        look = feature_overview(lm, sae, TOUR_FEATURE, config)
    print(look.cards.describe(look.feature, contexts=3), "\n", look.frequency.summary(), sep="")
    run.write(SAETourData(model=lm.name, feature=look.feature, card=card(look, config),
                          steering=steering(look, config), load_seconds=load.seconds,
                          step_seconds=step.seconds), ensure_ascii=False)


if __name__ == "__main__":
    main()

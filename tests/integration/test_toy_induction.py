"""The trained 2-layer attention-only toy: detection must recover its known induction circuit."""

from __future__ import annotations

import pytest

from lmsci_mi.circuits.heads import (
    HeadScoreConfig,
    composition_scores,
    induction_scores,
    previous_token_scores,
)
from lmsci_mi.circuits.toy_induction import load_toy_induction, training_record
from lmsci_mi.sites import Head

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def toy():
    # Trained once (a few CPU minutes) and then read from the cache.
    return load_toy_induction()


def test_detects_induction_head_and_its_previous_token_partner(toy) -> None:
    config = HeadScoreConfig(n_sequences=50, seed=1)
    induction = induction_scores(toy, config=config)
    best, score = induction.top(1)[0]
    assert best.layer == 1 and score > 0.7

    previous = previous_token_scores(toy, config=config)
    prev_layer0 = previous.values[0]
    partner = int(prev_layer0.argmax())
    # chance is about 1/20 (uniform attention over the earlier tokens)
    assert float(prev_layer0[partner]) > 0.3
    assert float(previous.values[1].max()) < 0.1  # layer 1 does not do this job

    # The partner is the layer-0 head whose output the induction head's keys read most.
    k_comp = composition_scores(toy, "K")
    scores = [k_comp.score(Head(0, h), best) for h in range(toy.cfg.n_heads)]
    assert max(range(len(scores)), key=scores.__getitem__) == partner
    record = training_record()
    assert record is not None and record["final_loss"] < 0.5 * record["chance_loss"]
    assert toy.hooks.attached_count() == 0

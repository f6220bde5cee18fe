"""Dai et al.'s protocol beside ours: the ratio of means per relation (hand-computed), the summary
of facts by both measures, the activation-selected baseline neurons, and the refinement's
sensitivity to the number of prompts."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.knowledge import (
    FactScaling,
    KnowledgeNeuronsConfig,
    NeuronAttribution,
    ScaledProbabilities,
    activation_neurons,
    dai_change,
    integrated_gradients,
    jaccard,
    paraphrase_sensitivity,
    scaled_probabilities,
    scaling_effect,
    summarise_change,
    top_activation_neurons,
)

# Three facts over two relations, p(answer) per prompt (before, x0, x2).
R1_A = FactScaling("r1", True, ScaledProbabilities((0.8, 0.2), (0.4, 0.0), (0.8, 0.6)))
R1_B = FactScaling("r1", True, ScaledProbabilities((0.5, 0.5), (0.5, 0.25), (0.25, 0.5)))
R2_A = FactScaling("r2", True, ScaledProbabilities((0.1, 0.3), (0.05, 0.3), (0.2, 0.3)))


def test_dai_change_is_the_ratio_of_means_per_relation_averaged_over_relations() -> None:
    # r1: prompts before 0.8, 0.2, 0.5, 0.5 (mean 0.5); suppress deltas -0.4, -0.2, 0, -0.25
    # (mean -0.2125) -> -0.425. r2: before 0.1, 0.3 (mean 0.2), deltas -0.05, 0 -> -0.125.
    average, by_relation = dai_change([R1_A, R1_B, R2_A], "suppress")
    assert by_relation == pytest.approx({"r1": -0.425, "r2": -0.125})
    assert average == pytest.approx((-0.425 - 0.125) / 2)
    # Enhance, r1: deltas 0, 0.4, -0.25, 0 -> 0.15 / 2.0 = 0.075; r2: 0.1, 0 -> 0.25.
    average, by_relation = dai_change([R1_A, R1_B, R2_A], "enhance")
    assert by_relation == pytest.approx({"r1": 0.075, "r2": 0.25})
    assert average == pytest.approx(0.1625)
    # Ours differs: the mean over facts of the mean per-prompt ratio. R1_A enhance: (0 + 2) / 2.
    assert R1_A.probabilities.effect().enhance == pytest.approx(1.0)


def test_summary_gives_both_measures_with_intervals() -> None:
    empty = FactScaling("r2", False, ScaledProbabilities((0.4,), (0.4,), (0.4,)))
    facts = [R1_A, R1_B, R2_A, empty]
    s = summarise_change(facts, "enhance", n_resamples=500, seed=1)
    per_fact = [1.0, -0.25, 0.5]  # R1_B: (-0.5 + 0) / 2; R2_A: (1 + 0) / 2; the empty set left out
    assert s.mean.estimate == pytest.approx(sum(per_fact) / 3) and s.mean.n == 3
    assert s.median.estimate == pytest.approx(0.5)
    assert s.n_negative == 1
    # Dai et al.'s keeps the fact without neurons (it changes nothing): r2 = 0.1 / 0.8.
    assert s.dai_by_relation == pytest.approx({"r1": 0.075, "r2": 0.125})
    assert s.dai.estimate == pytest.approx(0.1) and s.dai.n == 4
    for interval in (s.mean, s.median, s.dai):
        assert interval.low <= interval.estimate <= interval.high
    assert s.as_dict()["dai"]["ci95"] == s.dai.as_list()
    # One fact per relation: resampling within relations cannot move the measure.
    single = summarise_change([R1_A, R2_A], "suppress", n_resamples=200)
    assert single.dai.low == pytest.approx(single.dai.estimate) == pytest.approx(single.dai.high)
    nothing = summarise_change([empty], "suppress", n_resamples=50)
    assert math.isnan(nothing.mean.estimate) and nothing.dai.estimate == 0.0


def test_scaled_probabilities_are_what_scaling_effect_averages(tiny: LensModel) -> None:
    cases = [("The Eiffel Tower is in", " Paris"), ("The capital of Germany is", " Berlin")]
    probs = scaled_probabilities(tiny, [(1, 3), (0, 7)], cases)
    assert len(probs.before) == 2 and probs.suppress != probs.before != probs.enhance
    assert probs.effect() == scaling_effect(tiny, [(1, 3), (0, 7)], cases)
    clean = scaled_probabilities(tiny, [], cases)
    assert clean.before == clean.suppress == clean.enhance == probs.before
    assert tiny.hooks.attached_count() == 0


@pytest.fixture
def attribution(tiny: LensModel) -> NeuronAttribution:
    """One real attribution whose scores and activations the tests overwrite."""
    return integrated_gradients(tiny, "The Eiffel Tower is in", " Paris", KnowledgeNeuronsConfig(steps=2))


def _with(base: NeuronAttribution, prompt: str, cells: dict[tuple[int, int], float], *, acts: bool) -> NeuronAttribution:
    grid = torch.zeros_like(base.values)
    for (layer, neuron), value in cells.items():
        grid[layer, neuron] = value
    field = "activations" if acts else "values"
    return dataclasses.replace(base, prompt=prompt, **{field: grid})


def test_activation_baseline_keeps_neurons_above_half_the_peak_in_most_prompts(
    attribution: NeuronAttribution,
) -> None:
    prompts = [
        {(0, 1): 10.0, (1, 2): 6.0, (1, 3): 4.0, (0, 5): 5.5},
        {(0, 1): 8.0, (1, 2): 5.0, (1, 3): 4.5, (0, 5): 1.0},
        {(0, 1): 3.0, (1, 2): 4.0, (1, 3): 3.0, (0, 5): -9.0},
    ]
    attributions = [_with(attribution, f"p{i}", cells, acts=True) for i, cells in enumerate(prompts)]
    # Above 0.5 x the prompt's largest: p0 {(0,1), (1,2), (0,5)}; p1 {(0,1), (1,2), (1,3)};
    # p2 {(0,1), (1,2), (1,3)}. Share 0.7 of 3 prompts needs all 3: (0,1) and (1,2), ordered by
    # mean activation.
    base = activation_neurons(attributions)
    assert base.neurons == ((0, 1), (1, 2)) and base.objective == "activation"
    assert base.threshold == 0.5
    assert activation_neurons(attributions, KnowledgeNeuronsConfig(share=0.6)).neurons == ((0, 1), (1, 2), (1, 3))
    # The count-matched variant ranks by mean activation: (0,1) 7, (1,2) 5, (1,3) 3.83.
    assert top_activation_neurons(attributions, 3) == [(0, 1), (1, 2), (1, 3)]
    assert top_activation_neurons(attributions, 0) == []
    with pytest.raises(ValueError, match="at least 3 prompts"):
        activation_neurons(attributions[:2])


def test_paraphrase_sensitivity_refines_on_the_first_k_prompts(attribution: NeuronAttribution) -> None:
    prompts = [
        {(0, 1): 1.0, (1, 2): 0.5, (0, 9): 0.3},
        {(0, 1): 1.0, (1, 2): 0.5, (0, 9): 0.1},
        {(0, 1): 1.0, (1, 2): 0.1, (0, 9): 0.5},
        {(0, 1): 1.0, (1, 2): 0.1, (0, 9): 0.5},
    ]
    attributions = [_with(attribution, f"p{i}", cells, acts=False) for i, cells in enumerate(prompts)]
    found = paraphrase_sensitivity(attributions, [4, 2, 3])
    # Above 0.2 x max: p0 all three; p1 drops (0,9); p2 and p3 drop (1,2).
    assert found.sizes == (2, 3, 4)
    assert set(found.neurons[2]) == {(0, 1), (1, 2)}  # both of 2 prompts (min_prompts lowered)
    assert set(found.neurons[3]) == {(0, 1)}  # (1,2) and (0,9) pass in 2 of 3 < 0.7
    assert set(found.neurons[4]) == {(0, 1), (0, 9)}  # (0,9) passes in 3 of 4 = 0.75
    assert found.jaccard_to_largest[4] == 1.0
    assert found.jaccard_to_largest[2] == pytest.approx(jaccard(found.neurons[2], found.neurons[4]))
    with pytest.raises(ValueError, match=r"must lie in 2\.\.4"):
        paraphrase_sensitivity(attributions, [1, 4])

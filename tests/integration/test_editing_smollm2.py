"""ROME and MEMIT on the bundled SmolLM2: an edit flips the Eiffel Tower to Rome and restores
exactly; a small MEMIT batch installs its facts. Statistics come from the on-disk cache (or are
computed once with the default token budget)."""

from __future__ import annotations

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.editing import (
    EditRequest,
    EvaluationConfig,
    MEMITConfig,
    ROMEConfig,
    default_memit_layers,
    default_rome_layer,
    evaluate_edits,
    key_statistics,
    load_facts,
    rome_edit,
    target_nll,
)

pytestmark = pytest.mark.slow

EIFFEL = EditRequest(
    "{} is located in the city of",
    "The Eiffel Tower",
    " Rome",
    " Paris",
    ("The Eiffel Tower can be found in the city of",),
    ("The Louvre is located in the city of",),
)


def p_new_true(lm: LensModel, prompt: str) -> tuple[float, float]:
    nll = target_nll(lm, [prompt, prompt], [" Rome", " Paris"])
    return float((-nll[0]).exp()), float((-nll[1]).exp())


def test_rome_flips_eiffel_to_rome_and_restores(clean_smollm2: LensModel) -> None:
    lm = clean_smollm2
    layer = default_rome_layer(lm)
    stats = key_statistics(lm, layer)
    before = {k: v.clone() for k, v in lm.model.state_dict().items()}
    p_rome, p_paris = p_new_true(lm, EIFFEL.rewrite_prompt)
    assert p_paris > 0.5 > p_rome  # the model knows the fact before the edit
    with rome_edit(lm, EIFFEL, ROMEConfig(layer=layer), stats=stats) as handle:
        assert handle.layers == (layer,)
        p_rome, p_paris = p_new_true(lm, EIFFEL.rewrite_prompt)
        assert p_rome > 0.5 > p_paris
        para_rome, para_paris = p_new_true(lm, EIFFEL.paraphrase_prompts[0])
        assert para_rome > para_paris
        # Specificity: the Louvre stays in Paris.
        louvre_rome, louvre_paris = p_new_true(lm, EIFFEL.neighborhood_prompts[0])
        assert louvre_paris > louvre_rome
        assert "Rome" in lm.generate(EIFFEL.rewrite_prompt, 5)
    after = lm.model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in before.items())


def test_rome_bad_layer_changes_nothing(clean_smollm2: LensModel) -> None:
    lm = clean_smollm2
    before = {k: v.clone() for k, v in lm.model.state_dict().items()}
    with pytest.raises(ValueError, match="out of range"):
        rome_edit(lm, EIFFEL, ROMEConfig(layer=lm.cfg.n_layers))
    with pytest.raises(ValueError, match="not in the prompt"):
        rome_edit(
            lm, EditRequest("Big Ben is in the city of", "The Eiffel Tower", " Rome"),
            ROMEConfig(layer=4),
        )
    after = lm.model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in before.items())


def test_the_traced_layer_of_the_eiffel_fact(
    clean_smollm2: LensModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ROMEConfig(trace_layer=True) edits at the causal trace's MLP peak at the last subject
    token, refusing a peak within 2 s.e. of the corrupted run. Measured on the Eiffel Tower (MLP
    trace, default noise, seed 0): peak at layer 15, effect 0.0126 ± 0.0039 s.e. (3.2 s.e.), so
    the layer is 15. Over noise seeds 0-3: effect 0.0126 / 0.0063 / 0.0080 / 0.0077 (s.d. 0.0027),
    peak layer 15 / 15 / 17 / 15, above 2 s.e. at seeds 0, 1, 3 (refused at seed 2). The effect's
    bounds are seed 0's value ± 3 s.d.

    benchmarks/causal_trace.py records the same four seeds (docs/data/causal_trace_eiffel.json,
    ``mlp_only``; docs/editing.md and docs/circuits.md quote it). With the 2-s.e. rule the peak is
    layer 15 and is not refused; it restores under 2% of the clean-corrupted gap (0.753 - 0.018),
    so it is still no guide to where the fact lives."""
    from lmsci_mi.circuits import TraceConfig, causal_trace
    from lmsci_mi.editing.rome import traced_layer

    lm = clean_smollm2
    trace = causal_trace(lm, EIFFEL.rewrite_prompt, EIFFEL.subject, TraceConfig(kinds=("mlp",)))
    layer, effect, error = trace.peak_effect("mlp")
    assert layer == 15 and 0.0044 < effect < 0.0208 and effect > 2 * error, (layer, effect, error)
    assert effect < 0.02 * (trace.clean_prob - trace.corrupted_prob)
    # traced_layer's rule applied to this real trace (handed back instead of traced again: 50 s)
    # gives the measured layer, a constant, not the trace's own answer.
    import lmsci_mi.circuits

    def same_trace(lm_, prompt, subject, config):
        assert (prompt, subject, config) == (EIFFEL.rewrite_prompt, EIFFEL.subject, TraceConfig(kinds=("mlp",)))
        return trace

    monkeypatch.setattr(lmsci_mi.circuits, "causal_trace", same_trace)
    assert traced_layer(lm, EIFFEL) == 15


def test_memit_small_batch(clean_smollm2: LensModel) -> None:
    lm = clean_smollm2
    layers = default_memit_layers(lm)
    stats = key_statistics(lm, layers)
    facts = load_facts()[::20][:4]  # Paris, Tokyo, Calgary, the Colosseum
    before = {k: v.clone() for k, v in lm.model.state_dict().items()}
    ev = evaluate_edits(
        lm,
        facts,
        MEMITConfig(layers=layers, steps=15),
        stats=stats,
        evaluation=EvaluationConfig(generation_tokens=0),  # GE is not pinned here: it costs most
        use_cache=False,
    )
    assert ev.fact_layers == (tuple(layers),) * 4 and ev.n_edits == 1
    # The unedited model knows these facts (docs/editing.md: unedited ES/PS near 0, NS near 100).
    assert ev.metric("ES", edited=False) == 0 and ev.metric("NS", edited=False) == 100
    # docs/editing.md, MEMIT on 80 facts in one batch: ES 92.5, PS 91.7, NS 96.2; EM 83.3, PM 64.0,
    # NM 41.6 points. Measured on this batch (15 steps; prefix seeds 0, 1, 2; seed 0 is the one
    # run here): ES 100 and PS 100 at every seed, NS 91.67 at every seed (Calgary keeps 2 of its 3
    # neighbours); EM 82.6 / 85.0 / 86.6 (s.d. 2.0), PM 61.4 / 60.6 / 64.1 (s.d. 1.8), NM 47.0 /
    # 44.2 / 46.1 (s.d. 1.4). ES, PS and NS are 4 facts' shares with no spread over seeds: the
    # bound is one step of their resolution below the measured value (one fact, or one of the 12
    # neighbour prompts). The margins in points are seed 0's value ± 3 s.d. over the seeds.
    assert ev.metric("ES") >= 75 and ev.metric("PS") >= 75, ev.values
    assert ev.metric("NS") >= 83, ev.values
    assert 76.6 < ev.metric("EM") < 88.6, ev.values
    assert 55.9 < ev.metric("PM") < 66.9, ev.values
    assert 42.8 < ev.metric("NM") < 51.1, ev.values
    after = lm.model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in before.items())

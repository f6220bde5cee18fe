"""ROME and MEMIT on the bundled SmolLM2: an edit flips the Eiffel Tower to Rome and restores
exactly; a small MEMIT batch installs its facts. Statistics come from the on-disk cache (or are
computed once with the default token budget)."""

from __future__ import annotations

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.editing import (
    EditRequest,
    ROMEConfig,
    default_rome_layer,
    rome_edit,
    target_nll,
)
from tests.pins import EIFFEL_EDIT, Measured, check_pins, measure

pytestmark = pytest.mark.slow

EIFFEL = EditRequest(*EIFFEL_EDIT)


def p_new_true(lm: LensModel, prompt: str) -> tuple[float, float]:
    nll = target_nll(lm, [prompt, prompt], [" Rome", " Paris"])
    return float((-nll[0]).exp()), float((-nll[1]).exp())


def test_rome_flips_eiffel_to_rome_and_restores(clean_smollm2: LensModel) -> None:
    lm = clean_smollm2
    before = {k: v.clone() for k, v in lm.model.state_dict().items()}
    p_rome, p_paris = p_new_true(lm, EIFFEL.rewrite_prompt)
    assert p_paris > 0.5 > p_rome  # the model knows the fact before the edit
    rome = measure("rome", lm)  # edits, reads, and undoes the edit
    p = rome.values
    assert rome.extra["layer"] == default_rome_layer(lm)
    assert p["p_new_rewrite"] > 0.5 > p["p_true_rewrite"]
    assert p["p_new_paraphrase"] > p["p_true_paraphrase"]
    assert p["p_true_neighbour"] > p["p_new_neighbour"]  # specificity: the Louvre stays in Paris
    assert "Rome" in rome.result
    after = lm.model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in before.items())
    check_pins("rome", rome, lm.device)


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
    """ROMEConfig(trace_layer=True) edits at the MLP peak at the last subject token only when
    the clean run beats the corrupted runs (``CausalTrace.gap_test``, one-sided sign-flip over
    the 10 noise samples) by a material gap (``traced_gap_is_material``: at least 0.05 and half
    the clean p) and the peak passes ``CausalTrace.peak_test`` (the largest of the 30 layers'
    effects under the 1,024 sign flips), each test at p <= 0.05. Pinned from
    docs/data/guard_null.json (``eiffel``, noise seed 0, written by benchmarks/guard_null.py): the
    peak layer, its effect and the gap (relative 1e-3: thread-count rounding) and the exact
    p-values (within two flips of 1,024: a flip whose statistic ties the observed one may fall
    either side under that rounding). At seed 0 the guard accepts layer 15 (gap p = 1/1024,
    peak p = 4/1024), yet the peak restores under 2 % of the clean-corrupted gap
    (docs/editing.md): no guide to where the fact lives."""
    import json
    from pathlib import Path

    import lmsci_mi.circuits
    from lmsci_mi.circuits import TraceConfig, causal_trace
    from lmsci_mi.editing.rome import traced_gap_is_material, traced_layer

    data = Path(__file__).resolve().parents[2] / "docs" / "data" / "guard_null.json"
    pinned = json.loads(data.read_text(encoding="utf-8"))["eiffel"]["traces"][0]
    assert pinned["seed"] == 0 and pinned["subject"] == EIFFEL.subject
    lm, guard = clean_smollm2, TraceConfig(kinds=("mlp",), last_subject_only=True)
    trace = causal_trace(lm, EIFFEL.rewrite_prompt, EIFFEL.subject, guard)
    layer, effect, _ = trace.peak_effect("mlp")
    test = trace.peak_test("mlp")
    assert layer == test.argmax == pinned["layer"]
    assert effect == pytest.approx(pinned["effect"], rel=1e-3)
    assert test.p_value == pytest.approx(pinned["p_value"], abs=2 / 1024)
    gap = trace.gap_test()
    assert gap.statistic == pytest.approx(pinned["gap"], rel=1e-3)
    assert gap.p_value == pytest.approx(pinned["gap_p_value"], abs=2 / 1024)
    assert effect < 0.02 * (trace.clean_prob - trace.corrupted_prob)
    assert pinned["material_accepted"] and traced_gap_is_material(trace.clean_prob, trace.corrupted_prob)

    def same_trace(lm_, prompt, subject, config):  # handed back instead of traced again
        assert (prompt, subject, config) == (EIFFEL.rewrite_prompt, EIFFEL.subject, guard)
        return trace

    monkeypatch.setattr(lmsci_mi.circuits, "causal_trace", same_trace)
    assert pinned["accepted"] and gap.p_value < 0.05 and test.p_value < 0.05
    assert traced_layer(lm, EIFFEL) == pinned["layer"] == 15


@pytest.fixture(scope="module")
def memit(smollm2: LensModel) -> Measured:
    before = {k: v.clone() for k, v in smollm2.model.state_dict().items()}
    measured = measure("memit", smollm2)  # 4 facts in one batch, 15 steps, prefix seed 0
    after = smollm2.model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in before.items())
    return measured


def test_memit_small_batch(clean_smollm2: LensModel, memit: Measured) -> None:
    ev = memit.result
    assert ev.fact_layers == (tuple(memit.extra["layers"]),) * 4 and ev.n_edits == 1
    # The unedited model knows these facts (docs/editing.md: unedited ES/PS near 0, NS near 100).
    assert ev.metric("ES", edited=False) == 0 and ev.metric("NS", edited=False) == 100
    check_pins("memit", memit, clean_smollm2.device)


def test_memit_robustness_band(memit: Measured) -> None:
    """Robustness, not the pin. Measured on this batch with MEMIT's defaults since issue 38
    (compute_z's total-loss stop and decay; 15 steps; prefix seeds 0, 1, 2; seed 0 is the pinned
    one): ES 100 and PS 100 at every seed; NS 91.67 / 91.67 / 83.33 (one of the 12 neighbour
    prompts apart); EM 83.7 / 86.9 / 94.0 (s.d. 5.2), PM 67.5 / 65.5 / 73.0 (s.d. 3.9), NM 43.1 /
    41.4 / 40.1 (s.d. 1.5). ES, PS and NS are shares of 4 facts and 12 prompts: the bound is one
    step of their resolution below the lowest seed's value. The bands in points are seed 0's
    value ± 3 s.d. (the fit of before issue 38 spread less: EM s.d. 2.0, PM 1.8, NM 1.4)."""
    ev = memit.result
    assert ev.metric("ES") >= 75 and ev.metric("PS") >= 75, ev.values
    assert ev.metric("NS") >= 75, ev.values
    assert 68.0 < ev.metric("EM") < 99.4, ev.values
    assert 55.9 < ev.metric("PM") < 79.1, ev.values
    assert 38.6 < ev.metric("NM") < 47.6, ev.values


def test_alphaedit_small_batch(clean_smollm2: LensModel) -> None:
    """AlphaEdit on MEMIT's pinned batch: the facts install (each rate a share of 4 facts and 12
    neighbour prompts), the weights are restored, and the values match their pins."""
    lm = clean_smollm2
    before = {k: v.clone() for k, v in lm.model.state_dict().items()}
    alpha = measure("alphaedit", lm)
    after = lm.model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in before.items())
    ev = alpha.result
    assert ev.metric("ES", edited=False) == 0 and ev.metric("ES") >= 75 and ev.metric("NS") >= 75, ev.values
    check_pins("alphaedit", alpha, lm.device)

"""ROME's layer choice by causal tracing: the documented one-way use of circuits from editing,
and its guard: the clean run must give the answer more than the corrupted runs
(``CausalTrace.gap_test``), by a material gap (``traced_gap_is_material``: at least 0.05 and at
least half the clean p), and the peak must beat the largest of the layers' effects under sign
flips of the noise samples (``CausalTrace.peak_test``), or the edit is refused before any weight
changes."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import lmsci_mi.circuits
from lmsci_mi import LensModel
from lmsci_mi.circuits import CausalTrace, TraceConfig, causal_trace
from lmsci_mi.editing import EditRequest, ROMEConfig, rome_edit
from lmsci_mi.editing.rome import (
    MIN_TRACED_GAP,
    MIN_TRACED_GAP_SHARE,
    traced_gap_is_material,
    traced_layer,
)
from tests.fixtures import weights_fingerprint

REQUEST = EditRequest("{} is located in the city of", "The Eiffel Tower", " Rome", " Paris")
GUARD_TRACE = TraceConfig(kinds=("mlp",), last_subject_only=True)


def _traced_with(
    lm: LensModel, monkeypatch: pytest.MonkeyPatch, differences: torch.Tensor, gap: float = 0.5,
    corrupted: torch.Tensor | None = None,
) -> CausalTrace:
    """The toy's own guard trace with the paired differences at the last subject token set to
    ``differences`` ``[sample, layer]`` and the clean run's p(target) ``gap`` above the largest
    corrupted sample's (a negative ``gap``: below the smallest); ``corrupted`` replaces the
    corrupted samples' p(target) (default: the toy's own); ``causal_trace`` then hands it to the
    guard."""
    trace = causal_trace(lm, REQUEST.rewrite_prompt, REQUEST.subject, GUARD_TRACE)
    corrupted = trace.corrupted_samples if corrupted is None else corrupted.float()
    samples = trace.sample_values.clone()
    samples[0, :, trace.subject_positions[-1]] = corrupted + differences.T.float()
    clean = float(corrupted.max() + gap if gap > 0 else corrupted.min() + gap)
    mean = float(corrupted.mean())
    trace = dataclasses.replace(
        trace, sample_values=samples, values=samples.mean(-1), clean_prob=clean, clean_value=clean,
        corrupted_samples=corrupted, corrupted_prob=mean, corrupted_value=mean,
    )

    def same_trace(lm_, prompt, subject, config):
        assert (prompt, subject, config) == (REQUEST.rewrite_prompt, REQUEST.subject, GUARD_TRACE)
        return trace

    monkeypatch.setattr(lmsci_mi.circuits, "causal_trace", same_trace)
    return trace


def _refused_before_any_edit(tiny: LensModel, match: str) -> None:
    """A traced ROME edit raises ``match`` and leaves every weight and hook as it was."""
    before = weights_fingerprint(tiny)
    with pytest.raises(ValueError, match=match):
        rome_edit(tiny, REQUEST, ROMEConfig(trace_layer=True, n_contexts=2, steps=2))
    assert weights_fingerprint(tiny) == before and tiny.hooks.attached_count() == 0


def _clear_peak_at_layer_1() -> torch.Tensor:
    """Every sample restores 0.2 at layer 1 and nothing at layer 0: peak p = 1/1024, the least."""
    noise = 0.01 * torch.randn(10, 2, generator=torch.Generator().manual_seed(0))
    return noise + torch.tensor([0.0, 0.2])


def test_a_peak_within_noise_is_refused_and_nothing_is_edited(
    tiny: LensModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No effect at either layer: each sample's difference is matched by its negative, so the
    largest mean (zero) is reached under most sign flips. The gap passes: the peak is refused."""
    signs = torch.tensor([(-1.0) ** s for s in range(10)])
    trace = _traced_with(tiny, monkeypatch, 0.01 * signs[:, None] * torch.tensor([1.0, 2.0]))
    assert trace.peak_test("mlp").p_value > 0.5 and trace.gap_test().p_value == 1 / 1024
    _refused_before_any_edit(tiny, r"no MLP peak above noise.*p = 0\.\d+ > 0\.05.*give a layer")


def test_a_clear_peak_with_no_gap_is_refused_and_nothing_is_edited(
    tiny: LensModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The peak alone would pass, but the clean run gives the answer less than every corrupted
    sample: the noise destroyed nothing, so the gap test refuses the trace first."""
    trace = _traced_with(tiny, monkeypatch, _clear_peak_at_layer_1(), gap=-0.01)
    assert trace.peak_test("mlp").p_value == 1 / 1024 and trace.gap_test().p_value == 1.0
    _refused_before_any_edit(tiny, r"no gap to locate.*does not lower p.*p = 1 > 0\.05.*give a layer")


def test_a_material_gap_is_5_points_and_half_the_clean_p() -> None:
    """Both bounds, at and just past each: the absolute one decides for a small clean p, the
    share for a large one."""
    assert (MIN_TRACED_GAP, MIN_TRACED_GAP_SHARE) == (0.05, 0.5)
    assert traced_gap_is_material(0.0625, 0.0)  # 0.0625 clears 0.05 and half of itself
    assert not traced_gap_is_material(0.0495, 0.0)  # the whole p gone, but under 0.05
    assert traced_gap_is_material(0.75, 0.375) and not traced_gap_is_material(0.75, 0.3755)
    assert not traced_gap_is_material(0.9, 0.6)  # 0.3 is material in size, a third of the p
    assert not traced_gap_is_material(1.3e-5, 1.8e-7)  # 98.6 % of a word the model does not give
    assert not traced_gap_is_material(0.2, 0.3)  # no gap at all


def test_a_significant_but_tiny_gap_is_refused_and_nothing_is_edited(
    tiny: LensModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A word the model hardly gives: every corrupted sample below the clean run (gap p =
    1/1024) and a clear peak, but the clean p is 10⁻⁵: nothing material to locate."""
    corrupted = torch.linspace(1e-7, 2e-7, 10)
    trace = _traced_with(tiny, monkeypatch, 1e-6 * _clear_peak_at_layer_1(), gap=1e-5, corrupted=corrupted)
    assert trace.peak_test("mlp").p_value == 1 / 1024 and trace.gap_test().p_value == 1 / 1024
    _refused_before_any_edit(tiny, r"no material answer to locate.*under 0\.05 or under 50%.*give a layer")


def test_a_gap_that_leaves_most_of_the_answer_is_refused(
    tiny: LensModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer rests on the template, not on the subject: p 0.6 clean, about 0.42 noised (a
    gap of 0.18, every sample below the clean run, a clear peak): under half the clean p."""
    corrupted = torch.linspace(0.40, 0.44, 10)
    trace = _traced_with(tiny, monkeypatch, _clear_peak_at_layer_1(), gap=0.16, corrupted=corrupted)
    assert trace.peak_test("mlp").p_value == 1 / 1024 and trace.gap_test().p_value == 1 / 1024
    assert 0.05 < trace.clean_prob - trace.corrupted_prob < 0.5 * trace.clean_prob
    with pytest.raises(ValueError, match="no material answer to locate"):
        traced_layer(tiny, REQUEST)


def test_a_clear_peak_with_a_gap_is_the_layer(tiny: LensModel, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _traced_with(tiny, monkeypatch, _clear_peak_at_layer_1())
    assert trace.peak_test("mlp").p_value == 1 / 1024 and trace.gap_test().p_value == 1 / 1024
    assert traced_layer(tiny, REQUEST) == 1


def test_layer_and_trace_layer_together_are_refused(tiny: LensModel) -> None:
    with pytest.raises(ValueError, match="give one of them"):
        rome_edit(tiny, REQUEST, ROMEConfig(layer=1, trace_layer=True))

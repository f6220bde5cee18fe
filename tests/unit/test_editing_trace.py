"""ROME's layer choice by causal tracing: the documented one-way use of circuits from editing,
and its guard: the clean run must give the answer more than the corrupted runs
(``CausalTrace.gap_test``), and the peak must beat the largest of the layers' effects under sign
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
from lmsci_mi.editing.rome import traced_layer
from tests.conftest import weights_fingerprint

REQUEST = EditRequest("{} is located in the city of", "The Eiffel Tower", " Rome", " Paris")
GUARD_TRACE = TraceConfig(kinds=("mlp",), last_subject_only=True)


def _traced_with(
    lm: LensModel, monkeypatch: pytest.MonkeyPatch, differences: torch.Tensor, gap: float = 0.5
) -> CausalTrace:
    """The toy's own guard trace with the paired differences at the last subject token set to
    ``differences`` ``[sample, layer]`` and the clean run's p(target) ``gap`` above the largest
    corrupted sample's (a negative ``gap``: below the smallest); ``causal_trace`` then hands it to
    the guard."""
    trace = causal_trace(lm, REQUEST.rewrite_prompt, REQUEST.subject, GUARD_TRACE)
    corrupted = trace.corrupted_samples
    samples = trace.sample_values.clone()
    samples[0, :, trace.subject_positions[-1]] = corrupted + differences.T.float()
    clean = float(corrupted.max() + gap if gap > 0 else corrupted.min() + gap)
    trace = dataclasses.replace(
        trace, sample_values=samples, values=samples.mean(-1), clean_prob=clean, clean_value=clean
    )

    def same_trace(lm_, prompt, subject, config):
        assert (prompt, subject, config) == (REQUEST.rewrite_prompt, REQUEST.subject, GUARD_TRACE)
        return trace

    monkeypatch.setattr(lmsci_mi.circuits, "causal_trace", same_trace)
    return trace


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
    before = weights_fingerprint(tiny)
    with pytest.raises(ValueError, match=r"no MLP peak above noise.*p = 0\.\d+ > 0\.05.*give a layer"):
        rome_edit(tiny, REQUEST, ROMEConfig(trace_layer=True, n_contexts=2, steps=2))
    assert weights_fingerprint(tiny) == before and tiny.hooks.attached_count() == 0


def test_a_clear_peak_with_no_gap_is_refused_and_nothing_is_edited(
    tiny: LensModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The peak alone would pass, but the clean run gives the answer less than every corrupted
    sample: the noise destroyed nothing, so the gap test refuses the trace first."""
    trace = _traced_with(tiny, monkeypatch, _clear_peak_at_layer_1(), gap=-0.01)
    assert trace.peak_test("mlp").p_value == 1 / 1024 and trace.gap_test().p_value == 1.0
    before = weights_fingerprint(tiny)
    with pytest.raises(ValueError, match=r"no gap to locate.*does not lower p.*p = 1 > 0\.05.*give a layer"):
        rome_edit(tiny, REQUEST, ROMEConfig(trace_layer=True, n_contexts=2, steps=2))
    assert weights_fingerprint(tiny) == before and tiny.hooks.attached_count() == 0


def test_a_clear_peak_with_a_gap_is_the_layer(tiny: LensModel, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _traced_with(tiny, monkeypatch, _clear_peak_at_layer_1())
    assert trace.peak_test("mlp").p_value == 1 / 1024 and trace.gap_test().p_value == 1 / 1024
    assert traced_layer(tiny, REQUEST) == 1


def test_layer_and_trace_layer_together_are_refused(tiny: LensModel) -> None:
    with pytest.raises(ValueError, match="give one of them"):
        rome_edit(tiny, REQUEST, ROMEConfig(layer=1, trace_layer=True))

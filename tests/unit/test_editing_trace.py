"""ROME's layer choice by causal tracing: the documented one-way use of circuits from editing,
and its refusal of a peak within noise."""

from __future__ import annotations

import types

import pytest

from lmsci_mi import LensModel
from lmsci_mi.circuits import TraceConfig, causal_trace
from lmsci_mi.editing import EditRequest, ROMEConfig, rome_edit
from lmsci_mi.editing.rome import traced_layer
from tests.conftest import weights_fingerprint

REQUEST = EditRequest("{} is located in the city of", "The Eiffel Tower", " Rome", " Paris")


def test_a_peak_within_noise_is_refused_and_nothing_is_edited(tiny: LensModel) -> None:
    """The random model's trace has no real peak: its best layer is within 2 s.e. of noise."""
    trace = causal_trace(tiny, REQUEST.rewrite_prompt, REQUEST.subject, TraceConfig(kinds=("mlp",)))
    layer, effect, error = trace.peak_effect("mlp")
    assert layer == trace.peak_layer("mlp") and effect <= 2 * error
    before = weights_fingerprint(tiny)
    with pytest.raises(ValueError, match=r"no MLP peak above noise.*give a layer"):
        rome_edit(tiny, REQUEST, ROMEConfig(trace_layer=True, n_contexts=2, steps=2))
    assert weights_fingerprint(tiny) == before and tiny.hooks.attached_count() == 0


def test_a_clear_peak_is_the_layer(tiny: LensModel, monkeypatch: pytest.MonkeyPatch) -> None:
    import lmsci_mi.circuits

    def fake_trace(lm, prompt, subject, config):
        return types.SimpleNamespace(peak_effect=lambda kind: (1, 0.4, 0.05), target=" Paris")

    monkeypatch.setattr(lmsci_mi.circuits, "causal_trace", fake_trace)
    assert traced_layer(tiny, REQUEST) == 1


def test_layer_and_trace_layer_together_are_refused(tiny: LensModel) -> None:
    with pytest.raises(ValueError, match="give one of them"):
        rome_edit(tiny, REQUEST, ROMEConfig(layer=1, trace_layer=True))

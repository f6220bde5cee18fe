"""ROME's layer choice by causal tracing: the documented one-way use of circuits from editing."""

from __future__ import annotations

from lmsci_mi import LensModel
from lmsci_mi.circuits import TraceConfig, causal_trace
from lmsci_mi.editing import EditRequest
from lmsci_mi.editing.rome import traced_layer


def test_traced_layer_is_the_mlp_peak_of_the_trace(tiny: LensModel) -> None:
    request = EditRequest("{} is located in the city of", "The Eiffel Tower", " Rome", " Paris")
    trace = causal_trace(tiny, request.rewrite_prompt, request.subject, TraceConfig(kinds=("mlp",)))
    assert traced_layer(tiny, request) == trace.peak_layer("mlp")
    assert tiny.hooks.attached_count() == 0

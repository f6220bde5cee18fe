"""Visualisation helpers: matplotlib plots of results, circuitsvis views inline or saved offline,
and the interactive circuit viewer.

The ground floor: these draw tensors and results they are given and run no model. Attention views
of a model's heads are :func:`lmsci_mi.circuits.attention.attention_html`; the report page is
:mod:`lmsci_mi.cli.report`.
"""

from typing import Any

from lmsci_mi.viz.attention import attention_patterns_html as attention_patterns_html
from lmsci_mi.viz.attention import attention_view as attention_view
from lmsci_mi.viz.circuit_viewer import CircuitViewer as CircuitViewer
from lmsci_mi.viz.circuit_viewer import circuit_viewer as circuit_viewer
from lmsci_mi.viz.plots import plot_curves as plot_curves
from lmsci_mi.viz.plots import plot_tensor as plot_tensor
from lmsci_mi.viz.plots import save_figure as save_figure

__all__ = [
    "CircuitViewer",
    "attention_patterns_html",
    "attention_view",
    "circuit_viewer",
    "plot_curves",
    "plot_tensor",
    "save_figure",
]


def __getattr__(name: str) -> Any:
    """Names that moved: ``attention_html`` and ``save_attention_html`` run the model, so they
    live in :mod:`lmsci_mi.circuits.attention` (no alias here: viz never imports circuits)."""
    if name in ("attention_html", "save_attention_html"):
        raise AttributeError(f"lmsci_mi.viz.{name} moved: use lmsci_mi.circuits.attention.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

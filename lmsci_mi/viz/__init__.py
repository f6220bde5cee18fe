"""Visualisation helpers: matplotlib plots of results, and circuitsvis views saved offline.

The ground floor: these draw tensors and results they are given and run no model. Attention views
of a model's heads are :func:`lmsci_mi.circuits.attention.attention_html`; the report page is
:mod:`lmsci_mi.cli.report`.
"""

import warnings
from typing import Any

from lmsci_mi.viz.attention import attention_patterns_html as attention_patterns_html
from lmsci_mi.viz.plots import plot_curves as plot_curves
from lmsci_mi.viz.plots import plot_tensor as plot_tensor
from lmsci_mi.viz.plots import save_figure as save_figure

__all__ = [
    "attention_patterns_html",
    "plot_curves",
    "plot_tensor",
    "save_figure",
]


def __getattr__(name: str) -> Any:
    """Deprecated names: ``attention_html`` and ``save_attention_html`` run the model, so they
    moved to :mod:`lmsci_mi.circuits.attention`."""
    if name not in ("attention_html", "save_attention_html"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"lmsci_mi.viz.{name} is deprecated: use lmsci_mi.circuits.attention.{name}",
        DeprecationWarning,
        stacklevel=2,
    )
    # A deprecated alias (tests/unit/test_import_layers.py lists it); it goes with it.
    from lmsci_mi.circuits import attention

    return getattr(attention, name)

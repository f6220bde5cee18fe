"""Visualisation helpers: matplotlib plots of results, and circuitsvis views saved offline."""

from lmsci_mi.viz.attention import attention_html as attention_html
from lmsci_mi.viz.attention import save_attention_html as save_attention_html
from lmsci_mi.viz.plots import plot_curves as plot_curves
from lmsci_mi.viz.plots import plot_tensor as plot_tensor
from lmsci_mi.viz.plots import save_figure as save_figure

__all__ = [
    "attention_html",
    "plot_curves",
    "plot_tensor",
    "save_attention_html",
    "save_figure",
]

"""Attention patterns drawn as circuitsvis views: inline in a notebook cell, or a self-contained page.

circuitsvis's ``str()`` of a view loads its JavaScript from a CDN, which a saved page would need
at viewing time; only ``RenderedHTML.local_src`` inlines the script. Everything here uses
``local_src``, so a saved page opens on a machine with no network; :func:`attention_view` drops
the bundle from the view so that a notebook carries it once (:mod:`.circuitsvis_inline`), not in
every cell and not in a file beside the notebook. This module draws patterns it
is given; running the model to get them is :func:`lmsci_mi.circuits.attention.head_patterns`
(and :func:`~lmsci_mi.circuits.attention.attention_html` does both).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jaxtyping import Float
from torch import Tensor

from lmsci_mi.errors import UserInputError
from lmsci_mi.viz.circuitsvis_inline import CircuitsView

__all__ = ["attention_patterns_html", "attention_view"]


def attention_patterns_html(
    patterns: Float[Tensor, "head q k"],
    tokens: Sequence[str],
    head_names: Sequence[str],
) -> str:
    """A self-contained HTML page (script inlined) of attention patterns, one tab per head.

    Args:
        patterns: one ``[query, key]`` pattern per head.
        tokens: the sequence's token labels (``len(tokens)`` queries and keys).
        head_names: one label per pattern, e.g. ``"L5.H1"``.

    Returns:
        The HTML source (circuitsvis ``attention_heads`` view, ``local_src``).

    Raises:
        ValueError: as many names or tokens as the patterns do not have.

    >>> import torch
    >>> page = attention_patterns_html(torch.eye(3)[None], ["a", "b", "c"], ["L0.H0"])
    >>> "L0.H0" in page and "cdn" not in page.lower()
    True
    """
    from circuitsvis.attention import attention_heads

    if patterns.ndim != 3 or len(head_names) != patterns.shape[0]:
        raise UserInputError(
            f"{len(head_names)} head names for patterns of shape {tuple(patterns.shape)}: give "
            "[head, query, key] patterns and one name per head"
        )
    if not (patterns.shape[1] == patterns.shape[2] == len(tokens)):
        raise UserInputError(f"{len(tokens)} tokens for patterns over {patterns.shape[-1]} positions")
    rendered = attention_heads(
        attention=patterns.float().cpu(), tokens=list(tokens), attention_head_names=list(head_names)
    )
    return rendered.local_src


def attention_view(
    patterns: Float[Tensor, "head q k"],
    tokens: Sequence[str],
    head_names: Sequence[str],
    *,
    caption: str = "",
) -> CircuitsView:
    """The view of :func:`attention_patterns_html`, inline: a notebook cell shows it, with
    circuitsvis's script bundle included once per notebook (not per cell, and no file beside the
    notebook), so it renders in any front end and in an exported HTML file.

    >>> import torch
    >>> view = attention_view(torch.eye(3)[None], ["a", "b", "c"], ["L0.H0"])
    >>> view.element, "var CircuitsVis" in view.html()
    ('AttentionHeads', False)
    """
    return CircuitsView.from_html(attention_patterns_html(patterns, tokens, head_names), caption)


_MOVED = ("attention_html", "head_patterns", "parse_heads", "save_attention_html")


def __getattr__(name: str) -> Any:
    """Names that moved: running the model is :mod:`lmsci_mi.circuits.attention`'s (no alias
    here: viz never imports circuits)."""
    if name in _MOVED:
        raise AttributeError(f"lmsci_mi.viz.attention.{name} moved: use lmsci_mi.circuits.attention.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""circuitsvis views inline in a notebook cell or a page, with the 1.3 MB script bundle once.

circuitsvis's ``str()`` of a view loads its script from a CDN, and its ``local_src`` inlines the
whole bundle in every view. A :class:`CircuitsView` is a view without the bundle: a page (the
report) carries one copy for all its views, and in a notebook the first view a kernel shows
carries it (again when the cell that carried it runs again); later views find it on the page.
A view whose script runs before the bundle's (cells run out of order, then exported) waits in a
queue that the bundle empties, so the views render in any front end and in an exported file.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from lmsci_mi.viz.result_html import esc as _esc
from lmsci_mi.viz.result_html import html_page, save_page

__all__ = ["CircuitsView", "bundle_html", "circuitsvis_bundle", "include_bundle_again"]

_RENDER_CALL = re.compile(
    r'CircuitsVis\.render\(\s*"(?P<id>[^"]+)",\s*CircuitsVis\.(?P<element>\w+),\s*(?P<props>.*)\)\s*'
    r"</script>",
    re.DOTALL,
)

_QUEUE = "lmsciCircuitsVisQueue"
"""The page's list of views waiting for the bundle (a global of the page)."""

_MISSING = (
    "The circuitsvis script is not on this page: the output of the cell that carried it was "
    "cleared. Run lmsci_mi.viz.circuitsvis_inline.include_bundle_again(), then this cell again."
)


@dataclass(frozen=True)
class CircuitsView:
    """One circuitsvis view (an attention pattern, coloured tokens) without its script bundle.

    In a notebook cell it shows itself (``_repr_html_``, the bundle included once per notebook);
    :meth:`html` is its fragment for a page that has :func:`bundle_html`; :meth:`save` writes a
    page of its own.

    Attributes:
        element: the circuitsvis React element, e.g. ``"AttentionHeads"``, ``"ColoredTokens"``.
        props: its properties as JSON text (circuitsvis's own conversion of the arrays).
        caption: a line shown above the view.
    """

    element: str
    props: str
    caption: str = ""

    @classmethod
    def from_html(cls, local_src: str, caption: str = "") -> CircuitsView:
        """The view of a circuitsvis ``RenderedHTML.local_src`` (or a page containing one), its
        inlined bundle dropped.

        Raises:
            ValueError: no circuitsvis render call in ``local_src``, or props that are not JSON.

        >>> from circuitsvis.tokens import colored_tokens
        >>> view = CircuitsView.from_html(colored_tokens(["a", "b"], [0.5, -1.0]).local_src)
        >>> view.element, len(view.props) < 1000
        ('ColoredTokens', True)
        """
        start = local_src.rfind("CircuitsVis.render(")
        match = _RENDER_CALL.search(local_src, start) if start >= 0 else None
        if match is None:
            raise ValueError("not a circuitsvis view: no CircuitsVis.render(...) call in the HTML")
        props = match.group("props").strip()
        json.loads(props)  # circuitsvis writes JSON; anything else would run as script here
        return cls(match.group("element"), props, caption)

    def html(self, element_id: str | None = None) -> str:
        """The view's fragment: it draws once the page's bundle (:func:`bundle_html`, before or
        after it) has run, and says so in the page if no bundle ever comes."""
        uid = element_id or f"cv-{uuid.uuid4().hex[:12]}"
        caption = f"<p class='caption'>{_esc(self.caption)}</p>" if self.caption else ""
        # A props text cannot end the script early: JSON escapes nothing in "</", so do it here.
        props = self.props.replace("</", "<\\/")
        return (
            f"<div class='view'>{caption}<p class='note' id='{uid}-missing' hidden>{_MISSING}</p>"
            f"<div id='{uid}'></div><script>(function () {{"
            f"var draw = function () {{ var note = document.getElementById('{uid}-missing');"
            f" if (note) note.remove(); CircuitsVis.render('{uid}', CircuitsVis.{self.element}, {props}); }};"
            f" if (window.CircuitsVis) {{ draw(); return; }}"
            f" (window.{_QUEUE} = window.{_QUEUE} || []).push(draw);"
            " var check = function () { if (!window.CircuitsVis) {"
            f" var note = document.getElementById('{uid}-missing'); if (note) note.hidden = false; }} }};"
            " if (document.readyState === 'complete') setTimeout(check, 2000);"
            " else window.addEventListener('load', function () { setTimeout(check, 0); });"
            "})();</script></div>"
        )

    def page(self) -> str:
        """A self-contained page of the view (the bundle inlined; it opens with no network)."""
        return html_page(bundle_html() + self.html(), title=self.caption or self.element)

    def save(self, path: str | Path) -> Path:
        """Write :meth:`page` to ``path`` (folders are made) and return the path."""
        return save_page(path, self.page())

    def _repr_html_(self) -> str:
        return (bundle_html() if _bundle_needed() else "") + self.html()


@cache
def circuitsvis_bundle() -> str:
    """circuitsvis's offline JavaScript bundle (the IIFE that defines ``CircuitsVis``), made safe
    to inline: as circuitsvis's own ``render_local`` does, no closing script tag is left in it."""
    from circuitsvis.utils import render

    source = (Path(render.__file__).parent.parent / "dist" / "cdn" / "iife.js").read_text(
        encoding="utf-8"
    )
    return source.replace("</script>", "").replace("</script", "<\\/script")


def bundle_html() -> str:
    """The bundle as a ``<script>`` element that also draws the views waiting for it."""
    return (
        f"<script>{circuitsvis_bundle()}\n;(function () {{ window.CircuitsVis = CircuitsVis;"
        f" var waiting = window.{_QUEUE} || []; window.{_QUEUE} = [];"
        " waiting.forEach(function (draw) { draw(); }); })();</script>"
    )


# ---------------------------------------------------------------------- once per notebook

_carrier: dict[str, Any] = {}
"""Where the bundle was last shown in this kernel: the cell id and the request that ran it."""


def include_bundle_again() -> None:
    """Make the next view shown in this kernel carry the bundle (after its carrier's output was
    cleared, in a front end that does not say which cell runs)."""
    _carrier.clear()


def _bundle_needed() -> bool:
    """Whether a view shown now must carry the bundle: always outside a notebook kernel; in one,
    the first time, and when the cell that carried it runs again (its output is replaced)."""
    shell = _shell()
    if shell is None:
        return True
    cell, request = _running(shell)
    if _carrier and not (
        cell is not None and cell == _carrier["cell"] and request != _carrier["request"]
    ):
        return False
    _carrier.update(cell=cell, request=request)
    return True


def _shell() -> Any:
    import sys

    if "IPython" not in sys.modules:  # never import IPython just to ask
        return None
    from IPython import get_ipython

    shell = get_ipython()
    return shell if shell is not None and hasattr(shell, "kernel") else None


def _running(shell: Any) -> tuple[str | None, object]:
    """The running cell's id (JupyterLab, Notebook 7 and VS Code send it) and its request."""
    try:
        parent = shell.kernel.get_parent() or {}
    except Exception:  # an older or another kernel: no cell ids, one bundle per kernel
        parent = {}
    cell = (parent.get("metadata") or {}).get("cellId")
    request = (parent.get("header") or {}).get("msg_id") or getattr(shell, "execution_count", None)
    return cell, request

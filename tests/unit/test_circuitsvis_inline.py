"""circuitsvis views inline: the script bundle once per notebook (again when the cell that carried
it runs again), views that wait for a bundle that comes later on the page, and (slow, in headless
Chromium) an executed notebook's views rendering from its exported outputs, in any cell order."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from headless_chromium import chromium_or_skip, dump_dom

from lmsci_mi.viz import circuitsvis_inline
from lmsci_mi.viz.attention import attention_view
from lmsci_mi.viz.circuitsvis_inline import include_bundle_again

BUNDLE = "var CircuitsVis="


def _view() -> circuitsvis_inline.CircuitsView:
    return attention_view(torch.eye(3)[None], ["a", "b", "c"], ["L0.H0"], caption="one head")


class _Kernel:
    """A kernel whose running request is whatever the test says."""

    def __init__(self) -> None:
        self.parent: dict[str, Any] = {}

    def run(self, cell: str | None, request: str) -> None:
        self.parent = {"header": {"msg_id": request}, "metadata": {"cellId": cell} if cell else {}}

    def get_parent(self) -> dict[str, Any]:
        return self.parent


def test_a_notebook_carries_the_bundle_once(monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = _Kernel()
    monkeypatch.setattr(circuitsvis_inline, "_shell", lambda: SimpleNamespace(kernel=kernel))
    monkeypatch.setattr(circuitsvis_inline, "_carrier", {})
    view = _view()

    def shown(cell: str | None, request: str) -> int:
        kernel.run(cell, request)
        return view._repr_html_().count(BUNDLE)

    assert shown("A", "r1") == 1  # the first view of the kernel
    assert view._repr_html_().count(BUNDLE) == 0  # a second view in the same run of cell A
    assert shown("B", "r2") == 0  # another cell
    assert shown("A", "r3") == 1  # cell A again: its old output (and bundle) is replaced
    assert shown("B", "r4") == 0
    include_bundle_again()
    assert shown(None, "r5") == 1  # a front end without cell ids: once per kernel
    assert shown(None, "r6") == 0


def test_outside_a_kernel_every_view_carries_the_bundle() -> None:
    view = _view()
    assert view._repr_html_().count(BUNDLE) == 1
    assert view.html().count(BUNDLE) == 0 and "one head" in view.html()
    assert view.page().count(BUNDLE) == 1
    # The bundle's text names addresses (React's error pages) but loads none.
    assert not re.search(r"""\b(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", view.page())


@pytest.mark.slow  # starts a browser: seconds
@pytest.mark.chromium
def test_a_notebooks_views_render_from_its_exported_outputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three cells' outputs, as a kernel makes them (a real kernel's are checked by the notebook
    tests: tests/integration/test_examples.py), exported in any order."""
    chromium = chromium_or_skip()
    kernel = _Kernel()
    monkeypatch.setattr(circuitsvis_inline, "_shell", lambda: SimpleNamespace(kernel=kernel))
    monkeypatch.setattr(circuitsvis_inline, "_carrier", {})
    outputs = []
    for n in (3, 4, 5):
        kernel.run(f"cell{n}", f"request{n}")
        view = attention_view(torch.eye(n)[None], list("abcdefgh"[:n]), ["L0.H0"])
        outputs.append(view._repr_html_())
    assert [o.count(BUNDLE) for o in outputs] == [1, 0, 0]

    def rendered(order: list[int], name: str) -> str:
        """The page's DOM after its scripts ran, its bundle's text left out (the bundle itself
        names "Head Selector")."""
        body = "".join(f"<div class='cell'>{outputs[i]}</div>" for i in order)
        page = tmp_path / name
        page.write_text(f"<!DOCTYPE html><html><body>{body}</body></html>", encoding="utf-8")
        return dump_dom(chromium, page).replace(circuitsvis_inline.circuitsvis_bundle(), "")

    # An export in document order, and one where the bundle's cell comes last (run out of order).
    for order in ([0, 1, 2], [1, 2, 0]):
        dom = rendered(order, f"export-{order[0]}.html")
        assert dom.count("Head Selector") == 3, order
        assert len(re.findall(r'-missing" hidden', dom)) == 0  # the notes are gone
    # With the bundle's output cleared, the views say why they are empty and what to do.
    dom = rendered([1, 2], "cleared.html")
    assert dom.count("Head Selector") == 0 and dom.count("include_bundle_again()") == 2
    assert len(re.findall(r'id="[^"]+-missing">', dom)) == 2  # shown: no `hidden` attribute

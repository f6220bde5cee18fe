"""Every result type shows itself in a notebook: a short repr, and HTML with its plot (an inlined
PNG), its largest numbers and its meta, fetching nothing; and examples/results.ipynb, which
displays one result of each type, runs and shows each."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import sys
from pathlib import Path
from types import ModuleType

import nbformat
import pytest

from lmsci_mi.results import _RESULT_TYPES, Result

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
REMOTE = re.compile(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", re.IGNORECASE)


@functools.cache
def _gallery() -> ModuleType:
    spec = importlib.util.spec_from_file_location("result_gallery", EXAMPLES / "result_gallery.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if "__pycache__" not in p.parts}


def _check_html(page: str, kind: str) -> None:
    # An interactive view (a circuit's viewer, script inlined) stands in for the plot.
    interactive = "class='lmsci-cv'" in page
    assert interactive or ("<img" in page and "data:image/png;base64," in page), (
        f"{kind}: no inlined plot"
    )
    assert "No plot:" not in page, f"{kind}: its plot failed"
    assert "<table" in page and "No table:" not in page, f"{kind}: no table"
    assert "<details><summary>Meta</summary>" in page, f"{kind}: no meta"
    assert "http://" not in page and "https://" not in page, f"{kind}: a network resource"
    assert not REMOTE.search(page.split("base64,")[0]), f"{kind}: a network resource"


@functools.cache
def _toy() -> object:
    """One toy for every builder, as the notebook has one ``lm`` for every cell (a toy's load reads
    its tokenizer twice, about 1 s: once per type was the file's largest cost)."""
    return _gallery().toy()


@functools.cache
def _built(kind: str) -> Result:
    """The gallery's result of type ``kind``, built once for this file's tests: the repr test and
    the page test read the same result (the whole suite built each type twice, 25 s)."""
    return _gallery().BUILDERS[kind](_toy())


def _library_types() -> set[str]:
    """The result types lmsci-mi registers (tests may register their own)."""
    _gallery()  # imports every module that defines one
    return {
        name
        for name, cls in _RESULT_TYPES.items()
        if name != "Result" and cls.__module__.startswith("lmsci_mi.")
    }


def test_the_gallery_has_every_registered_result_type() -> None:
    assert set(_gallery().BUILDERS) == _library_types()


# Building these takes seconds (a CFG model and its probes); the notebook test covers them too.
_SLOW_TO_BUILD = {"CFGProbeTable", "CFGAttentionTransitions"}


def _kinds(*, slow: set[str]) -> list:
    return [
        pytest.param(kind, marks=[pytest.mark.slow] if kind in slow else [])
        for kind in sorted(_gallery().BUILDERS)
    ]


@pytest.mark.parametrize("kind", _kinds(slow=_SLOW_TO_BUILD))
def test_every_result_type_has_a_short_repr_and_a_summary(kind: str) -> None:
    result = _built(kind)
    assert type(result).__name__ == kind
    shown = repr(result)
    assert shown.startswith(f"<{kind} on ") and len(shown) < 200 and "tensor(" not in shown
    assert result.summary(rows=3).strip(), kind


# Rendering a plot to PNG takes 0.4-1.5 s a type, 30 s for all of them: the fast suite renders one,
# the whole suite each, and the notebook test below checks every type's page again.
@pytest.mark.parametrize("kind", _kinds(slow=set(_gallery().BUILDERS) - {"CausalTrace"}))
def test_every_result_type_renders_html_offline(kind: str) -> None:
    import matplotlib.pyplot as plt

    result = _built(kind)
    _check_html(result._repr_html_(), kind)
    assert not plt.get_fignums(), (
        "a plot left a pyplot figure open (a notebook would draw it twice)"
    )


@pytest.mark.slow
def test_the_results_notebook_shows_every_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nbclient import NotebookClient

    root = str(EXAMPLES.parent)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    nb = nbformat.read(EXAMPLES / "results.ipynb", as_version=4)
    before = _files(EXAMPLES)
    NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    # The checks tests/integration/test_examples.py makes of every other notebook (this one runs
    # only here): it writes nothing into examples/, and no cell carries the 1.3 MB circuitsvis
    # bundle.
    assert _files(EXAMPLES) == before, "results.ipynb wrote into examples/"
    sizes = [len(nbformat.writes(nbformat.v4.new_notebook(cells=[cell]))) for cell in nb.cells]
    assert max(sizes) < 500_000, (max(sizes), sizes.index(max(sizes)))
    shown = []
    for cell in nb.cells[2:]:
        if cell.cell_type != "code":
            continue
        outputs = [o for o in cell.outputs if o.output_type == "execute_result"]
        assert outputs, f"cell shows nothing:\n{cell.source[:200]}"
        page = outputs[-1]["data"].get("text/html", "")
        kind = re.search(r"<span class='kind'>(\w+)</span>", page)
        assert kind is not None, f"no result view:\n{cell.source[:200]}"
        _check_html(page, kind.group(1))
        assert not any("image/png" in o.get("data", {}) for o in cell.outputs), "plot drawn twice"
        shown.append(kind.group(1))
    assert sorted(shown) == sorted(_library_types())

"""Every example script and notebook in examples/ runs to the end, offline, in quick mode.

The scripts and notebooks are discovered from the folder, so a new one is tested without touching
this file. Each runs in a temporary folder (its outputs never land in the repository) with
``LMSCI_MI_QUICK=1`` on the bundled SmolLM2: scripts in a fresh process forked from one that has
imported lmsci-mi (tests/warm_python.py), notebooks with nbclient on a kernel of this
interpreter. The fast checks at the end keep make_notebooks.py and the saved notebooks in step.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import nbformat
import pytest

from lmsci_mi.config import QUICK_ENV
from tests.warm_python import WarmPython

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
GENERATOR = "make_notebooks.py"
SCRIPTS = sorted(p for p in EXAMPLES.glob("*.py") if p.name != GENERATOR)
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))
RUN_ELSEWHERE = {"results.ipynb": "tests/unit/test_results_notebook.py"}
"""Notebooks that another test runs with these checks and its own (a second run cost 25 s)."""
RUN_HERE = [notebook for notebook in NOTEBOOKS if notebook.name not in RUN_ELSEWHERE]


def _quick_env() -> dict[str, str]:
    """Quick, offline, and importing this checkout's lmsci_mi (not another editable install)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {
        QUICK_ENV: "1",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": path,
        "TRANSFORMERS_VERBOSITY": "error",
    }


def _files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if "__pycache__" not in p.parts}


@functools.cache
def _generator() -> ModuleType:
    """examples/make_notebooks.py, imported (it is not in a package)."""
    spec = importlib.util.spec_from_file_location("make_notebooks", EXAMPLES / GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass resolves annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def warm_python() -> Iterator[WarmPython]:
    """One interpreter with lmsci-mi imported, forked afresh for each script (a cold start costs
    6-7 s of imports a script; tests/warm_python.py says what a child shares)."""
    with WarmPython({**os.environ, **_quick_env()}) as python:
        yield python


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_example_script_runs(script: Path, tmp_path: Path, warm_python: WarmPython) -> None:
    before = _files(EXAMPLES)
    proc = warm_python.run(script, cwd=tmp_path, env={**os.environ, **_quick_env()}, timeout=600)
    assert proc.returncode == 0, (
        f"{script.name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    )
    assert proc.stdout.strip(), f"{script.name} printed nothing"
    assert _files(EXAMPLES) == before, f"{script.name} wrote into examples/"


@pytest.mark.slow
@pytest.mark.parametrize("notebook", RUN_HERE, ids=lambda p: p.name)
def test_notebook_runs(notebook: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nbclient import NotebookClient

    for name, value in _quick_env().items():
        monkeypatch.setenv(name, value)  # the kernel inherits this process's environment
    nb = nbformat.read(notebook, as_version=4)
    before = _files(EXAMPLES)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    errors = [
        out for cell in nb.cells for out in cell.get("outputs", []) if out.output_type == "error"
    ]
    assert not errors, errors
    assert _files(EXAMPLES) == before, f"{notebook.name} wrote into examples/"
    # Attention views render inline, and the circuitsvis bundle (1.3 MB) comes once per notebook,
    # in the first view's output, never per view: no other cell's output comes near its size. (A
    # bound on the whole notebook grew tight as the results gallery gained types of some 50-110 kB
    # each, and would let a bundle through in a short notebook.)
    texts = [nbformat.writes(nbformat.v4.new_notebook(cells=[cell])) for cell in nb.cells]
    carriers = [i for i, text in enumerate(texts) if "var CircuitsVis=" in text]
    assert len(carriers) <= 1, f"the circuitsvis bundle in cells {carriers}"
    sizes = [len(text) for i, text in enumerate(texts) if i not in carriers]
    assert max(sizes) < 500_000, (max(sizes), sizes.index(max(sizes)))


def test_every_story_has_a_script_and_a_notebook() -> None:
    for story in _generator().NOTEBOOKS:
        if story.cells is None:
            assert story.pending, f"{story.name}: a story without cells must say who brings them"
            continue
        assert (EXAMPLES / f"{story.name}.ipynb") in NOTEBOOKS, (
            f"run make_notebooks.py for {story.name}"
        )
        assert story.script is not None and (EXAMPLES / story.script) in SCRIPTS, story.name


def test_saved_notebooks_match_their_cells() -> None:
    """A notebook edited by hand (or a cell list changed without regenerating) fails here."""
    generator = _generator()
    stories = {story.name: story for story in generator.NOTEBOOKS if story.cells is not None}
    for path in NOTEBOOKS:
        assert path.stem in stories, f"{path.name} has no entry in {GENERATOR}'s NOTEBOOKS"
        saved = [cell.source for cell in nbformat.read(path, as_version=4).cells]
        assert saved == [src for _, src in stories[path.stem].cells], f"regenerate {path.name}"

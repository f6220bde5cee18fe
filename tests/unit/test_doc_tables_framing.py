"""The published EAP/EAP-IG reference comes from one released file, read as the paper's plots read
it; the pages that set a measured figure beside a paper's name the quantised weights. Reads JSON
only (no model)."""

from __future__ import annotations

import functools
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "data"

CSV = """baseline,corrupted_baseline,edges,edges_EAP,loss_EAP,edges_EAP-IG,loss_EAP-IG
4.0,0.0,100,90,0.0,95,1.0
4.0,0.0,200,180,2.0,190,3.0
"""


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@functools.cache
def _renderers() -> dict:
    return _load("doc_tables_script_framing", ROOT / "scripts" / "doc_tables.py")._renderers()


def test_the_released_loss_is_normalised_as_the_papers_plots_do() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        script = _load("published_eap_ig_script", ROOT / "benchmarks" / "published_eap_ig.py")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    clean, corrupted, rows = script.read_rows(CSV)
    assert (clean, corrupted) == (4.0, 0.0)
    assert rows[1]["edges"] == {"EAP": 180, "EAP-IG": 190}
    assert rows[1]["faithfulness"] == {"EAP": 0.5, "EAP-IG": 0.75}


def test_the_published_eap_row_quotes_one_file_from_its_data() -> None:
    published = json.loads((DATA / "published_eap_ig.json").read_text())
    assert published["path"] == "results/pareto/gpt2/csv/ioi.csv" and len(published["commit"]) == 40
    table = _renderers()["published_eap_ig"](published)
    assert "results/real" not in table
    published["rows"][-1]["faithfulness"]["EAP-IG"] = 0.987
    assert "0.99 |" in _renderers()["published_eap_ig"](published).split("\n")[-1]


def test_the_readme_states_the_weights_and_the_heads_share() -> None:
    readme = (ROOT / "README.md").read_text()
    cards = json.loads((DATA / "model_cards.json").read_text())["models"]
    assert cards["smollm2-135m"]["framing"] in readme
    edges = json.loads((DATA / "edges.json").read_text())
    assert f"holds {len(edges['eap_ig_5pct']['heads'])} of the 270 heads" in readme
    assert "results/real/gpt2" not in readme

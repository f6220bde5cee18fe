"""The README's published-vs-measured table and the IOI, AIE and probe-task tables follow their data
files: a changed figure in the data changes the page, and what the data decide (which methods ran,
how far, which seed is lowest) is read, not typed. Reads JSON only."""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "data"


def _published_files() -> list[str]:
    """The data files the README's published-vs-measured block names, in its order."""
    found = re.search(r"<!-- table: published_vs_measured from (.*?) \(written by", (ROOT / "README.md").read_text())
    assert found, "README.md has no published_vs_measured block"
    return [Path(name.strip()).stem for name in found.group(1).split(",")]


@functools.cache
def _renderers() -> dict:
    spec = importlib.util.spec_from_file_location("doc_tables_script_readme", ROOT / "scripts" / "doc_tables.py")
    assert spec is not None and spec.loader is not None
    module: ModuleType = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module._renderers()


def _docs() -> dict:
    return {name: json.loads((DATA / f"{name}.json").read_text()) for name in _published_files()}


def _row(table: str, start: str) -> str:
    return next(line for line in table.split("\n") if line.startswith(f"| {start}"))


def test_the_published_table_reads_its_figures_from_the_data() -> None:
    docs = _docs()
    render = _renderers()["published_vs_measured"]
    docs["ioi"]["summary"]["logit_diff"]["mean"] = 9.87
    assert "9.87 ± " in _row(render(docs), "IOI logit difference")
    # The lowest-faithfulness remark follows the data, whichever seed it is.
    docs["ioi"]["summary"]["faithfulness"]["min"] = docs["ioi"]["runs"][0]["faithfulness"]
    assert "seed 0 the lowest" in _row(render(docs), "IOI circuit")


def test_the_sequential_row_follows_how_far_each_method_ran() -> None:
    docs = _docs()
    render = _renderers()["published_vs_measured"]
    methods = docs["sequential_editing"]["methods"]
    common = min(max(m["n_edited"]) for m in methods.values())
    assert f"after {common} edits" in _row(render(docs), "Sequential editing")
    finished = copy.deepcopy(docs)
    for m in finished["sequential_editing"]["methods"].values():
        m["complete"] = True
    assert "still to run" not in _row(render(finished), "Sequential editing")


def test_the_batch_row_names_every_method_of_the_editing_table() -> None:
    docs = _docs()
    render = _renderers()["published_vs_measured"]
    rows = docs["editing_table"]["rows"]
    rome = copy.deepcopy(next(r for r in rows if r["model"] != "unedited"))
    rome.update(model="rome", n_edits=rome["n_facts"])
    rows.append(rome)
    line = _row(render(docs), "MEMIT, AlphaEdit and ROME")
    assert "ROME (one fact at a time)" in line


def test_ioi_classes_and_aie_runs_render_from_their_files() -> None:
    ioi = json.loads((DATA / "ioi.json").read_text())
    table = _renderers()["ioi_classes"](ioi)
    first = ioi["runs"][0]["heads"][0]
    assert first["head"] in _row(table, "name movers")
    aie = json.loads((DATA / "aie.json").read_text())
    runs = _renderers()["aie_runs"](aie)
    assert _row(runs, "smollm2-str").endswith(f"| {aie['smollm2-str']['seconds_per_fact']:.1f} |")


def test_probe_tasks_count_their_examples() -> None:
    probes = json.loads((DATA / "probes.json").read_text())
    table = _renderers()["probes_tasks"](probes)
    t = probes["tasks"]["country"]
    assert f"{t['n_train'] + t['n_val'] + t['n_test']:,} ({t['n_train']:,} / " in _row(table, "`country`")

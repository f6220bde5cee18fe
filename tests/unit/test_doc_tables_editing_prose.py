"""docs/editing.md's prose under the cost and sweep tables is generated from the data files: a
changed figure changes the sentence, and what the data decide (whether a target is met, whether a
fit stopped early, whether a setting beats the default) is read, not typed. Reads JSON only."""

from __future__ import annotations

import copy
import functools
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "data"


@functools.cache
def _renderers() -> dict:
    """The doc-table renderers, imported as the benchmarks import them (benchmarks/ on the path)."""
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    from doc_tables import RENDERERS, editing  # noqa: F401  (editing registers its renderers)

    return RENDERERS


def _load(*names: str) -> dict:
    return {name: json.loads((DATA / f"{name}.json").read_text()) for name in names}


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_the_cost_prose_reads_the_memit_run_and_its_count() -> None:
    docs = _load("editing_speed", "model_cards")
    render = _renderers()["editing_cost_findings"]
    run = docs["editing_speed"]["memit_fits"]["runs"][0]
    ran_all = sum(s == run["config"]["steps"] - 1 for s in run["fit_steps_each"])
    assert f"{ran_all} of the {run['n_facts']} facts ran all" in _flat(render(docs))
    changed = copy.deepcopy(docs)
    changed["editing_speed"]["memit_fits"]["runs"][0]["wall_s"] = 140.0
    text = _flat(render(changed))
    assert "140.0 s, within the 150 s target" in text


def test_the_rome_prose_says_whether_the_paper_fit_stopped_early() -> None:
    speed = _load("editing_speed")["editing_speed"]
    render = _renderers()["editing_rome_findings"]
    assert "it never stopped early" in _flat(render(speed))
    changed = copy.deepcopy(speed)
    paper = next(r for r in changed["rome_fits"]["runs"] if r["config"]["fit"] == "rome")
    paper["steps_each"][0] = 7
    text = _flat(render(changed))
    assert "never stopped early" not in text
    assert "its total-loss stop fired on 1 of the" in text


def test_the_sweep_prose_follows_the_paired_differences() -> None:
    docs = _load("editing_sweeps", "alphaedit")
    render = _renderers()["editing_sweeps_findings"]
    assert "So the default stays 5,000." in _flat(render(docs))
    changed = copy.deepcopy(docs)
    lam = next(r for r in changed["editing_sweeps"]["rows"] if r["changes"].get("mom2_weight") == 1000.0)
    lam["vs_reference"]["S"] = [3.0, 1.0, 5.0]
    text = _flat(render(changed))
    assert "At 1,000 S is 3.0 higher [1.0, 5.0]." in text
    assert "So the default stays" not in text


def test_the_table_prose_reads_the_rows_and_rome_fit() -> None:
    table = _load("editing_table")["editing_table"]
    render = _renderers()
    rows = {row["model"]: row for row in table["rows"]}
    text = _flat(render["editing_table_findings"](table))
    assert f"ES {rows['memit']['metrics']['ES']:.1f} (MEMIT)" in text
    moved = copy.deepcopy(table)
    moved_rows = {row["model"]: row for row in moved["rows"]}
    moved_rows["memit"]["metrics"]["ES"] = 12.3
    moved_rows["alphaedit"]["ci95"]["S"] = [0.0, 1.0]  # apart from MEMIT's: the sentence says so
    changed = _flat(render["editing_table_findings"](moved))
    assert "ES 12.3 (MEMIT)" in changed and "S intervals do not overlap" in changed
    moved["configs"]["rome"] = {"fit": "rome", "n_contexts": 10, "steps": 20}
    assert "the paper's fit (10 prefixes, up to 20 steps)" in _flat(render["editing_table_intro"](moved))


def test_the_messy_prose_counts_two_hop_facts_per_method() -> None:
    table = _load("editing_table")["editing_table"]
    text = _flat(_renderers()["editing_messy_findings"](table))
    n = table["rows"][0]["probe_facts"]["2HOP"]
    hops = {round(r["metrics"]["2HOP"] * n / 100) for r in table["rows"] if r["model"] != "unedited"}
    expected = str(min(hops)) if len(hops) == 1 else f"{min(hops)}–{max(hops)}"
    assert f"{expected} of the {n} two-hop facts" in text

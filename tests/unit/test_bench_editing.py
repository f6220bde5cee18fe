"""The editing benchmarks' own logic on the toy: sequential_editing.py's WILD-EM steps judge the
session's facts and NS's neighbour prompts, its doc table says when WILD-EM is not measured, and
editing.py --speed's partial runs keep the rows they did not time."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from lmsci_mi import LensModel
from lmsci_mi.editing import (
    EditingSession,
    EditRequest,
    EvaluationConfig,
    MEMITConfig,
    SessionConfig,
    StatsConfig,
    WildConfig,
    key_statistics,
)
from lmsci_mi.editing import wild as wild_module
from tests.fixtures import benchmark_script

ROOT = Path(__file__).resolve().parents[2]
SHORT = WildConfig(max_new_tokens=3)
FACTS = [
    EditRequest("{} is in", s, new, true, paraphrase_prompts=(f"The city of {s} is in",),
                neighborhood_prompts=near)
    for s, new, true, near in [
        ("Paris", " Rome", " France", ("Lyon is in", "Berlin and Lyon are in")),  # names Berlin: not NS's
        ("Berlin", " Oslo", " Germany", ("Munich is in",)),
        ("Madrid", " Tokyo", " Spain", ("Seville is in",)),
        ("Vienna", " Lima", " Austria", ("Graz is in",)),
    ]
]


_script = benchmark_script


@pytest.mark.slow  # a session, its WILD generations and a resume: ~5 s, more than the fast part's share
def test_wild_steps_judge_the_sessions_facts_and_ns_prompts(tiny: LensModel, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path / "cache"))
    seq = _script("sequential_editing")
    stats = key_statistics(tiny, [0, 1], StatsConfig(n_tokens=512), cache_dir=tmp_path / "stats")
    probe = seq.wild_probe(tiny, FACTS, 2, SHORT)  # on the unedited model
    assert probe.near == ("Lyon is in", "Munich is in")
    generate = wild_module.generate

    def refuse(*args, **kwargs):
        raise AssertionError("step 0 generated again instead of reading the unedited generations")

    monkeypatch.setattr(wild_module, "generate", refuse)
    zero = probe.step(tiny, 0)
    assert zero["n"] == {"rewrite": 2, "paraphrase": 2, "locality": 2} and zero["k"]["locality"] == 2
    monkeypatch.setattr(wild_module, "generate", generate)
    config = SessionConfig(batch_size=2, evaluation=EvaluationConfig(generation_tokens=0))
    session = EditingSession(tiny, MEMITConfig(layers=(0, 1), steps=2), config, stats=stats)
    try:
        session.run(FACTS[:2])
        saved = json.loads((session.save(tmp_path / "session") / "session.json").read_text())
        assert [p for p, _, _ in saved["neighbours"]] == list(probe.near)  # the prompts NS counts
        session.run(FACTS[2:])
        four = probe.step(tiny, 4)
    finally:
        session.restore()
    assert four["n_edited"] == 4 and four["n"] == {"rewrite": 4, "paraphrase": 4, "locality": 2}
    assert all(0 <= four["k"][m] <= four["n"][m] for m in four["n"])


def test_the_sequential_wild_table_says_what_is_not_measured_yet() -> None:
    seq = _script("sequential_editing")
    from doc_tables.editing import sequential_wild

    # the run before issue 38: 200 edits, no WILD-EM
    data = json.loads((ROOT / "docs" / "data" / "sequential_editing_before_38.json").read_text())
    before = sequential_wild(data).split("\n")
    assert len(before) == 2 + 2 * len(data["methods"]) and before[2].count("not measured yet") == 3
    curve = data["methods"]["memit"]
    steps = [{"k": {"rewrite": n // 2, "paraphrase": 0, "locality": 53}, "n": {"rewrite": n, "paraphrase": 2 * n,
                                                                            "locality": 53}, "seconds": 1.0}
             for n in curve["n_edited"][:-1]]
    seq.add_wild(curve, [*steps, None])  # the last step not judged yet (a --partial write)
    rows = {row.split(" | ")[1]: row for row in sequential_wild(data).split("\n") if row.startswith("| MEMIT")}
    assert "50.0 [40.4, 59.6] (n=100)" in rows["100"] and "100.0 [93.2, 100.0] (n=53)" in rows["100"]
    assert rows["200"].count("not measured yet") == 3


def test_a_partial_speed_run_keeps_the_rows_it_did_not_time() -> None:
    editing = _script("editing")
    flags = {"rome_only": False, "memit_only": False, "alphaedit_only": False}
    assert editing.speed_parts(argparse.Namespace(**flags)) == {"rome", "memit", "alphaedit", "evaluation"}
    both = argparse.Namespace(**{**flags, "memit_only": True, "alphaedit_only": True})
    assert editing.speed_parts(both) == {"memit", "alphaedit"}
    old = ["one ROME edit, layer 4, x", "MEMIT, 50 facts in one batch, x", "MEMIT, 10 facts in one batch, x",
           "AlphaEdit, 50 facts in one batch, x", "evaluation of one fact, x", "… the same, the edit excluded"]
    previous = {"rows": [{"what": w} for w in old]}
    timed = [{"what": "AlphaEdit, 50 facts in one batch, x"}]
    kept = [r["what"] for r in editing.kept_rows(previous, timed, {"alphaedit"})]
    assert kept == [w for w in old if not w.startswith("AlphaEdit")]
    everything = [r["what"] for r in editing.kept_rows(previous, timed, set(editing.SPEED_PARTS))]
    assert everything == ["MEMIT, 50 facts in one batch, x", "MEMIT, 10 facts in one batch, x"]


@pytest.mark.parametrize("name", ["sequential_editing", "editing_wild"])
def test_one_home_for_wild_along_the_sequential_curves(name: str) -> None:
    parser = argparse.ArgumentParser()
    _script(name).add_flags(parser)
    flags = {a.dest for a in parser._actions}
    assert ("no_wild" in flags) == (name == "sequential_editing") and "sequential" not in flags

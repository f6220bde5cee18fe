"""The shipped editing fact set (lmsci_mi/data/edit_facts.json), read without a model: its size,
that every record is a valid request, that no neighbour names an edited subject, that the messy
probes are set consistently, that the header counts the facts, and that the candidates it came
from are deterministic and still produce it."""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from lmsci_mi.data import Fact, edit_facts, load_facts
from lmsci_mi.data.edit_facts import (
    EDIT_FACTS_FILE,
    EDIT_RELATIONS,
    EDIT_RELATIONS_FILE,
    edit_fact_candidates,
)

REVERSE = "reverse_prompt", "reverse_target_new", "reverse_target_true"
TWO_HOP = "two_hop_prompt", "two_hop_target_new", "two_hop_target_true"


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    text = resources.files("lmsci_mi.data").joinpath(EDIT_FACTS_FILE).read_text(encoding="utf-8")
    return json.loads(text)


@pytest.fixture(scope="module")
def facts(document: dict[str, Any]) -> list[dict[str, Any]]:
    return document["facts"]


@pytest.fixture(scope="module")
def candidates() -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["relation"], r["subject"]): r for r in edit_fact_candidates()}


def test_the_set_is_large_and_spans_relations(facts: list[dict[str, Any]]) -> None:
    assert len(facts) >= 250
    assert len({f["relation"] for f in facts}) >= 6
    assert [f.to_dict() for f in load_facts("edit_facts")] == facts


def test_records_have_exactly_the_fact_fields(facts: list[dict[str, Any]]) -> None:
    names = [f.name for f in dataclasses.fields(Fact)]
    assert names == [*edit_facts._FIELDS, "p_true"]
    assert all(list(fact) == names for fact in facts)


def test_every_record_is_a_valid_request(facts: list[dict[str, Any]]) -> None:
    for fact in facts:
        request = Fact.from_dict(fact)
        request.validate()
        # Nothing is respelled on the way in: the targets already carry their leading space.
        assert json.loads(json.dumps(request.to_dict())) == fact
        assert len(fact["paraphrase_prompts"]) >= 2
        assert 2 <= len(fact["neighborhood_prompts"]) <= 5
        assert 0.1 <= fact["p_true"] <= 1
        assert fact["relation"] in EDIT_RELATIONS
    assert [r.subject for r in load_facts("edit_facts")] == [f["subject"] for f in facts]


def test_each_subject_is_edited_once(facts: list[dict[str, Any]]) -> None:
    subjects = [f["subject"] for f in facts]
    assert len(subjects) == len(set(subjects))


def test_no_neighbour_names_an_edited_subject(facts: list[dict[str, Any]]) -> None:
    # The evaluation drops a neighbour prompt containing an edited subject (plain substring, see
    # editing.metrics._kept_neighbours); none may, so any subset can be edited in one run.
    subjects = {f["subject"] for f in facts}
    rewrites = {f["prompt"].format(f["subject"]) for f in facts}
    for fact in facts:
        for prompt in fact["neighborhood_prompts"]:
            assert prompt not in rewrites
            assert not [s for s in subjects if s in prompt], prompt


def test_negated_prompts_negate_the_rewrite(facts: list[dict[str, Any]]) -> None:
    for fact in facts:
        rewrite = fact["prompt"].format(fact["subject"])
        assert fact["negated_prompt"].replace(" not", "", 1) == rewrite


def test_reverse_probes_only_on_one_to_one_relations(facts: list[dict[str, Any]]) -> None:
    one_to_one = {name for name, r in EDIT_RELATIONS.items() if r.reverse}
    for fact in facts:
        fields = [fact[k] for k in REVERSE]
        if not any(fields):
            continue
        assert all(fields), fact["subject"]
        assert fact["relation"] in one_to_one
        template = EDIT_RELATIONS[fact["relation"]].reverse
        assert fact["reverse_prompt"] == template.format(fact["target_new"].strip())
        assert fact["reverse_target_new"] == " " + fact["subject"]
        assert fact["reverse_target_true"] != fact["reverse_target_new"]


def test_two_hop_probes_are_whole_and_differ(facts: list[dict[str, Any]]) -> None:
    for fact in facts:
        fields = [fact[k] for k in TWO_HOP]
        if any(fields):
            assert all(fields), fact["subject"]
            assert EDIT_RELATIONS[fact["relation"]].two_hop
            assert fact["subject"] in fact["two_hop_prompt"]
            assert fact["two_hop_target_new"] != fact["two_hop_target_true"]


def test_other_relations_pair_prompts_with_targets(facts: list[dict[str, Any]]) -> None:
    for fact in facts:
        assert len(fact["other_relation_prompts"]) == len(fact["other_relation_targets"])
        for prompt in fact["other_relation_prompts"]:
            assert fact["subject"] in prompt
            assert prompt != fact["prompt"].format(fact["subject"])


def test_header_counts_the_facts(document: dict[str, Any], facts: list[dict[str, Any]]) -> None:
    assert document["model"] == "smollm2-135m"
    assert document["n_candidates"] == len(edit_fact_candidates())
    counts = edit_facts._counts(facts)
    assert {k: document[k] for k in counts} == counts
    assert sum(document["relations"].values()) == document["n_facts"] == len(facts)
    assert document["messy"]["negated"] == len(facts)


def test_module_docstring_quotes_the_header(document: dict[str, Any]) -> None:
    doc = " ".join(str(edit_facts.__doc__).split())
    messy = document["messy"]
    assert f"{document['n_facts']} facts of {document['n_candidates']} candidates" in doc
    assert f"negated prompts {messy['negated']}, reverse prompts {messy['reverse']}" in doc
    assert f"two-hop prompts {messy['two_hop']}" in doc
    assert (
        f"other-relation prompts for {messy['other_relation']} facts "
        f"({messy['other_relation_prompts']} prompts)"
    ) in doc


def test_the_docs_page_quotes_the_header(document: dict[str, Any]) -> None:
    page = (Path(__file__).parents[2] / "docs" / "editing.md").read_text(encoding="utf-8")
    section = page[page.index("## The editing fact set") :]
    section = section[: section.index("\n## ")]
    assert f"**{document['n_facts']} facts of {document['n_candidates']} candidates**" in section
    for name, count in document["relations"].items():
        assert re.search(rf"\| `{name}` \|[^\n]*\| {count} \|", section), name
    messy = document["messy"]
    for probe, count in (("negated", messy["negated"]), ("reverse", messy["reverse"])):
        assert f"| {probe} | {count} |" in section
    assert f"| two-hop | {messy['two_hop']} |" in section
    other = f"| other relation | {messy['other_relation']} ({messy['other_relation_prompts']} prompts) |"
    assert other in section


def test_shipped_facts_come_from_the_current_candidates(
    facts: list[dict[str, Any]], candidates: dict[tuple[str, str], dict[str, Any]]
) -> None:
    # Editing the tables without rebuilding the file fails here.
    same = ("prompt", "target_new", "target_true", "paraphrase_prompts", "negated_prompt")
    for fact in facts:
        candidate = candidates[fact["relation"], fact["subject"]]
        assert {k: fact[k] for k in same} == {k: candidate[k] for k in same}
        assert set(fact["neighborhood_prompts"]) <= set(candidate["neighborhood_prompts"])
        assert set(fact["other_relation_prompts"]) <= set(candidate["other_relation_prompts"])
        for keys in (REVERSE, TWO_HOP):
            if fact[keys[0]]:
                assert [fact[k] for k in keys] == [candidate[k] for k in keys]


def test_candidates_are_deterministic_and_counterfactual() -> None:
    first, again, other = edit_fact_candidates(), edit_fact_candidates(), edit_fact_candidates(1)
    assert first == again
    assert [r["target_new"] for r in first] != [r["target_new"] for r in other]
    assert len(first) >= 500
    for record in first:
        assert record["target_new"] in EDIT_RELATIONS[record["relation"]].answers
        assert edit_facts._head(record["target_new"]) != edit_facts._head(record["target_true"])


def test_held_out_subjects_are_never_candidates() -> None:
    subjects = edit_facts._candidate_subjects()
    for record in edit_fact_candidates():
        for prompt in record["neighborhood_prompts"]:
            assert not [s for s in subjects if s in prompt], prompt


def test_the_json_is_packaged() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = tomllib.loads(
        (Path(__file__).parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    )
    patterns = pyproject["tool"]["setuptools"]["package-data"]["lmsci_mi"]
    for name in (EDIT_FACTS_FILE, EDIT_RELATIONS_FILE):
        assert any(fnmatch.fnmatch(f"data/{name}", p) for p in patterns), name

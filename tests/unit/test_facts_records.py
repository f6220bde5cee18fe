"""The one fact record and its one loader (lmsci_mi.data.facts): every old fact type and loader
resolves to them, both shipped sets round-trip through a user's JSON file, bad files and records
raise a UserInputError that names the file and the field, and the relation tables read from the
shipped JSON hold what the Python literals held (pinned counts and entries)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from lmsci_mi.data import Fact, load_facts
from lmsci_mi.data.edit_facts import EDIT_RELATIONS, edit_fact_candidates
from lmsci_mi.data.facts import RELATIONS, Relation, candidate_facts
from lmsci_mi.errors import UserInputError


def test_every_old_name_is_the_one_record() -> None:
    from lmsci_mi.circuits import aie
    from lmsci_mi.editing import EditRequest
    from lmsci_mi.editing import load_facts as editing_load_facts

    assert EditRequest is Fact and aie.Fact is Fact and editing_load_facts is load_facts


def test_deprecated_loaders_return_the_typed_records() -> None:
    from lmsci_mi.circuits.aie import load_fact_set
    from lmsci_mi.data import edit_facts, facts
    from lmsci_mi.editing import load_edit_facts, load_requests

    small, edit = load_facts("facts"), load_facts("edit_facts")
    with pytest.warns(DeprecationWarning, match="load_facts"):
        assert facts.load_fact_records() == small
    with pytest.warns(DeprecationWarning, match="load_facts"):
        assert edit_facts.load_edit_fact_records() == edit
    with pytest.warns(DeprecationWarning, match="load_facts"):
        assert load_edit_facts() == edit
    with pytest.warns(DeprecationWarning, match="load_facts"):
        assert load_fact_set("shipped") == small
    with pytest.warns(DeprecationWarning, match="load_facts"):
        assert load_requests(json.dumps([small[0].to_dict()])) == small[:1]
    with pytest.warns(DeprecationWarning, match="Relation"):
        assert edit_facts.EditRelation is Relation


@pytest.mark.parametrize(("name", "count"), [("facts", 109), ("edit_facts", 406)])
def test_shipped_sets_round_trip_through_a_file(tmp_path: Path, name: str, count: int) -> None:
    facts = load_facts(name)
    assert len(facts) == count and all(isinstance(f, Fact) for f in facts)
    assert all(f.p_true is not None and f.target_true and f.target_new for f in facts)
    path = tmp_path / "facts.json"
    path.write_text(json.dumps({"facts": [f.to_dict() for f in facts]}, ensure_ascii=False))
    assert load_facts(path) == facts
    path.write_text(json.dumps([f.to_dict() for f in facts], ensure_ascii=False))
    assert load_facts(str(path)) == facts
    assert load_facts([f.to_dict() for f in facts]) == load_facts(facts) == facts


def test_a_record_reads_the_aie_spelling_and_a_filled_prompt() -> None:
    [fact] = load_facts([{"prompt": "The Eiffel Tower is in", "subject": "Eiffel Tower", "target": "Paris"}])
    assert (fact.prompt, fact.rewrite_prompt) == ("The {} is in", "The Eiffel Tower is in")
    assert (fact.target_true, fact.target_new, fact.p_true) == ("Paris", "", None)  # as written


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "is not a JSON file"),
        (b'{"facts": {"prompt": "x"}}', "give a list of records"),
        (b'{"facts": []}', "is empty"),
        (b'[["Paris is in", "Paris"]]', r"fact 0: a fact is an object"),
        (b'[{"subject": "Paris", "target_true": " France"}]', r"fact 0: 'prompt' is missing"),
        (b'[{"prompt": "{} is in", "subject": "Paris"}]', r"fact 0: give 'target_true'"),
        (
            b'[{"prompt": "{} is in", "subject": "Paris", "target_true": " France"},'
            b' {"prompt": "{} is in", "subject": "Rome", "target_true": 3}]',
            r"fact 1: 'target_true' must be a string",
        ),
        (
            b'[{"prompt": "{} is in", "subject": "Paris", "target_true": " France",'
            b' "paraphrase_prompts": "Paris lies in"}]',
            r"'paraphrase_prompts' must be a list of strings",
        ),
        (b'[{"prompt": "Rome is in", "subject": "Paris", "target_true": " France"}]', "not in the prompt"),
    ],
)
def test_a_bad_file_names_the_file_and_the_field(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "mine.json"
    path.write_bytes(content)
    with pytest.raises(UserInputError, match=message) as error:
        load_facts(path)
    assert str(path) in str(error.value)


def test_a_missing_file_or_set_names_the_shipped_sets(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="'facts', 'edit_facts'"):
        load_facts("edit_fact")
    with pytest.raises(UserInputError, match="not found"):
        load_facts(tmp_path / "nowhere.json")


def test_the_small_set_relations_hold_the_old_table() -> None:
    # Pinned from the Python literal the JSON replaced (lmsci_mi/data/facts.py before issue 36).
    assert list(RELATIONS) == ["city_country", "landmark_city", "country_language", "company_country"]
    assert [sum(len(s) for s in r.answers.values()) for r in RELATIONS.values()] == [74, 61, 43, 42]
    assert RELATIONS["landmark_city"].answers[" Paris"][0] == "The Eiffel Tower"
    assert RELATIONS["city_country"].answers[" Brazil"] == (
        "Rio de Janeiro", "São Paulo", "Brasília", "Salvador"
    )
    assert len(candidate_facts()) == 220


def test_the_edit_relations_hold_the_old_tables() -> None:
    # Pinned from the Python literals the JSON replaced (lmsci_mi/data/edit_facts.py before
    # issue 36): relation order, candidate counts, the country table and the templates shared.
    assert list(EDIT_RELATIONS)[:3] == ["country_capital", "country_language", "country_continent"]
    assert len(EDIT_RELATIONS) == 13
    capital, language = EDIT_RELATIONS["country_capital"], EDIT_RELATIONS["country_language"]
    assert capital.answers[" Paris"] == ("France",) and not capital.held_out
    assert capital.neighbours_from == "landmark_city" and capital.reverse
    assert language.answers[" Spanish"][:2] == ("Spain", "Peru")
    assert language.held_out[" Spanish"] == ("Mexico", "Argentina", "Colombia", "the Dominican Republic")
    assert language.prompt == RELATIONS["country_language"].prompt
    assert EDIT_RELATIONS["person_occupation"].kin[1] == (" painter", " artist", " sculptor")
    assert EDIT_RELATIONS["book_author"].titles
    assert len(edit_fact_candidates()) == 565


@pytest.mark.parametrize(
    ("seed", "small", "edit"),
    [(0, "23e5ed2445ed803f", "5c27692d07e5755c"), (3, "228b0409d130a571", "4a5b37317ccda957")],
)
def test_the_candidates_are_those_of_the_python_tables(seed: int, small: str, edit: str) -> None:
    # The fingerprints of candidate_facts(seed) and edit_fact_candidates(seed) as the Python
    # literals gave them (commit 8e9872d, before the tables became JSON): every field of every
    # candidate, the seeded target_new draws included, is the same.
    def fingerprint(records: list[dict]) -> str:
        text = json.dumps(records, ensure_ascii=False, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    assert fingerprint(candidate_facts(seed)) == small
    assert fingerprint(edit_fact_candidates(seed)) == edit


def test_the_tables_are_read_only() -> None:
    with pytest.raises(TypeError):
        RELATIONS["new"] = RELATIONS["city_country"]  # type: ignore[index]
    with pytest.raises(TypeError):
        EDIT_RELATIONS["book_author"].answers[" Homer"] = ("The Iliad",)  # type: ignore[index]


def test_an_old_style_aie_fact_is_refused_with_the_fix(tiny) -> None:
    from lmsci_mi.circuits.aie import known_facts

    old = Fact("The cat sat on the", "cat", " zebra")  # circuits.aie.Fact's (prompt, subject, target)
    with pytest.raises(UserInputError, match="target_true=target"):
        known_facts(tiny, [old])


def test_knowledge_neurons_read_a_fact(tiny) -> None:
    from lmsci_mi.knowledge.neurons import KnowledgeNeuronsConfig, knowledge_neurons

    fact = Fact("{} is in", "The Eiffel Tower", target_true=" Paris",
                paraphrase_prompts=("The Eiffel Tower stands in", "Where is the Eiffel Tower? In"))
    cfg = KnowledgeNeuronsConfig(steps=2)
    by_fact = knowledge_neurons(tiny, fact, config=cfg)
    prompts = ["The Eiffel Tower is in", "The Eiffel Tower stands in", "Where is the Eiffel Tower? In"]
    by_text = knowledge_neurons(tiny, prompts, " Paris", cfg)
    assert by_fact.neurons == by_text.neurons
    assert torch.equal(by_fact.scores, by_text.scores)
    with pytest.raises(UserInputError, match="give the answer"):
        knowledge_neurons(tiny, prompts)


def test_no_fact_loader_returns_dicts() -> None:
    """Issue 36: facts load as typed records; no function named like a fact loader returns dicts."""
    import ast

    root = Path(__file__).resolve().parents[2] / "lmsci_mi"
    loaders = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and "load" in node.name and "fact" in node.name:
                returns = ast.unparse(node.returns) if node.returns else ""
                loaders.append(node.name)
                assert "dict" not in returns, f"{path.relative_to(root)}:{node.lineno} {node.name} -> {returns}"
    assert {"load_facts", "load_fact_records", "load_edit_fact_records"} <= set(loaders)

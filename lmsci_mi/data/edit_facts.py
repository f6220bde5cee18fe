"""A larger editing fact set in the CounterFact shape (Meng et al. 2022), with messy-knowledge probes.

The candidates come from the relation tables shipped as `edit_relations.json` (thirteen relations);
:func:`select_edit_facts` keeps those the model really knows (rule below) and `edit_facts.json`
ships the set selected on SmolLM2; :func:`build_edit_fact_set` rebuilds it. Beyond CounterFact's fields each fact carries the probes of
"messy" knowledge: the negated prompt, the reverse of a one-to-one fact, a two-hop consequence and
other relations of the same subject. The tables were written at about 1,600 candidates and then
trimmed of every (subject, answer) pair SmolLM2 did not answer top-1 in a first selection; where an
answer was left with fewer than two held-out subjects, editable ones SmolLM2 knows were moved there.
So a rebuild reads few prompts that cannot pass.

The shipped set (SmolLM2-135M): 406 facts of 565 candidates; negated prompts 406, reverse prompts 3
(country -> capital is the only one-to-one relation, and the new capital must be one SmolLM2 names
the country of), two-hop prompts 40, other-relation prompts for 72 facts (103 prompts).

Selection rule (the first token of an answer decides, since that is what the model predicts next):

1. ``target_true`` is top-1 on the rewrite prompt with p ≥ 0.1 and top-1 on at least half of the
   paraphrases, and ``target_new`` starts with another token;
2. neighbourhood prompts (other subjects with the same true answer) are kept where it is top-1 too,
   at most five, and the fact needs two. Their subjects are *held out*: never a candidate subject,
   and no neighbourhood prompt contains a candidate subject, so any subset of the set can be edited
   in one run without a neighbour naming an edited subject;
3. a subject is edited in one fact only (the first relation, in table order, that keeps it);
4. the reverse prompt (one-to-one relations) is kept where ``reverse_target_true`` is top-1; the
   two-hop prompt where ``two_hop_target_true`` is top-1, both bridge facts (true and new object)
   are top-1, the two answers start differently and neither bridge fact is itself an edit of the
   set; each other-relation prompt where its target is top-1. The negated prompt is written for
   every fact (it has no answer to check: it measures whether an edit leaks into it).
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lmsci_mi.data.facts import RELATIONS as SMALL_SET_RELATIONS
from lmsci_mi.data.facts import Fact, Relation, _next_token_probs, _read_data, load_facts

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel

__all__ = [
    "EDIT_FACTS_FILE",
    "EDIT_RELATIONS",
    "EDIT_RELATIONS_FILE",
    "build_edit_fact_set",
    "edit_fact_candidates",
    "load_edit_fact_records",
    "select_edit_facts",
]

EDIT_FACTS_FILE = "edit_facts.json"
EDIT_RELATIONS_FILE = "edit_relations.json"

logger = logging.getLogger(__name__)


def _country_table(countries: Mapping[str, Sequence[str]], column: int) -> dict[str, list[str]]:
    """answer -> countries for one column of the countries table (one-to-one columns give one
    each); an empty cell leaves the country out."""
    table: dict[str, list[str]] = {}
    for country, row in countries.items():
        if row[column]:
            table.setdefault(" " + row[column], []).append(country)
    return table


def _edit_relations() -> Mapping[str, Relation]:
    """The relations of ``edit_relations.json``, with the country relations' answers read from its
    countries table and the shared relations' templates from the small set's (so one relation
    reads one way)."""
    document = _read_data(EDIT_RELATIONS_FILE)
    columns = document["country_columns"]
    specs: dict[str, dict[str, Any]] = {}
    for name, spec in document["relations"].items():
        spec = dict(spec)
        if "templates_from" in spec:
            shared = SMALL_SET_RELATIONS[spec.pop("templates_from")]
            spec.update(prompt=shared.prompt, paraphrases=shared.paraphrases)
        if "countries" in spec:
            column = columns.index(spec.pop("countries"))
            spec["answers"] = _country_table(document["countries"]["editable"], column)
            spec["held_out"] = _country_table(document["countries"]["held_out"], column)
        specs[name] = spec
    return Relation.table(specs, EDIT_RELATIONS_FILE)


EDIT_RELATIONS: Mapping[str, Relation] = _edit_relations()
"""The editing set's relations by name, in rule 3's order (``edit_relations.json``)."""

# A record's fields in the shipped file, in Fact's order (p_true, the selection's, comes last).
_FIELDS = tuple(f.name for f in fields(Fact) if f.name != "p_true")


def _head(answer: str) -> str:
    """The answer's first run of letters, standing in for its first token (" J.K. Rowling": "J")."""
    match = re.search(r"\w+", answer)
    return match.group(0) if match else answer.strip()


def _fill(template: str, subject: str, *, titles: bool = False) -> str:
    # "Tourists who want to see The Louvre" reads wrong, so a leading article is lower-cased
    # mid-sentence; titles ("The Hobbit") keep theirs.
    if not titles and not template.startswith("{}") and subject.startswith("The "):
        subject = "the " + subject[4:]
    return template.format(subject)


_SUBJECT_ANSWERS: dict[int, tuple[Relation, dict[str, str]]] = {}


def _subject_answers(relation: Relation) -> dict[str, str]:
    """Every subject of the relation (editable and held out) with its answer, built once per
    relation: :func:`edit_fact_candidates` asks some 100 k times, and rebuilding the table each
    time was most of its 0.7 s."""
    cached = _SUBJECT_ANSWERS.get(id(relation))
    if cached is None or cached[0] is not relation:  # the relation is kept, so its id is not reused
        cached = (relation, dict(relation.pairs() + relation.pairs(held_out=True)))
        _SUBJECT_ANSWERS[id(relation)] = cached
    return cached[1]


def _answer_of(relation: Relation, subject: str) -> tuple[str, str] | None:
    """(the subject as the relation spells it, its answer), for a subject given without "the"."""
    pairs = _subject_answers(relation)
    for name in (subject, "the " + subject):
        if name in pairs:
            return name, pairs[name]
    return None


def _candidate_subjects() -> set[str]:
    subjects = {s for r in EDIT_RELATIONS.values() for s, _ in r.pairs()}
    held = {s for r in EDIT_RELATIONS.values() for s, _ in r.pairs(held_out=True)}
    if subjects & held:
        raise ValueError(f"subjects both editable and held out: {sorted(subjects & held)}")
    return subjects


def edit_fact_candidates(seed: int = 0) -> list[dict[str, Any]]:
    """Every candidate fact as a plain dict with EditRequest's fields, in table order.

    ``target_new`` is drawn (seeded) from the relation's other answers whose first word differs
    from the true one's and that are not in the same ``kin`` group. Neighbourhood prompts are
    every held-out subject with the same answer, less those whose prompt contains a candidate
    subject. Candidates with a two-hop prompt also carry ``bridge_prompts``, the bridge facts of
    the true and the new object, which :func:`select_edit_facts` checks and then drops.

    >>> facts = edit_fact_candidates()
    >>> facts[0]["prompt"].format(facts[0]["subject"]), facts[0]["target_true"]
    ('The capital of France is', ' Paris')
    >>> facts == edit_fact_candidates()
    True
    """
    rng = random.Random(seed)
    subjects = _candidate_subjects()
    records: list[dict[str, Any]] = []
    for name, relation in EDIT_RELATIONS.items():
        source = EDIT_RELATIONS[relation.neighbours_from or name]
        neighbours: dict[str, list[str]] = {}
        for subject, answer in source.pairs(held_out=True):
            prompt = _fill(source.prompt, subject, titles=source.titles)
            # The evaluation drops a neighbour that names an edited subject, even inside a longer
            # name ("Nigeria" names "Niger"); leaving those out here keeps every subset whole.
            if not any(s in prompt for s in subjects):
                neighbours.setdefault(answer, []).append(prompt)
        inverse = {answer: subject for subject, answer in relation.pairs()}
        for subject, answer in relation.pairs():
            kin = {a for group in relation.kin if answer in group for a in group}
            others = [a for a in relation.answers if _head(a) != _head(answer) and a not in kin]
            target_new = rng.choice(others)
            record = {
                "prompt": relation.prompt,
                "subject": subject,
                "target_new": target_new,
                "target_true": answer,
                "paraphrase_prompts": [
                    _fill(p, subject, titles=relation.titles) for p in relation.paraphrases
                ],
                "neighborhood_prompts": neighbours.get(answer, []),
                "relation": name,
                "negated_prompt": _fill(relation.negated, subject, titles=relation.titles),
                **_reverse(relation, subject, target_new, inverse),
                **_two_hop(relation, subject, answer, target_new),
                **_other_relations(name, subject),
            }
            records.append(record)
    return records


def _reverse(
    relation: Relation, subject: str, target_new: str, inverse: Mapping[str, str]
) -> dict[str, str]:
    """The reverse probe of a one-to-one fact: asked back from the new object, whose unedited
    answer is the subject that object really belongs to."""
    owner = inverse.get(target_new)
    # " the" as a first token would be checked as readily for any country, so it proves nothing.
    if not relation.reverse or owner is None or "the " in (owner[:4], subject[:4]):
        return {"reverse_prompt": "", "reverse_target_new": "", "reverse_target_true": ""}
    return {
        "reverse_prompt": relation.reverse.format(target_new.strip()),
        "reverse_target_new": " " + subject,
        "reverse_target_true": " " + owner,
    }


def _two_hop(relation: Relation, subject: str, answer: str, target_new: str) -> dict[str, Any]:
    """The consequence through the bridge relation, when both objects have a bridge fact whose
    answers start differently (an unchanged answer would not show whether the edit rippled)."""
    empty = {"two_hop_prompt": "", "two_hop_target_new": "", "two_hop_target_true": ""}
    if not relation.two_hop:
        return empty
    bridge = EDIT_RELATIONS[relation.bridge]
    true_hop, new_hop = _answer_of(bridge, answer.strip()), _answer_of(bridge, target_new.strip())
    if true_hop is None or new_hop is None or _head(true_hop[1]) == _head(new_hop[1]):
        return empty
    return {
        "two_hop_prompt": _fill(relation.two_hop, subject, titles=relation.titles),
        "two_hop_target_new": new_hop[1],
        "two_hop_target_true": true_hop[1],
        "bridge_prompts": [_fill(bridge.prompt, true_hop[0]), _fill(bridge.prompt, new_hop[0])],
    }


def _other_relations(name: str, subject: str) -> dict[str, list[str]]:
    """The subject's facts in the other relations that list it: an edit should leave them."""
    prompts, targets = [], []
    for other_name, other in EDIT_RELATIONS.items():
        found = _answer_of(other, subject) if other_name != name else None
        if found is not None and found[0] == subject:
            prompts.append(_fill(other.prompt, subject, titles=other.titles))
            targets.append(found[1])
    return {"other_relation_prompts": prompts, "other_relation_targets": targets}


def _top1(lm: LensModel, prompts: Sequence[str], chunk: int = 512) -> dict[str, tuple[int, float]]:
    """Each prompt's top-1 next token and its probability, in chunks so that full-vocabulary
    distributions of thousands of prompts are never held at once."""
    # Similar lengths batch together, so little of each batch is padding.
    ordered = sorted(set(prompts), key=lambda p: (len(p), p))
    out: dict[str, tuple[int, float]] = {}
    for start in range(0, len(ordered), chunk):
        block = ordered[start : start + chunk]
        values, indices = _next_token_probs(lm, block, batch_size=64).max(-1)
        out.update(zip(block, zip(indices.tolist(), values.tolist(), strict=True), strict=True))
    return out


def _probe_prompts(record: Mapping[str, Any]) -> list[str]:
    """The prompts rule 2 and 4 read, asked only of facts that passed rule 1."""
    probes = [*record["neighborhood_prompts"], *record["other_relation_prompts"]]
    probes += record.get("bridge_prompts", [])
    return probes + [record[k] for k in ("reverse_prompt", "two_hop_prompt") if record[k]]


class _Reader:
    """The model's top-1 next token (and its probability) per prompt, each prompt read once, in
    batched rounds; and each target's first token."""

    def __init__(self, lm: LensModel) -> None:
        self.lm = lm
        self.top: dict[str, tuple[int, float]] = {}
        self.first: dict[str, int] = {}

    def read(self, prompts: Iterable[str]) -> None:
        self.top.update(_top1(self.lm, [p for p in prompts if p not in self.top]))

    def token(self, target: str) -> int:
        if target not in self.first:
            self.first[target] = self.lm.continuation_ids(target)[0]
        return self.first[target]

    def answers(self, prompt: str, target: str) -> bool:
        return self.top[prompt][0] == self.token(target)


def _rewrite(record: Mapping[str, Any]) -> str:
    return str(record["prompt"]).format(record["subject"])


def select_edit_facts(
    lm: LensModel,
    records: Sequence[Mapping[str, Any]] | None = None,
    *,
    min_prob: float = 0.1,
    max_neighbors: int = 5,
    min_neighbors: int = 2,
) -> list[dict[str, Any]]:
    """Keep the facts the model really knows, with their verified probes. Reads the model only.

    The rule is the module docstring's. The model reads the prompts in batched rounds, each only
    for the facts still in: rewrite prompts, half the paraphrases, the rest of them where the first
    half did not settle it, then everything else.

    Args:
        lm: the model whose knowledge decides.
        records: candidates (default: :func:`edit_fact_candidates`).
        min_prob: the least probability of the true answer on the rewrite prompt.
        max_neighbors: neighbourhood prompts kept per fact.
        min_neighbors: neighbourhood prompts a fact needs.

    Returns:
        The kept records (dicts with exactly EditRequest's fields), each with ``p_true`` (the
        true answer's probability on the rewrite prompt) added.
    """
    records = list(records) if records is not None else edit_fact_candidates()
    reader = _Reader(lm)
    # Rule 2 can be decided for a fact with too few neighbourhood prompts before any is read.
    records = [r for r in records if len(r["neighborhood_prompts"]) >= min_neighbors]
    records = _known_rewrites(reader, records, min_prob)
    records = _known_paraphrases(reader, records)
    reader.read(p for r in records for p in _probe_prompts(r))
    return _assemble(reader, records, max_neighbors, min_neighbors)


def _known_rewrites(reader: _Reader, records: list, min_prob: float) -> list:
    """The facts whose rewrite prompt the model answers (top-1, at least ``min_prob``) and whose
    new target starts with another token than the true one."""
    reader.read(_rewrite(r) for r in records)
    return [
        r
        for r in records
        if reader.answers(_rewrite(r), r["target_true"])
        and reader.top[_rewrite(r)][1] >= min_prob
        and reader.token(r["target_new"]) != reader.token(r["target_true"])
    ]


def _known_paraphrases(reader: _Reader, records: list) -> list:
    """The facts the model answers on at least half of their paraphrases."""

    def half(record: Mapping[str, Any]) -> int:
        return (len(record["paraphrase_prompts"]) + 1) // 2

    def sure(record: Mapping[str, Any]) -> bool:
        return all(
            reader.answers(p, record["target_true"]) for p in record["paraphrase_prompts"][: half(record)]
        )

    # The first half of the paraphrases decides every fact that answers them all; only the
    # others need the rest read.
    reader.read(p for r in records for p in r["paraphrase_prompts"][: half(r)])
    reader.read(p for r in records if not sure(r) for p in r["paraphrase_prompts"][half(r) :])
    return [
        r
        for r in records
        if sure(r)
        or 2 * sum(reader.answers(p, r["target_true"]) for p in r["paraphrase_prompts"])
        >= len(r["paraphrase_prompts"])
    ]


def _assemble(reader: _Reader, records: list, max_neighbors: int, min_neighbors: int) -> list[dict[str, Any]]:
    """The kept facts with their answered neighbours and verified probes, one fact per subject."""
    kept: list[dict[str, Any]] = []
    bridges: list[list[str]] = []
    taken: set[str] = set()
    for r in records:
        true = r["target_true"]
        near = [p for p in r["neighborhood_prompts"] if reader.answers(p, true)][:max_neighbors]
        if r["subject"] in taken or len(near) < min_neighbors:
            continue
        fact = _with_verified_probes(r, near, reader.answers, reader.token)
        fact["p_true"] = round(reader.top[_rewrite(r)][1], 4)
        taken.add(r["subject"])
        kept.append(fact)
        bridges.append(r.get("bridge_prompts", []) if fact["two_hop_prompt"] else [])
    # A two-hop answer assumes its bridge facts hold; where one is itself an edit of the set,
    # editing both at once would leave the expected answer undefined.
    edited = {_rewrite(f) for f in kept}
    for fact, hops in zip(kept, bridges, strict=True):
        if any(h in edited for h in hops):
            fact.update(two_hop_prompt="", two_hop_target_new="", two_hop_target_true="")
    return kept


def _with_verified_probes(
    r: Mapping[str, Any], near: list[str], answers: Any, token: Any
) -> dict[str, Any]:
    """A kept fact's record with only the probes the model answers as listed (rule 4); ``answers``
    and ``token`` are :func:`select_edit_facts`'s readers of the model's top-1 tokens."""
    fact = {key: r[key] for key in _FIELDS} | {"neighborhood_prompts": near}
    if r["reverse_prompt"] and not (
        answers(r["reverse_prompt"], r["reverse_target_true"])
        and token(r["reverse_target_true"]) != token(r["reverse_target_new"])
    ):
        fact.update(reverse_prompt="", reverse_target_new="", reverse_target_true="")
    hops = r.get("bridge_prompts", [])
    if r["two_hop_prompt"] and not (
        answers(r["two_hop_prompt"], r["two_hop_target_true"])
        and answers(hops[0], r["two_hop_target_true"])
        and answers(hops[1], r["two_hop_target_new"])
        and token(r["two_hop_target_true"]) != token(r["two_hop_target_new"])
    ):
        fact.update(two_hop_prompt="", two_hop_target_new="", two_hop_target_true="")
    others = [
        (p, t)
        for p, t in zip(r["other_relation_prompts"], r["other_relation_targets"], strict=True)
        if answers(p, t)
    ]
    fact["other_relation_prompts"] = [p for p, _ in others]
    fact["other_relation_targets"] = [t for _, t in others]
    return fact


def _counts(facts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The header's counts: facts per relation (table order) and per messy-knowledge kind."""
    relations = Counter(f["relation"] for f in facts)
    return {
        "n_facts": len(facts),
        "relations": {name: relations[name] for name in EDIT_RELATIONS if relations[name]},
        "messy": {
            "negated": sum(bool(f["negated_prompt"]) for f in facts),
            "reverse": sum(bool(f["reverse_prompt"]) for f in facts),
            "two_hop": sum(bool(f["two_hop_prompt"]) for f in facts),
            "other_relation": sum(bool(f["other_relation_prompts"]) for f in facts),
            "other_relation_prompts": sum(len(f["other_relation_prompts"]) for f in facts),
        },
    }


def build_edit_fact_set(
    lm: LensModel, path: str | Path | None = None, **rule: Any
) -> list[dict[str, Any]]:
    """Select the edit facts on ``lm`` and write them as JSON (default: the packaged file).

    The file is written to a temporary name and renamed, so a reader never sees half of it.
    ``python -c "from lmsci_mi import load_model; from lmsci_mi.data.edit_facts import
    build_edit_fact_set; build_edit_fact_set(load_model('smollm2-135m'))"`` rebuilds the
    shipped file.
    """
    start = time.perf_counter()
    candidates = edit_fact_candidates()
    facts = select_edit_facts(lm, candidates, **rule)
    target = Path(path) if path is not None else Path(__file__).with_name(EDIT_FACTS_FILE)
    document = {
        "model": lm.name,
        "rule": "lmsci_mi.data.edit_facts.select_edit_facts " + json.dumps(rule or "defaults"),
        "n_candidates": len(candidates),
        **_counts(facts),
        "facts": facts,
    }
    with tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", dir=target.parent, suffix=".tmp", delete=False
    ) as handle:
        handle.write(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    os.chmod(handle.name, 0o644)  # a temporary file is created private to its owner
    os.replace(handle.name, target)
    logger.info(
        "kept %d of %d candidate facts in %.1f s",
        len(facts),
        len(candidates),
        time.perf_counter() - start,
    )
    return facts


def load_edit_fact_records() -> list[Fact]:
    """Deprecated: ``load_facts("edit_facts")``, which returns the same facts (typed records, not
    dicts; ``fact.to_dict()`` gives a record's dict)."""
    warnings.warn(
        "lmsci_mi.data.edit_facts.load_edit_fact_records is deprecated: use "
        "lmsci_mi.data.load_facts('edit_facts')",
        DeprecationWarning,
        stacklevel=2,
    )
    return load_facts("edit_facts")


def __getattr__(name: str) -> Any:
    """Deprecated names: ``EditRelation`` is :class:`~lmsci_mi.data.facts.Relation`, the one
    relation type of both fact sets."""
    if name != "EditRelation":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        "lmsci_mi.data.edit_facts.EditRelation is deprecated: use lmsci_mi.data.facts.Relation",
        DeprecationWarning,
        stacklevel=2,
    )
    return Relation

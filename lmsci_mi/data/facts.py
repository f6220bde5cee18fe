"""Fact records in the CounterFact shape (Meng et al. 2022, §4.1), the one loader of fact sets, the
relation tables, and how the small set is chosen.

:class:`Fact` is the one fact type: the editing methods take it as their request, the AIE traces
its rewrite prompt, knowledge neurons attribute its prompts. :func:`load_facts` reads a shipped
set (``"facts"``, ``"edit_facts"``) or a user's JSON file. The relations the sets are drawn from
are shipped data (``fact_relations.json``, ``edit_relations.json``); :func:`select_known_facts`
keeps the candidates the model really knows (rule below), ``facts.json`` ships the set selected on
SmolLM2 and :func:`build_fact_set` rebuilds it.
"""

from __future__ import annotations

import functools
import json
import random
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import torch

from lmsci_mi.errors import UserInputError

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel

__all__ = [
    "FACTS_FILE",
    "RELATIONS",
    "RELATIONS_FILE",
    "SHIPPED_FACT_SETS",
    "Fact",
    "Relation",
    "build_fact_set",
    "candidate_facts",
    "load_fact_records",
    "load_facts",
    "select_known_facts",
]

FACTS_FILE = "facts.json"
RELATIONS_FILE = "fact_relations.json"

SHIPPED_FACT_SETS: Mapping[str, str] = MappingProxyType(
    {"facts": FACTS_FILE, "edit_facts": "edit_facts.json", "shipped": FACTS_FILE}
)
"""The fact sets :func:`load_facts` knows by name, and their files in ``lmsci_mi/data/``.
``"shipped"`` is the small set under the name the AIE gives it (``lmsci-mi trace --facts shipped``)."""

_PROMPT_LISTS = ("paraphrase_prompts", "neighborhood_prompts", "other_relation_prompts")
_TEXT_LISTS = (*_PROMPT_LISTS, "other_relation_targets")


def _spaced(target: str) -> str:
    """A target with the leading space a continuation needs (ROME adds it the same way)."""
    return " " + target if target.strip() and not target.startswith(" ") else target


@dataclass(frozen=True)
class Fact:
    """One fact, in the shape of a CounterFact record: what the AIE traces, what an editing method
    rewrites (``EditRequest`` is this class), what knowledge neurons attribute.

    Attributes:
        prompt: template with exactly one ``{}`` for the subject, e.g.
            ``"{} is located in the city of"``; a prompt with the subject written in becomes the
            template at the subject's first occurrence.
        subject: e.g. ``"The Eiffel Tower"``.
        target_new: the answer an edit installs, with its leading space (``" Rome"``); a missing
            space is added, as ROME does. Empty for a fact that is only traced.
        target_true: the model's current answer (``" Paris"``), or ``""`` when unknown; like
            every target but ``target_new``, a continuation of the prompt exactly as written.
        paraphrase_prompts: other wordings of the same fact (full prompts, subject included).
        neighborhood_prompts: prompts about other subjects whose true answer is ``target_true``.
        relation: a short relation name (``"landmark_city"``), for grouping results.
        negated_prompt: the fact negated (``"The Eiffel Tower is not located in the city of"``):
            an edit that also moves this prompt to ``target_new`` shows the negation curse.
        reverse_prompt: for a one-to-one relation, the fact asked backwards about the new
            object (``"Rome is the city where you find"``); ``reverse_target_new`` is what a
            reversible edit makes the answer (the subject), ``reverse_target_true`` the unedited
            answer.
        two_hop_prompt: a consequence of the edit through a second fact the model knows
            (``"The Eiffel Tower is located in the country of"``), with the answer the edit
            implies (``" Italy"``) and the unedited one (``" France"``).
        other_relation_prompts: other relations of the same subject (``"The Eiffel Tower was
            designed by"``) with their unedited answers in ``other_relation_targets``: an edit
            that moves them has leaked (over-ripple).
        p_true: the true answer's probability on the rewrite prompt when the set was selected
            (None for a fact that was not).

    >>> r = Fact("{} is located in the city of", "The Eiffel Tower", "Rome", " Paris")
    >>> r.rewrite_prompt, r.target_new
    ('The Eiffel Tower is located in the city of', ' Rome')
    >>> Fact("The Eiffel Tower is in", "Eiffel Tower", target_true=" Paris").prompt
    'The {} is in'
    """

    prompt: str
    subject: str
    target_new: str = ""
    target_true: str = ""
    paraphrase_prompts: tuple[str, ...] = ()
    neighborhood_prompts: tuple[str, ...] = ()
    relation: str = ""
    negated_prompt: str = ""
    reverse_prompt: str = ""
    reverse_target_new: str = ""
    reverse_target_true: str = ""
    two_hop_prompt: str = ""
    two_hop_target_new: str = ""
    two_hop_target_true: str = ""
    other_relation_prompts: tuple[str, ...] = ()
    other_relation_targets: tuple[str, ...] = ()
    p_true: float | None = None

    def __post_init__(self) -> None:
        if "{}" not in self.prompt and self.subject and self.subject in self.prompt:
            # A filled prompt ("The Eiffel Tower is in") becomes a template at the subject.
            object.__setattr__(self, "prompt", self.prompt.replace(self.subject, "{}", 1))
        # Only the answer to install gets ROME's space (rome_main.py does the same): every other
        # target is a continuation read as written, and the model's own answer may be a piece of
        # a word with no space before it.
        object.__setattr__(self, "target_new", _spaced(self.target_new))
        for name in _TEXT_LISTS:
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if len(self.other_relation_targets) != len(self.other_relation_prompts):
            raise UserInputError(
                f"fact {self.subject!r} has {len(self.other_relation_prompts)} other-relation "
                f"prompts but {len(self.other_relation_targets)} targets: give one answer per prompt"
            )

    @property
    def rewrite_prompt(self) -> str:
        """The prompt with the subject filled in."""
        return self.prompt.format(self.subject)

    def validate(self, lm: LensModel | None = None) -> None:
        """Check the fact as an edit request, before any weight is touched.

        Raises:
            UserInputError: the template has no single ``{}``, the subject is empty or not found
                in the filled prompt's tokens, or ``target_new`` is empty or equals
                ``target_true``.
        """
        if not self.subject.strip():
            raise UserInputError("empty subject")
        if "{}" not in self.prompt:
            raise UserInputError(
                f"subject {self.subject!r} is not in the prompt {self.prompt!r} (write the prompt "
                "with the subject in it, or with '{}' where the subject goes)"
            )
        if self.prompt.count("{}") != 1:
            raise UserInputError(
                f"the prompt template must contain exactly one '{{}}' for the subject, got {self.prompt!r}"
            )
        if not self.target_new.strip():
            raise UserInputError(f"empty target_new for subject {self.subject!r}")
        if self.target_new.strip() == self.target_true.strip():
            raise UserInputError(f"target_new {self.target_new!r} is the true answer already")
        if lm is not None:
            lm.find_subject(self.rewrite_prompt, self.subject)

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON data (lists for the prompt lists), every field in field order."""
        return {
            f.name: list(value) if isinstance(value := getattr(self, f.name), tuple) else value
            for f in fields(self)
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "fact") -> Fact:
        """A fact from a record with Fact's field names (other keys are ignored; ``target`` is
        read as ``target_true``, the AIE's old spelling).

        Raises:
            UserInputError: naming ``where`` and the field: a missing prompt, subject or answer, a
                field of the wrong type, or a subject that is not in its prompt.
        """
        if not isinstance(data, Mapping):
            raise UserInputError(
                f"{where}: a fact is an object with 'prompt', 'subject' and 'target_true', "
                f"not {type(data).__name__}"
            )
        values = {k: v for k, v in data.items() if k in _FIELD_NAMES}
        if "target_true" not in values and "target" in data:
            values["target_true"] = data["target"]
        for key, value in values.items():
            _check_field(where, key, value)
        for key in ("prompt", "subject"):
            if not values.get(key):
                raise UserInputError(f"{where}: '{key}' is missing or empty in {dict(data)}")
        if not (values.get("target_true") or values.get("target_new")):
            raise UserInputError(
                f"{where}: give 'target_true' (the model's answer) or 'target_new' (the answer an "
                f"edit installs): {dict(data)}"
            )
        if "{}" not in values["prompt"] and values["subject"] not in values["prompt"]:
            raise UserInputError(
                f"{where}: subject {values['subject']!r} is not in the prompt {values['prompt']!r}"
            )
        return cls(**values)

    # EditRequest's names for the same two methods (edit handles store their requests with them).
    to_json = to_dict
    from_json = from_dict


_FIELD_NAMES = frozenset(f.name for f in fields(Fact))


def _check_field(where: str, key: str, value: Any) -> None:
    """Raise if a record's field has the wrong JSON type: a list of strings, a number, a string."""
    if key in _TEXT_LISTS:
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        kind = "a list of strings"
    elif key == "p_true":
        ok = value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))
        kind = "a number"
    else:
        ok, kind = isinstance(value, str), "a string"
    if not ok:
        raise UserInputError(f"{where}: '{key}' must be {kind}, not {value!r}")


def load_facts(source: str | Path | Iterable[Mapping[str, Any] | Fact] = "facts") -> list[Fact]:
    """Fact records from a shipped set, a JSON file, or records: the one loader of fact sets.

    Args:
        source: ``"facts"`` (the small set: 109 facts SmolLM2-135M knows, four relations;
            ``"shipped"`` names it too), ``"edit_facts"`` (406 facts over 13 relations, with
            the messy-knowledge probes), the path of a JSON file (a list of records, or
            ``{"facts": [...]}`` as the shipped files are), or records (dicts with
            :class:`Fact`'s field names, or facts).

    Returns:
        The facts, in the set's order. The shipped sets are read once per process.

    Raises:
        UserInputError: a file that is missing or not JSON, a record with a missing or mistyped
            field (the message names the file, the record and the field), or no facts.

    >>> facts = load_facts()
    >>> len(facts), facts[0].rewrite_prompt, facts[0].target_true
    (109, 'Paris is a city in the country of', ' France')
    >>> edit = load_facts("edit_facts")
    >>> len(edit), edit[0].negated_prompt
    (406, 'The capital of France is not')
    """
    if isinstance(source, (str, Path)) and str(source) in SHIPPED_FACT_SETS:
        return list(_shipped_facts(SHIPPED_FACT_SETS[str(source)]))
    if isinstance(source, (str, Path)):
        where, records = str(source), _read_fact_file(Path(source))
    else:
        where, records = "records", list(source)
    facts = [
        r if isinstance(r, Fact) else Fact.from_dict(r, where=f"{where}, fact {i}")
        for i, r in enumerate(records)
    ]
    if not facts:
        raise UserInputError(f"the fact set {where} is empty")
    return facts


@functools.cache
def _shipped_facts(file: str) -> tuple[Fact, ...]:
    # Facts are frozen, so every caller can share the one copy read.
    records = _read_data(file)["facts"]
    return tuple(Fact.from_dict(r, where=f"{file}, fact {i}") for i, r in enumerate(records))


def _read_data(file: str) -> Any:
    """A JSON file shipped in ``lmsci_mi/data/``."""
    return json.loads(resources.files("lmsci_mi.data").joinpath(file).read_text(encoding="utf-8"))


def _read_fact_file(path: Path) -> list[Any]:
    """The records of a user's fact file: a list of them, or ``{"facts": [...]}``."""
    if not path.is_file():
        names = ", ".join(repr(n) for n in SHIPPED_FACT_SETS)
        raise UserInputError(f"fact file {path} not found: give a JSON file or a shipped set ({names})")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserInputError(f"fact file {path} is not a JSON file ({error})") from None
    records = document.get("facts") if isinstance(document, dict) else document
    if not isinstance(records, list):
        raise UserInputError(
            f"fact file {path}: give a list of records with 'prompt', 'subject' and "
            "'target_true' (or {'facts': [...]})"
        )
    return records


def load_fact_records() -> list[Fact]:
    """Deprecated: ``load_facts("facts")``, which returns the same facts (typed records, not dicts;
    ``fact.to_dict()`` gives a record's dict)."""
    warnings.warn(
        "lmsci_mi.data.facts.load_fact_records is deprecated: use lmsci_mi.data.load_facts('facts')",
        DeprecationWarning,
        stacklevel=2,
    )
    return load_facts("facts")


def _names(listing: str | Iterable[str]) -> tuple[str, ...]:
    # A "; "-separated string is how the Python tables listed an answer's subjects; JSON lists them.
    items = listing.split(";") if isinstance(listing, str) else listing
    return tuple(name.strip() for name in items if name.strip())


@dataclass(frozen=True)
class Relation:
    """One relation's templates and its facts, read from the shipped relation tables.

    Attributes:
        prompt: rewrite template with ``{}`` for the subject.
        paraphrases: other wordings of the same relation.
        negated: the rewrite template negated (the editing set's; empty in the small set).
        answers: answer -> the subjects that may be edited (a candidate each).
        held_out: answer -> subjects that are only ever neighbours, never edited.
        neighbours_from: the relation whose held-out subjects (same answer) are the neighbours;
            empty for this relation's own (a one-to-one relation has no second subject with the
            same answer, so country -> capital borrows landmarks in that capital).
        reverse: for a one-to-one relation, the template asking back from the object.
        two_hop: template of a consequence through ``bridge``, the relation that takes this
            relation's answers (as subjects) one step further.
        kin: groups of answers too close to stand in for each other as a counterfactual (a
            painter made an "artist" is no edit).
        titles: subjects are titles ("The Hobbit"), whose article stays capitalised.
    """

    prompt: str
    paraphrases: tuple[str, ...] = ()
    negated: str = ""
    answers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    held_out: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    neighbours_from: str = ""
    reverse: str = ""
    two_hop: str = ""
    bridge: str = ""
    kin: tuple[tuple[str, ...], ...] = ()
    titles: bool = False

    def __post_init__(self) -> None:
        # Read-only all the way down: the tables are loaded once and shared.
        object.__setattr__(self, "paraphrases", tuple(self.paraphrases))
        for name in ("answers", "held_out"):
            table = {answer: _names(s) for answer, s in getattr(self, name).items()}
            object.__setattr__(self, name, MappingProxyType(table))
        object.__setattr__(self, "kin", tuple(tuple(group) for group in self.kin))

    def pairs(self, *, held_out: bool = False) -> list[tuple[str, str]]:
        """(subject, answer) pairs in table order, of the editable or of the held-out subjects."""
        table = self.held_out if held_out else self.answers
        return [(s, a) for a, subjects in table.items() for s in subjects]

    @classmethod
    def table(cls, specs: Mapping[str, Mapping[str, Any]], source: str) -> Mapping[str, Relation]:
        """Relations by name from a JSON table's ``"relations"``; an unknown key raises, naming
        the relation and ``source``."""
        known = {f.name for f in fields(cls)}
        for name, spec in specs.items():
            if set(spec) - known:
                raise UserInputError(
                    f"{source}: relation {name!r} has unknown keys {sorted(set(spec) - known)}; "
                    f"a relation has {sorted(known)}"
                )
        return MappingProxyType({name: cls(**spec) for name, spec in specs.items()})


RELATIONS: Mapping[str, Relation] = Relation.table(
    _read_data(RELATIONS_FILE)["relations"], RELATIONS_FILE
)
"""The small set's relations (``fact_relations.json``): cities' countries, landmarks' cities,
countries' official languages, companies' home countries. Subjects that share an answer are each
other's neighbourhood (CounterFact's "same relation, same true object")."""


def candidate_facts(seed: int = 0) -> list[dict[str, Any]]:
    """Every candidate fact as a CounterFact-shaped record (plain dict, EditRequest's fields).

    ``target_new`` is drawn (seeded) from the relation's other answers whose first word differs
    from the true answer's; neighbourhood prompts are the rewrite prompts of every other subject
    with the same answer (filtered by :func:`select_known_facts`).
    """
    rng = random.Random(seed)
    records: list[dict[str, Any]] = []
    for relation, spec in RELATIONS.items():
        for answer, subjects in spec.answers.items():
            others = [a for a in spec.answers if a.split()[0] != answer.split()[0]]
            for subject in subjects:
                records.append(
                    {
                        "prompt": spec.prompt,
                        "subject": subject,
                        "target_new": rng.choice(others),
                        "target_true": answer,
                        "paraphrase_prompts": [p.format(subject) for p in spec.paraphrases],
                        "neighborhood_prompts": [
                            spec.prompt.format(s) for s in subjects if s != subject
                        ],
                        "relation": relation,
                    }
                )
    return records


@torch.no_grad()
def _next_token_probs(lm: LensModel, prompts: Sequence[str], batch_size: int = 16) -> torch.Tensor:
    """Next-token distributions after each prompt, ``[prompt, vocab]``.

    Rows are right-padded (``encode_batch``): with causal attention, padding after a prompt's last
    token cannot change it, and rotary positions stay those of an unpadded run. Only each row's
    last position is unembedded, since unembedding every position costs a quarter of the forward.
    """
    out = []
    for start in range(0, len(prompts), batch_size):
        batch = lm.encode_batch(prompts[start : start + batch_size])
        resid = lm.model(batch.tokens, stop_at_layer=lm.cfg.n_layers)
        rows = torch.arange(len(batch.lengths), device=lm.device)
        last = resid[rows, batch.lengths - 1]
        out.append(lm.unembed(last).float().softmax(-1).cpu())
    return torch.cat(out)


def select_known_facts(
    lm: LensModel,
    records: Sequence[dict[str, Any]] | None = None,
    *,
    min_prob: float = 0.1,
    max_neighbors: int = 5,
    min_neighbors: int = 2,
) -> list[dict[str, Any]]:
    """Keep the facts the model really knows. Reads the model only.

    The rule (the first token of ``target_true`` decides, since that is what the model predicts
    next):
      1. on the rewrite prompt it is the top-1 token with probability ≥ ``min_prob``;
      2. it is the top-1 token on at least half of the paraphrases;
      3. neighbourhood prompts are kept only where it is top-1 too (at most ``max_neighbors``),
         and the fact needs ``min_neighbors`` of them;
      4. ``target_new``'s first token differs from it.

    Returns:
        The kept records (dicts), each with ``p_true`` (rule 1's probability) added.
    """
    records = list(records) if records is not None else candidate_facts()
    tokenizer = lm._require_tokenizer()

    def first(text: str) -> int:
        return int(tokenizer(text, add_special_tokens=False)["input_ids"][0])

    prompts = sorted(
        {r["prompt"].format(r["subject"]) for r in records}
        | {p for r in records for p in r["paraphrase_prompts"]}
        | {p for r in records for p in r["neighborhood_prompts"]}
    )
    probs = _next_token_probs(lm, prompts)
    row = {p: i for i, p in enumerate(prompts)}
    top1 = probs.argmax(-1)

    kept = []
    for r in records:
        true_id = first(r["target_true"])
        rewrite = row[r["prompt"].format(r["subject"])]
        if int(top1[rewrite]) != true_id or float(probs[rewrite, true_id]) < min_prob:
            continue
        hits = sum(int(top1[row[p]]) == true_id for p in r["paraphrase_prompts"])
        if 2 * hits < len(r["paraphrase_prompts"]):
            continue
        neighbors = [p for p in r["neighborhood_prompts"] if int(top1[row[p]]) == true_id]
        if len(neighbors) < min_neighbors or first(r["target_new"]) == true_id:
            continue
        kept.append(
            {
                **r,
                "neighborhood_prompts": neighbors[:max_neighbors],
                "p_true": round(float(probs[rewrite, true_id]), 4),
            }
        )
    return kept


def build_fact_set(
    lm: LensModel, path: str | Path | None = None, **rule: Any
) -> list[dict[str, Any]]:
    """Select the known facts on ``lm`` and write them as JSON (default: the packaged facts.json).

    ``python -c "from lmsci_mi import load_model; from lmsci_mi.data.facts import build_fact_set;
    build_fact_set(load_model('smollm2-135m'))"`` rebuilds the shipped file.
    """
    facts = select_known_facts(lm, **rule)
    target = Path(path) if path is not None else Path(__file__).with_name(FACTS_FILE)
    document = {
        "model": lm.name,
        "rule": "lmsci_mi.data.facts.select_known_facts " + json.dumps(rule or "defaults"),
        "n_candidates": len(candidate_facts()),
        "facts": facts,
    }
    target.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    return facts

"""In-context-learning tasks: labelled items for ICL prompts, read from ``lmsci_mi/data/icl/*.json``.

Classification tasks (Han et al. 2023's setting: sentiment, topic, animal or plant, country or
city, language, parity) carry their label set and single-token label words; pair tasks (Hendel et
al. 2023's and Todd et al. 2024's antonyms, country -> capital, present -> past) map an input to
an output compared by its first token. Each file states its source and how labels were assigned.
Our fact relations become pair tasks through :func:`fact_relation_task`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

from lmsci_mi.errors import UnknownNameError, UserInputError

__all__ = [
    "ICL_CLASSIFICATION_TASKS",
    "ICL_PAIR_TASKS",
    "ICL_TASKS",
    "ICLItem",
    "ICLTask",
    "fact_relation_task",
    "load_icl_task",
]

ICL_CLASSIFICATION_TASKS = ("sentiment", "topic", "animal_plant", "country_city", "language", "parity")
"""The bundled classification tasks (at least 200 items each)."""
ICL_PAIR_TASKS = ("antonyms", "country_capital", "present_past")
"""The bundled pair tasks of the task- and function-vector papers (at least 100 pairs each)."""
ICL_TASKS = ICL_CLASSIFICATION_TASKS + ICL_PAIR_TASKS

TaskKind = Literal["classification", "pairs"]


@dataclass(frozen=True)
class ICLItem:
    """One labelled item: the input ``x``, its output (a label name, or the answer text of a pair
    task), and the group a split keeps together (the item's own input when empty: translations of
    one sentence share a group).

    >>> ICLItem("hot", "cold").split_key
    'hot'
    """

    input: str
    output: str
    group: str = ""

    @property
    def split_key(self) -> str:
        return self.group or self.input


@dataclass(frozen=True)
class ICLTask:
    """A task's items, label set and label words, with where they come from.

    Attributes:
        name: the task's name (``"sentiment"``, ``"facts:city_country"``).
        kind: ``"classification"`` (outputs are labels of ``labels``) or ``"pairs"`` (outputs are
            free text, compared by their first token).
        items: the items, in the file's order.
        labels: the label names, in order (empty for a pair task).
        label_words: alternative label-word sets, each one word per label in ``labels``' order;
            the first is the default (empty for a pair task, and for a classification task whose
            prompts are given label words of their own).
        description: what the task asks, in words.
        source: who wrote the items, or where they come from.
        labelling: how each item's label was assigned, and what was left out.
    """

    name: str
    kind: TaskKind
    items: tuple[ICLItem, ...]
    labels: tuple[str, ...] = ()
    label_words: tuple[tuple[str, ...], ...] = ()
    description: str = ""
    source: str = ""
    labelling: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("classification", "pairs"):
            raise UserInputError(f"task {self.name!r}: kind is 'classification' or 'pairs', not {self.kind!r}")
        if not self.items:
            raise UserInputError(f"task {self.name!r} has no items")
        if self.kind == "pairs":
            return
        if len(self.labels) < 2 or len(set(self.labels)) != len(self.labels):
            raise UserInputError(f"task {self.name!r} needs two or more distinct labels, got {self.labels}")
        unknown = sorted({i.output for i in self.items} - set(self.labels))
        if unknown:
            raise UserInputError(f"task {self.name!r}: items labelled {unknown}, not in {list(self.labels)}")
        for words in self.label_words:
            if len(words) != len(self.labels) or len(set(words)) != len(words):
                raise UserInputError(
                    f"task {self.name!r}: a label-word set gives one distinct word per label "
                    f"{list(self.labels)}, got {list(words)}"
                )

    def __len__(self) -> int:
        return len(self.items)

    @property
    def is_classification(self) -> bool:
        return self.kind == "classification"

    def counts(self) -> dict[str, int]:
        """Items per label (classification), in label order.

        >>> load_icl_task("sentiment").counts()
        {'positive': 100, 'negative': 100}
        """
        return {label: sum(i.output == label for i in self.items) for label in self.labels}


def _task(raw: dict, name: str) -> ICLTask:
    return ICLTask(
        name=name,
        kind=raw["kind"],
        items=tuple(ICLItem(*item) for item in raw["items"]),
        labels=tuple(raw.get("labels", ())),
        label_words=tuple(tuple(words) for words in raw.get("label_words", ())),
        description=raw["description"],
        source=raw["source"],
        labelling=raw["labelling"],
    )


@cache
def load_icl_task(name: str) -> ICLTask:
    """A bundled ICL task by name (see ``ICL_TASKS``); ``"facts:RELATION"`` gives a fact relation
    as a pair task (:func:`fact_relation_task`).

    Raises:
        UnknownNameError: no such task (the message lists the bundled ones).

    >>> task = load_icl_task("antonyms")
    >>> task.kind, task.items[0]
    ('pairs', ICLItem(input='hot', output='cold', group=''))
    """
    if name.startswith("facts:"):
        return fact_relation_task(name.removeprefix("facts:"))
    if name not in ICL_TASKS:
        raise UnknownNameError.among("ICL task", name, ICL_TASKS)
    path = resources.files("lmsci_mi.data").joinpath("icl", f"{name}.json")
    return _task(json.loads(path.read_text(encoding="utf-8")), name)


def fact_relation_task(relation: str) -> ICLTask:
    """One of the editing set's fact relations (``lmsci_mi.data.edit_facts.EDIT_RELATIONS``:
    ``city_country``, ``person_language``...) as a pair task: subject -> answer, for the
    task- and function-vector analyses. Both editable and held-out subjects are items; a subject
    listed under two answers is left out (its answer would be ambiguous).

    >>> task = fact_relation_task("city_country")
    >>> task.name, task.items[0]
    ('facts:city_country', ICLItem(input='Lyon', output='France', group=''))
    """
    from lmsci_mi.data.edit_facts import EDIT_RELATIONS, EDIT_RELATIONS_FILE

    if relation not in EDIT_RELATIONS:
        raise UnknownNameError.among("fact relation", relation, EDIT_RELATIONS)
    spec = EDIT_RELATIONS[relation]
    pairs = spec.pairs() + spec.pairs(held_out=True)
    answers: dict[str, set[str]] = {}
    for subject, answer in pairs:
        answers.setdefault(subject, set()).add(answer.strip())
    items = tuple(ICLItem(s, next(iter(a))) for s, a in answers.items() if len(a) == 1)
    return ICLTask(
        name=f"facts:{relation}",
        kind="pairs",
        items=items,
        description=f"the fact relation {relation!r} ({spec.prompt.format('X')!r}) as subject -> answer",
        source=f"lmsci_mi/data/{EDIT_RELATIONS_FILE}, relation {relation}: editable and held-out subjects",
        labelling="the relation table's answer (the editing set's tables, trimmed to facts SmolLM2 knows)",
    )

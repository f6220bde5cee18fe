"""Probing datasets written by the project, offline: texts, the word each probe reads, and labels
with their source.

* ``country``: a city's country, read at the city's last token (semantic; cities.json).
* ``subject_number``: the grammatical number of a sentence's subject, read at the last token of
  "The <subject> <preposition> the <attractor>", where the attractor's number is independent of
  the subject's (syntactic, after Linzen et al. 2016's agreement attractors; nouns.json).
* ``bracket_depth``: how many brackets are open at an identifier in a generated code expression
  (syntactic; generated here).
"""

from __future__ import annotations

import json
import random
from collections.abc import Hashable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["ProbeDataset", "bracket_depth_dataset", "country_dataset", "subject_number_dataset"]


@dataclass(frozen=True)
class ProbeDataset:
    """Texts to probe, one probed word each, and their labels.

    Attributes:
        name: the task's name.
        texts: the texts (the model adds its sink in front).
        labels: one label per text.
        spans: per text, the character span of the probed word; the probe reads the word's last
            token. None reads each text's last token.
        groups: per text, a key; a group goes whole into one split (None: examples split freely).
        source: where the texts and labels come from.
    """

    name: str
    texts: tuple[str, ...]
    labels: tuple[Hashable, ...]
    spans: tuple[tuple[int, int], ...] | None
    groups: tuple[str, ...] | None
    source: str

    def __len__(self) -> int:
        return len(self.texts)


@cache
def _load(name: str) -> dict[str, Any]:
    return json.loads(resources.files("lmsci_mi.data").joinpath("probing", name).read_text("utf-8"))


def country_dataset(n_examples: int | None = None, seed: int = 0) -> ProbeDataset:
    """Each city of ``cities.json`` in every template, labelled with its country.

    All sentences about one city form a group, so the test cities are cities the probe never saw.

    >>> data = country_dataset()
    >>> data.texts[0], data.labels[0], data.texts[0][slice(*data.spans[0])]
    ('Paris is a city I would like to visit one day.', 'France', 'Paris')
    """
    table = _load("cities.json")
    texts, labels, spans, groups = [], [], [], []
    for country, cities in table["countries"].items():
        for city in cities:
            for template in table["templates"]:
                start = template.index("{}")
                texts.append(template.format(city))
                labels.append(country)
                spans.append((start, start + len(city)))
                groups.append(city)
    data = ProbeDataset(
        "country",
        tuple(texts),
        tuple(labels),
        tuple(spans),
        tuple(groups),
        "lmsci_mi/data/probing/cities.json: cities and countries written by the "
        "project; four neutral sentence templates",
    )
    return _subsample(data, n_examples, seed)


def subject_number_dataset(n_examples: int = 2000, seed: int = 0) -> ProbeDataset:
    """Sentences "The <subject> <preposition> the <attractor>", labelled by the subject's number.

    Subject and attractor are different nouns whose numbers are drawn independently, so the
    probed token (the attractor) says nothing about the label: a probe must read the subject's
    number from context.

    >>> data = subject_number_dataset(4, seed=1)
    >>> len(data), sorted(set(data.labels)) <= ["plural", "singular"], data.spans is None
    (4, True, True)
    """
    table = _load("nouns.json")
    nouns, preps = table["nouns"], table["prepositions"]
    rng = random.Random(seed)
    texts, labels = [], []
    for _ in range(n_examples):
        subject, attractor = rng.sample(nouns, 2)
        number = rng.choice(["singular", "plural"])
        attractor_form = attractor[rng.randrange(2)]
        texts.append(f"The {subject[number == 'plural']} {rng.choice(preps)} the {attractor_form}")
        labels.append(number)
    return ProbeDataset(
        "subject_number",
        tuple(texts),
        tuple(labels),
        None,
        None,
        "lmsci_mi/data/probing/nouns.json: nouns and plurals written by the project; "
        f"sentences drawn with seed {seed}",
    )


_OPEN = {"(": ")", "[": "]", "{": "}"}
_NAMES = ("x", "y", "z", "a", "b", "n", "i", "j", "val", "item", "key", "data", "count", "total")
_FUNCS = ("f", "g", "max", "min", "sum", "len", "print", "sorted", "abs", "str")


def bracket_depth_dataset(
    n_examples: int = 2000, seed: int = 0, max_depth: int = 4
) -> ProbeDataset:
    """Generated code expressions; the label is the number of brackets open (1 to ``max_depth``) at
    one identifier.

    >>> data = bracket_depth_dataset(3, seed=0)
    >>> all(1 <= d <= 4 for d in data.labels)
    True
    """
    rng = random.Random(seed)
    texts, labels, spans = [], [], []
    while len(texts) < n_examples:
        marks: list[tuple[int, int, int]] = []  # (start, end, depth) of every identifier
        text = _expression(rng, 0, max_depth, marks, [])
        inside = [m for m in marks if m[2] > 0]  # the outermost name is the text's first token
        if not inside:
            continue
        start, end, depth = rng.choice(inside)
        texts.append(text)
        labels.append(depth)
        spans.append((start, end))
    return ProbeDataset(
        "bracket_depth",
        tuple(texts),
        tuple(labels),
        tuple(spans),
        None,
        f"generated by lmsci_mi.data.probing.bracket_depth_dataset (seed {seed}); "
        "the depth is counted while generating",
    )


def _expression(
    rng: random.Random, depth: int, max_depth: int, marks: list, prefix: list[str]
) -> str:
    """Append one expression to ``prefix`` (a list of text pieces), recording identifiers' depths."""

    def emit(piece: str, mark: bool = False) -> None:
        start = sum(len(p) for p in prefix)
        prefix.append(piece)
        if mark:
            marks.append((start, start + len(piece), depth))

    if depth >= max_depth or rng.random() < 0.35:
        emit(rng.choice(_NAMES), mark=True)
    else:
        opener = rng.choice(list(_OPEN))
        if opener == "(":
            emit(rng.choice(_FUNCS), mark=True)
        emit(opener)
        for k in range(rng.randint(1, 3)):
            if k:
                emit(", ")
            _expression(rng, depth + 1, max_depth, marks, prefix)
        emit(_OPEN[opener])
    return "".join(prefix)


def _subsample(data: ProbeDataset, n: int | None, seed: int) -> ProbeDataset:
    if n is None or n >= len(data):
        return data
    keep = sorted(random.Random(seed).sample(range(len(data)), n))

    def pick(values: tuple | None) -> tuple | None:
        return None if values is None else tuple(values[i] for i in keep)

    return ProbeDataset(
        data.name,
        tuple(data.texts[i] for i in keep),
        tuple(data.labels[i] for i in keep),
        pick(data.spans),
        pick(data.groups),
        data.source,
    )

"""Steering texts: labelled training texts per attribute, neutral prompts, topic word lists.

The texts live as JSON under ``lmsci_mi/data/steering/`` (data apart from code); each file states
its source. Sentiment: 100 positive and 100 negative project-written remarks (+1 / -1). Topic:
60 food and 60 technology sentences (+1 / -1), neutral in tone. Prompts: 60 neutral openings.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import torch
from torch import Tensor

from lmsci_mi.errors import UnknownNameError, UserInputError

__all__ = [
    "STEERING_ATTRIBUTES",
    "SteeringTexts",
    "neutral_prompts",
    "steering_texts",
    "topic_lexicon",
]

STEERING_ATTRIBUTES = ("sentiment", "topic")
"""Attributes with bundled training texts."""


@dataclass(frozen=True)
class SteeringTexts:
    """Training texts for one or more attributes.

    Attributes:
        texts: the texts.
        labels: ``[text, attribute]`` target steer values (0 where a text says nothing of an
            attribute: a topic sentence carries no sentiment label).
        attributes: the attribute names, one per label column.
        source: where the texts come from.
    """

    texts: tuple[str, ...]
    labels: Tensor
    attributes: tuple[str, ...]
    source: str

    def __post_init__(self) -> None:
        if self.labels.shape != (len(self.texts), len(self.attributes)):
            raise UserInputError(
                f"labels have shape {tuple(self.labels.shape)}, expected "
                f"({len(self.texts)}, {len(self.attributes)}) for {len(self.texts)} texts and "
                f"attributes {list(self.attributes)}"
            )

    def __len__(self) -> int:
        return len(self.texts)


@cache
def _read(name: str) -> dict[str, Any]:
    path = resources.files("lmsci_mi.data").joinpath("steering", f"{name}.json")
    return json.loads(path.read_text(encoding="utf-8"))


def steering_texts(attributes: str | Sequence[str] = "sentiment") -> SteeringTexts:
    """The bundled training texts of one attribute, or of several for one joint steer.

    Raises:
        ValueError: an attribute with no bundled texts (the message lists them).

    >>> data = steering_texts(["sentiment", "topic"])
    >>> len(data), data.attributes, data.labels[0].tolist()
    (320, ('sentiment', 'topic'), [1.0, 0.0])
    """
    names = (attributes,) if isinstance(attributes, str) else tuple(attributes)
    if not names:
        raise UserInputError(f"give at least one attribute: {list(STEERING_ATTRIBUTES)}")
    for name in names:
        if name not in STEERING_ATTRIBUTES:
            raise UnknownNameError(
                f"no bundled texts for attribute {name!r}; choose from {list(STEERING_ATTRIBUTES)}"
            )
    texts: list[str] = []
    rows: list[list[float]] = []
    sources = []
    for column, name in enumerate(names):
        document = _read(name)
        sources.append(f"{name}: {document['source']}")
        for label_name, group in document["texts"].items():
            value = float(document["labels"][label_name])
            for text in group:
                texts.append(text)
                row = [0.0] * len(names)
                row[column] = value
                rows.append(row)
    return SteeringTexts(tuple(texts), torch.tensor(rows), names, " | ".join(sources))


def neutral_prompts() -> tuple[str, ...]:
    """The 60 bundled neutral prompts (VADER compound 0 each) for evaluating steers."""
    return tuple(_read("neutral_prompts")["prompts"])


def neutral_prompts_source() -> str:
    return str(_read("neutral_prompts")["source"])


def topic_lexicon() -> dict[str, frozenset[str]]:
    """The topic word lists (``"food"``, ``"technology"``) that measure the topic attribute."""
    return {k: frozenset(v) for k, v in _read("topic")["lexicon"].items()}

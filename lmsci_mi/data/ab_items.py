"""Multiple-choice (A/B) behaviour items for contrastive activation addition (Rimsky et al. 2024).

Each item is a question with two answers, one showing a behaviour and one its opposite; the vector
is read at the answer letter. The items live as JSON under ``lmsci_mi/data/steering/ab_*.json``,
each file stating its source and how an open-ended answer to its questions is scored offline.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

from lmsci_mi.errors import UnknownNameError, UserInputError

__all__ = ["AB_BEHAVIOURS", "ABItem", "ABItems", "ab_items"]

AB_BEHAVIOURS = ("sentiment", "topic")
"""Behaviours with bundled A/B items: a positive answer (against a negative one), and an answer
about food (against one about technology)."""

Letter = Literal["A", "B"]


@dataclass(frozen=True)
class ABItem:
    """One question with two answers; ``behaviour`` is the letter of the answer that shows it.

    >>> item = ABItem("How was it?", ("Great", "Awful"), "A")
    >>> item.matching, item.not_matching, item.behaviour_text
    ('A', 'B', 'Great')
    """

    question: str
    options: tuple[str, str]
    behaviour: Letter

    def __post_init__(self) -> None:
        if self.behaviour not in ("A", "B"):
            raise UserInputError(f"the behaviour letter is 'A' or 'B', got {self.behaviour!r}")
        if len(self.options) != 2 or not all(isinstance(o, str) and o.strip() for o in self.options):
            raise UserInputError(f"an A/B item has two non-empty answers, got {self.options!r}")
        if not self.question.strip():
            raise UserInputError("an A/B item needs a question")

    @property
    def matching(self) -> Letter:
        """The letter of the answer that shows the behaviour."""
        return self.behaviour

    @property
    def not_matching(self) -> Letter:
        """The letter of the other answer."""
        return "B" if self.behaviour == "A" else "A"

    @property
    def behaviour_text(self) -> str:
        return self.options[0 if self.behaviour == "A" else 1]

    @property
    def other_text(self) -> str:
        return self.options[1 if self.behaviour == "A" else 0]


@dataclass(frozen=True)
class ABItems:
    """A behaviour's bundled items, with where they come from and how answers are scored.

    Attributes:
        behaviour: its name (``"sentiment"``, ``"topic"``).
        items: the items, behaviour letters alternating A, B, A, ...
        matching: what the behaviour answer is, in words.
        not_matching: what the other answer is.
        scored_by: how an open-ended answer is scored offline (higher: more of the behaviour).
        source: who wrote the items, when and how.
    """

    behaviour: str
    items: tuple[ABItem, ...]
    matching: str
    not_matching: str
    scored_by: str
    source: str

    def __len__(self) -> int:
        return len(self.items)

    def split(self, *sizes: int) -> tuple[tuple[ABItem, ...], ...]:
        """Consecutive slices of the items, of the given sizes (the rest is dropped).

        >>> a, b = ab_items("sentiment").split(50, 10)
        >>> len(a), len(b), sum(i.behaviour == "A" for i in b)
        (50, 10, 5)
        """
        if sum(sizes) > len(self.items) or any(s < 0 for s in sizes):
            raise UserInputError(f"cannot split {len(self.items)} items into {sizes}")
        out, start = [], 0
        for size in sizes:
            out.append(self.items[start : start + size])
            start += size
        return tuple(out)


@cache
def ab_items(behaviour: str = "sentiment") -> ABItems:
    """The bundled A/B items of one behaviour (100 each, letters balanced).

    Raises:
        ValueError: an unknown behaviour (the message lists the bundled ones).

    >>> items = ab_items("topic")
    >>> len(items), items.items[0].behaviour, items.items[1].behaviour
    (100, 'A', 'B')
    """
    if behaviour not in AB_BEHAVIOURS:
        raise UnknownNameError(f"no A/B items for {behaviour!r}: the bundled behaviours are {AB_BEHAVIOURS}")
    path = resources.files("lmsci_mi.data").joinpath("steering", f"ab_{behaviour}.json")
    raw = json.loads(path.read_text(encoding="utf-8"))
    items = tuple(ABItem(r["question"], tuple(r["options"]), r["behaviour"]) for r in raw["items"])
    return ABItems(behaviour, items, raw["matching"], raw["not_matching"], raw["scored_by"], raw["source"])

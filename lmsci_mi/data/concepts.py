"""Counterfactual word pairs for concept directions (Park, Choe, Veitch, ICML 2024).

Sixteen concepts (male -> female, singular -> plural, lower -> upper case, English -> French...),
40-60 pairs each, written by hand for lmsci-mi (``concept_pairs.json`` records the source and
the selection rule). Words carry the leading space a model sees mid-sentence (``" king"``);
which pairs are single tokens depends on the tokenizer, so the analyses filter per model.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources

from lmsci_mi.errors import UnknownNameError

__all__ = ["CONCEPT_PAIRS_FILE", "ConceptPairs", "concept_pairs_source", "load_concept_pairs"]

CONCEPT_PAIRS_FILE = "concept_pairs.json"


@dataclass(frozen=True)
class ConceptPairs:
    """One concept's counterfactual pairs: each ``(base, target)`` differs only in the concept.

    Iterating over it, ``len`` and indexing go over :attr:`pairs`, so it can be passed wherever
    a list of pairs is expected.

    Attributes:
        name: the concept's key (``"male_female"``).
        base, target: the values of the concept the pairs go from and to (``"male"``, ``"female"``).
        description: what a pair is, with an example.
        pairs: ``(base word, target word)``, each with its leading space.
    """

    name: str
    base: str
    target: str
    description: str
    pairs: tuple[tuple[str, str], ...]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self.pairs)

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> tuple[str, str]:
        return self.pairs[index]

    @property
    def label(self) -> str:
        """``"male → female"``: how plots and tables name the concept."""
        return f"{self.base} → {self.target}"


def _document() -> dict[str, object]:
    text = resources.files("lmsci_mi.data").joinpath(CONCEPT_PAIRS_FILE).read_text(encoding="utf-8")
    return dict(json.loads(text))


def concept_pairs_source() -> str:
    """Where the pairs come from and how they were chosen (the JSON's ``source`` and ``selection``),
    for a result's ``meta.data_source``."""
    document = _document()
    return f"{document['source']}: {document['selection']}"


def load_concept_pairs(names: Sequence[str] | None = None) -> dict[str, ConceptPairs]:
    """The shipped concepts, by name, in the file's order.

    Args:
        names: the concepts to load (default: all of them).

    Returns:
        ``{name: ConceptPairs}``.

    Raises:
        ValueError: an unknown concept name; the message lists the known ones.

    >>> concepts = load_concept_pairs(["male_female"])
    >>> concepts["male_female"].pairs[0], concepts["male_female"].label
    ((' king', ' queen'), 'male → female')
    """
    shipped = {
        entry["name"]: ConceptPairs(
            name=entry["name"],
            base=entry["base"],
            target=entry["target"],
            description=entry["description"],
            pairs=tuple((base, target) for base, target in entry["pairs"]),
        )
        for entry in _document()["concepts"]  # type: ignore[attr-defined]
    }
    if names is None:
        return shipped
    unknown = [name for name in names if name not in shipped]
    if unknown:
        raise UnknownNameError(f"unknown concept(s) {unknown}; the shipped concepts are {list(shipped)}")
    return {name: shipped[name] for name in names}

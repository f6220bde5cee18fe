"""Contrast pairs for representation reading (Zou et al. 2023, "Representation Engineering", §3.1):
each pair is a positive and a negative prompt that differ in one concept only, put in a LAT task
template that ends by asking for the concept, so the last token is where the model gathers it.

Both contrasts are derived from the project's own data; nothing is copied from a dataset:

* ``sentiment`` (100 pairs): ``lmsci_mi/data/steering/sentiment.json`` writes its negative remarks
  as counterparts of the positive ones, index by index (same topic, mostly the same frame: "The
  hotel room was spotless..." / "The hotel room was filthy..."; 98 of the 100 pairs share at least
  a fifth of their words). Pair ``i`` is (positive ``i``, negative ``i``).
* ``truth`` (200 pairs): facts of ``lmsci_mi/data/edit_facts.json`` (the editing set, facts
  SmolLM2-135M answers top-1), taken round-robin over its thirteen relations in file order so that
  every relation is represented. A pair is the rewrite prompt completed with the true answer and
  with CounterFact's false answer (``target_new``), then a full stop: "The capital of France is
  Paris." / "The capital of France is Manila.". The two differ in the answer only.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

from lmsci_mi.data.facts import Fact, load_facts
from lmsci_mi.errors import UnknownNameError, UserInputError

__all__ = ["CONTRASTS", "LAT_TEMPLATES", "ContrastPairs", "contrast_pairs"]

CONTRASTS = ("sentiment", "truth")
"""The contrasts with bundled pairs."""

LAT_TEMPLATES = {
    "sentiment": (
        "Consider the sentiment of the following review:\n{}\nThe sentiment of the review is"
    ),
    "truth": (
        "Consider the amount of truthfulness in the following statement:\n{}\n"
        "The amount of truthfulness in the statement is"
    ),
}
"""Each contrast's LAT task template, after Zou et al. 2023 §3.1 step 1 ("Consider the amount of
<concept> in the following ...: <stimulus> The amount of <concept> ... is"); ``{}`` is the
stimulus. The template's closing words ask for the concept, so the last token has attended to the
whole stimulus with the concept in question."""

_N_TRUTH = 200


@dataclass(frozen=True)
class ContrastPairs:
    """Prompt pairs that differ in one concept.

    Attributes:
        name: the contrast ("sentiment").
        positive, negative: the prompts, pair ``i`` being ``(positive[i], negative[i])``.
        source: where the prompts come from and how they were paired.
    """

    name: str
    positive: tuple[str, ...]
    negative: tuple[str, ...]
    source: str

    def __post_init__(self) -> None:
        if len(self.positive) != len(self.negative):
            raise UserInputError(
                f"{len(self.positive)} positive and {len(self.negative)} negative prompts: "
                "give one negative prompt per positive prompt"
            )

    def __len__(self) -> int:
        return len(self.positive)

    @classmethod
    def from_pairs(
        cls,
        pairs: Sequence[tuple[str, str]],
        *,
        name: str = "contrast",
        source: str = "given by the caller",
    ) -> ContrastPairs:
        """Pairs from a list of ``(positive, negative)`` prompts.

        >>> ContrastPairs.from_pairs([("I love it", "I hate it")]).negative
        ('I hate it',)
        """
        for i, pair in enumerate(pairs):
            if isinstance(pair, str) or len(pair) != 2:
                raise UserInputError(f"pair {i} is {pair!r}; give (positive prompt, negative prompt)")
        return cls(name, tuple(p for p, _ in pairs), tuple(n for _, n in pairs), source)


def contrast_pairs(
    name: str, *, n_pairs: int | None = None, template: bool = True
) -> ContrastPairs:
    """The bundled pairs of one contrast (see the module docstring for the rules).

    Args:
        name: ``"sentiment"`` or ``"truth"``.
        n_pairs: keep the first ``n_pairs`` pairs (all by default).
        template: put each stimulus in the contrast's LAT template (:data:`LAT_TEMPLATES`);
            False gives the bare stimuli.

    Returns:
        :class:`ContrastPairs`.

    Raises:
        ValueError: an unknown contrast (the message lists them) or ``n_pairs`` below 1.

    >>> pairs = contrast_pairs("truth", template=False)
    >>> len(pairs), pairs.positive[0], pairs.negative[0]
    (200, 'The capital of France is Paris.', 'The capital of France is Manila.')
    >>> len(contrast_pairs("sentiment")), contrast_pairs("sentiment").positive[0][:30]
    (100, 'Consider the sentiment of the ')
    """
    if name not in CONTRASTS:
        raise UnknownNameError(f"no bundled pairs for contrast {name!r}; choose from {list(CONTRASTS)}")
    if n_pairs is not None and n_pairs < 1:
        raise UserInputError(f"n_pairs must be at least 1, not {n_pairs}")
    positive, negative, source = _sentiment() if name == "sentiment" else _truth()
    if template:
        form = LAT_TEMPLATES[name]
        positive = [form.format(text) for text in positive]
        negative = [form.format(text) for text in negative]
        source += f"; each stimulus put in the LAT template {form!r}"
    keep = slice(None, n_pairs)
    return ContrastPairs(name, tuple(positive[keep]), tuple(negative[keep]), source)


def _sentiment() -> tuple[list[str], list[str], str]:
    path = resources.files("lmsci_mi.data").joinpath("steering", "sentiment.json")
    document = json.loads(path.read_text(encoding="utf-8"))
    positive, negative = document["texts"]["positive"], document["texts"]["negative"]
    source = (
        "lmsci_mi/data/steering/sentiment.json (written by the project), pair i = (positive "
        "remark i, negative remark i), written as counterparts on the same topic"
    )
    return list(positive), list(negative), source


def _truth() -> tuple[list[str], list[str], str]:
    by_relation: dict[str, list[Fact]] = {}
    for fact in load_facts("edit_facts"):
        by_relation.setdefault(fact.relation, []).append(fact)
    # Round-robin over the relations (file order within each), so that the 200 pairs are not all
    # city-country facts, the largest relation.
    rounds = itertools.zip_longest(*by_relation.values())
    chosen = [record for row in rounds for record in row if record is not None][:_N_TRUTH]
    positive, negative = [], []
    for fact in chosen:
        positive.append(f"{fact.rewrite_prompt}{fact.target_true}.")
        negative.append(f"{fact.rewrite_prompt}{fact.target_new}.")
    source = (
        f"lmsci_mi/data/edit_facts.json (facts SmolLM2-135M knows), {_N_TRUTH} facts round-robin "
        "over the relations; pair = (prompt + true answer + '.', prompt + CounterFact's "
        "target_new + '.')"
    )
    return positive, negative, source

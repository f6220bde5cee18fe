"""Edit requests in the shape of CounterFact records (Meng et al. 2022, §4.1).

A request rewrites one (subject, relation) fact: the prompt template holds ``{}`` where the
subject goes, ``target_new`` is the answer to install and ``target_true`` the model's own answer.
Paraphrases test generalisation; neighbourhood prompts (other subjects, same true answer) test
specificity.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from lmsci_mi.errors import UserInputError

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel

__all__ = ["EditRequest", "load_facts", "load_requests"]

_TARGETS = (
    "target_new", "target_true", "reverse_target_new", "reverse_target_true",
    "two_hop_target_new", "two_hop_target_true",
)
_PROMPT_LISTS = ("paraphrase_prompts", "neighborhood_prompts", "other_relation_prompts")


def _spaced(target: str) -> str:
    """A target with the leading space a continuation needs (ROME adds it the same way)."""
    return " " + target if target.strip() and not target.startswith(" ") else target


@dataclass(frozen=True)
class EditRequest:
    """One fact to rewrite.

    Attributes:
        prompt: template with exactly one ``{}`` for the subject, e.g.
            ``"{} is located in the city of"``.
        subject: e.g. ``"The Eiffel Tower"``.
        target_new: the answer to install, with its leading space (``" Rome"``); a missing space
            is added, as ROME does.
        target_true: the model's current answer (``" Paris"``), or ``""`` when unknown.
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

    >>> r = EditRequest("{} is located in the city of", "The Eiffel Tower", "Rome", " Paris")
    >>> r.rewrite_prompt, r.target_new
    ('The Eiffel Tower is located in the city of', ' Rome')
    """

    prompt: str
    subject: str
    target_new: str
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

    def __post_init__(self) -> None:
        if "{}" not in self.prompt and self.subject and self.subject in self.prompt:
            # A filled prompt ("The Eiffel Tower is in") becomes a template at the subject.
            object.__setattr__(self, "prompt", self.prompt.replace(self.subject, "{}", 1))
        for name in _TARGETS:
            object.__setattr__(self, name, _spaced(getattr(self, name)))
        for name in _PROMPT_LISTS:
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(
            self, "other_relation_targets", tuple(_spaced(t) for t in self.other_relation_targets)
        )
        if len(self.other_relation_targets) != len(self.other_relation_prompts):
            raise UserInputError(
                f"request for {self.subject!r} has {len(self.other_relation_prompts)} other-relation "
                f"prompts but {len(self.other_relation_targets)} targets: give one answer per prompt"
            )

    @property
    def rewrite_prompt(self) -> str:
        """The prompt with the subject filled in."""
        return self.prompt.format(self.subject)

    def validate(self, lm: LensModel | None = None) -> None:
        """Check the request before any weight is touched.

        Raises:
            ValueError: the template has no single ``{}``, the subject is empty or not found in
                the filled prompt's tokens, or ``target_new`` is empty or equals ``target_true``.
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
        if self.target_new == self.target_true:
            raise UserInputError(f"target_new {self.target_new!r} is the true answer already")
        if lm is not None:
            lm.find_subject(self.rewrite_prompt, self.subject)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EditRequest:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def load_requests(records: Iterable[Mapping[str, Any]] | str) -> list[EditRequest]:
    """Requests from dicts (or a JSON string of a list of them) with EditRequest's field names."""
    items: Sequence[Mapping[str, Any]] = (
        json.loads(records) if isinstance(records, str) else list(records)
    )
    return [EditRequest.from_json(item) for item in items]


def load_facts() -> list[EditRequest]:
    """The shipped fact set (``lmsci_mi/data/facts.json``, facts SmolLM2-135M knows) as requests.

    >>> facts = load_facts()
    >>> len(facts) >= 50 and all(f.paraphrase_prompts and f.neighborhood_prompts for f in facts)
    True
    """
    from lmsci_mi.data.facts import load_fact_records

    return load_requests(load_fact_records())


def load_edit_facts() -> list[EditRequest]:
    """The shipped editing fact set (``lmsci_mi/data/edit_facts.json``: facts SmolLM2-135M
    knows, over many relations, with the messy-knowledge probes) as requests.

    >>> facts = load_edit_facts()
    >>> len(facts) >= 250 and all(f.paraphrase_prompts and f.neighborhood_prompts for f in facts)
    True
    """
    from lmsci_mi.data.edit_facts import load_edit_fact_records

    return load_requests(load_edit_fact_records())

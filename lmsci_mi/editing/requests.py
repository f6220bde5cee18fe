"""Edit requests in the shape of CounterFact records (Meng et al. 2022, §4.1).

A request rewrites one (subject, relation) fact: the prompt template holds ``{}`` where the
subject goes, ``target_new`` is the answer to install and ``target_true`` the model's own answer.
Paraphrases test generalisation; neighbourhood prompts (other subjects, same true answer) test
specificity. A request is a :class:`lmsci_mi.data.facts.Fact`, the one fact record, under the
name ROME's code gives it; :func:`load_facts` is the one loader of fact sets.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from lmsci_mi.data.facts import Fact, load_facts

__all__ = ["EditRequest", "load_edit_facts", "load_facts", "load_requests"]

EditRequest = Fact
"""A fact to rewrite: :class:`~lmsci_mi.data.facts.Fact` itself (``EditRequest is Fact``).

>>> r = EditRequest("{} is located in the city of", "The Eiffel Tower", "Rome", " Paris")
>>> r.rewrite_prompt, r.target_new
('The Eiffel Tower is located in the city of', ' Rome')
"""


def load_requests(records: Iterable[Mapping[str, Any]] | str) -> list[Fact]:
    """Deprecated: ``load_facts(records)`` (for a JSON string, ``load_facts(json.loads(text))``).

    Requests from dicts (or a JSON string of a list of them) with Fact's field names.
    """
    warnings.warn(
        "lmsci_mi.editing.load_requests is deprecated: use lmsci_mi.data.load_facts(records)",
        DeprecationWarning,
        stacklevel=2,
    )
    items: Sequence[Mapping[str, Any]] = (
        json.loads(records) if isinstance(records, str) else list(records)
    )
    return [Fact.from_dict(item, where=f"request {i}") for i, item in enumerate(items)]


def load_edit_facts() -> list[Fact]:
    """Deprecated: ``load_facts("edit_facts")``, the shipped editing fact set (406 facts SmolLM2-135M
    knows, over 13 relations, with the messy-knowledge probes)."""
    warnings.warn(
        "lmsci_mi.editing.load_edit_facts is deprecated: use lmsci_mi.data.load_facts('edit_facts')",
        DeprecationWarning,
        stacklevel=2,
    )
    return load_facts("edit_facts")

"""Indirect-object-identification prompts (Wang et al. 2022, "Interpretability in the Wild").

"When Mary and John went to the store, John gave a drink to" → " Mary". Several templates, both
name orders (ABBA: IO first; BABA: S first), and ABC corruptions (three unrelated names, same
template, place and object). Names, places and objects are kept only if they are one token for the
model at hand, so every prompt of one template has the same length and its positions line up.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Int
from torch import Tensor

from lmsci_mi.data.pairs import PromptPairs
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel

__all__ = [
    "IOI_TEMPLATES",
    "IOIBatch",
    "IOIDataset",
    "TextPairs",
    "ioi_dataset",
    "ioi_str_pairs",
    "single_token_words",
]

# {A} and {B} are the first clause's names in order; {S} is the subject's repetition. The prompt
# stops before the indirect object, which is the answer.
IOI_TEMPLATES: tuple[str, ...] = (
    "When {A} and {B} went to the {PLACE}, {S} gave a {OBJECT} to",
    "Then, {A} and {B} went to the {PLACE}. {S} gave a {OBJECT} to",
    "After {A} and {B} went to the {PLACE}, {S} gave a {OBJECT} to",
    "While {A} and {B} were working at the {PLACE}, {S} gave a {OBJECT} to",
    "Then, {A} and {B} had a lot of fun at the {PLACE}. {S} gave a {OBJECT} to",
    "When {A} and {B} got a {OBJECT} at the {PLACE}, {S} decided to give it to",
)

NAMES: tuple[str, ...] = (
    "Mary", "John", "Tom", "James", "Dan", "Sarah", "Paul", "Anna", "Mark", "Lisa", "David",
    "Emma", "Michael", "Laura", "Peter", "Kate", "Chris", "Alice", "Robert", "Jane", "Steve",
    "Amy", "Kevin", "Rachel", "Brian", "Emily", "Jack", "Grace", "Sam", "Helen", "Adam",
    "Linda", "Eric", "Susan", "George", "Ruth", "Henry", "Claire", "Frank", "Rose", "Joe",
    "Martin", "Nancy", "Richard", "Karen", "Tim", "Julia", "Andrew", "Jessica", "Matt",
)
PLACES: tuple[str, ...] = (
    "store", "garden", "restaurant", "school", "hospital", "office", "house", "station",
    "park", "market", "beach", "library",
)
OBJECTS: tuple[str, ...] = (
    "ring", "kiss", "bone", "computer", "necklace", "drink", "snack", "book", "ball", "gift",
    "letter", "flower",
)


def single_token_words(lm: LensModel, words: Sequence[str]) -> tuple[str, ...]:
    """The words that are one token for ``lm`` when preceded by a space (as inside a sentence)."""
    kept = []
    for word in words:
        try:
            lm.token_id(" " + word)
        except ValueError:
            continue
        kept.append(word)
    return tuple(kept)


@dataclass(frozen=True)
class IOIBatch:
    """IOI prompts of one template: equal token length, positions aligned row by row.

    Positions index the tokens under lmsci-mi's policy (sink at 0). Per-row tensors
    (``io_pos`` …) can be passed to the hook registry's ``positions=`` directly.

    Attributes:
        template: the template text.
        prompts, abc_prompts: clean prompts and their ABC corruptions (same row order).
        orders: ``"ABBA"`` (IO named first) or ``"BABA"`` per row.
        tokens, abc_tokens: ``[n, pos]`` token ids.
        io_token, s_token: ``[n]`` answer (indirect object) and subject token ids.
        io_pos, s1_pos, s2_pos, s1_plus_1, end: ``[n]`` positions.
    """

    template: str
    prompts: tuple[str, ...]
    abc_prompts: tuple[str, ...]
    orders: tuple[str, ...]
    tokens: Int[Tensor, "n pos"]
    abc_tokens: Int[Tensor, "n pos"]
    io_token: Int[Tensor, " n"]
    s_token: Int[Tensor, " n"]
    io_pos: Int[Tensor, " n"]
    s1_pos: Int[Tensor, " n"]
    s2_pos: Int[Tensor, " n"]
    s1_plus_1: Int[Tensor, " n"]
    end: Int[Tensor, " n"]

    def __len__(self) -> int:
        return len(self.prompts)


@dataclass(frozen=True)
class IOIDataset:
    """IOI prompts grouped by template (one :class:`IOIBatch` each)."""

    batches: tuple[IOIBatch, ...]
    seed: int
    names: tuple[str, ...]
    places: tuple[str, ...]
    objects: tuple[str, ...]

    @property
    def prompts(self) -> tuple[str, ...]:
        return tuple(p for batch in self.batches for p in batch.prompts)

    def __len__(self) -> int:
        return sum(len(b) for b in self.batches)


def _fill(template: str, first: str, second: str, subject: str, place: str, obj: str) -> str:
    return template.format(A=first, B=second, S=subject, PLACE=place, OBJECT=obj)


def ioi_dataset(
    lm: LensModel,
    n_prompts: int = 60,
    *,
    seed: int = 0,
    templates: Sequence[str] = IOI_TEMPLATES,
) -> IOIDataset:
    """Generate IOI prompts (half ABBA, half BABA) with ABC corruptions, grouped by template.

    Args:
        lm: the model whose tokenizer decides which names, places and objects are single tokens.
        n_prompts: total prompts, spread evenly over the templates.
        seed: the draw depends only on this seed.
        templates: templates with ``{A}``, ``{B}``, ``{S}``, ``{PLACE}``, ``{OBJECT}`` fields.

    Returns:
        :class:`IOIDataset`.

    Raises:
        ValueError: fewer than three single-token names for this model, or no prompts asked for.

    >>> from lmsci_mi import load_model
    >>> data = ioi_dataset(load_model("toy-2l"), n_prompts=4, templates=IOI_TEMPLATES[:1])
    >>> batch = data.batches[0]
    >>> int(batch.tokens[0, batch.s2_pos[0]]) == int(batch.s_token[0])
    True
    """
    if n_prompts < 1:
        raise UserInputError("n_prompts must be at least 1")
    names = single_token_words(lm, NAMES)
    places = single_token_words(lm, PLACES)
    objects = single_token_words(lm, OBJECTS)
    if len(names) < 3 or not places or not objects:
        raise UserInputError(
            f"{lm.name} has only {len(names)} single-token names, {len(places)} places and "
            f"{len(objects)} objects; IOI needs at least 3, 1 and 1"
        )
    rng = random.Random(seed)
    per_template = [n_prompts // len(templates)] * len(templates)
    for i in range(n_prompts % len(templates)):
        per_template[i] += 1
    batches = []
    for template, count in zip(templates, per_template, strict=True):
        if count == 0:
            continue
        rows: list[tuple[str, str, str, str, str]] = []
        for i in range(count):
            io, s, x, y, z = rng.sample(names, 5)
            place, obj = rng.choice(places), rng.choice(objects)
            order = "ABBA" if i % 2 == 0 else "BABA"
            first, second = (io, s) if order == "ABBA" else (s, io)
            clean = _fill(template, first, second, s, place, obj)
            # ABC: three names unrelated to the clean ones, so no name in the corrupted prompt
            # says who the indirect object is; template, place and object stay.
            corrupt = _fill(template, x, y, z, place, obj)
            rows.append((clean, corrupt, order, io, s))
        batches.append(_make_batch(lm, template, rows))
    return IOIDataset(tuple(batches), seed, names, places, objects)


def _make_batch(lm: LensModel, template: str, rows: list[tuple[str, str, str, str, str]]) -> IOIBatch:
    prompts = [r[0] for r in rows]
    tokens = lm.to_tokens(prompts)
    abc_tokens = lm.to_tokens([r[1] for r in rows])
    if abc_tokens.shape != tokens.shape:
        raise ValueError(f"ABC prompts of template {template!r} tokenise to a different length")
    io_ids = [lm.token_id(" " + r[3]) for r in rows]
    s_ids = [lm.token_id(" " + r[4]) for r in rows]
    io_pos, s1_pos, s2_pos = [], [], []
    for row, io_id, s_id in zip(tokens.tolist(), io_ids, s_ids, strict=True):
        io_hits = [i for i, t in enumerate(row) if t == io_id]
        s_hits = [i for i, t in enumerate(row) if t == s_id]
        if len(io_hits) != 1 or len(s_hits) != 2:
            raise ValueError(f"names not found once/twice in {lm.to_str_tokens(row)}")
        io_pos.append(io_hits[0])
        s1_pos.append(s_hits[0])
        s2_pos.append(s_hits[1])
    as_tensor = lambda xs: torch.tensor(xs, dtype=torch.long, device=tokens.device)  # noqa: E731
    s1 = as_tensor(s1_pos)
    return IOIBatch(
        template=template,
        prompts=tuple(prompts),
        abc_prompts=tuple(r[1] for r in rows),
        orders=tuple(r[2] for r in rows),
        tokens=tokens,
        abc_tokens=abc_tokens,
        io_token=as_tensor(io_ids),
        s_token=as_tensor(s_ids),
        io_pos=as_tensor(io_pos),
        s1_pos=s1,
        s2_pos=as_tensor(s2_pos),
        s1_plus_1=s1 + 1,
        end=torch.full_like(s1, tokens.shape[1] - 1),
    )


TextPairs = PromptPairs
"""Deprecated alias of :class:`lmsci_mi.data.pairs.PromptPairs` (the IOI pairs' type before the
one pair type; the same class, so ``TextPairs(clean, corrupted, answers, wrongs, source)`` still
works)."""


def ioi_str_pairs(lm: LensModel, n_prompts: int = 32, *, seed: int = 0) -> PromptPairs:
    """IOI prompts with STR corruption: the subject's second mention replaced by another name.

    This is the EAP-IG paper's IOI corruption (``gen_flipped_prompts(("S2", "RAND"))``): the
    corrupted prompt names a third person as the giver, so neither name is "the other one" and
    the logit difference IO − S collapses. Names are single tokens, so each pair keeps its length.

    >>> from lmsci_mi import load_model
    >>> pairs = ioi_str_pairs(load_model("toy-2l"), 2)
    >>> len(pairs.clean), pairs.clean[0] != pairs.corrupted[0]
    (2, True)
    """
    names = single_token_words(lm, NAMES)
    rng = random.Random(seed)
    clean, corrupted, answers, wrongs = [], [], [], []
    for batch in ioi_dataset(lm, n_prompts, seed=seed).batches:
        for i, prompt in enumerate(batch.prompts):
            io_id, s_id = int(batch.io_token[i]), int(batch.s_token[i])
            subject = _name_of(lm, s_id, names)
            io_name = _name_of(lm, io_id, names)
            other = rng.choice([n for n in names if n not in (subject, io_name)])
            head, sep, tail = prompt.rpartition(f" {subject} ")
            if not sep:
                raise UserInputError(f"IOI prompt {prompt!r} has no second mention of {subject!r}")
            clean.append(prompt)
            corrupted.append(f"{head} {other} {tail}")
            answers.append(io_id)
            wrongs.append(s_id)
    return PromptPairs(
        tuple(clean),
        tuple(corrupted),
        tuple(answers),
        tuple(wrongs),
        f"IOI ({len(clean)} prompts, STR: S2 -> a third name, seed {seed})",
    )


def _name_of(lm: LensModel, token: int, names: tuple[str, ...]) -> str:
    for name in names:
        if lm.token_id(" " + name) == token:
            return name
    raise ValueError(f"token {token} is not one of the IOI names")

"""Contrastive activation addition (CAA) as Rimsky et al. define it ("Steering Llama 2 via
Contrastive Activation Addition", ACL 2024, arXiv:2312.06681).

The vector is the mean, over multiple-choice (A/B) items, of the block output at the answer letter
when the letter matches the behaviour minus when it does not; it is added at the positions from
the end of the instruction on (the instruction's last token and every token after it, generated
ones included). The difference of means over free text is ActAdd-style, in
:func:`lmsci_mi.steering.vectors.mean_difference_vector`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field

import torch
from jaxtyping import Float
from torch import Tensor

from lmsci_mi.collect import CollectConfig, collect_activations
from lmsci_mi.config import Config, config
from lmsci_mi.data.ab_items import ABItem, Letter
from lmsci_mi.errors import UserInputError
from lmsci_mi.generation import prompt_lengths
from lmsci_mi.hooks import PositionScope
from lmsci_mi.model import LensModel
from lmsci_mi.steering.vectors import SteeringVector, _site_hook

__all__ = [
    "ANSWER_MARKER",
    "CAAConfig",
    "ab_behaviour_probability",
    "ab_prompt",
    "caa_scope",
    "caa_vector",
    "open_prompt",
]

ANSWER_MARKER = "\nAnswer:"
"""The end of the instruction: the base-model format of CAA (``Input: … Response:``) with the
marker ``Answer:``; the A/B prompt continues with `` (`` and the letter."""


@config
class CAAConfig(Config):
    """Where a CAA vector is read and added.

    Attributes:
        layer: the block whose output is read (and steered); Rimsky et al. sweep every layer and
            use 13 of Llama-2-7B's 32.
        site: the site read and steered; CAA's is the block output, ``resid_post``.
        token_budget: tokens per forward pass while reading.
    """

    layer: int = field(default=0, metadata={
        "paper": "13 of Llama-2-7B-chat's 32 (14 of 13B's 40)",
        "paper_source": "Rimsky et al. 2024, code: nrimsky/CAA script.sh (the layer after the sweep)",
        "why": "no layer carries over between models: benchmarks/caa.py chooses it per method on dev "
               "items (docs/data/caa.json)",
        "help": "layer read and steered", "ge": 0})
    site: str = field(default="resid_post", metadata={
        "paper": "resid_post", "paper_source": "Rimsky et al. 2024, code: nrimsky/CAA BlockOutputWrapper",
        "help": "site read and steered (CAA: the block output)"})
    token_budget: int = field(default=8192, metadata={"help": "tokens per forward pass", "ge": 1})


def ab_prompt(item: ABItem, letter: Letter | None = None) -> str:
    """The A/B prompt: the question, both answers, ``Answer: (`` and, if given, the letter.

    >>> from lmsci_mi.data.ab_items import ABItem
    >>> print(ab_prompt(ABItem("How was it?", ("Great", "Awful"), "A"), "B"))
    How was it?
    <BLANKLINE>
    (A) Great
    (B) Awful
    Answer: (B
    """
    a, b = item.options
    return f"{item.question}\n\n(A) {a}\n(B) {b}{ANSWER_MARKER} (" + (letter or "")


def open_prompt(item: ABItem) -> str:
    """The open-ended prompt: the question alone, ending at the instruction's end (CAA's
    open-ended test questions are the A/B questions without their answers).

    >>> from lmsci_mi.data.ab_items import ABItem
    >>> open_prompt(ABItem("How was it?", ("Great", "Awful"), "A"))
    'How was it?\\nAnswer:'
    """
    return f"{item.question}{ANSWER_MARKER}"


def _letter_tokens(lm: LensModel, item: ABItem, letter: Letter) -> list[int]:
    """The token ids of ``item``'s A/B prompt ending at ``letter``, checked to end with the letter
    as its own token (CAA's index −2 assumes Llama's tokens of ``(A)``; here it is located)."""
    prefix = lm.encode(ab_prompt(item))
    ids = lm.encode(ab_prompt(item, letter))
    if ids[: len(prefix)] != prefix or len(ids) != len(prefix) + 1:
        raise UserInputError(
            f"{lm.name}'s tokenizer merges the answer letter {letter!r} with the text before it, "
            "so no single position holds the letter"
        )
    return ids


def caa_vector(lm: LensModel, items: Sequence[ABItem], config: CAAConfig | None = None) -> SteeringVector:
    """CAA: the mean over ``items`` of the activation at the behaviour's answer letter minus that at
    the other letter, at ``config.layer``'s block output.

    Reads the model only. Each item gives two prompts, the same question and answers followed by
    ``Answer: (A`` or ``Answer: (B``; the activation is read at the letter token. Add the vector
    over :func:`caa_scope` (the positions from the instruction's end), with a multiplier.

    Args:
        lm: the model.
        items: A/B items (:func:`lmsci_mi.data.ab_items.ab_items`), at least one.
        config: the layer and site.

    Returns:
        A :class:`SteeringVector` (``method="caa"``), the raw mean difference.

    Raises:
        ValueError: no items, a layer out of range, an unknown site, a tokenizer that merges the
            letter with the text before it.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.data.ab_items import ab_items
    >>> lm = load_model("toy-2l")
    >>> v = caa_vector(lm, ab_items("sentiment").items[:4], CAAConfig(layer=1))
    >>> v.hook, v.method, v.n_positive
    ('blocks.1.hook_resid_post', 'caa', 4)
    """
    config = config or CAAConfig()
    if not items:
        raise UserInputError("give at least one A/B item")
    hook = _site_hook(lm, config.site, config.layer)
    sequences = [_letter_tokens(lm, item, letter) for item in items for letter in (item.matching, item.not_matching)]
    acts = collect_activations(
        lm, sequences, [hook], positions=[[len(s) - 1] for s in sequences],
        config=CollectConfig(token_budget=config.token_budget, progress=False),
    )
    rows = acts.acts[hook].float()[acts.example.argsort()]  # one row per prompt, in prompt order
    difference = (rows[0::2] - rows[1::2]).mean(0)
    return SteeringVector(
        values=difference.to(lm.device),
        axes=("d",),
        labels=((),),
        meta=lm.meta([ab_prompt(i) for i in items], params=config.params(), data_source="A/B items (CAA)"),
        hook=hook,
        method="caa",
        n_positive=len(items),
        n_negative=len(items),
    )


def caa_scope(lm: LensModel, prompts: Sequence[str]) -> PositionScope:
    """CAA's positions for ``prompts``: the instruction's last token (the end of ``Answer:``) and
    every position after it, generated ones included.

    A prompt that ends at the instruction's end (:func:`open_prompt`) gets
    ``PositionScope.from_last_prompt()``; an A/B prompt, which goes on with `` (``, gets its last
    ``k`` prompt positions, ``PositionScope.prompt(-k)`` (what A/B scoring, one forward pass,
    reads). Every prompt must have the same ``k``.

    Raises:
        ValueError: a prompt without the marker, or prompts with different tails after it.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.data.ab_items import ab_items
    >>> lm, item = load_model("toy-2l"), ab_items("sentiment").items[0]
    >>> caa_scope(lm, [ab_prompt(item)]), caa_scope(lm, [open_prompt(item)]).kind
    (PositionScope(kind='prompt', start=-2, stop=None, exclude=None), 'from_last_prompt')
    """
    tails = set()
    for prompt in prompts:
        end = prompt.rfind(ANSWER_MARKER)
        if end < 0:
            raise UserInputError(f"no instruction end {ANSWER_MARKER!r} in prompt {prompt[:60]!r}")
        head, ids = lm.encode(prompt[: end + len(ANSWER_MARKER)]), lm.encode(prompt)
        if ids[: len(head)] != head:
            raise UserInputError(f"the text after {ANSWER_MARKER!r} merges with it into one token")
        tails.add(len(ids) - len(head))
    if len(tails) != 1:
        raise UserInputError(f"the prompts go on for different numbers of tokens after the instruction: {sorted(tails)}")
    (tail,) = tails
    return PositionScope.from_last_prompt() if tail == 0 else PositionScope.prompt(-(tail + 1))


@torch.no_grad()
def ab_behaviour_probability(
    lm: LensModel,
    items: Sequence[ABItem],
    vector: SteeringVector | None = None,
    multiplier: float = 0.0,
    scope: PositionScope | None = None,
    *,
    batch_size: int = 32,
) -> Float[Tensor, " item"]:
    """Per item, p(behaviour letter) / (p(A) + p(B)) after ``Answer: (`` (CAA's A/B metric), with
    ``multiplier × vector`` added over ``scope`` (None: :func:`caa_scope`, CAA's positions).

    Reads the model only (the vector is attached for the forward pass and removed).

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.data.ab_items import ab_items
    >>> lm = load_model("toy-2l")
    >>> p = ab_behaviour_probability(lm, ab_items("topic").items[:3])
    >>> tuple(p.shape), bool(((p > 0) & (p < 1)).all())
    ((3,), True)
    """
    if not items:
        raise UserInputError("give at least one A/B item")
    letters = [lm.continuation_ids(letter) for letter in ("A", "B")]
    if any(len(ids) != 1 for ids in letters):
        raise UserInputError(f"{lm.name} does not spell the letters A and B as one token each")
    letter_ids = torch.tensor([ids[0] for ids in letters], device=lm.device)
    prompts = [ab_prompt(item) for item in items]
    if vector is not None and scope is None:
        scope = caa_scope(lm, prompts)
    out = []
    for start in range(0, len(prompts), batch_size):
        batch = lm.encode_batch(prompts[start : start + batch_size])
        with prompt_lengths(batch.lengths):
            if vector is None:
                logits = lm(batch.tokens)
            else:
                with vector.apply(lm, multiplier, scope):
                    logits = lm(batch.tokens)
        last = logits[torch.arange(len(batch.lengths)), batch.lengths - 1].float()
        pair = last[:, letter_ids].softmax(-1)  # p(A), p(B) renormalised over the two letters
        out.append(pair)
    pairs = torch.cat(out)
    matching = torch.tensor([0 if item.behaviour == "A" else 1 for item in items], device=pairs.device)
    return pairs[torch.arange(len(items)), matching].cpu()

"""CAA (Rimsky et al. 2024) on the toy model: the vector is the letter-position mean difference, it is
added from the instruction's end on and nowhere before; the bundled A/B items; bad input."""

from __future__ import annotations

import json
from importlib import resources

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.data.ab_items import AB_BEHAVIOURS, ABItem, ab_items
from lmsci_mi.generation import prompt_lengths
from lmsci_mi.hooks import PositionScope
from lmsci_mi.sites import hook_name
from lmsci_mi.steering import steering_vector
from lmsci_mi.steering.caa import (
    CAAConfig,
    ab_behaviour_probability,
    ab_prompt,
    caa_scope,
    caa_vector,
    open_prompt,
)

ITEMS = ab_items("sentiment").items[:5]  # letters A, B, A, B, A


def test_the_vector_is_the_mean_difference_at_the_answer_letter(tiny: LensModel) -> None:
    """Computed by hand: TransformerLens's own cache of each full prompt, read at its letter."""
    hook = hook_name("resid_post", 1)
    diffs = []
    for item in ITEMS:
        reads = {}
        for letter in ("A", "B"):
            ids = tiny.encode(ab_prompt(item, letter))
            assert tiny.tokenizer.decode(ids[-1:]) == letter  # the read position holds the letter
            _, cache = tiny.model.run_with_cache(torch.tensor([ids], device=tiny.device), names_filter=hook)
            reads[letter] = cache[hook][0, -1]
        diffs.append(reads[item.matching] - reads[item.not_matching])
    v = caa_vector(tiny, ITEMS, CAAConfig(layer=1))
    torch.testing.assert_close(v.values, torch.stack(diffs).mean(0), atol=1e-5, rtol=1e-5)
    assert (v.hook, v.method, v.n_positive, v.n_negative) == (hook, "caa", 5, 5)


def _layer0_shift(lm: LensModel, prompts: list[str], scope: PositionScope) -> torch.Tensor:
    """How far each position's layer-0 block output moves under a unit vector with coefficient 2,
    in a right-padded batch (read as layer 1's input, downstream of the addition)."""
    v = steering_vector(lm, torch.ones(lm.cfg.d_model), 0).unit()
    batch = lm.encode_batch(prompts)
    read = hook_name("resid_pre", 1)
    with prompt_lengths(batch.lengths):
        _, clean = lm.model.run_with_cache(batch.tokens, names_filter=read)
        with v.apply(lm, 2.0, scope):
            _, steered = lm.model.run_with_cache(batch.tokens, names_filter=read)
    return (steered[read] - clean[read]).norm(dim=-1)


def test_ab_prompts_are_steered_from_the_instruction_end_on(tiny: LensModel) -> None:
    """``Answer:``'s last token and `` (`` move by exactly 2; every earlier position is untouched."""
    items = [ITEMS[0], ABItem("Why?", ("Yes", "No"), "B")]  # prompts of different lengths
    prompts = [ab_prompt(i) for i in items]
    scope = caa_scope(tiny, prompts)
    shift = _layer0_shift(tiny, prompts, scope)
    for row, prompt in enumerate(prompts):
        ids = tiny.encode(prompt)
        end = len(tiny.encode(prompt[: prompt.rfind("Answer:") + len("Answer:")])) - 1
        assert tiny.tokenizer.decode(ids[end : end + 2]) == ": ("
        torch.testing.assert_close(shift[row, end : len(ids)], torch.full((len(ids) - end,), 2.0))
        assert shift[row, :end].abs().max() == 0


def test_open_prompts_are_steered_from_their_last_token(tiny: LensModel) -> None:
    prompts = [open_prompt(i) for i in ITEMS[:2]]
    scope = caa_scope(tiny, prompts)
    assert scope == PositionScope.from_last_prompt()  # and every generated token
    shift = _layer0_shift(tiny, prompts, scope)
    for row, prompt in enumerate(prompts):
        n = len(tiny.encode(prompt))
        assert shift[row, n - 1] == pytest.approx(2.0, abs=1e-5) and shift[row, : n - 1].abs().max() == 0


@torch.no_grad()
def test_ab_probability_is_the_letter_softmax_and_zero_is_unsteered(tiny: LensModel) -> None:
    p = ab_behaviour_probability(tiny, ITEMS)
    a, b = (tiny.continuation_ids(x)[0] for x in "AB")
    for item, got in zip(ITEMS, p.tolist(), strict=True):
        logits = tiny(tiny.to_tokens(ab_prompt(item)))[0, -1, [a, b]].float().softmax(-1)
        assert got == pytest.approx(float(logits[0 if item.behaviour == "A" else 1]), abs=1e-5)
    v = caa_vector(tiny, ITEMS, CAAConfig(layer=0))
    torch.testing.assert_close(ab_behaviour_probability(tiny, ITEMS, v, 0.0), p)
    assert not torch.allclose(ab_behaviour_probability(tiny, ITEMS, v.scaled(50.0), 1.0), p)
    assert tiny.hooks.attached_count() == 0


@pytest.mark.parametrize("behaviour", AB_BEHAVIOURS)
def test_the_bundled_items(behaviour: str) -> None:
    """At least 100 items, letters balanced, distinct questions, a stated source and scorer."""
    bundle = ab_items(behaviour)
    raw = json.loads(resources.files("lmsci_mi.data").joinpath("steering", f"ab_{behaviour}.json").read_text())
    assert set(raw) >= {"source", "scored_by", "items"} and set(raw["items"][0]) == {"question", "options", "behaviour"}
    assert len(bundle) >= 100 and "written for lmsci-mi" in bundle.source.lower()
    assert sum(i.behaviour == "A" for i in bundle.items) * 2 == len(bundle)
    assert len({i.question for i in bundle.items}) == len(bundle)
    assert all(i.options[0] != i.options[1] for i in bundle.items)
    for part in bundle.split(50, 10, 40):  # the benchmark's split keeps both letters balanced
        assert sum(i.behaviour == "A" for i in part) * 2 == len(part)


def test_bad_input(tiny: LensModel) -> None:
    with pytest.raises(ValueError, match="at least one"):
        caa_vector(tiny, [])
    with pytest.raises(ValueError, match="out of range"):
        caa_vector(tiny, ITEMS, CAAConfig(layer=5))
    with pytest.raises(ValueError, match="'A' or 'B'"):
        ABItem("Why?", ("Yes", "No"), "C")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="two non-empty"):
        ABItem("Why?", ("Yes", " "), "A")
    with pytest.raises(KeyError, match="sentiment"):
        ab_items("sycophancy")
    with pytest.raises(ValueError, match="instruction end"):
        caa_scope(tiny, ["no marker here"])
    with pytest.raises(ValueError, match="different numbers"):
        caa_scope(tiny, [ab_prompt(ITEMS[0]), open_prompt(ITEMS[0])])
    with pytest.raises(ValueError, match="at least one"):
        ab_behaviour_probability(tiny, [])
    with pytest.raises(ValueError, match="cannot split"):
        ab_items("topic").split(90, 20)

"""Unit tests of lmsci_mi.editing.wild (WILD-EM) on the tiny random model: the stop rules, the
normalisation, locality, batching, the cache, and the errors that name their fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lmsci_mi import load_model
from lmsci_mi.editing import (
    EditRequest,
    ROMEConfig,
    WildConfig,
    WildEvaluation,
    evaluate_wild,
    wild_generate,
)
from lmsci_mi.editing import wild as wild_module
from lmsci_mi.editing.stats import StatsConfig, key_statistics
from lmsci_mi.editing.wild import (
    WildGeneration,
    answer_matches,
    normalize_answer,
    score_facts,
    stop_token_ids,
    wild_facts,
)
from lmsci_mi.errors import UserInputError
from lmsci_mi.generation import GenerationConfig, generate
from lmsci_mi.model import LensModel
from lmsci_mi.weights import WeightEdit

EIFFEL = EditRequest(
    "{} is located in the city of",
    "The Eiffel Tower",
    " Rome",
    " Paris",
    ("The Eiffel Tower can be found in the city of", "Where is the Eiffel Tower? In the city of"),
    ("The Louvre is located in the city of", "Notre-Dame is located in the city of"),
)
NEAR = [EIFFEL.neighborhood_prompts]
SHORT = WildConfig(max_new_tokens=6)


@pytest.fixture(scope="module")
def tiny() -> LensModel:
    return load_model("toy-2l", device="cpu")


def forced(lm: LensModel, token: int) -> WeightEdit:
    """A weight change that makes ``token`` every position's argmax (through b_U)."""
    delta = torch.zeros_like(lm.model.unembed.b_U)
    delta[token] = 1e4
    return WeightEdit(lm, {"unembed.b_U": delta})


# ---------------------------------------------------------------------- normalisation and match


@pytest.mark.parametrize(
    ("generation", "target", "matches"),
    [
        (" Rome", " Rome", True),
        (" rome, the capital of Italy", " Rome", True),  # case and punctuation go
        (" the Rome", " Rome", True),  # an article goes
        (" Romeo and Juliet", " Rome", False),  # a match ends at a word boundary
        (" New York City", " New York", True),
        (" New", " New York", False),  # the whole target must be there
        ("", " Rome", False),
        (" Paris", " Rome", False),
    ],
)
def test_answer_matches_at_a_word_boundary_after_squad_normalisation(generation, target, matches) -> None:
    assert answer_matches(generation, target) is matches


def test_normalisation_is_squads() -> None:
    assert normalize_answer("  The  Eiffel-Tower, in   an A.I. lab!") == "eiffeltower in ai lab"


def test_a_target_with_no_word_is_refused_naming_the_fix() -> None:
    with pytest.raises(UserInputError, match="give a target with a word in it"):
        answer_matches(" Rome", " the ...")


def test_an_empty_stop_string_is_refused_naming_the_fix() -> None:
    with pytest.raises(UserInputError, match="leave it out"):
        WildConfig(stop_strings=(".", ""))


# ---------------------------------------------------------------------- stop rules


def test_stop_tokens_are_eos_and_every_token_holding_a_stop_string(tiny: LensModel) -> None:
    stops = stop_token_ids(tiny, (".", "\n"))
    tokenizer = tiny.tokenizer
    assert tokenizer.eos_token_id in stops
    for text in (".", "\n", "...", ").", "\n\n"):
        (token,) = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert token in stops, text
    assert tiny.token_id(" Rome") not in stops


@pytest.mark.parametrize("stop", [".", "\n", "eos"])
def test_a_generation_ends_at_the_first_stop_token(tiny: LensModel, stop: str) -> None:
    token = tiny.tokenizer.eos_token_id if stop == "eos" else tiny.token_id(stop)
    with forced(tiny, token).apply():
        generations = wild_generate(tiny, ["The cat sat on the", "Hello"], SHORT)
    assert [g.tokens for g in generations] == [(token,), (token,)]
    assert [g.text for g in generations] == ["", ""]


def test_without_a_stop_a_generation_runs_to_max_new_tokens(tiny: LensModel) -> None:
    rome = tiny.token_id(" Rome")
    with forced(tiny, rome).apply():
        (g,) = wild_generate(tiny, ["The cat sat on the"], SHORT)
    assert g.tokens == (rome,) * 6 and g.text == " Rome" * 6


def test_the_text_ends_before_the_stop_string_and_a_split_stop_string_is_caught(tiny: LensModel) -> None:
    tokens = tiny.tokenizer(" Rome, Italy. It is", add_special_tokens=False)["input_ids"]
    dot = tokens.index(tiny.token_id("."))
    cut = wild_module._cut(tiny, "p", tokens, WildConfig())
    assert cut.tokens == tuple(tokens[: dot + 1]) and cut.text == " Rome, Italy"
    # "e, I" spans " Rome", "," and " Italy": the tokens end with the one that completes it.
    cut = wild_module._cut(tiny, "p", tokens, WildConfig(stop_strings=("e, I",)))
    assert cut.tokens == tuple(tokens[:3]) and cut.text == " Rom"


def test_generate_takes_several_stop_ids(tiny: LensModel) -> None:
    greedy = GenerationConfig(max_new_tokens=8, temperature=0.0)
    full = generate(tiny, ["The cat sat on the", "Hello there"], greedy).tokens
    stops = {full[0][2], full[1][4]}
    cut = generate(tiny, ["The cat sat on the", "Hello there"], greedy, stop_at=stops).tokens
    for row, whole in zip(cut, full, strict=True):
        end = next(k for k, t in enumerate(whole) if t in stops)
        assert row == whole[: end + 1]


# ---------------------------------------------------------------------- batching and cache


def test_a_batch_generates_what_each_prompt_generates_alone(tiny: LensModel) -> None:
    prompts = ["The cat sat on the", "Hi", "The Eiffel Tower is located in the city of", "Hi", "A b c d e f"]
    together = wild_generate(tiny, prompts, SHORT.replace(batch_size=2))
    alone = [wild_generate(tiny, [p], SHORT)[0] for p in prompts]
    assert together == tuple(alone)


def test_the_cache_returns_what_was_generated(tiny: LensModel, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path))
    first = wild_generate(tiny, ["The cat sat on the", "Hi"], SHORT, use_cache=True)

    def refuse(*args, **kwargs):
        raise AssertionError("generated again instead of reading the cache")

    monkeypatch.setattr(wild_module, "generate", refuse)
    assert wild_generate(tiny, ["Hi", "The cat sat on the"], SHORT, use_cache=True) == first[::-1]
    with pytest.raises(AssertionError, match="generated again"):  # another config: another entry
        wild_generate(tiny, ["Hi"], SHORT.replace(max_new_tokens=5), use_cache=True)


# ---------------------------------------------------------------------- scoring


def test_locality_is_identity_with_the_unedited_generations(tiny: LensModel) -> None:
    prompts = wild_module._prompts_of([EIFFEL], NEAR)
    reference = {g.prompt: g for g in wild_generate(tiny, prompts, SHORT)}
    (same,) = wild_facts(tiny, [EIFFEL], NEAR, reference, SHORT)
    assert same.neighbours_kept == (True, True) and same.scores()[2] == 1.0
    with forced(tiny, tiny.token_id(" Rome")).apply():  # an "edit" that says Rome everywhere
        (edited,) = wild_facts(tiny, [EIFFEL], NEAR, reference, SHORT)
    assert edited.neighbours_kept == (False, False)
    assert edited.scores() == (1.0, 1.0, 0.0, 0.0)  # rewrite, paraphrase, locality, true answer


def test_score_facts_names_what_is_missing() -> None:
    generation = WildGeneration(EIFFEL.rewrite_prompt, (1,), " Rome")
    with pytest.raises(UserInputError, match=r"one .*per fact"):
        score_facts([EIFFEL], [], {}, {})
    with pytest.raises(UserInputError, match=r"generations lack 4 prompt.*wild_generate"):
        score_facts([EIFFEL], NEAR, {EIFFEL.rewrite_prompt: generation}, {})


def test_a_model_without_a_tokenizer_is_refused_naming_the_fix(tiny: LensModel, monkeypatch) -> None:
    monkeypatch.setattr(tiny, "tokenizer", None)
    with pytest.raises(UserInputError, match="load a model with a tokenizer"):
        wild_generate(tiny, ["Hi"])


def test_evaluate_wild_restores_the_model_and_round_trips(tiny: LensModel, tmp_path: Path) -> None:
    stats = key_statistics(tiny, [0], StatsConfig(n_tokens=1024, seq_len=64), cache_dir=tmp_path / "stats")
    before = {k: v.clone() for k, v in tiny.model.state_dict().items()}
    ev = evaluate_wild(tiny, [EIFFEL], ROMEConfig(layer=0, n_contexts=2, steps=4), stats=stats, wild=SHORT,
                       use_cache=False)
    assert all(torch.equal(v, before[k]) for k, v in tiny.model.state_dict().items())
    assert ev.labels[0] == ("unedited", "rome") and ev.metric("locality", edited=False) == 100.0
    assert ev.per_fact.shape == (2, 1, 4) and ev.facts[1][0].rewrite.prompt == EIFFEL.rewrite_prompt
    assert ev.meta.params["wild.max_new_tokens"] == 6
    ev.save(tmp_path / "wild")
    assert WildEvaluation.load(tmp_path / "wild") == ev

"""ICL prompt sets (lmsci_mi.icl.prompts) and their data (lmsci_mi/data/icl/): token spans on a toy
tokenizer and on the cached SmolLM2 tokenizer, seeded drawing, the dev / held-out split, bad input,
and every item of every data file. Reads tokenizers only; no model is run."""

from __future__ import annotations

import json
import re
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from lmsci_mi.errors import UnknownNameError, UserInputError
from lmsci_mi.icl import (
    ICL_CLASSIFICATION_TASKS,
    ICL_FORMATS,
    ICL_PAIR_TASKS,
    ICL_TASKS,
    ICLItem,
    ICLPromptConfig,
    ICLTask,
    ICLTokenizer,
    fact_relation_task,
    icl_prompts,
    icl_split,
    load_icl_task,
    zero_shot_prompts,
)

TOKENIZERS = Path.home() / ".cache" / "lmsci-mi" / "tokenizers"

# The label words the bundled tasks use, each set in the task's label order (the first is the
# default); each must be one token, with its leading space, for both bundled tokenizers.
LABEL_WORDS = {
    "sentiment": [["positive", "negative"], ["good", "bad"], ["great", "terrible"]],
    "topic": [["sports", "business", "science", "world"]],
    "animal_plant": [["animal", "plant"]],
    "country_city": [["country", "city"]],
    "language": [["English", "French", "German", "Spanish"]],
    "parity": [["even", "odd"]],
}


class ToyTokenizer:
    """Whitespace-attached words as tokens (" Output:", "\\n"), ids given on first sight; id 0 is
    the sink. Enough of the Hugging Face call signature for the prompt builder."""

    PATTERN = re.compile(r"\n| ?[^\s]+")

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {"<s>": 0}
        self.calls: list[str] = []

    def __call__(self, text: str, add_special_tokens: bool = False,
                 return_offsets_mapping: bool = False) -> dict[str, Any]:
        self.calls.append(text)
        found = list(self.PATTERN.finditer(text))
        ids = [self.vocab.setdefault(m.group(), len(self.vocab)) for m in found]
        out: dict[str, Any] = {"input_ids": ids}
        if return_offsets_mapping:
            out["offset_mapping"] = [m.span() for m in found]
        return out

    def decode(self, ids: list[int]) -> str:
        words = {i: w for w, i in self.vocab.items()}
        return "".join(words[i] for i in ids)


def _toy_task() -> ICLTask:
    items = tuple(ICLItem(f"w{i}", "yes" if i % 2 else "no") for i in range(40))
    return ICLTask("toy", "classification", items, labels=("yes", "no"), label_words=(("yes", "no"),))


def _cached(prefix: str) -> ICLTokenizer:
    folders = sorted(TOKENIZERS.glob(f"{prefix}*")) if TOKENIZERS.is_dir() else []
    if not folders:
        pytest.skip(f"no cached {prefix} tokenizer under {TOKENIZERS}")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folders[0])
    return ICLTokenizer(tokenizer, tokenizer.bos_token_id if prefix == "gemma" else 0, prefix)


@pytest.fixture(scope="module")
def smollm2_tokenizer() -> ICLTokenizer:
    return _cached("SmolLM2")


def test_spans_on_a_toy_tokenizer() -> None:
    toy = ICLTokenizer(ToyTokenizer(), 0, "toy")
    prompts = icl_prompts(toy, _toy_task(), ICLPromptConfig(n_demonstrations=2))
    for p in prompts:
        # <s> Input: wA Output: yes \n Input: wB Output: no \n Input: wQ Output:
        assert p.tokens[0] == 0 and len(p.tokens) == 14 and p.final_position == 13
        first, second = p.demonstrations
        assert (first.span, first.input, first.label, first.delimiter) == (range(1, 5), range(2, 3), range(4, 5), range(5, 6))
        assert (second.span, second.input, second.label, second.delimiter) == (range(6, 10), range(7, 8), range(9, 10), range(10, 11))
        assert p.query_span == range(12, 13) and p.label_positions == (4, 9)
        assert toy.tokenizer.decode([p.tokens[12]]) == " " + _toy_task().items[p.query].input
        assert [toy.tokenizer.decode([p.tokens[d.label_position]]) for d in p.demonstrations] == [
            " " + d.word for d in p.demonstrations]
        assert p.answer_token == p.label_tokens[("yes", "no").index(p.gold)]


def test_spans_on_the_smollm2_tokenizer(smollm2_tokenizer: ICLTokenizer) -> None:
    tok = smollm2_tokenizer.tokenizer
    task = load_icl_task("topic")
    prompts = icl_prompts(smollm2_tokenizer, task, ICLPromptConfig(n_demonstrations=4, n_prompts=5))
    for p in prompts:
        assert list(p.tokens) == [0, *tok(p.text, add_special_tokens=False)["input_ids"]]

        def text(span: range, p: Any = p) -> str:
            return tok.decode(list(p.tokens[span.start:span.stop]))

        for d in p.demonstrations:
            assert text(d.input).strip() == task.items[d.item].input
            assert text(d.label) == " " + d.word and text(d.delimiter) == "\n"
            assert text(d.span) == f"Input: {task.items[d.item].input} Output: {d.word}"
        assert text(p.query_span).strip() == task.items[p.query].input
        assert text(range(p.final_position, p.final_position + 1)) == ":"
        assert tok.decode([p.answer_token]) == " " + p.answer


def test_the_prompt_tokens_are_the_models_encoding() -> None:
    from lmsci_mi import load_model

    lm = load_model("toy-2l")
    prompts = icl_prompts(lm, "antonyms", ICLPromptConfig(n_demonstrations=5, n_prompts=3))
    assert all(list(p.tokens) == lm.encode(p.text) for p in prompts)


# A check of the shipped label words (about 2 s for SmolLM2's tokenizer, 6 s for Gemma's 262k-token
# vocabulary): the whole suite runs it; the fast suite's tokenizer tests check the mechanism.
@pytest.mark.slow
@pytest.mark.parametrize("prefix", ["SmolLM2", "gemma"])
def test_label_words_are_single_tokens_for_both_tokenizers(prefix: str) -> None:
    encoder = _cached(prefix)
    for name in ICL_CLASSIFICATION_TASKS:
        task = load_icl_task(name)
        assert [list(words) for words in task.label_words] == LABEL_WORDS[name]
        for words in task.label_words:
            assert all(len(encoder.tokenizer(" " + w, add_special_tokens=False)["input_ids"]) == 1
                       for w in words), (prefix, name, words)
    # Every task builds in the default format, its spans in order and its labels checked in context.
    for name in ICL_TASKS:
        for p in icl_prompts(encoder, name, ICLPromptConfig(n_demonstrations=4, n_prompts=8)):
            stops = [0] + [x for d in p.demonstrations for x in (d.span.start, d.label.stop, d.delimiter.stop)]
            assert stops == sorted(stops) and p.query_span.start >= stops[-1]


def test_seeded_drawing_is_reproducible_and_prompt_by_prompt() -> None:
    toy = ICLTokenizer(ToyTokenizer(), 0, "toy")
    config = ICLPromptConfig(n_demonstrations=6, label_set=None)
    a, b = icl_prompts(toy, "sentiment", config), icl_prompts(toy, "sentiment", config)
    assert a.prompts == b.prompts
    other = icl_prompts(toy, "sentiment", config.replace(seed=1))
    assert [p.demonstrations for p in other] != [p.demonstrations for p in a]
    assert {p.label_words for p in a} == {("positive", "negative"), ("good", "bad"), ("great", "terrible")}
    # A prompt depends on its query and the seed only, not on which other prompts are drawn.
    subset = icl_prompts(toy, "sentiment", config.replace(n_prompts=7))
    by_query = {p.query: p for p in a}
    assert len(subset) == 7 and all(by_query[p.query] == p for p in subset)
    # Balanced: 6 demonstrations over two labels are 3 and 3.
    assert all(Counter(d.shown for d in p.demonstrations) == {"positive": 3, "negative": 3} for p in a)


def test_dev_and_held_out_are_disjoint_and_prompts_stay_in_their_split() -> None:
    toy = ICLTokenizer(ToyTokenizer(), 0, "toy")
    for name in ("language", "sentiment", "antonyms"):
        task = load_icl_task(name)
        split = icl_split(task)
        assert not set(split.dev) & set(split.held_out)
        assert sorted(split.dev + split.held_out) == list(range(len(task)))
        groups = {s: {task.items[i].split_key for i in split[s]} for s in ("dev", "held_out")}
        assert not groups["dev"] & groups["held_out"]  # a sentence's translations stay together
        for s in ("dev", "held_out"):
            for p in icl_prompts(toy, task, ICLPromptConfig(n_demonstrations=4), split=s):  # type: ignore[arg-type]
                used = {p.query} | {d.item for d in p.demonstrations}
                assert used <= set(split[s])
                assert task.items[p.query].split_key not in {task.items[d.item].split_key for d in p.demonstrations}
    counts = load_icl_task("sentiment").counts()
    held = Counter(load_icl_task("sentiment").items[i].output for i in icl_split(load_icl_task("sentiment")).held_out)
    assert held == {k: v // 2 for k, v in counts.items()}  # stratified


def test_bad_input_raises_before_any_prompt_is_tokenised() -> None:
    toy = ICLTokenizer(ToyTokenizer(), 0, "toy")
    with pytest.raises(UserInputError, match="zero_shot=True"):
        ICLPromptConfig(n_demonstrations=0)
    with pytest.raises(UserInputError, match="set n_demonstrations=0"):
        ICLPromptConfig(zero_shot=True)
    cases = [
        (ICLPromptConfig(n_demonstrations=150), "more than the 9[89] items"),
        (ICLPromptConfig(n_prompts=101), "n_prompts=101 is more than the 100 dev items"),
        (ICLPromptConfig(label_words=("positive",)), "one\ndistinct word per label|distinct word per label"),
        (ICLPromptConfig(label_set=3), "label_set=3"),
    ]
    for config, message in cases:
        toy.tokenizer.calls.clear()
        with pytest.raises(UserInputError, match=message):
            icl_prompts(toy, "sentiment", config)
        assert all(len(text.split()) == 1 for text in toy.tokenizer.calls), config  # label words only
    rare = ICLTask("rare", "classification", (*(ICLItem(f"a{i}", "a") for i in range(2)),
                                              *(ICLItem(f"b{i}", "b") for i in range(40))), labels=("a", "b"))
    with pytest.raises(UserInputError, match=r"needs 2 'a' items, but a dev prompt of task 'rare' has [01]"):
        icl_prompts(toy, rare, ICLPromptConfig(n_demonstrations=4, label_words=("yes", "no")))
    assert icl_prompts(toy, rare, ICLPromptConfig(n_demonstrations=4, label_words=("yes", "no"), balanced=False))
    with pytest.raises(UserInputError, match="pair task"):
        icl_prompts(toy, "antonyms", ICLPromptConfig(label_mode="flipped"))
    with pytest.raises(UnknownNameError, match="did you mean 'sentiment'"):
        load_icl_task("sentimnet")


def test_a_label_word_of_several_tokens_names_the_word_and_the_fix(smollm2_tokenizer: ICLTokenizer) -> None:
    with pytest.raises(UserInputError) as error:
        icl_prompts(smollm2_tokenizer, "sentiment", ICLPromptConfig(label_words=("positive", "unfavourable")))
    message = str(error.value)
    assert "'unfavourable' is 3 tokens" in message and "label_words=" in message and "'good'" in message
    # Without the leading space 'sports' is two tokens; the message says the spaced form is one.
    with pytest.raises(UserInputError, match="written ' sports' it is one token"):
        icl_prompts(smollm2_tokenizer, "topic", ICLPromptConfig(format=ICL_FORMATS["hendel"]))


def test_label_modes() -> None:
    toy = ICLTokenizer(ToyTokenizer(), 0, "toy")
    config = ICLPromptConfig(n_demonstrations=6, n_prompts=20)
    gold = icl_prompts(toy, "parity", config)
    flipped = icl_prompts(toy, "parity", config.replace(label_mode="flipped"))
    for g, f in zip(gold, flipped, strict=True):
        assert f.label_words == ("odd", "even") and f.answer == ("odd" if f.gold == "even" else "even")
        assert [d.item for d in f.demonstrations] == [d.item for d in g.demonstrations]
        assert all(d.word != d.shown for d in f.demonstrations)
    shuffled = icl_prompts(toy, "parity", config.replace(label_mode="shuffled"))
    items = load_icl_task("parity").items
    assert all(Counter(d.shown for d in p.demonstrations) == Counter(items[d.item].output for d in p.demonstrations)
               for p in shuffled)
    assert any(d.shown != items[d.item].output for p in shuffled for d in p.demonstrations)
    random_pairs = icl_prompts(toy, "antonyms", config.replace(label_mode="random"))
    assert any(d.shown != load_icl_task("antonyms").items[d.item].output for p in random_pairs for d in p.demonstrations)


def test_zero_shot_prompts_keep_the_queries_and_label_words() -> None:
    toy = ICLTokenizer(ToyTokenizer(), 0, "toy")
    icl = icl_prompts(toy, "sentiment", ICLPromptConfig(n_prompts=10, label_set=None), split="held_out")
    zero = zero_shot_prompts(toy, icl)
    assert zero.queries == icl.queries and zero.split == "held_out"
    for z, p in zip(zero, icl, strict=True):
        assert z.demonstrations == () and z.text == f"Input: {icl.task.items[p.query].input} Output:"
        assert (z.answer, z.label_words) == (p.answer, p.label_words)


def _shipped(name: str) -> dict[str, Any]:
    return json.loads(resources.files("lmsci_mi.data").joinpath("icl", f"{name}.json").read_text("utf-8"))


_ONES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
         "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
         "nineteen")
_TENS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_NUMBERS = {**{w: i for i, w in enumerate(_ONES)}, **{w: 10 * (i + 2) for i, w in enumerate(_TENS)}}


def _number(words: str) -> int:
    total = 0
    for word in words.replace("-", " ").split():
        total = total * 100 if word == "hundred" else total + _NUMBERS[word]
    return total


@pytest.mark.parametrize("name", ICL_TASKS)
def test_every_item_of_every_data_file_is_valid(name: str) -> None:
    raw = _shipped(name)
    assert raw["task"] == name and all(raw[k].strip() for k in ("description", "source", "labelling"))
    task = load_icl_task(name)
    inputs = [i.input.casefold() for i in task.items]
    assert len(set(inputs)) == len(inputs), [k for k, n in Counter(inputs).items() if n > 1]
    assert all(i.input.strip() == i.input and i.input and i.output.strip() == i.output and i.output
               for i in task.items)
    if name in ICL_PAIR_TASKS:
        assert raw["kind"] == "pairs" and len(task) >= 100
        assert all(i.input.casefold() != i.output.casefold() for i in task.items)
        return
    assert raw["kind"] == "classification" and len(task) >= 200
    assert {i.output for i in task.items} == set(task.labels)
    assert min(task.counts().values()) >= len(task) // len(task.labels) - 5  # balanced
    if name == "parity":
        assert all(i.output == ("even" if _number(i.input) % 2 == 0 else "odd") for i in task.items)
    if name == "language":  # every sentence in all four languages
        assert all(sorted(task.items[j].output for j in range(len(task)) if task.items[j].group == g)
                   == sorted(task.labels) for g in {i.group for i in task.items})


def test_fact_relations_become_pair_tasks() -> None:
    task = load_icl_task("facts:city_country")
    assert task == fact_relation_task("city_country")
    assert task.kind == "pairs" and len(task) > 100 and len({i.input for i in task.items}) == len(task)
    assert ICLItem("Paris", "France") in task.items
    with pytest.raises(UnknownNameError, match="fact relation"):
        load_icl_task("facts:nope")

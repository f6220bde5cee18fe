"""ICL prompt sets: demonstrations ``[x_1, y_1, delim, ..., x_n, y_n, delim, x_test]`` with the token
span of every part, after Han et al. (2023, arXiv:2305.12766, §5: "Input: {x} Output: {label}").

The kernel-regression heads read the attention from the last position inside each
demonstration's span, and task and function vectors (Hendel et al. 2023; Todd et al. 2024) patch
that position, so a prompt records where its parts sit, counted as the tokenizer splits the whole
prompt, with the model's sink (BOS) at position 0. Demonstrations, their order and the label words
are drawn with a seed; a dev and a held-out split never share an item (:func:`icl_split`).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import torch
from jaxtyping import Int
from torch import Tensor

from lmsci_mi.config import Config, config, validate_choice
from lmsci_mi.data.icl_tasks import ICLTask, load_icl_task
from lmsci_mi.errors import UserInputError

__all__ = [
    "ICL_FORMATS",
    "LABEL_MODES",
    "SPLITS",
    "Demonstration",
    "ICLFormat",
    "ICLPrompt",
    "ICLPromptConfig",
    "ICLPromptSet",
    "ICLSplit",
    "ICLTokenizer",
    "icl_prompts",
    "icl_split",
    "label_token_ids",
    "zero_shot_prompts",
]

LabelMode = Literal["gold", "flipped", "random", "shuffled"]
LABEL_MODES: tuple[str, ...] = ("gold", "flipped", "random", "shuffled")
"""What a demonstration's label shows: its gold label; every label's word swapped for the next
label's (flipped, Wei et al. 2023); a label drawn at random (Min et al. 2022); the demonstrations'
gold labels permuted among them (shuffled: Todd et al.'s corrupted prompts)."""
Split = Literal["dev", "held_out"]
SPLITS: tuple[str, ...] = ("dev", "held_out")


@config
class ICLFormat(Config):
    """How a demonstration is written: ``input_template`` (with ``{x}``), then ``label_template``
    (with ``{y}``), then ``delimiter``; the query is ``input_template`` alone, so the model's next
    token is the label. The default is Han et al.'s ``Input: {x} Output: {label}`` lines.

    >>> ICL_FORMATS["hendel"].input_template
    'example:{x}->'
    """

    input_template: str = field(default="Input: {x} Output:", metadata={"help": "a demonstration's input, with {x}"})
    label_template: str = field(
        default=" {y}", metadata={"help": "the label after the input, with {y}; a leading space makes ' positive' one token"}
    )
    delimiter: str = field(default="\n", metadata={"help": "what follows each demonstration's label"})

    def validate(self) -> None:
        for name, slot in (("input_template", "{x}"), ("label_template", "{y}")):
            if getattr(self, name).count(slot) != 1:
                raise UserInputError(f"ICLFormat.{name} must hold {slot} once, got {getattr(self, name)!r}")
        if not self.delimiter:
            raise UserInputError("ICLFormat.delimiter is empty: demonstrations need a delimiter ('\\n')")


ICL_FORMATS: dict[str, ICLFormat] = {
    "han": ICLFormat(),
    "hendel": ICLFormat(input_template="example:{x}->", label_template="{y}", delimiter="\n"),
    "todd": ICLFormat(input_template="Q:{x}\nA:", label_template="{y}", delimiter="\n\n"),
}
"""The papers' prompt formats (reference notes §6, §7): Han et al. (2023), Hendel et al.'s
``example:{x}->{y}`` lines (``core/data/datasets/few_shot_format.py``) and Todd et al.'s
``Q:{x}\\nA:{y}\\n\\n``."""


@config
class ICLPromptConfig(Config):
    """How an ICL prompt set is drawn. Defaults: 8 demonstrations (Han et al. do not state theirs;
    Hendel et al. use 5, Todd et al. 10), balanced over labels, gold labels, half the items held out."""

    n_demonstrations: int = field(default=8, metadata={"help": "demonstrations per prompt", "ge": 0})
    zero_shot: bool = field(
        default=False, metadata={"help": "ask for prompts without demonstrations (n_demonstrations=0)"}
    )
    format: ICLFormat = field(default_factory=ICLFormat)
    label_mode: LabelMode = field(default="gold", metadata={"help": "what each demonstration's label shows"})
    label_set: int | None = field(
        default=0, metadata={"help": "which of the task's label-word sets (None: one drawn per prompt)", "ge": 0}
    )
    label_words: tuple[str, ...] = field(
        default=(), metadata={"help": "label words of your own, one per label (replaces label_set)"}
    )
    balanced: bool = field(default=True, metadata={"help": "demonstrations spread evenly over the labels"})
    held_out_fraction: float = field(default=0.5, metadata={"help": "share of items held out", "gt": 0, "lt": 1})
    n_prompts: int | None = field(
        default=None, metadata={"help": "prompts to draw (None: every item of the split is a query once)", "ge": 1}
    )
    seed: int = field(default=0, metadata={"help": "seed of the demonstrations, order and label words"})

    def validate(self) -> None:
        if self.n_demonstrations == 0 and not self.zero_shot:
            raise UserInputError(
                "n_demonstrations=0: an ICL prompt needs demonstrations; for a zero-shot prompt say "
                "so with zero_shot=True"
            )
        if self.zero_shot and self.n_demonstrations != 0:
            raise UserInputError(
                f"zero_shot=True asks for prompts without demonstrations, but n_demonstrations="
                f"{self.n_demonstrations}: set n_demonstrations=0"
            )


class HasTokenizer(Protocol):
    """What a prompt set needs of a model: a LensModel, or an :class:`ICLTokenizer`."""

    tokenizer: Any
    sink_token_id: int | None
    name: str


@dataclass(frozen=True)
class ICLTokenizer:
    """A tokenizer and the sink put in front of every prompt, for building prompts without a model.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> ICLTokenizer(lm.tokenizer, lm.sink_token_id, "smollm2 tokenizer").sink_token_id
    0
    """

    tokenizer: Any
    sink_token_id: int | None
    name: str = "tokenizer"


@dataclass(frozen=True)
class ICLSplit:
    """A task's items (indices into ``task.items``) in the dev and the held-out split."""

    dev: tuple[int, ...]
    held_out: tuple[int, ...]

    def __getitem__(self, split: str) -> tuple[int, ...]:
        validate_choice("split", split, SPLITS)
        return self.dev if split == "dev" else self.held_out


@dataclass(frozen=True)
class Demonstration:
    """One demonstration of a prompt, as token positions of the whole prompt (sink at 0).

    Attributes:
        item: its item's index in ``task.items``.
        shown: the output the demonstration shows (a label name, or an answer's text); it differs
            from the item's own in the flipped, random and shuffled label modes.
        word: the text written as its label (a label word, or the answer).
        span: ``[x_i, y_i]``, from the demonstration's first token through its label's last:
            Han et al.'s range for a demonstration's largest attention.
        input: the tokens holding the input text ``x_i`` (a token that also holds the template's
            space before it counts).
        label: the label's tokens (one for a classification label).
        delimiter: the delimiter's tokens.
    """

    item: int
    shown: str
    word: str
    span: range
    input: range
    label: range
    delimiter: range

    @property
    def label_position(self) -> int:
        """The label's (first) token: where the tutorial's attention-on-labels map reads."""
        return self.label.start


@dataclass(frozen=True)
class ICLPrompt:
    """One prompt: its text, tokens (sink first), the spans of its parts and the expected answer.

    Attributes:
        text: the prompt's text (without the sink).
        tokens: its token ids, the sink at position 0 when the model has one.
        query: the query item's index in ``task.items``.
        demonstrations: the demonstrations, in prompt order.
        query_span: the tokens holding ``x_test``'s text.
        gold: the query's true output (a label name, or the answer).
        answer: the output expected under the prompt's label words (``label_words[gold]``; the
            answer of a pair task).
        answer_token: the first token of ``answer`` as written after the input.
        label_words: the word this prompt writes for each label, in the task's label order
            (empty for a pair task); under ``flipped`` each label shows the next one's word.
        label_tokens: their token ids (the candidates a classification prompt is scored among).
    """

    text: str
    tokens: tuple[int, ...]
    query: int
    demonstrations: tuple[Demonstration, ...]
    query_span: range
    gold: str
    answer: str
    answer_token: int
    label_words: tuple[str, ...] = ()
    label_tokens: tuple[int, ...] = ()

    @property
    def final_position(self) -> int:
        """The last token, whose next-token prediction is the answer."""
        return len(self.tokens) - 1

    @property
    def label_positions(self) -> tuple[int, ...]:
        return tuple(d.label_position for d in self.demonstrations)


@dataclass(frozen=True)
class ICLPromptSet:
    """A task's prompts for one split, with the config that drew them.

    Attributes:
        task: the task (its items, labels, source).
        split: ``"dev"`` or ``"held_out"``.
        config: how the prompts were drawn.
        prompts: the prompts.
        model: the model (or tokenizer) name whose tokens the spans count.
        sink_token_id: the token at position 0 of every prompt (None: no sink).
    """

    task: ICLTask
    split: str
    config: ICLPromptConfig
    prompts: tuple[ICLPrompt, ...]
    model: str
    sink_token_id: int | None

    def __len__(self) -> int:
        return len(self.prompts)

    def __iter__(self) -> Iterator[ICLPrompt]:
        return iter(self.prompts)

    def __getitem__(self, index: int) -> ICLPrompt:
        return self.prompts[index]

    @property
    def texts(self) -> tuple[str, ...]:
        return tuple(p.text for p in self.prompts)

    @property
    def queries(self) -> tuple[int, ...]:
        """The query items, in prompt order (a zero-shot set of the same queries takes them)."""
        return tuple(p.query for p in self.prompts)

    def answer_tokens(self) -> Int[Tensor, " prompt"]:
        return torch.tensor([p.answer_token for p in self.prompts], dtype=torch.long)

    def params(self) -> dict[str, Any]:
        """What ``Meta.params`` records of the set: the task, split, size and drawing config."""
        return {"task": self.task.name, "split": self.split, "n_prompts": len(self.prompts),
                **self.config.params()}


def _hash_rank(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def icl_split(task: ICLTask, held_out_fraction: float = 0.5) -> ICLSplit:
    """The task's dev and held-out items: deterministic, seed-free and disjoint.

    Items sharing a group (the four translations of a sentence) are one unit. Units are ordered by
    the SHA-256 of their group (the input text, for most items) within each stratum (the labels a
    unit holds, for a classification task), and the first ``round(fraction × size)`` units of each
    stratum are held out. So the split keeps the label balance, does not depend on the file's
    order or a seed, and a held-out item is never a dev prompt's demonstration (each split's
    prompts draw demonstrations from their own split only).

    >>> split = icl_split(load_icl_task("sentiment"))
    >>> len(split.dev), len(split.held_out), set(split.dev) & set(split.held_out)
    (100, 100, set())
    """
    if not 0 < held_out_fraction < 1:
        raise UserInputError(f"held_out_fraction must be between 0 and 1, not {held_out_fraction}")
    units: dict[str, list[int]] = {}
    for index, item in enumerate(task.items):
        units.setdefault(item.split_key, []).append(index)
    strata: dict[tuple[str, ...], list[str]] = {}
    for key, members in units.items():
        stratum = tuple(sorted({task.items[i].output for i in members})) if task.is_classification else ()
        strata.setdefault(stratum, []).append(key)
    held: set[int] = set()
    for keys in strata.values():
        ranked = sorted(keys, key=_hash_rank)
        for key in ranked[: round(held_out_fraction * len(ranked))]:
            held.update(units[key])
    return ICLSplit(
        dev=tuple(i for i in range(len(task.items)) if i not in held),
        held_out=tuple(sorted(held)),
    )


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _fill(template: str, slot: str, value: str) -> tuple[str, int]:
    """The template with ``slot`` replaced (no other brace is read), and where the value starts."""
    before, _, after = template.partition(slot)
    return before + value + after, len(before)


def _single_token(model: HasTokenizer, word: str, label_template: str, alternatives: Sequence[str]) -> int:
    """The id of ``word`` written as a label; a word of several tokens is a UserInputError that
    names it and the fix."""
    text, _ = _fill(label_template, "{y}", word)
    ids = _ids(model.tokenizer, text)
    if len(ids) == 1:
        return ids[0]
    pieces = [model.tokenizer.decode([i]) for i in ids]
    other = _fill(label_template.removeprefix(" ") if text.startswith(" ") else " " + label_template, "{y}", word)[0]
    hint = ""
    if len(_ids(model.tokenizer, other)) == 1:
        hint = f"; written {other!r} it is one token (change the format's label_template)"
    ones = [w for w in alternatives if w != word]
    raise UserInputError(
        f"label word {word!r} is {len(ids)} tokens {pieces} for {model.name} (written {text!r}), but a "
        f"label must be one token{hint}; or pass label_words=(...) with single-token words"
        + (f" (this task's other label words: {ones})" if ones else "")
    )


def label_token_ids(model: HasTokenizer, task: ICLTask | str, config: ICLPromptConfig | None = None) -> tuple[tuple[int, ...], ...]:
    """The token ids of every label-word set a config may use, each in the task's label order.

    Raises:
        UserInputError: a label word of several tokens (the message names it and the fix), label
            words given for a pair task, or a label set the task does not have.

    >>> from lmsci_mi import load_model
    >>> ids = label_token_ids(load_model("toy-2l"), "sentiment")
    >>> len(ids), len(ids[0])
    (1, 2)
    """
    task = load_icl_task(task) if isinstance(task, str) else task
    config = config or ICLPromptConfig()
    sets = _label_sets(task, config)
    flat = sorted({w for words in task.label_words for w in words} | set(config.label_words))
    return tuple(tuple(_single_token(model, w, config.format.label_template, flat) for w in words) for words in sets)


def _label_sets(task: ICLTask, config: ICLPromptConfig) -> tuple[tuple[str, ...], ...]:
    if not task.is_classification:
        if config.label_words or config.label_mode == "flipped":
            raise UserInputError(
                f"task {task.name!r} is a pair task: it has no label words to set or flip "
                "(label_words=() and label_mode 'gold', 'random' or 'shuffled')"
            )
        return ()
    if config.label_words:
        if len(config.label_words) != len(task.labels) or len(set(config.label_words)) != len(task.labels):
            raise UserInputError(
                f"label_words gives {list(config.label_words)}, but task {task.name!r} needs one "
                f"distinct word per label {list(task.labels)}"
            )
        return (config.label_words,)
    if not task.label_words:
        raise UserInputError(
            f"task {task.name!r} has no label words: pass label_words=(...), one word per label {list(task.labels)}"
        )
    if config.label_set is None:
        return task.label_words
    if config.label_set >= len(task.label_words):
        raise UserInputError(
            f"label_set={config.label_set}, but task {task.name!r} has {len(task.label_words)} "
            f"label-word sets: {[list(w) for w in task.label_words]}"
        )
    return (task.label_words[config.label_set],)


# ---------------------------------------------------------------------- drawing (no tokenizer)


@dataclass(frozen=True)
class _Plan:
    query: int
    demos: tuple[int, ...]
    shown: tuple[str, ...]
    words: int  # which label set


def _draw_demos(task: ICLTask, pool: Sequence[int], query: int, config: ICLPromptConfig,
                rng: random.Random, split: str) -> list[int]:
    own = task.items[query].split_key
    # A prompt never shows its query's own group (a translation of the query would leak it).
    avail = [i for i in pool if task.items[i].split_key != own]
    n = config.n_demonstrations
    where = f"a {split} prompt of task {task.name!r}"
    if n > len(avail):
        raise UserInputError(
            f"n_demonstrations={n} is more than the {len(avail)} items {where} can draw from (its "
            f"split less the query): lower n_demonstrations or held_out_fraction"
        )
    if not (config.balanced and task.is_classification):
        return rng.sample(avail, n)
    base, extra = divmod(n, len(task.labels))
    counts = dict.fromkeys(task.labels, base)
    for label in rng.sample(task.labels, extra):
        counts[label] += 1
    picks = []
    for label in task.labels:
        of_label = [i for i in avail if task.items[i].output == label]
        if counts[label] > len(of_label):
            raise UserInputError(
                f"n_demonstrations={n} balanced over {len(task.labels)} labels needs {counts[label]} "
                f"{label!r} items, but {where} has {len(of_label)}: lower n_demonstrations, or "
                "balanced=False"
            )
        picks += rng.sample(of_label, counts[label])
    rng.shuffle(picks)
    return picks


def _shown(task: ICLTask, demos: list[int], pool: Sequence[int], config: ICLPromptConfig,
           rng: random.Random) -> list[str]:
    gold = [task.items[i].output for i in demos]
    if config.label_mode == "random":
        choices = task.labels or tuple(task.items[i].output for i in pool)
        return [rng.choice(choices) for _ in demos]
    if config.label_mode == "shuffled":
        rng.shuffle(gold)
    return gold  # "flipped" swaps label *words*, in _words_of


def _plans(task: ICLTask, split: str, config: ICLPromptConfig, queries: Sequence[int] | None,
           pool: Sequence[int], n_sets: int) -> list[_Plan]:
    if queries is None:
        queries = list(pool)
        if config.n_prompts is not None:
            if config.n_prompts > len(pool):
                raise UserInputError(
                    f"n_prompts={config.n_prompts} is more than the {len(pool)} {split} items of "
                    f"task {task.name!r}: lower n_prompts (each item is a query once)"
                )
            queries = random.Random(f"{config.seed}|{task.name}|{split}|queries").sample(queries, config.n_prompts)
    outside = [q for q in queries if q not in set(pool)]
    if outside:
        raise UserInputError(f"query items {outside[:5]} of task {task.name!r} are not in its {split} split")
    plans = []
    for query in queries:
        # One generator per query: a prompt is the same whichever other prompts are drawn.
        rng = random.Random(f"{config.seed}|{task.name}|{split}|{query}")
        # The label set first, so that a zero-shot prompt of the query keeps its label words.
        words = rng.randrange(n_sets) if config.label_set is None and n_sets > 1 else 0
        demos = _draw_demos(task, pool, query, config, rng, split) if config.n_demonstrations else []
        shown = _shown(task, demos, pool, config, rng)
        plans.append(_Plan(query, tuple(demos), tuple(shown), words))
    return plans


# ---------------------------------------------------------------------- encoding


def _token_ranges(model: HasTokenizer, text: str, pieces: Sequence[tuple[int, int]]) -> tuple[list[int], list[range]]:
    """The prompt's ids under the sink policy, and the token positions overlapping each
    character piece (empty range: none)."""
    encoded = model.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = list(encoded["input_ids"])
    sink = model.sink_token_id
    # The sink policy of LensModel.encode: one sink in front, unless the text starts with it.
    shift = 1 if sink is not None and (not ids or ids[0] != sink) else 0
    ids = [sink, *ids] if shift else ids
    spans = []
    for start, end in pieces:
        hits = [i + shift for i, (s, e) in enumerate(encoded["offset_mapping"]) if e > s and s < end and e > start]
        spans.append(range(hits[0], hits[-1] + 1) if hits else range(0))
    return ids, spans


def _words_of(task: ICLTask, sets: tuple[tuple[str, ...], ...], plan: _Plan, mode: str) -> tuple[str, ...]:
    if not task.is_classification:
        return ()
    words = sets[plan.words]
    return words[1:] + words[:1] if mode == "flipped" else words


def _encode(model: HasTokenizer, task: ICLTask, plan: _Plan, fmt: ICLFormat, words: tuple[str, ...],
            token_of: dict[str, int]) -> ICLPrompt:
    def written(output: str) -> str:
        return words[task.labels.index(output)] if words else output

    text, pieces = "", []
    for item, shown in zip(plan.demos, plan.shown, strict=True):
        start = len(text)
        part, at = _fill(fmt.input_template, "{x}", task.items[item].input)
        label, _ = _fill(fmt.label_template, "{y}", written(shown))
        text += part + label + fmt.delimiter
        pieces += [(start + at, start + at + len(task.items[item].input)),
                   (start + len(part), start + len(part) + len(label)),
                   (start + len(part) + len(label), len(text)), (start, start + len(part) + len(label))]
    query, at = _fill(fmt.input_template, "{x}", task.items[plan.query].input)
    pieces.append((len(text) + at, len(text) + at + len(task.items[plan.query].input)))
    text += query
    ids, spans = _token_ranges(model, text, pieces)
    demos = []
    for k, (item, shown) in enumerate(zip(plan.demos, plan.shown, strict=True)):
        x, y, delim, whole = spans[4 * k: 4 * k + 4]
        _check_label(model, fmt, ids, y, delim, written(shown), token_of)
        demos.append(Demonstration(item, shown, written(shown), range(whole.start, y.stop), x, y, delim))
    gold = task.items[plan.query].output
    answer = written(gold)
    return ICLPrompt(text=text, tokens=tuple(ids), query=plan.query, demonstrations=tuple(demos),
                     query_span=spans[-1], gold=gold, answer=answer, answer_token=token_of[answer],
                     label_words=words, label_tokens=tuple(token_of[w] for w in words))


def _check_label(model: HasTokenizer, fmt: ICLFormat, ids: list[int], label: range, delimiter: range,
                 word: str, token_of: dict[str, int]) -> None:
    """In the whole prompt, the label must start with the token it has alone (the token the
    query's answer is scored by) and share no token with the delimiter."""
    alone = _ids(model.tokenizer, _fill(fmt.label_template, "{y}", word)[0])
    inside = ids[label.start:label.stop]
    if inside[:1] != [token_of[word]] or (len(alone) == 1 and len(inside) != 1) or (
            len(delimiter) and delimiter.start < label.stop):
        pieces = [model.tokenizer.decode([i]) for i in inside]
        raise UserInputError(
            f"in the prompt, the label {word!r} is tokenised {pieces} by {model.name}, not as alone "
            f"({[model.tokenizer.decode([i]) for i in alone]}), or shares a token with the delimiter "
            f"{fmt.delimiter!r}: change the format (label_template {fmt.label_template!r}, "
            f"delimiter {fmt.delimiter!r})"
        )


def icl_prompts(
    model: HasTokenizer,
    task: ICLTask | str,
    config: ICLPromptConfig | None = None,
    *,
    split: Split = "dev",
    queries: Sequence[int] | None = None,
) -> ICLPromptSet:
    """A task's ICL prompts for one split, with the token span of every demonstration's parts.

    Every item of the split is a query once (or ``config.n_prompts`` of them, drawn with the
    seed; or the given ``queries``). Each prompt's demonstrations come from the same split, never
    the query's own group, balanced over labels by default, in a seeded order. Bad input (a label
    word of several tokens, no demonstrations, more demonstrations than the split holds) raises
    before any prompt is tokenised. Reads the tokenizer only; the model is not run.

    Args:
        model: a LensModel, or an :class:`ICLTokenizer` (a tokenizer and its sink).
        task: an :class:`ICLTask`, or a bundled task's name (``"sentiment"``, ``"facts:city_country"``).
        config: how to draw the prompts (``ICLPromptConfig()``: 8 gold demonstrations).
        split: ``"dev"`` (to choose heads, layers, settings) or ``"held_out"`` (to report).
        queries: query items (indices into ``task.items``, all in ``split``), e.g. another set's
            ``queries``.

    Returns:
        An :class:`ICLPromptSet`.

    >>> from lmsci_mi import load_model
    >>> prompts = icl_prompts(load_model("toy-2l"), "sentiment", ICLPromptConfig(n_demonstrations=2))
    >>> p = prompts[0]
    >>> len(prompts), p.answer, [p.tokens[d.label_position] for d in p.demonstrations] == [
    ...     p.label_tokens[("positive", "negative").index(d.shown)] for d in p.demonstrations]
    (100, 'positive', True)
    """
    task = load_icl_task(task) if isinstance(task, str) else task
    config = config or ICLPromptConfig()
    validate_choice("split", split, SPLITS)
    sets = _label_sets(task, config)
    token_ids = label_token_ids(model, task, config) if task.is_classification else ()
    pool = icl_split(task, config.held_out_fraction)[split]
    plans = _plans(task, split, config, queries, pool, max(len(sets), 1))
    token_of: dict[str, int] = {w: i for words, ids in zip(sets, token_ids, strict=True)
                                for w, i in zip(words, ids, strict=True)}
    if not task.is_classification:
        outputs = {task.items[i].output for plan in plans for i in (*plan.demos, plan.query)} | {
            s for plan in plans for s in plan.shown}
        token_of = {o: _ids(model.tokenizer, _fill(config.format.label_template, "{y}", o)[0])[0] for o in outputs}
    prompts = tuple(
        _encode(model, task, plan, config.format, _words_of(task, sets, plan, config.label_mode), token_of)
        for plan in plans
    )
    return ICLPromptSet(task, split, config, prompts, model.name, model.sink_token_id)


def zero_shot_prompts(model: HasTokenizer, prompts: ICLPromptSet) -> ICLPromptSet:
    """The zero-shot prompts of the same queries (the query alone, in the same format and label
    words): the baseline, and the run a task vector replaces a state in (Hendel et al. 2023).

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> icl = icl_prompts(lm, "antonyms", ICLPromptConfig(n_demonstrations=3, n_prompts=4))
    >>> zero = zero_shot_prompts(lm, icl)
    >>> zero.queries == icl.queries, zero[0].text, len(zero[0].demonstrations)
    (True, 'Input: safe Output:', 0)
    """
    config = prompts.config.replace(n_demonstrations=0, zero_shot=True)
    return icl_prompts(model, prompts.task, config, split=prompts.split, queries=prompts.queries)  # type: ignore[arg-type]

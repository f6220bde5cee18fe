"""Edits judged without teacher forcing: WILD's protocol (Yang et al. 2025, "The Mirage of Model
Editing", arXiv:2502.11177), scored by normalised exact match, hence "WILD-EM".

Each prompt is continued greedily (batched, KV-cached: :func:`lmsci_mi.generation.generate`) for
at most 50 tokens, stopped at ".", a newline or EOS. An edit succeeds on a prompt when the
generation, SQuAD-normalised, starts with the normalised new target; a neighbour prompt is kept
when its generation is token for token the unedited model's up to the stop. WILD's own judge is
GPT-4o-mini; offline we use its fallback, exact match, so expect lower numbers than the judge's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import string
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any

import torch
from torch import Tensor
from tqdm.auto import tqdm

from lmsci_mi.cache import cache_key, cache_root, weights_fingerprint
from lmsci_mi.config import Config, config
from lmsci_mi.editing.methods import EDITING_METHODS
from lmsci_mi.editing.metrics import plan_evaluation
from lmsci_mi.editing.requests import EditRequest
from lmsci_mi.editing.stats import KeyStatistics
from lmsci_mi.errors import UnknownNameError, UserInputError
from lmsci_mi.generation import GenerationConfig, generate
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result, result_type
from lmsci_mi.stats import Interval, bootstrap_interval

__all__ = [
    "WILD_METRICS",
    "WildConfig",
    "WildEvaluation",
    "WildFact",
    "WildGeneration",
    "answer_matches",
    "assemble_wild",
    "evaluate_wild",
    "normalize_answer",
    "score_facts",
    "stop_token_ids",
    "wild_facts",
    "wild_generate",
]

WILD_METRICS = ("rewrite", "paraphrase", "locality", "true_answer")
"""Columns of :class:`WildEvaluation` (percent of facts; a fact's paraphrase and locality are the
shares of its prompts): WILD's reliability, generalisation and locality, and how often the rewrite
prompt's generation still starts with the true answer (on the unedited row: what the model says
unprompted, the ceiling of a format that greedy decoding reaches)."""


@config
class WildConfig(Config):
    """How a prompt is continued and cut (WILD's ``test_prediction_acc_real``: 50 new tokens, stop
    strings ".", "\\n" and EOS, greedy).

    The text that is scored ends before the first stop string; EOS (the tokenizer's
    ``eos_token_id``) always stops too. Normalisation is SQuAD's (lower case, punctuation and the
    articles a/an/the removed, whitespace squashed), and a match must end at a word boundary:
    "Rome, Italy" matches " Rome", "Romeo" does not.
    """

    max_new_tokens: int = field(default=50, metadata={"help": "tokens generated at most per prompt", "ge": 1})
    stop_strings: tuple[str, ...] = field(
        default=(".", "\n"), metadata={"help": "strings that end a generation (EOS always does)", "cli": False}
    )
    batch_size: int = field(default=32, metadata={"help": "prompts decoded together", "ge": 1})

    def validate(self) -> None:
        if any(not s for s in self.stop_strings):
            raise UserInputError(
                f"WildConfig.stop_strings {self.stop_strings!r} holds an empty string, which would "
                "stop every generation before it starts: leave it out"
            )


@dataclasses.dataclass(frozen=True)
class WildGeneration:
    """A prompt's greedy continuation, cut at the stop.

    Attributes:
        prompt: the prompt.
        tokens: the new token ids up to and including the one that completed a stop string (or
            EOS); all of them when none did within ``max_new_tokens``.
        text: the new tokens decoded (special tokens left out), ending before the first stop string.
    """

    prompt: str
    tokens: tuple[int, ...]
    text: str


@dataclasses.dataclass(frozen=True)
class WildFact:
    """One fact's WILD-EM outcome on one model (unedited or edited).

    Attributes:
        subject, target_new, target_true: the fact.
        rewrite: the rewrite prompt's generation; paraphrases: each paraphrase's.
        neighbours: each neighbourhood prompt's generation (those the teacher-forced NS counts).
        neighbours_kept: per neighbour, whether its generation equals the unedited model's.
    """

    subject: str
    target_new: str
    target_true: str
    rewrite: WildGeneration
    paraphrases: tuple[WildGeneration, ...]
    neighbours: tuple[WildGeneration, ...]
    neighbours_kept: tuple[bool, ...]

    def scores(self) -> tuple[float, float, float, float]:
        """The :data:`WILD_METRICS` of this fact as fractions (NaN for a kind it has no prompt of)."""

        def share(flags: Sequence[bool]) -> float:
            return sum(flags) / len(flags) if flags else float("nan")

        return (
            float(answer_matches(self.rewrite.text, self.target_new)),
            share([answer_matches(g.text, self.target_new) for g in self.paraphrases]),
            share(self.neighbours_kept),
            float(answer_matches(self.rewrite.text, self.target_true)),
        )


# --- the match ------------------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's answer normalisation (WILD's exact-match fallback): lower case, punctuation removed,
    the articles a/an/the removed, whitespace squashed.

    >>> normalize_answer("  The Eiffel-Tower,  in Paris.")
    'eiffeltower in paris'
    """
    text = _ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION))
    return " ".join(text.split())


def answer_matches(generation: str, target: str) -> bool:
    """Whether the normalised ``generation`` starts with the normalised ``target``, ending at a
    word boundary.

    Raises:
        UserInputError: a target with nothing left after normalisation (it would match anything).

    >>> answer_matches(" Rome, the capital of Italy", " Rome"), answer_matches(" Romeo", " Rome")
    (True, False)
    """
    want = normalize_answer(target)
    if not want:
        raise UserInputError(
            f"target {target!r} is empty once normalised (no letter or digit outside a/an/the), "
            "so every generation would start with it: give a target with a word in it"
        )
    got = normalize_answer(generation)
    return got == want or got.startswith(want + " ")


# --- generation -----------------------------------------------------------------------------------

_STOP_IDS: weakref.WeakKeyDictionary[Any, dict[tuple[str, ...], frozenset[int]]] = weakref.WeakKeyDictionary()


def stop_token_ids(lm: LensModel, stop_strings: Sequence[str]) -> frozenset[int]:
    """EOS and every vocabulary token whose text holds one of ``stop_strings``: the tokens that end
    a generation (a stop string split over two tokens is caught when the text is cut). Computed
    once per tokenizer (about 0.3 s for 49k tokens).

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> lm.tokenizer.eos_token_id in stop_token_ids(lm, (".",)), lm.token_id(".") in stop_token_ids(lm, (".",))
    (True, True)
    """
    tokenizer = _tokenizer(lm)
    key = tuple(stop_strings)
    per_tokenizer = _STOP_IDS.setdefault(tokenizer, {})
    if key not in per_tokenizer:
        texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
        ids = {i for i, text in enumerate(texts) if any(s in text for s in key)}
        if tokenizer.eos_token_id is not None:
            ids.add(int(tokenizer.eos_token_id))
        per_tokenizer[key] = frozenset(ids)
    return per_tokenizer[key]


def _tokenizer(lm: LensModel) -> Any:
    if lm.tokenizer is None:
        raise UserInputError(
            f"{lm.name} has no tokenizer, and WILD-EM compares generated text with the target: "
            "load a model with a tokenizer (e.g. toy-2l or smollm2-135m)"
        )
    return lm.tokenizer


def _cut(lm: LensModel, prompt: str, tokens: Sequence[int], config: WildConfig) -> WildGeneration:
    """The generation up to its stop: the tokens through the first one after which the text holds
    a stop string (or EOS), and the text before that string."""
    tokenizer, stops = lm.tokenizer, stop_token_ids(lm, config.stop_strings)
    end = next((k + 1 for k, t in enumerate(tokens) if t in stops), len(tokens))
    if any(len(s) > 1 for s in config.stop_strings):  # a stop string may span tokens
        end = next(
            (k for k in range(1, end) if any(s in tokenizer.decode(tokens[:k]) for s in config.stop_strings)), end
        )
    kept = tuple(int(t) for t in tokens[:end])
    text = str(tokenizer.decode(list(kept), skip_special_tokens=True))
    cut = min((i for i in (text.find(s) for s in config.stop_strings) if i >= 0), default=len(text))
    return WildGeneration(prompt, kept, text[:cut])


def wild_generate(
    lm: LensModel, prompts: Sequence[str], config: WildConfig | None = None, *, use_cache: bool = False
) -> tuple[WildGeneration, ...]:
    """Greedy continuations of ``prompts`` cut at the stop, all in batched KV-cached passes; the
    hooks active on ``lm`` apply. Reads the model only.

    Args:
        lm: the model (with a tokenizer).
        prompts: texts; a repeated prompt is generated once.
        config: :class:`WildConfig`.
        use_cache: keep each prompt's generation on disk under the weights' fingerprint and the
            config, and read it from there: the unedited model's neighbour generations are then
            computed once for every method and every run.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> (g,) = wild_generate(lm, ["The cat sat on the"], WildConfig(max_new_tokens=4))
    >>> 1 <= len(g.tokens) <= 4
    True
    """
    config = config or WildConfig()
    _tokenizer(lm)
    unique = list(dict.fromkeys(prompts))
    folder = _cache_folder(lm, config) if use_cache else None
    found = {p: _read(folder, p) for p in unique} if folder else {}
    missing = [p for p in unique if found.get(p) is None]
    if missing:
        greedy = GenerationConfig(max_new_tokens=config.max_new_tokens, temperature=0.0, batch_size=config.batch_size)
        out = generate(lm, missing, greedy, stop_at=stop_token_ids(lm, config.stop_strings))
        for prompt, tokens in zip(missing, out.tokens, strict=True):
            found[prompt] = _cut(lm, prompt, tokens, config)
            if folder:
                _write(folder, found[prompt])
    return tuple(found[p] for p in prompts)  # type: ignore[misc]


def _cache_folder(lm: LensModel, config: WildConfig) -> Any:
    return cache_root() / "wild-generations" / cache_key(weights_fingerprint(lm), {"version": 1, **config.params()})


def _read(folder: Any, prompt: str) -> WildGeneration | None:
    path = folder / f"{cache_key(prompt)}.json"
    if not path.is_file():
        return None
    item = json.loads(path.read_text(encoding="utf-8"))
    return WildGeneration(item["prompt"], tuple(item["tokens"]), item["text"])


def _write(folder: Any, generation: WildGeneration) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{cache_key(generation.prompt)}.json"
    partial = path.with_suffix(f".{os.getpid()}.partial")
    partial.write_text(json.dumps(dataclasses.asdict(generation)), encoding="utf-8")
    os.replace(partial, path)  # never a half-written entry


# --- scoring --------------------------------------------------------------------------------------


def _prompts_of(requests: Sequence[EditRequest], neighbours: Sequence[Sequence[str]]) -> list[str]:
    if len(neighbours) != len(requests):
        raise UserInputError(
            f"{len(neighbours)} neighbour lists for {len(requests)} facts: give one (possibly empty) per fact"
        )
    return [p for r, near in zip(requests, neighbours, strict=True) for p in (r.rewrite_prompt, *r.paraphrase_prompts, *near)]


def score_facts(
    requests: Sequence[EditRequest],
    neighbours: Sequence[Sequence[str]],
    generations: Mapping[str, WildGeneration],
    reference: Mapping[str, WildGeneration],
) -> tuple[WildFact, ...]:
    """Each fact's outcome from the generations of its prompts (``generations``, by prompt) and the
    unedited model's generations of its neighbours (``reference``). Pure: no model.

    Raises:
        UserInputError: a prompt without a generation, a target empty once normalised.
    """
    wanted = _prompts_of(requests, neighbours)
    for name, table, prompts in (("generations", generations, wanted),
                                 ("reference", reference, [p for near in neighbours for p in near])):
        lacking = [p for p in prompts if p not in table]
        if lacking:
            raise UserInputError(f"{name} lack {len(lacking)} prompt(s), e.g. {lacking[0]!r}: "
                                 "generate every rewrite, paraphrase and neighbour prompt (wild_generate)")
    facts = []
    for r, near in zip(requests, neighbours, strict=True):
        for target in (r.target_new, r.target_true):
            answer_matches("", target)  # an empty target raises here, naming itself
        after = tuple(generations[p] for p in near)
        facts.append(WildFact(
            subject=r.subject, target_new=r.target_new, target_true=r.target_true,
            rewrite=generations[r.rewrite_prompt],
            paraphrases=tuple(generations[p] for p in r.paraphrase_prompts),
            neighbours=after,
            neighbours_kept=tuple(g.tokens == reference[g.prompt].tokens for g in after),
        ))
    return tuple(facts)


def wild_facts(
    lm: LensModel,
    requests: Sequence[EditRequest],
    neighbours: Sequence[Sequence[str]],
    reference: Mapping[str, WildGeneration],
    config: WildConfig | None = None,
) -> tuple[WildFact, ...]:
    """WILD-EM of the facts on the model as it is now (edited or not): every prompt of every fact
    generated in one batched call, then :func:`score_facts`. Reads the model only."""
    prompts = _prompts_of(requests, neighbours)
    generations = {g.prompt: g for g in wild_generate(lm, prompts, config)}
    return score_facts(requests, neighbours, generations, reference)


def _per_fact(facts: Sequence[WildFact]) -> Tensor:
    return torch.tensor([f.scores() for f in facts], dtype=torch.float32).reshape(len(facts), len(WILD_METRICS))


def _summary(per_fact: Tensor) -> Tensor:
    """Percent of facts per column (NaN rows of a column left out; NaN when all are)."""
    means = torch.nanmean(per_fact, dim=0) * 100
    return torch.where(torch.isnan(per_fact).all(0), torch.nan, means)


# --- the evaluation -------------------------------------------------------------------------------


@result_type
class WildEvaluation(Result):
    """WILD-EM before and after editing.

    ``values`` is ``[model, metric]``: rows ``("unedited", <method>)``, columns :data:`WILD_METRICS`
    in percent. The raw generations are kept (``facts``), so a score can be read back to its text.

    Attributes:
        per_fact: ``[model, fact, metric]`` fractions.
        facts: per row of ``values``, each fact's :class:`WildFact` (its generations).
        method: the registered method's name.
        n_edits: edit calls made; seconds_per_edit: their mean time.
        excluded_neighbours: neighbourhood prompts left out for naming another subject of the same
            edit (as the teacher-forced NS leaves them out).
    """

    per_fact: Tensor
    facts: tuple[tuple[WildFact, ...], ...]
    method: str
    n_edits: int
    seconds_per_edit: float
    excluded_neighbours: int

    def metric(self, name: str, *, edited: bool = True) -> float:
        """One number in percent, e.g. ``ev.metric("rewrite")``."""
        return float(self.values[1 if edited else 0, _column(name)])

    def interval(self, name: str, *, edited: bool = True, samples: int = 2000, level: float = 0.95,
                 seed: int = 0) -> Interval:
        """A percentile bootstrap interval of one metric over facts, in percent (facts without a
        prompt of the kind left out)."""
        column = self.per_fact[1 if edited else 0, :, _column(name)]
        column = column[~column.isnan()] * 100
        if len(column) == 0:
            return Interval(float("nan"), float("nan"), float("nan"), level, 0, "percentile bootstrap")
        return bootstrap_interval(column, n_resamples=samples, level=level, seed=seed)

    def default_title(self, **options: object) -> str:
        return f"WILD-EM, {self.method} on {self.per_fact.shape[1]} facts — {self.meta.model}"

    def summary(self, rows: int = 10) -> str:
        """The rewrite rate before and after, then a markdown table of both rows."""
        head = (f"WILD-EM, {self.method} on {self.meta.model}, {self.per_fact.shape[1]} facts: rewrite "
                f"{self.metric('rewrite', edited=False):.1f} -> {self.metric('rewrite'):.1f}")
        table = ["| model | " + " | ".join(WILD_METRICS) + " |", "|---|" + "---|" * len(WILD_METRICS)]
        for label, row in zip(self.labels[0], self.values, strict=True):
            table.append(f"| {label} | " + " | ".join(f"{float(v):.1f}" for v in row) + " |")
        return "\n".join([head, *table])


def _column(name: str) -> int:
    if name not in WILD_METRICS:
        raise UnknownNameError(f"unknown WILD metric {name!r}: choose from {WILD_METRICS}")
    return WILD_METRICS.index(name)


def evaluate_wild(
    lm: LensModel,
    requests: Sequence[EditRequest],
    config: Config | str = "rome",
    *,
    stats: KeyStatistics | None = None,
    wild: WildConfig | None = None,
    use_cache: bool = True,
) -> WildEvaluation:
    """Edit the facts as :func:`~lmsci_mi.editing.evaluate_edits` does (the same plan: ROME one
    fact per edit, restored in between; MEMIT and AlphaEdit all facts in one edit) and judge them
    by WILD-EM, with the unedited model as baseline. The model is changed while this runs and
    left as it was (every edit restored, also on error).

    Args:
        lm: the model.
        requests: facts with ``target_true``, paraphrase and neighbourhood prompts.
        config: the method's config, or a method name for its default config.
        stats: key statistics covering the edited layers (default: each method's own).
        wild: :class:`WildConfig`.
        use_cache: keep the unedited model's generations on disk and reuse them (every method's
            locality is judged against the same ones).

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.editing import EditRequest, ROMEConfig
    >>> lm = load_model("toy-2l")
    >>> fact = EditRequest("{} is located in", "The Eiffel Tower", " Rome", " Paris",
    ...                    paraphrase_prompts=("The Eiffel Tower stands in",),
    ...                    neighborhood_prompts=("The Louvre is located in",))
    >>> ev = evaluate_wild(lm, [fact], ROMEConfig(layer=0, steps=2, n_contexts=1, stats_tokens=256),
    ...                    wild=WildConfig(max_new_tokens=3), use_cache=False)
    >>> ev.metric("locality", edited=False)
    100.0
    """
    wild = wild or WildConfig()
    plan = plan_evaluation(lm, requests, config)
    every = _prompts_of(plan.requests, plan.neighbours)
    reference = {g.prompt: g for g in wild_generate(lm, every, wild, use_cache=use_cache)}
    before = score_facts(plan.requests, plan.neighbours, reference, reference)
    after: list[WildFact] = []
    seconds = []
    function = EDITING_METHODS.get(plan.method).function
    for batch in tqdm(plan.batches, desc=f"{plan.method} WILD", unit="edit", disable=len(plan.batches) < 2):
        start = time.perf_counter()
        with function(lm, [plan.requests[i] for i in batch], plan.config, stats=stats):
            seconds.append(time.perf_counter() - start)
            after += wild_facts(lm, [plan.requests[i] for i in batch], [plan.neighbours[i] for i in batch],
                                reference, wild)
    return assemble_wild(lm, plan.method, (before, tuple(after)), seconds=seconds, excluded=plan.excluded,
                         params={f"edit.{k}": v for k, v in plan.config.params().items()}, wild=wild)


def assemble_wild(
    lm: LensModel,
    method: str,
    rows: tuple[Sequence[WildFact], Sequence[WildFact]],
    *,
    seconds: Sequence[float],
    excluded: int,
    params: Mapping[str, Any],
    wild: WildConfig,
) -> WildEvaluation:
    """The :class:`WildEvaluation` of the unedited and the edited model's facts (same facts, same
    order) and the seconds of each edit."""
    before, after = rows
    if [f.subject for f in before] != [f.subject for f in after]:
        raise UserInputError("the unedited and the edited rows must hold the same facts in the same order")
    per_fact = torch.stack([_per_fact(before), _per_fact(after)])
    return WildEvaluation(
        values=torch.stack([_summary(per_fact[0]), _summary(per_fact[1])]),
        axes=("model", "metric"),
        labels=(("unedited", method), WILD_METRICS),
        meta=lm.meta([f.rewrite.prompt for f in before], data_source="edit requests",
                     params={"method": method, "n_facts": len(before), **params,
                             **{f"wild.{k}": v for k, v in wild.params().items()}}),
        per_fact=per_fact,
        facts=(tuple(before), tuple(after)),
        method=method,
        n_edits=len(seconds),
        seconds_per_edit=sum(seconds) / len(seconds) if seconds else float("nan"),
        excluded_neighbours=excluded,
    )

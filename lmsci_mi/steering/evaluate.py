"""Evaluating steers: continuations of neutral prompts at several steer values, scored for sentiment
(mean VADER compound), a topic word score, perplexity under the unsteered model and distinct-n,
each with its standard error over prompts. Any intervention with a strength (LM-Steer, a steering
vector, an SAE feature) gets the same curve on the same prompts and seeds.

Follows LM-Steer's evaluation (Han et al. 2024: sampled 20-token continuations, perplexity under
a reference model, dist-1/2/3), with VADER (offline, lexicon-based) in place of the SST-2
classifier and the model itself, unsteered, as the perplexity reference. Generation is the one
sampler (:mod:`lmsci_mi.generation`) under the steer, which applies at every step.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import field
from functools import cache
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from tqdm.auto import tqdm

from lmsci_mi.config import Config, config, paper
from lmsci_mi.data.steering_texts import neutral_prompts, neutral_prompts_source, topic_lexicon
from lmsci_mi.errors import UserInputError
from lmsci_mi.generation import GenerationConfig, Generations, generate
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result, result_type
from lmsci_mi.stats import standard_error
from lmsci_mi.steering.lm_steer import LMSteer

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "METRICS",
    "ControlCurve",
    "SteerEvalConfig",
    "distinct_n",
    "evaluate_intervention",
    "evaluate_settings",
    "evaluate_steer",
    "generate_steered",
    "perplexity",
    "sentiment_scores",
    "topic_scores",
]

METRICS = ("sentiment", "topic", "perplexity", "distinct_1", "distinct_2", "distinct_3")
"""The columns of a :class:`ControlCurve`."""


_MOVED_TO_GENERATION = ("max_new_tokens", "temperature", "top_p", "seed", "batch_size")


@config
class SteerEvalConfig(Config):
    """How a steer is evaluated. LM-Steer samples at T = 1 with top-p 0.9, 20 new tokens.

    The sampling is ``generation`` (the seed is the same for every steer value). The flat
    keywords ``max_new_tokens``, ``temperature``, ``top_p``, ``seed`` and ``batch_size`` still
    set it, deprecated.
    """

    _moved = MappingProxyType({name: f"generation.{name}" for name in _MOVED_TO_GENERATION})

    attribute: str = field(default="sentiment", metadata={"help": "the steer the curve varies"})
    values: tuple[float, ...] = field(
        default=(-10.0, -5.0, 0.0, 5.0, 10.0),
        metadata={
            "help": "steer values of the control curve (the dummy stays at 1 throughout)",
            "min_length": 1,
            **paper(
                "±5 (and 3, 0, −1 on the continuous-control curve)",
                "Han et al. 2024, code: Glaciohound/LM-Steer README (generate.py --steer_values "
                "±5 1)",
                why="not measured at this default: the shipped curve runs −2 … 2 "
                "(docs/data/steering.json, curve; benchmarks/steering.py GRID)",
            ),
        },
    )
    n_prompts: int = field(
        default=60,
        metadata={
            "help": "neutral prompts (60 are bundled)",
            "ge": 1,
            **paper(
                "5,000 neutral OpenWebText prompts (sentiment), 25 samples each",
                "Han et al. 2024, code: Glaciohound/LM-Steer data/prompts and generate.py "
                "(prompts from MuCoLa; 25 samples per prompt, 20 new tokens)",
                why="the 60 bundled neutral prompts, one sample each: docs/data/steering.json "
                "(evaluation); benchmarks/steering.py",
            ),
        },
    )
    generation: GenerationConfig = field(
        default_factory=functools.partial(
            GenerationConfig, max_new_tokens=20, temperature=1.0, top_p=0.9, seed=0, batch_size=64
        ),
        metadata={"help": "how continuations are sampled"},
    )
    progress: bool = field(default=True, metadata={"help": "show a progress bar", "cli": False})


_DEFAULT_STEER_EVAL_CONFIG = SteerEvalConfig()


@result_type
class ControlCurve(Result):
    """Metrics of continuations at each steer setting.

    ``values`` is ``[setting, metric]`` (axes ``("setting", "metric")``; metrics :data:`METRICS`).

    Attributes:
        attributes: the steer names, one per entry of each setting.
        settings: per row, the value of every steer (the dummy is 1 in every row).
        unsteered: the metrics of the model without any steer (dummy off too).
        continuations: per row, the sampled continuations (prompt order).
        errors: per row, each metric's standard error over prompts (sentiment and topic: of the
            mean score; perplexity: by the delta method on the log, the perplexity times the
            standard error of the per-prompt mean NLLs; NaN for distinct-n, a corpus statistic).
            Empty in files written before.
        unsteered_errors: the same for the unsteered row.
    """

    attributes: tuple[str, ...]
    settings: tuple[tuple[float, ...], ...]
    unsteered: tuple[float, ...]
    continuations: tuple[tuple[str, ...], ...]
    errors: tuple[tuple[float, ...], ...] = ()
    unsteered_errors: tuple[float, ...] = ()

    def error(self, name: str) -> Tensor:
        """One metric's standard errors, one per setting (NaN where none was recorded)."""
        if not self.errors:
            return torch.full((len(self.settings),), float("nan"))
        return torch.tensor(self.errors)[:, METRICS.index(name)]

    def metric(self, name: str) -> Tensor:
        """One metric's column, one entry per setting."""
        return self.values[:, METRICS.index(name)]

    def gap(self, name: str = "sentiment") -> float:
        """The metric at the last setting minus the first (the +s/−s gap of a curve)."""
        column = self.metric(name)
        return float(column[-1] - column[0])

    def is_monotone(self, name: str = "sentiment") -> bool:
        """Whether the metric rises strictly along the settings."""
        column = self.metric(name)
        return bool((column[1:] > column[:-1]).all())

    def summary(self, rows: int = 10) -> str:
        """The sentiment gap, then a Markdown table: one row per setting (the first ``rows``),
        the unsteered model first."""
        header = "| setting | " + " | ".join(METRICS) + " |"
        gap = f"sentiment gap (last − first setting) {self.gap():+.3f} on {self.meta.model}"
        lines = [gap, header, "|" + "---|" * (len(METRICS) + 1)]
        lines.append("| unsteered | " + " | ".join(f"{v:.3f}" for v in self.unsteered) + " |")
        for label, row in list(zip(self.axis_labels(0), self.values.tolist(), strict=True))[:rows]:
            lines.append(f"| {label} | " + " | ".join(f"{v:.3f}" for v in row) + " |")
        if self.errors:
            lines.append(f"(sentiment ± s.e. over {len(self.meta.prompts)} prompts: "
                         + ", ".join(f"{e:.3f}" for e in self.error("sentiment").tolist()) + ")")
        return "\n".join(lines)

    def default_title(self, **options: object) -> str:
        return f"LM-Steer control curve — {self.meta.model}"

    def _draw(self, title: str) -> Figure:
        """Sentiment and topic score against the first varying steer, perplexity on a second axis."""
        from matplotlib.figure import Figure

        settings = torch.tensor(self.settings)
        varying = int((settings.max(0).values - settings.min(0).values).argmax())
        x = settings[:, varying].tolist()
        fig = Figure(figsize=(6, 4))
        ax = fig.add_subplot()
        for name, style in (("sentiment", "o-"), ("topic", "s--")):
            # Error bars: one standard error over prompts (files written before have none).
            ax.errorbar(x, self.metric(name).tolist(), yerr=self.error(name).nan_to_num(0.0).tolist(),
                        fmt=style, capsize=2, label=f"{name} (steered)")
            ax.axhline(self.unsteered[METRICS.index(name)], ls=":", lw=1, color="grey")
        ax.set_xlabel(f"{self.attributes[varying]} steer value (dummy at 1)")
        ax.set_ylabel("mean VADER compound / topic score")
        twin = ax.twinx()
        twin.plot(x, self.metric("perplexity").tolist(), "^-", color="tab:red", label="perplexity")
        twin.set_ylabel("perplexity (unsteered model)", color="tab:red")
        ax.legend(loc="upper left")
        ax.set_title(title)
        fig.tight_layout()
        return fig


# ---------------------------------------------------------------------- generation


def generate_steered(
    lm: LensModel,
    prompts: Sequence[str],
    steer: LMSteer | None = None,
    values: Mapping[str | int, float] | Sequence[float] | float | None = None,
    config: GenerationConfig | None = None,
    *,
    use_kv_cache: bool = True,
) -> Generations:
    """Continue each prompt under a steer: apply the steer, then :func:`generate`.

    Each prompt draws from its own seeded stream, so a seed gives the same draws at every steer
    value. ``steer=None`` samples the unsteered model. Reads the model only.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> steer = LMSteer.for_model(lm, ("sentiment",))
    >>> out = generate_steered(lm, ["Hi", "Hello there"], steer, [2.0], GenerationConfig(max_new_tokens=3))
    >>> [len(t) for t in out.tokens]
    [3, 3]
    """
    if steer is None:
        return generate(lm, prompts, config, use_kv_cache=use_kv_cache)
    with steer.apply(lm, values if values is not None else {}):
        return generate(lm, prompts, config, use_kv_cache=use_kv_cache)


# ---------------------------------------------------------------------- metrics


@cache
def _vader() -> Any:
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    return SentimentIntensityAnalyzer()


def sentiment_scores(texts: Sequence[str]) -> list[float]:
    """VADER compound score of each text, in [-1, 1] (0 for text with no sentiment word).

    >>> sentiment_scores(["What a wonderful day", "This is awful", "The bus"])
    [0.5719, -0.4588, 0.0]
    """
    analyzer = _vader()
    return [float(analyzer.polarity_scores(t)["compound"]) for t in texts]


def vader_valence(word: str) -> float:
    """A word's VADER lexicon valence (−4 … +4), 0 when it is not in the lexicon."""
    return float(_vader().lexicon.get(word.lower(), 0.0))


_WORD = re.compile(r"[a-z]+")


def topic_scores(texts: Sequence[str]) -> list[float]:
    """Per text, (food words − technology words) / words, with the bundled topic word lists.

    >>> topic_scores(["Bake the bread in the oven", "Open the software update"])
    [0.5, -0.5]
    """
    lexicon = topic_lexicon()
    scores = []
    for text in texts:
        words = _WORD.findall(text.lower())
        food = sum(w in lexicon["food"] for w in words)
        tech = sum(w in lexicon["technology"] for w in words)
        scores.append((food - tech) / max(len(words), 1))
    return scores


def distinct_n(texts: Sequence[str], n: int) -> float:
    """Distinct n-grams over all texts: unique n-grams / n-grams, of whitespace-split words.

    >>> distinct_n(["a b a b", "a b c"], 2)
    0.6
    """
    grams = []
    for text in texts:
        words = text.split()
        grams += [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def perplexity(
    lm: LensModel,
    prompts: Sequence[str],
    continuations: Sequence[Sequence[int]],
    *,
    batch_size: int = 16,
) -> float:
    """Token-level perplexity of the continuations given their prompts under ``lm`` as it is
    (call it outside any steer): exp of the mean negative log-likelihood over all continuation
    tokens. Reads the model only.
    """
    nll, count = continuation_nll(lm, prompts, continuations, batch_size=batch_size)
    return float((nll.sum() / max(int(count.sum()), 1)).exp())


@torch.no_grad()
def continuation_nll(
    lm: LensModel,
    prompts: Sequence[str],
    continuations: Sequence[Sequence[int]],
    *,
    batch_size: int = 16,
) -> tuple[Tensor, Tensor]:
    """Per prompt, the summed negative log-likelihood of its continuation under ``lm`` as it is,
    and the continuation's token count. Reads the model only."""
    nll = torch.zeros(len(prompts), dtype=torch.float64)
    count = torch.zeros(len(prompts), dtype=torch.long)
    for start in range(0, len(prompts), batch_size):
        prompt_ids = [lm.encode(p) for p in prompts[start : start + batch_size]]
        rows = [
            p + list(c)
            for p, c in zip(prompt_ids, continuations[start : start + batch_size], strict=True)
        ]
        batch = lm.pad_batch(rows)
        log_probs = lm(batch.tokens).float().log_softmax(-1)
        for r, (p, row) in enumerate(zip(prompt_ids, rows, strict=True)):
            positions = torch.arange(len(p) - 1, len(row) - 1, device=lm.device)
            targets = torch.tensor(row[len(p) :], device=lm.device)
            nll[start + r] = -float(log_probs[r, positions, targets].sum())
            count[start + r] = len(targets)
    return nll, count


def _metrics(
    lm: LensModel, prompts: Sequence[str], ids: Sequence[Sequence[int]]
) -> tuple[list[float], list[float], list[str]]:
    """The metric row, its standard errors over prompts, and the continuations' texts."""
    texts = [lm.tokenizer.decode(c, skip_special_tokens=True) for c in ids]
    sentiment = sentiment_scores(texts)
    topic = topic_scores(texts)
    nll, count = continuation_nll(lm, prompts, ids)
    mean_nll = float(nll.sum() / max(int(count.sum()), 1))
    # Perplexity = exp(total NLL / total tokens); its s.e. by the delta method on the per-prompt
    # mean NLL (continuations have nearly equal lengths, so the ratio estimator's error is small).
    per_prompt = nll / count.clamp_min(1)
    nan = float("nan")
    row = [
        sum(sentiment) / len(sentiment),
        sum(topic) / len(topic),
        float(torch.tensor(mean_nll).exp()),
        distinct_n(texts, 1),
        distinct_n(texts, 2),
        distinct_n(texts, 3),
    ]
    errors = [
        float(standard_error(sentiment)),
        float(standard_error(topic)),
        row[2] * float(standard_error(per_prompt.double())),
        nan,
        nan,
        nan,
    ]
    return row, errors, texts


def evaluate_settings(
    lm: LensModel,
    steer: LMSteer,
    settings: Sequence[Mapping[str | int, float]],
    config: SteerEvalConfig = _DEFAULT_STEER_EVAL_CONFIG,
    *,
    prompts: Sequence[str] | None = None,
) -> ControlCurve:
    """Metrics of steered continuations at each setting (several steers may be set at once:
    composition), plus the unsteered model. Reads the model only.

    Args:
        lm: the model the steer belongs to.
        steer: the steer.
        settings: per row, ``{steer name or index: value}``; the dummy is 1 in every row.
        config: sampling and prompt count (``values``/``attribute`` are not used here).
        prompts: defaults to the first ``config.n_prompts`` bundled neutral prompts.

    Raises:
        ValueError: a steer of another model, an unknown steer, no settings.
    """
    steer.check_model(lm)
    if not settings:
        raise UserInputError("give at least one steer setting")
    vectors = [steer.value_vector(s)[: len(steer.attributes)].tolist() for s in settings]
    labels = tuple(
        ", ".join(f"{name}={value:+g}" for name, value in zip(steer.attributes, v, strict=True))
        for v in vectors
    )
    return _curve(
        lm,
        [lambda s=s: steer.apply(lm, s) for s in settings],
        labels,
        config,
        prompts,
        attributes=steer.attributes,
        settings=tuple(tuple(v) for v in vectors),
    )


def evaluate_intervention(
    lm: LensModel,
    intervention: Callable[[float], AbstractContextManager[object]],
    values: Sequence[float],
    config: SteerEvalConfig = _DEFAULT_STEER_EVAL_CONFIG,
    *,
    name: str = "coefficient",
    prompts: Sequence[str] | None = None,
) -> ControlCurve:
    """The control curve of any intervention with a strength, on the same prompts and seeds as
    :func:`evaluate_steer`: ``intervention(value)`` is entered around generation at each value.
    Puts a steering vector, an SAE feature and LM-Steer side by side. Reads the model only.

    Args:
        lm: the model.
        intervention: a value → context manager, e.g. ``lambda c: vector.apply(lm, c)`` or
            ``lambda c: steer_with_sae_feature(lm, sae, feature, c)``.
        values: the strengths of the curve.
        config: sampling and prompt count (``values``/``attribute`` are not used here).
        name: what the value is called in the curve's labels.
        prompts: defaults to the first ``config.n_prompts`` bundled neutral prompts.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.steering.vectors import steering_vector
    >>> lm = load_model("toy-2l")
    >>> v = steering_vector(lm, torch.ones(64), 1)
    >>> curve = evaluate_intervention(lm, lambda c: v.apply(lm, c), [0.0, 2.0],
    ...     SteerEvalConfig(n_prompts=2, generation=GenerationConfig(max_new_tokens=3), progress=False),
    ...     name="ones")
    >>> curve.axis_labels(0), tuple(curve.values.shape)
    (['ones=+0', 'ones=+2'], (2, 6))
    """
    if not values:
        raise UserInputError("give at least one value")
    values = [float(v) for v in values]
    return _curve(
        lm,
        [lambda v=v: intervention(v) for v in values],
        tuple(f"{name}={v:+g}" for v in values),
        config,
        prompts,
        attributes=(name,),
        settings=tuple((v,) for v in values),
    )


def _curve(
    lm: LensModel,
    contexts: Sequence[Callable[[], AbstractContextManager[object]]],
    labels: tuple[str, ...],
    config: SteerEvalConfig,
    prompts: Sequence[str] | None,
    *,
    attributes: tuple[str, ...],
    settings: tuple[tuple[float, ...], ...],
) -> ControlCurve:
    """Sample the prompts under each context and score them, then the model without any."""
    prompts = list(prompts if prompts is not None else neutral_prompts()[: config.n_prompts])
    if not prompts:
        raise UserInputError("no prompts to evaluate on")
    sample = config.generation
    rows, errors, samples = [], [], []
    for context in tqdm(contexts, desc="evaluate steer", unit="setting", disable=not config.progress):
        with context():
            ids = generate(lm, prompts, sample).tokens
        row, error, texts = _metrics(lm, prompts, ids)  # perplexity under the unsteered model
        rows.append(row)
        errors.append(tuple(error))
        samples.append(tuple(texts))
    unsteered, unsteered_errors, _ = _metrics(lm, prompts, generate(lm, prompts, sample).tokens)
    return ControlCurve(
        values=torch.tensor(rows),
        axes=("setting", "metric"),
        labels=(labels, METRICS),
        meta=lm.meta(
            prompts, seed=config.generation.seed, data_source=neutral_prompts_source(), params=config.params()
        ),
        attributes=attributes,
        settings=settings,
        unsteered=tuple(unsteered),
        continuations=tuple(samples),
        errors=tuple(errors),
        unsteered_errors=tuple(unsteered_errors),
    )


def evaluate_steer(
    lm: LensModel, steer: LMSteer, config: SteerEvalConfig = _DEFAULT_STEER_EVAL_CONFIG
) -> ControlCurve:
    """The continuous-control curve: ``config.attribute`` at each of ``config.values``, the other
    steers at 0 and the dummy at 1; the unsteered model is reported separately. Reads the model.

    Raises:
        ValueError: a steer of another model or an unknown attribute.
    """
    index = steer.index_of(config.attribute)
    return evaluate_settings(lm, steer, [{index: v} for v in config.values], config)

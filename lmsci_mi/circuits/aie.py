"""The average indirect effect (AIE) of causal tracing over a fact set, by token category (Meng et
al. 2022, ROME Fig. 2; severed kinds as its Fig. 3), under Gaussian noise or symmetric token
replacement (Zhang & Nanda 2024, who show STR can move the localisation that noise gives).

Only facts the model gets top-1 are traced; each fact's trace is cached under a folder keyed by the
model's weights and the config, so a long run resumes where it stopped.
"""

from __future__ import annotations

import json
import logging
import random
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from jaxtyping import Float
from torch import Tensor

from lmsci_mi.cache import cache_key, cache_root, weights_fingerprint
from lmsci_mi.circuits.tracing import (
    CausalTrace,
    TraceConfig,
    causal_trace,
    subject_embedding_std,
)
from lmsci_mi.config import Config, config
from lmsci_mi.data.facts import Fact, load_facts
from lmsci_mi.errors import UserInputError
from lmsci_mi.results import Result, result_type
from lmsci_mi.stats import normal_half_width

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from lmsci_mi.cluster import ClusterConfig
    from lmsci_mi.model import LensModel

__all__ = [
    "CATEGORIES",
    "AIEConfig",
    "AverageIndirectEffect",
    "FactPlan",
    "FactTraces",
    "aggregate_traces",
    "average_indirect_effect",
    "cached_trace",
    "known_facts",
    "load_fact_set",
    "plan_fact_traces",
    "str_partners",
    "token_categories",
    "trace_fact",
    "trace_facts",
]

logger = logging.getLogger(__name__)

CATEGORIES = (
    "first subject",
    "middle subject",
    "last subject",
    "first subsequent",
    "further tokens",
    "last token",
)
"""ROME's token categories (``average_causal_effects.ipynb``); middle and further tokens pool."""

_FACT_CORRUPTIONS = ("gaussian", "str")
_CACHE_VERSION = 1


def load_fact_set(source: str | Path | Sequence[Mapping[str, Any]] = "shipped") -> list[Fact]:
    """Deprecated: :func:`lmsci_mi.data.load_facts`, the one loader of fact sets (the same
    sources; ``"shipped"`` is its ``"facts"``)."""
    warnings.warn(
        "lmsci_mi.circuits.aie.load_fact_set is deprecated: use lmsci_mi.data.load_facts",
        DeprecationWarning,
        stacklevel=2,
    )
    return load_facts(source)


def _answers(facts: Sequence[Fact]) -> None:
    """Raise unless every fact has the true answer the trace measures."""
    for i, fact in enumerate(facts):
        if not fact.target_true.strip():
            hint = (
                f" (its target_new {fact.target_new!r} looks like the old "
                "circuits.aie.Fact(prompt, subject, target): write "
                "Fact(prompt, subject, target_true=target))"
                if fact.target_new
                else ""
            )
            raise UserInputError(f"fact {i} ({fact.subject!r}) has no target_true{hint}")


def token_categories(subject: Sequence[int], n_pos: int) -> dict[str, list[int]]:
    """Positions of each of ROME's token categories for a subject span in an ``n_pos`` prompt.

    A one-token subject is both first and last; a prompt whose subject is followed by one token
    has that token as both first subsequent and last token (as ROME's notebook counts them).

    >>> token_categories([2, 3, 4], 8)
    {'first subject': [2], 'middle subject': [3], 'last subject': [4], 'first subsequent': [5], \
'further tokens': [6], 'last token': [7]}
    """
    first, last = subject[0], subject[-1]
    if last + 1 >= n_pos:
        raise UserInputError(
            f"the subject ends the prompt ({n_pos} tokens): there is no token after it"
        )
    return {
        "first subject": [first],
        "middle subject": list(range(first + 1, last)),
        "last subject": [last],
        "first subsequent": [last + 1],
        "further tokens": list(range(last + 2, n_pos - 1)),
        "last token": [n_pos - 1],
    }


@config
class AIEConfig(Config):
    """Parameters of the average indirect effect over a fact set."""

    n_facts: int | None = field(
        default=None,
        metadata={"help": "trace at most this many known facts (default all)", "ge": 1},
    )
    cache: bool = field(default=True, metadata={"help": "cache each fact's trace (resumable)"})
    trace: TraceConfig = field(
        default_factory=TraceConfig, metadata={"cli": False, "help": "per-fact trace settings"}
    )

    def validate(self) -> None:
        super().validate()
        t = self.trace
        if t.corruption not in _FACT_CORRUPTIONS:
            raise UserInputError(
                f"a fact set is traced with corruption {_FACT_CORRUPTIONS}, not {t.corruption!r}"
            )
        given = [n for n in ("target", "replacement", "corrupted_prompt", "wrong") if getattr(t, n)]
        if given:
            raise UserInputError(f"{given} are set per fact when tracing a fact set; leave them unset")


@dataclass(frozen=True)
class FactTraces:
    """The per-fact traces of a fact set, and how the facts were chosen.

    Attributes:
        facts: the facts traced (known, paired under STR), in the set's order.
        traces: their traces (fewer than ``facts`` while the run is incomplete).
        n_candidates / n_known / n_unpaired: facts in the set, known top-1, and known but left
            out because no STR partner exists.
        noise_scale: the Gaussian std used (0 under STR).
    """

    facts: tuple[Fact, ...]
    traces: tuple[CausalTrace, ...]
    n_candidates: int
    n_known: int
    n_unpaired: int
    noise_scale: float

    @property
    def complete(self) -> bool:
        return len(self.traces) == len(self.facts)


@torch.no_grad()
def known_facts(lm: LensModel, facts: Sequence[Fact], batch_size: int = 16) -> list[Fact]:
    """The facts whose answer's first token is the model's top-1 next token (ROME's known set).

    >>> from lmsci_mi import load_model
    >>> known_facts(load_model("toy-2l"), load_facts()[:4])  # a random model knows nothing
    []
    """
    _answers(facts)
    kept = []
    for start in range(0, len(facts), batch_size):
        chunk = facts[start : start + batch_size]
        batch = lm.encode_batch([f.rewrite_prompt for f in chunk])
        # Only the last real token is unembedded: the full vocabulary at every position costs as
        # much as the blocks on short prompts.
        resid = lm.model(batch.tokens, stop_at_layer=lm.cfg.n_layers)
        last = resid[torch.arange(len(chunk), device=lm.device), batch.lengths - 1]
        top = lm.unembed(last).argmax(-1).tolist()
        kept += [
            f for f, t in zip(chunk, top, strict=True) if lm.continuation_ids(f.target_true)[0] == t
        ]
    return kept


def str_partners(lm: LensModel, facts: Sequence[Fact], seed: int = 0) -> list[Fact | None]:
    """For each fact, a partner for symmetric token replacement, or None where none exists.

    The partner has the same template, a subject of the same number of tokens covering the same
    positions once swapped in, and a *different* answer (first token), so the logit difference
    true − partner's answer measures the fact. The choice among candidates is seeded.
    """
    _answers(facts)
    spans = [tuple(lm.find_subject(f.rewrite_prompt, f.subject)) for f in facts]
    first = [lm.continuation_ids(f.target_true)[0] for f in facts]
    partners: list[Fact | None] = []
    for i, fact in enumerate(facts):
        candidates = [
            other
            for j, other in enumerate(facts)
            if other.prompt == fact.prompt
            and first[j] != first[i]
            and len(spans[j]) == len(spans[i])
            and len(lm.encode(other.rewrite_prompt)) == len(lm.encode(fact.rewrite_prompt))
            and tuple(lm.find_subject(fact.prompt.format(other.subject), other.subject))
            == spans[i]
        ]
        partners.append(random.Random(f"{seed}:{i}").choice(candidates) if candidates else None)
    return partners


@dataclass(frozen=True)
class FactPlan:
    """The facts a fact-set trace covers, each with its own trace settings, and how they were
    chosen; what :func:`trace_facts` and a sharded run (:mod:`lmsci_mi.cluster`) both start from.

    Attributes:
        facts: the facts to trace (known top-1, paired under STR), in the set's order.
        configs: each fact's trace settings (its answer, its STR partner, the noise scale).
        config: the fact-set config they came from.
        n_candidates / n_known / n_unpaired: facts in the set, known top-1, and known but left
            out because no STR partner exists.
        noise_scale: the Gaussian std used (0 under STR).
        fingerprint: the model's weights fingerprint (the traces' cache folder is keyed by it).
    """

    facts: tuple[Fact, ...]
    configs: tuple[TraceConfig, ...]
    config: AIEConfig
    n_candidates: int
    n_known: int
    n_unpaired: int
    noise_scale: float
    fingerprint: str


def plan_fact_traces(
    lm: LensModel, facts: Sequence[Fact], config: AIEConfig | None = None
) -> FactPlan:
    """Choose the facts to trace and each one's settings. Reads the model only: one batched
    forward pass per 16 facts to find the known ones, and the subject embeddings' spread.

    Raises:
        ValueError: an empty fact set, no known fact (or none with an STR partner).
    """
    cfg = config or AIEConfig()
    if not facts:
        raise UserInputError("the fact set is empty: give facts (e.g. load_facts('facts'))")
    known = known_facts(lm, facts)
    if not known:
        raise UserInputError(
            f"{lm.name} knows none of the {len(facts)} facts (top-1): nothing to trace"
        )
    partners: list[Fact | None] = [None] * len(known)
    if cfg.trace.corruption == "str":
        partners = str_partners(lm, known, cfg.trace.seed)
    chosen = [
        (f, p)
        for f, p in zip(known, partners, strict=True)
        if cfg.trace.corruption != "str" or p is not None
    ]
    n_unpaired = len(known) - len(chosen)
    chosen = chosen[: cfg.n_facts]
    if not chosen:
        raise UserInputError(
            f"none of the {len(known)} known facts has an STR partner (same template, "
            "same subject length, another answer): add facts or use gaussian"
        )
    scale = 0.0
    if cfg.trace.corruption == "gaussian":
        # ROME's unit: subject-token embeddings of the facts traced, times the noise multiple.
        scale = cfg.trace.noise * subject_embedding_std(
            lm, [f.rewrite_prompt for f, _ in chosen], [f.subject for f, _ in chosen]
        )
    return FactPlan(
        facts=tuple(f for f, _ in chosen),
        configs=tuple(_fact_config(lm, cfg.trace, f, p, scale) for f, p in chosen),
        config=cfg,
        n_candidates=len(facts),
        n_known=len(known),
        n_unpaired=n_unpaired,
        noise_scale=scale,
        fingerprint=weights_fingerprint(lm),
    )


def cached_trace(plan: FactPlan, index: int) -> CausalTrace | None:
    """Fact ``index`` of the plan's trace from the cache (None if it is not there, or the
    plan's config has ``cache`` off)."""
    path = _trace_path(plan, index)
    return CausalTrace.load(path) if plan.config.cache and path.is_file() else None


def trace_fact(lm: LensModel, plan: FactPlan, index: int) -> CausalTrace:
    """Fact ``index`` of the plan's trace: from the cache, or traced (and cached under the
    plan's ``config.cache``). Reads the model only."""
    trace = cached_trace(plan, index)
    if trace is None:
        fact = plan.facts[index]
        trace = causal_trace(lm, fact.rewrite_prompt, fact.subject, plan.configs[index])
        if plan.config.cache:
            trace.save(_trace_path(plan, index))
    return trace


def _trace_path(plan: FactPlan, index: int) -> Path:
    fact, per_fact = plan.facts[index], plan.configs[index]
    folder = _cache_folder(plan.fingerprint, plan.config, plan.noise_scale)
    return folder / f"{cache_key(fact.rewrite_prompt, fact.subject, json.dumps(per_fact.params()))}.json"


def trace_facts(
    lm: LensModel,
    facts: Sequence[Fact],
    config: AIEConfig | None = None,
    *,
    max_new: int | None = None,
    budget_s: float | None = None,
) -> FactTraces:
    """Trace every known fact, each trace cached, so a run resumes where it stopped.

    Reads the model only. ``max_new`` (traces) and ``budget_s`` (seconds, checked before each
    new trace) bound this call's work; it then returns the traces done so far (``complete``
    False until all are) and the next call reads them from the cache.

    Raises:
        ValueError: an empty fact set, no known fact (or none with an STR partner).
    """
    start = time.perf_counter()
    plan = plan_fact_traces(lm, facts, config)
    traces: list[CausalTrace] = []
    new = 0
    for index in range(len(plan.facts)):
        trace = cached_trace(plan, index)
        if trace is None:
            if (max_new is not None and new >= max_new) or (
                budget_s is not None and time.perf_counter() - start > budget_s
            ):
                break
            trace = trace_fact(lm, plan, index)
            new += 1
        traces.append(trace)
    logger.info("aie: %d of %d facts traced (%d new)", len(traces), len(plan.facts), new)
    return FactTraces(
        plan.facts, tuple(traces), plan.n_candidates, plan.n_known, plan.n_unpaired,
        plan.noise_scale,
    )


def _fact_config(
    lm: LensModel, base: TraceConfig, fact: Fact, partner: Fact | None, scale: float
) -> TraceConfig:
    """The trace settings of one fact: its answer's first token, its STR partner and answer."""
    answer = fact.target_true
    first = lm.tokenizer.decode(lm.continuation_ids(answer)[:1]) if lm.tokenizer else answer
    changes: dict[str, Any] = {
        "target": first,
        "noise_scale": scale if base.corruption == "gaussian" else None,
    }
    if partner is not None:
        wrong = lm.continuation_ids(partner.target_true)[:1]
        changes |= {
            "replacement": partner.subject,
            "wrong": lm.tokenizer.decode(wrong) if lm.tokenizer else partner.target_true,
        }
    return base.replace(**changes)


def _cache_folder(fingerprint: str, cfg: AIEConfig, scale: float) -> Path:
    """Per model (weights fingerprint) and config: changing either starts a fresh folder."""
    params = {**cfg.trace.params(), "noise_scale": scale, "version": _CACHE_VERSION}
    params.pop("sweep", None)  # batching never changes a trace
    return (
        cache_root()
        / "aie"
        / cache_key(fingerprint, json.dumps(params, sort_keys=True))
    )


@result_type
class AverageIndirectEffect(Result):
    """The average indirect effect per restored kind, token category and layer (ROME Fig. 2).

    ``values`` is ``[kind, category, layer]``: the mean over facts (middle subject and further
    tokens pooled over their tokens, as ROME) of the metric with that state restored minus the
    fact's corrupted metric. ``band`` is the 95% half-width z·sd/√n (sample sd, z the normal
    97.5th percentile), ``n`` the number of samples per category (facts, or pooled tokens).

    Attributes:
        band: ``[kind, category, layer]``.
        n: per category.
        n_facts / n_candidates / n_known / n_unpaired: facts traced, in the set, known top-1,
            known but without an STR partner.
        corruption / metric: ``gaussian`` with p(target), or ``str`` with the logit difference.
        clean_mean / corrupted_mean: the metric on clean and corrupted runs, averaged over facts.
        noise_scale / window: the Gaussian std (0 for STR) and the mlp/attn window.
        kinds: the restored kinds along the first axis.
    """

    band: Tensor
    n: tuple[int, ...]
    n_facts: int
    n_candidates: int
    n_known: int
    n_unpaired: int
    corruption: str
    metric: str
    clean_mean: float
    corrupted_mean: float
    noise_scale: float
    window: int
    kinds: tuple[str, ...]

    def curve(self, kind: str, category: str) -> Float[Tensor, " layer"]:
        """The AIE per layer of one kind and category."""
        if kind not in self.kinds or category not in CATEGORIES:
            raise UserInputError(f"choose kind in {self.kinds} and category in {CATEGORIES}")
        return self.values[self.kinds.index(kind), CATEGORIES.index(category)]

    def peak(self, kind: str, category: str) -> tuple[int, float, float]:
        """``(layer, AIE, band)`` where the AIE of ``kind`` at ``category`` is largest."""
        k, c = self.kinds.index(kind), CATEGORIES.index(category)
        layer = int(self.values[k, c].argmax())
        return layer, float(self.values[k, c, layer]), float(self.band[k, c, layer])

    def summary(self, rows: int = 10) -> str:
        """The peak AIE of every kind and category, with its band and n."""
        unit = "logit diff" if self.metric == "logit_diff" else "p(target)"
        lines = [
            f"AIE ({self.corruption}, {unit}) on {self.meta.model}: {self.n_facts} facts traced "
            f"({self.n_known} of {self.n_candidates} known top-1"
            + (f", {self.n_unpaired} without an STR partner" if self.n_unpaired else "")
            + "); "
            f"clean {self.clean_mean:.3f}, corrupted {self.corrupted_mean:.3f}",
            f"{'kind':10s} {'category':17s} {'n':>4s} {'peak layer':>10s} {'AIE':>8s} {'±95%':>7s}",
        ]
        for kind in self.kinds:
            for c, category in enumerate(CATEGORIES):
                if self.n[c]:
                    layer, value, band = self.peak(kind, category)
                    lines.append(
                        f"{kind:10s} {category:17s} {self.n[c]:4d} {layer:10d} {value:8.3f} {band:7.3f}"
                    )
        return "\n".join(lines)

    def default_title(self, **options: object) -> str:
        return (
            f"{self.meta.model}: AIE over {self.n_facts} known facts, "
            f"{self.corruption} corruption (bands: 95%)"
        )

    def _draw(self, title: str) -> Figure:
        """ROME Fig. 2 as lines: one panel per kind, one line per category, its 95% band shaded."""
        from matplotlib.figure import Figure

        fig = Figure(figsize=(4.6 * len(self.kinds), 4.2))
        axes = fig.subplots(1, len(self.kinds), squeeze=False)[0]
        layers = list(range(self.values.shape[-1]))
        for ax, kind in zip(axes, self.kinds, strict=True):
            for c, category in enumerate(CATEGORIES):
                if not self.n[c]:
                    continue
                k = self.kinds.index(kind)
                mean, band = self.values[k, c].float().numpy(), self.band[k, c].float().numpy()
                ax.plot(layers, mean, label=f"{category} (n={self.n[c]})", lw=1.6)
                ax.fill_between(layers, mean - band, mean + band, alpha=0.18)
            window = (
                f", window {self.window}" if kind in ("mlp", "attn") and self.window > 1 else ""
            )
            ax.set_title(f"restoring {kind}{window}", fontsize=10)
            ax.set_xlabel("layer")
            ax.axhline(0, color="grey", lw=0.6)
            ax.grid(alpha=0.3)
        unit = "logit diff" if self.metric == "logit_diff" else "p(target)"
        axes[0].set_ylabel(f"average indirect effect ({unit})")
        handles, names = axes[0].get_legend_handles_labels()
        # Below the panels: inside, the legend hides the early-layer curves that matter most. Two
        # entries a row per panel fit the figure's width; with fewer panels it takes two rows.
        ncol = min(len(names), 2 * len(self.kinds))
        rows = -(-len(names) // max(ncol, 1))
        fig.legend(handles, names, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
        fig.suptitle(title, fontsize=11)
        fig.tight_layout(rect=(0, 0.035 + 0.035 * rows, 1, 1))
        return fig

    def plot_severing(
        self,
        path: str | Path | None = None,
        *,
        category: str = "last subject",
        title: str | None = None,
    ) -> Figure:
        """ROME Fig. 3: the stream restored at ``category``, ordinary vs attention / MLP severed.

        Needs ``resid`` and at least one of ``sever_mlp`` / ``sever_attn`` among the kinds.
        Saved to ``path`` when one is given, as :meth:`plot` saves.
        """
        default = (
            f"{self.meta.model}, {self.corruption}, {self.n_facts} facts: severing (ROME Fig. 3)"
        )
        return self._plotted(self._draw_severing, path, title or default, category=category)

    def _draw_severing(self, title: str, *, category: str) -> Figure:
        from matplotlib.figure import Figure

        shown = [k for k in ("resid", "sever_attn", "sever_mlp") if k in self.kinds]
        if "resid" not in shown or len(shown) < 2:
            raise UserInputError(
                f"severing needs kinds resid and sever_mlp/sever_attn; this has {self.kinds}"
            )
        names = {"resid": "ordinary", "sever_attn": "attention severed", "sever_mlp": "MLP severed"}
        fig = Figure(figsize=(5.5, 3.8))
        ax = fig.subplots()
        layers = list(range(self.values.shape[-1]))
        c = CATEGORIES.index(category)
        for kind in shown:
            mean = self.values[self.kinds.index(kind), c].float().numpy()
            band = self.band[self.kinds.index(kind), c].float().numpy()
            ax.plot(layers, mean, label=names[kind], lw=1.6)
            ax.fill_between(layers, mean - band, mean + band, alpha=0.2)
        unit = "logit diff" if self.metric == "logit_diff" else "p(target)"
        ax.set_xlabel(f"restored layer (residual stream at the {category} token)")
        ax.set_ylabel(f"AIE ({unit})")
        ax.set_title(title, fontsize=10)
        ax.axhline(0, color="grey", lw=0.6)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        return fig


def aggregate_traces(
    traces: Sequence[CausalTrace],
    *,
    n_candidates: int | None = None,
    n_known: int | None = None,
    n_unpaired: int = 0,
) -> AverageIndirectEffect:
    """The AIE of per-fact traces (one kind set, corruption and metric), by ROME's categories.

    Raises:
        ValueError: no traces, or traces of different kinds, corruptions or layer counts.
    """
    if not traces:
        raise UserInputError("no traces to average: trace some facts first")
    first = traces[0]
    if any(
        (t.kinds, t.corruption, t.metric, t.values.shape[1])
        != (first.kinds, first.corruption, first.metric, first.values.shape[1])
        for t in traces
    ):
        raise UserInputError(
            "traces differ in kinds, corruption, metric or layers: average like with like"
        )
    samples: dict[str, list[Tensor]] = {c: [] for c in CATEGORIES}
    for trace in traces:
        effect = trace.indirect_effect().float()
        for category, positions in token_categories(
            trace.subject_positions, trace.values.shape[-1]
        ).items():
            samples[category] += [effect[:, :, p] for p in positions]
    n_kinds, n_layers = len(first.kinds), first.values.shape[1]
    values = torch.zeros(n_kinds, len(CATEGORIES), n_layers)
    band = torch.zeros_like(values)
    for c, category in enumerate(CATEGORIES):
        if samples[category]:
            stack = torch.stack(samples[category])
            values[:, c] = stack.mean(0)
            if len(stack) > 1:
                band[:, c] = normal_half_width(stack, axis=0)
    params = dict(first.meta.params)
    for key in ("target", "replacement", "wrong", "subject", "corrupted_prompt"):
        params.pop(key, None)
    return AverageIndirectEffect(
        values=values,
        axes=("kind", "category", "layer"),
        labels=(first.kinds, CATEGORIES, tuple(str(i) for i in range(n_layers))),
        meta=replace(
            first.meta,
            prompts=tuple(t.meta.prompts[0] for t in traces),
            params=params,
            data_source="fact set",
        ),
        band=band,
        n=tuple(len(samples[c]) for c in CATEGORIES),
        n_facts=len(traces),
        n_candidates=len(traces) if n_candidates is None else n_candidates,
        n_known=len(traces) if n_known is None else n_known,
        n_unpaired=n_unpaired,
        corruption=first.corruption,
        metric=first.metric,
        clean_mean=sum(t.clean_metric for t in traces) / len(traces),
        corrupted_mean=sum(t.corrupted_metric for t in traces) / len(traces),
        noise_scale=first.noise_scale,
        window=first.window,
        kinds=first.kinds,
    )


def average_indirect_effect(
    lm: LensModel,
    facts: Sequence[Fact] | str | Path = "facts",
    config: AIEConfig | None = None,
    *,
    cluster: ClusterConfig | None = None,
) -> AverageIndirectEffect:
    """ROME's Figure 2 over a fact set: the AIE by token category, layer and restored kind.

    Reads the model only. Each fact's trace is cached (``config.cache``), so an interrupted run
    resumes; :func:`trace_facts` with ``max_new`` runs it in pieces.

    Args:
        lm: the model.
        facts: :class:`~lmsci_mi.data.facts.Fact` records, or what
            :func:`~lmsci_mi.data.facts.load_facts` reads: a shipped set's name (``"facts"``,
            also called ``"shipped"``; ``"edit_facts"``) or a JSON file.
        config: ``n_facts``, ``cache`` and the per-fact ``trace`` settings (``corruption``
            ``"gaussian"`` (p(target), ``n_samples`` noise draws, 3 × the subject embeddings'
            std) or ``"str"`` (logit difference), ``kinds``, ``window``, ``seed``).
        cluster: trace the facts in shards on a Ray cluster (or in this process with
            ``address="process"``), :func:`lmsci_mi.cluster.run_sharded`; the same numbers as
            one process. None: here, one fact after another.

    Returns:
        An :class:`AverageIndirectEffect` ``[kind, category, layer]`` with bands and n.

    Raises:
        ValueError: an empty fact set, no known fact, a subject not in its prompt.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> facts = [Fact("The Eiffel Tower is in", "Eiffel Tower", target_true=" the")]
    >>> average_indirect_effect(lm, facts)  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    lmsci_mi.errors.UserInputError: toy-2l knows none of the 1 facts (top-1): nothing to trace
    """
    fact_list = load_facts(facts) if isinstance(facts, (str, Path)) else list(facts)
    if cluster is not None:
        from lmsci_mi.cluster import run_sharded

        return run_sharded("aie", lm, fact_list, config, cluster=cluster)
    done = trace_facts(lm, fact_list, config)
    return aggregate_traces(
        done.traces,
        n_candidates=done.n_candidates,
        n_known=done.n_known,
        n_unpaired=done.n_unpaired,
    )

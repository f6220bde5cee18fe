"""CounterFact metrics for fact edits (Meng et al. 2022, §4.2): efficacy, paraphrase and
neighbourhood scores and magnitudes, generation entropy and the score S.

Probabilities compare the mean per-token NLL of each (possibly multi-token) target with its
leading space, tokenised as a continuation of the prompt. Every metric is reported for the
unedited model and the edited one.
"""

from __future__ import annotations

import dataclasses
import math
import re
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import field
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float
from torch import Tensor
from tqdm.auto import tqdm

from lmsci_mi.config import Config, config
from lmsci_mi.editing.fit import check_requests
from lmsci_mi.editing.methods import method_for
from lmsci_mi.editing.requests import EditRequest
from lmsci_mi.editing.stats import KeyStatistics
from lmsci_mi.generation import GenerationConfig, generate
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result, result_type

if TYPE_CHECKING:
    from pathlib import Path

    from matplotlib.figure import Figure

__all__ = [
    "GENERATION_TOKENS",
    "METRICS",
    "EditEvaluation",
    "EvaluationConfig",
    "evaluate_edits",
    "generation_entropy",
    "target_nll",
]

METRICS = ("S", "ES", "PS", "NS", "EM", "PM", "NM", "GE")
"""Columns of :class:`EditEvaluation` (percent, except GE: n-gram entropy in bits ×100)."""

GENERATION_TOKENS = 50
"""Tokens sampled per rewrite prompt for GE (ROME's papers use 100; 50 keeps an evaluation of 30
facts on a CPU within minutes). GE is comparable only between runs with the same length."""


@config
class EvaluationConfig(Config):
    """How edits are measured.

    Attributes:
        generation_tokens: tokens of the top-5 sampled generation per fact for GE (0 skips GE).
        seed: generation seed (the same for the unedited and the edited model).
    """

    generation_tokens: int = field(
        default=GENERATION_TOKENS,
        metadata={"help": "tokens per generation for GE (0 skips GE)", "ge": 0},
    )
    seed: int = field(default=0, metadata={"help": "generation seed"})


@result_type
class EditEvaluation(Result):
    """CounterFact metrics before and after editing.

    ``values`` is ``[model, metric]``: rows ``("unedited", <method>)``, columns :data:`METRICS`.
    ES/PS/NS are the percentages of prompts where the right target wins (new on rewrite and
    paraphrase prompts, true on neighbours); EM/PM/NM the mean probability differences in points;
    S the harmonic mean of ES, PS, NS; GE the generation entropy (NaN when skipped).

    Attributes:
        per_fact: ``[model, fact, 7]``: each fact's ES, PS, NS (fractions), EM, PM, NM
            (probability differences) and GE.
        subjects: the edited subjects, one per fact.
        method: the registered method's name.
        fact_layers: per fact, the layers of the edit that installed it.
        n_edits: edit calls made (one per fact for ROME, one per batch for MEMIT).
        seconds_per_edit: mean time of one edit call.
        stats_tokens: text tokens behind the key statistics (given, or asked of the method).
        excluded_neighbours: neighbourhood prompts left out because they name a subject edited in
            the same edit (they test that subject's own edit, not specificity).
    """

    per_fact: Tensor
    subjects: tuple[str, ...]
    method: str
    fact_layers: tuple[tuple[int, ...], ...]
    n_edits: int
    seconds_per_edit: float
    stats_tokens: int
    excluded_neighbours: int

    @classmethod
    def combine(cls, parts: Sequence[EditEvaluation]) -> EditEvaluation:
        """One evaluation from several over disjoint fact sets (e.g. shards run in parallel)."""
        first = parts[0]
        per_fact = torch.cat([p.per_fact for p in parts], dim=1)
        n_edits = sum(p.n_edits for p in parts)
        return dataclasses.replace(
            first,
            values=torch.stack([_summary(per_fact[0]), _summary(per_fact[1])]),
            per_fact=per_fact,
            subjects=tuple(s for p in parts for s in p.subjects),
            fact_layers=tuple(layers for p in parts for layers in p.fact_layers),
            n_edits=n_edits,
            seconds_per_edit=sum(p.seconds_per_edit * p.n_edits for p in parts) / n_edits,
            excluded_neighbours=sum(p.excluded_neighbours for p in parts),
        )

    def metric(self, name: str, *, edited: bool = True) -> float:
        """One number, e.g. ``ev.metric("ES")``."""
        return float(self.values[1 if edited else 0, METRICS.index(name)])

    def plot(self, path: str | Path | None = None, *, title: str | None = None) -> Figure:
        """Bars before and after editing: the success rates (S, ES, PS, NS, in %) on the left,
        the mean probability differences (EM, PM, NM, in points) on the right."""
        from matplotlib.figure import Figure

        from lmsci_mi.viz.plots import save_figure

        fig = Figure(figsize=(9, 3.6))
        panels = fig.subplots(1, 2, gridspec_kw={"width_ratios": [4, 3]})
        for ax, names, unit in (
            (panels[0], ("S", "ES", "PS", "NS"), "% of prompts (S: harmonic mean)"),
            (panels[1], ("EM", "PM", "NM"), "mean probability difference (points)"),
        ):
            x = torch.arange(len(names), dtype=torch.float32)
            for i, (label, color) in enumerate(zip(self.labels[0], ("grey", "tab:blue"), strict=False)):
                heights = [float(self.values[i, METRICS.index(n)]) for n in names]
                bars = ax.bar((x + 0.4 * i - 0.2).tolist(), heights, width=0.4, label=label, color=color)
                ax.bar_label(bars, fmt="%.0f", fontsize=7)
            ax.set_xticks(x.tolist(), names)
            ax.set_ylabel(unit, fontsize=8)
            ax.axhline(0, color="grey", linewidth=0.5)
            ax.grid(axis="y", alpha=0.3)
        panels[0].legend(fontsize=8)
        fig.suptitle(
            title or f"{self.method} on {len(self.subjects)} facts — {self.meta.model}", fontsize=10
        )
        fig.tight_layout()
        if path is not None:
            save_figure(fig, path)
        return fig

    def summary(self, rows: int = 10) -> str:
        """The score S before and after, then a markdown table of both rows (``rows`` unused:
        there are two)."""
        line = (
            f"{self.method} on {self.meta.model}, {len(self.subjects)} facts: S "
            f"{self.metric('S', edited=False):.1f} -> {self.metric('S'):.1f}"
        )
        head = "| model | " + " | ".join(METRICS) + " |"
        rule = "|---|" + "---|" * len(METRICS)
        table = [
            f"| {label} | " + " | ".join(f"{float(v):.1f}" for v in self.values[i]) + " |"
            for i, label in enumerate(self.labels[0])
        ]
        return "\n".join([line, head, rule, *table])


@torch.no_grad()
def target_nll(
    lm: LensModel, prompts: Sequence[str], targets: Sequence[str], *, batch_size: int = 32
) -> Float[Tensor, " pair"]:
    """Mean per-token NLL of each target after its prompt. Reads the model only.

    The prompt is tokenised under the sink policy and the target on its own
    (``lm.continuation_ids``: leading space, no special tokens), so the target is a pure
    continuation and no sink sits in front of it.

    >>> from lmsci_mi import load_model
    >>> target_nll(load_model("toy-2l"), ["The cat sat on the"], [" mat"]).shape
    torch.Size([1])
    """
    out = []
    for start in range(0, len(prompts), batch_size):
        ps, ts = prompts[start : start + batch_size], targets[start : start + batch_size]
        pairs = [(lm.encode(p), lm.continuation_ids(t)) for p, t in zip(ps, ts, strict=True)]
        log_probs = lm(lm.pad_batch([p + t for p, t in pairs]).tokens).float().log_softmax(-1)
        for row, (p, t) in enumerate(pairs):
            pos = torch.arange(len(p) - 1, len(p) - 1 + len(t), device=lm.device)
            gold = torch.tensor(t, device=lm.device)
            out.append(-log_probs[row, pos, gold].mean())
    return torch.stack(out).cpu()


def generation_entropy(texts: Sequence[str]) -> float:
    """ROME's fluency measure: mean over texts of (⅔·H₂ + ⁴⁄₃·H₃)/2 over words, in bits, ×100.

    Repetitive text (a degenerate edit) scores low. Words are ``\\w+`` runs and punctuation marks.

    >>> generation_entropy(["the cat " * 20]) < generation_entropy(["a quick brown fox jumps over the lazy dog"])
    True
    """
    scores = []
    for text in texts:
        words = re.findall(r"\w+|[^\w\s]", text.lower())
        parts = []
        for n, weight in ((2, 2 / 3), (3, 4 / 3)):
            grams = Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))
            total = sum(grams.values())
            h = -sum(c / total * math.log2(c / total) for c in grams.values()) if total else 0.0
            parts.append(weight * h)
        scores.append(100 * sum(parts) / len(parts))
    return statistics.fmean(scores) if scores else float("nan")


def _fluency(lm: LensModel, requests: Sequence[EditRequest], evaluation: EvaluationConfig) -> Tensor:
    """GE per fact ``[fact, 1]``: a top-5 sampled continuation of the rewrite prompt (as ROME's
    generate_fast), all facts in one batch; fact ``i`` draws from the stream of ``(seed, i)``,
    so the unedited and edited model draw the same way."""
    if evaluation.generation_tokens == 0:
        return torch.full((len(requests), 1), float("nan"))
    config = GenerationConfig(
        max_new_tokens=evaluation.generation_tokens, temperature=1.0, top_k=5, seed=evaluation.seed
    )
    texts = generate(lm, [r.rewrite_prompt for r in requests], config).texts
    return torch.tensor([[generation_entropy([text])] for text in texts])


def _kept_neighbours(
    requests: Sequence[EditRequest], batch: Sequence[EditRequest]
) -> tuple[list[tuple[str, ...]], int]:
    """Each request's neighbourhood prompts that name no subject edited in ``batch``, and how
    many were left out. A prompt about another edited subject tests that subject's own edit."""
    subjects = {r.subject for r in batch}
    kept = []
    for request in requests:
        others = subjects - {request.subject}
        kept.append(tuple(p for p in request.neighborhood_prompts if not any(s in p for s in others)))
    excluded = sum(len(r.neighborhood_prompts) - len(k) for r, k in zip(requests, kept, strict=True))
    return kept, excluded


def _fact_scores(
    lm: LensModel, requests: Sequence[EditRequest], neighbours: Sequence[tuple[str, ...]],
    evaluation: EvaluationConfig,
) -> Tensor:
    """Per fact: [ES, PS, NS, EM, PM, NM] as fractions / probability differences, then GE."""
    prompts, targets, owners = [], [], []
    for i, (r, near) in enumerate(zip(requests, neighbours, strict=True)):
        for kind, group in enumerate(([r.rewrite_prompt], r.paraphrase_prompts, near)):
            for p in group:
                prompts += [p, p]
                targets += [r.target_new, r.target_true]
                owners.append((i, kind))
    nll = target_nll(lm, prompts, targets).view(-1, 2)
    p_new, p_true = (-nll[:, 0]).exp(), (-nll[:, 1]).exp()
    scores = torch.full((len(requests), 6), float("nan"))
    for i in range(len(requests)):
        for kind in range(3):
            idx = [j for j, o in enumerate(owners) if o == (i, kind)]
            if not idx:
                continue
            new, true = p_new[idx], p_true[idx]
            if kind == 2:  # neighbours: the true answer should still win
                new, true = true, new
            scores[i, kind] = (new > true).float().mean()
            scores[i, 3 + kind] = (new - true).mean()
    return torch.cat([scores, _fluency(lm, requests, evaluation)], dim=1)


def _summary(per_fact: Tensor) -> Tensor:
    """METRICS from per-fact [ES, PS, NS, EM, PM, NM, GE] rows."""
    means = [100 * float(torch.nanmean(per_fact[:, k])) for k in range(6)]
    es, ps, ns = means[:3]
    s = statistics.harmonic_mean([es, ps, ns]) if min(es, ps, ns) > 0 else 0.0
    return torch.tensor([s, *means, float(torch.nanmean(per_fact[:, 6]))])


def evaluate_edits(
    lm: LensModel,
    requests: Sequence[EditRequest],
    config: Config | str = "rome",
    *,
    stats: KeyStatistics | None = None,
    evaluation: EvaluationConfig | None = None,
) -> EditEvaluation:
    """Edit the facts and measure CounterFact metrics, with the unedited model as baseline.

    The method is the registered one that takes ``config`` (or is named by it). A method whose
    config has ``one_fact_per_edit`` (ROME) edits one fact at a time and restores the weights
    before the next (as in the paper's Table 4); others (MEMIT) edit all facts in one edit.
    Neighbourhood prompts that name another subject of the same edit are left out of NS, for
    both rows, and counted. The model is changed while this runs and left as it was (every edit
    is restored, also on error).

    Args:
        lm: the model.
        requests: facts with ``target_true``, paraphrase and neighbourhood prompts.
        config: the method's config (``ROMEHyperParams(layer=4)``), or a method name for its
            default config.
        stats: key statistics covering the edited layers (default: each method's own).
        evaluation: :class:`EvaluationConfig` (generation length for GE, seed).

    Returns:
        :class:`EditEvaluation`.
    """
    method, config = method_for(config)
    evaluation = evaluation or EvaluationConfig()
    requests = list(requests)
    _check_evaluation_requests(lm, requests)
    batches = [[r] for r in requests] if getattr(config, "one_fact_per_edit", False) else [requests]
    before, after, layers, seconds, excluded = [], [], [], [], 0
    for batch in tqdm(batches, desc=f"{method.name} evaluation", unit="edit", disable=len(batches) < 2):
        neighbours, left_out = _kept_neighbours(batch, batch)
        excluded += left_out
        before.append(_fact_scores(lm, batch, neighbours, evaluation))
        start = time.perf_counter()
        with method.function(lm, batch, config, stats=stats) as handle:
            seconds.append(time.perf_counter() - start)
            layers += [handle.layers] * len(batch)
            after.append(_fact_scores(lm, batch, neighbours, evaluation))
    per_fact = torch.stack([torch.cat(before), torch.cat(after)])
    return EditEvaluation(
        values=torch.stack([_summary(per_fact[0]), _summary(per_fact[1])]),
        axes=("model", "metric"),
        labels=(("unedited", method.name), METRICS),
        meta=lm.meta(
            [r.rewrite_prompt for r in requests],
            seed=evaluation.seed,
            data_source="edit requests" if stats is None else f"edit requests; C from {stats.source}",
            params={
                "method": method.name,
                "n_facts": len(requests),
                **{f"edit.{k}": v for k, v in config.params().items()},
                **{f"evaluation.{k}": v for k, v in evaluation.params().items()},
            },
        ),
        per_fact=per_fact,
        subjects=tuple(r.subject for r in requests),
        method=method.name,
        fact_layers=tuple(layers),
        n_edits=len(batches),
        seconds_per_edit=statistics.fmean(seconds),
        stats_tokens=stats.n_tokens if stats is not None else int(getattr(config, "stats_tokens", 0)),
        excluded_neighbours=excluded,
    )


def _check_evaluation_requests(lm: LensModel, requests: Sequence[EditRequest]) -> None:
    check_requests(lm, requests)
    for r in requests:
        if not r.target_true.strip():
            raise ValueError(f"request for {r.subject!r} has no target_true to compare against")

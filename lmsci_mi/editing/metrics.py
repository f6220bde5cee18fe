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
from typing import Literal

import torch
from jaxtyping import Float
from torch import Tensor
from tqdm.auto import tqdm

from lmsci_mi.editing.handle import EditHandle
from lmsci_mi.editing.memit import MEMITHyperParams, memit_edit
from lmsci_mi.editing.requests import EditRequest
from lmsci_mi.editing.rome import ROMEHyperParams, _check_requests, rome_edit
from lmsci_mi.editing.stats import KeyStatistics
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result, result_type

__all__ = [
    "METRICS",
    "EditEvaluation",
    "evaluate_edits",
    "generation_entropy",
    "target_nll",
]

METRICS = ("S", "ES", "PS", "NS", "EM", "PM", "NM", "GE")
"""Columns of :class:`EditEvaluation` (percent, except GE: n-gram entropy in bits ×100)."""


@result_type
class EditEvaluation(Result):
    """CounterFact metrics before and after editing.

    ``values`` is ``[model, metric]``: rows ``("unedited", <method>)``, columns :data:`METRICS`.
    ES/PS/NS are the percentages of prompts where the right target wins (new on rewrite and
    paraphrase prompts, true on neighbours); EM/PM/NM the mean probability differences in points;
    S the harmonic mean of ES, PS, NS; GE the generation entropy.

    Attributes:
        per_fact: ``[model, fact, 7]``: each fact's ES, PS, NS (fractions), EM, PM, NM
            (probability differences) and GE.
        subjects: the edited subjects, one per fact.
        method: ``"rome"`` or ``"memit"``.
        layers: the edited layers.
        seconds_per_edit: mean time of one edit call (all facts for MEMIT: the batch time).
        stats_tokens: text tokens behind the key statistics.
    """

    per_fact: Tensor
    subjects: tuple[str, ...]
    method: str
    layers: tuple[int, ...]
    seconds_per_edit: float
    stats_tokens: int

    @classmethod
    def combine(cls, parts: Sequence[EditEvaluation]) -> EditEvaluation:
        """One evaluation from several over disjoint fact sets (e.g. shards run in parallel)."""
        first = parts[0]
        per_fact = torch.cat([p.per_fact for p in parts], dim=1)
        n = [len(p.subjects) for p in parts]
        seconds = sum(p.seconds_per_edit * k for p, k in zip(parts, n, strict=True)) / sum(n)
        return dataclasses.replace(
            first,
            values=torch.stack([_summary(per_fact[0]), _summary(per_fact[1])]),
            per_fact=per_fact,
            subjects=tuple(s for p in parts for s in p.subjects),
            seconds_per_edit=seconds if first.method == "rome" else first.seconds_per_edit,
        )

    def metric(self, name: str, *, edited: bool = True) -> float:
        """One number, e.g. ``ev.metric("ES")``."""
        return float(self.values[1 if edited else 0, METRICS.index(name)])

    def table(self) -> str:
        """A markdown table of both rows."""
        head = "| model | " + " | ".join(METRICS) + " |"
        rule = "|---|" + "---|" * len(METRICS)
        rows = [
            f"| {label} | " + " | ".join(f"{float(v):.1f}" for v in self.values[i]) + " |"
            for i, label in enumerate(self.labels[0])
        ]
        return "\n".join([head, rule, *rows])


def _continuation_ids(lm: LensModel, target: str) -> list[int]:
    if not target.strip():
        raise ValueError("empty target")
    return list(lm._require_tokenizer()(target, add_special_tokens=False)["input_ids"])


@torch.no_grad()
def target_nll(
    lm: LensModel, prompts: Sequence[str], targets: Sequence[str], *, batch_size: int = 32
) -> Float[Tensor, " pair"]:
    """Mean per-token NLL of each target after its prompt. Reads the model only.

    The prompt is tokenised under the sink policy and the target on its own (leading space, no
    special tokens), so the target is a pure continuation and no sink sits in front of it.

    >>> from lmsci_mi import load_model
    >>> target_nll(load_model("toy-2l"), ["The cat sat on the"], [" mat"]).shape
    torch.Size([1])
    """
    out = []
    for start in range(0, len(prompts), batch_size):
        ps, ts = prompts[start : start + batch_size], targets[start : start + batch_size]
        pairs = [(lm.encode(p), _continuation_ids(lm, t)) for p, t in zip(ps, ts, strict=True)]
        seqs = [p + t for p, t in pairs]
        width = max(map(len, seqs))
        # Right padding: causal attention keeps padded rows exact, and rotary positions unshifted.
        tokens = torch.tensor([s + [s[-1]] * (width - len(s)) for s in seqs], device=lm.device)
        log_probs = lm(tokens).float().log_softmax(-1)
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


@torch.no_grad()
def _generate(lm: LensModel, prompts: Sequence[str], n_tokens: int, seed: int) -> list[str]:
    """Top-5 sampled continuations (as ROME's generate_fast), seeded without touching global RNG."""
    texts = []
    devices = [lm.device] if lm.device.type == "cuda" else []
    tokenizer = lm._require_tokenizer()
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        for prompt in prompts:
            tokens = lm.to_tokens(prompt)
            out = lm.model.generate(
                tokens,
                max_new_tokens=n_tokens,
                do_sample=True,
                top_k=5,
                stop_at_eos=False,
                verbose=False,
            )
            assert isinstance(out, torch.Tensor)  # token ids in, token ids out
            texts.append(
                tokenizer.decode(out[0, tokens.shape[1] :].tolist(), skip_special_tokens=True)
            )
    return texts


def _fact_scores(lm: LensModel, requests: Sequence[EditRequest]) -> Tensor:
    """Per fact: [ES, PS, NS, EM, PM, NM] as fractions / probability differences."""
    prompts, targets, owners = [], [], []
    for i, r in enumerate(requests):
        for kind, group in enumerate(
            ([r.rewrite_prompt], r.paraphrase_prompts, r.neighborhood_prompts)
        ):
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
    return scores


def _summary(per_fact: Tensor) -> Tensor:
    """METRICS from per-fact [ES, PS, NS, EM, PM, NM, GE] rows."""
    means = [100 * float(torch.nanmean(per_fact[:, k])) for k in range(6)]
    es, ps, ns = means[:3]
    s = statistics.harmonic_mean([es, ps, ns]) if min(es, ps, ns) > 0 else 0.0
    return torch.tensor([s, *means, float(torch.nanmean(per_fact[:, 6]))])


def evaluate_edits(
    lm: LensModel,
    requests: Sequence[EditRequest],
    *,
    method: Literal["rome", "memit"] = "rome",
    layer: int | None = None,
    layers: Sequence[int] | None = None,
    stats: KeyStatistics | None = None,
    rome_hparams: ROMEHyperParams | None = None,
    memit_hparams: MEMITHyperParams | None = None,
    generation_tokens: int = 50,
    seed: int = 0,
) -> EditEvaluation:
    """Edit each fact and measure CounterFact metrics, with the unedited model as baseline.

    ROME edits one fact at a time and restores the weights before the next (as in the paper's
    Table 4); MEMIT edits all facts in one batch. The model is left as it was (every edit is
    restored, also on error); it is changed while this runs.

    Args:
        lm: the model.
        requests: facts with ``target_true``, paraphrase and neighbourhood prompts.
        method: ``"rome"`` or ``"memit"``.
        layer: ROME's layer (None: see :func:`rome_edit`).
        layers: MEMIT's layers (None: :func:`default_memit_layers`).
        stats: key statistics covering the layers.
        rome_hparams, memit_hparams: settings for the edits.
        generation_tokens: length of the sampled generation per fact for GE (0 skips GE).
        seed: generation seed.

    Returns:
        :class:`EditEvaluation`.
    """
    requests = list(requests)
    _check_requests(lm, requests)
    for r in requests:
        if not r.target_true.strip():
            raise ValueError(f"request for {r.subject!r} has no target_true to compare against")
    if method not in ("rome", "memit"):
        raise ValueError(f"unknown method {method!r}: use 'rome' or 'memit'")

    def fluency(batch: Sequence[EditRequest]) -> Tensor:
        if generation_tokens <= 0:
            return torch.full((len(batch), 1), float("nan"))
        texts = _generate(lm, [r.rewrite_prompt for r in batch], generation_tokens, seed)
        return torch.tensor([[generation_entropy([t])] for t in texts])

    before = torch.cat([_fact_scores(lm, requests), fluency(requests)], dim=1)
    seconds: list[float] = []
    edited_layers: tuple[int, ...] = ()
    if method == "rome":
        rows = []
        for r in tqdm(requests, desc="ROME evaluation", unit="fact"):
            start = time.perf_counter()
            with rome_edit(lm, r, layer=layer, stats=stats, hparams=rome_hparams) as handle:
                seconds.append(time.perf_counter() - start)
                edited_layers = handle.layers
                rows.append(torch.cat([_fact_scores(lm, [r]), fluency([r])], dim=1))
        after = torch.cat(rows)
    else:
        start = time.perf_counter()
        handle: EditHandle
        with memit_edit(lm, requests, layers=layers, stats=stats, hparams=memit_hparams) as handle:
            seconds.append(time.perf_counter() - start)
            edited_layers = handle.layers
            after = torch.cat([_fact_scores(lm, requests), fluency(requests)], dim=1)

    values = torch.stack([_summary(before), _summary(after)])
    return EditEvaluation(
        values=values,
        axes=("model", "metric"),
        labels=(("unedited", method), METRICS),
        meta=lm.meta(
            [r.rewrite_prompt for r in requests],
            seed=seed,
            data_source="lmsci_mi/data/facts.json"
            if stats is None
            else f"facts; C from {stats.source}",
            params={
                "method": method,
                "generation_tokens": generation_tokens,
                "n_facts": len(requests),
            },
        ),
        per_fact=torch.stack([before, after]),
        subjects=tuple(r.subject for r in requests),
        method=method,
        layers=edited_layers,
        seconds_per_edit=statistics.fmean(seconds),
        stats_tokens=stats.n_tokens if stats is not None else 0,
    )

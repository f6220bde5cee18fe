"""Value tests of the reported metrics: each against a hand computation on data the test builds,
with the arithmetic in a comment (issue 22, item 4).

Covered: the editing evaluation's ES/PS/NS, EM/PM/NM, S, GE and the messy columns; perplexity and
its standard error; the steer transfer map and its held-out R². No model is
trained or sampled: the inputs are planted tensors, stand-ins for the model where the metric only
reads numbers from it, and the toy where the metric's own forward pass is the point.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from lmsci_mi import LensModel, load_model
from lmsci_mi.editing import METRICS, PER_FACT, EditRequest, EvaluationConfig, generation_entropy
from lmsci_mi.editing import metrics as edit_metrics
from lmsci_mi.steering import evaluate as steer_eval
from lmsci_mi.steering import transfer
from lmsci_mi.steering.lm_steer import LMSteer
from lmsci_mi.steering.transfer import TransferConfig, transfer_steer

LN2, LN3, LN6 = math.log(2), math.log(3), math.log(6)


# ---------------------------------------------------------------------- editing: GE


def test_generation_entropy_equals_the_hand_n_gram_entropies() -> None:
    # "The cat the cat sat" -> the cat the cat sat (lower-cased).
    #   2-grams: (the cat) x2, (cat the), (cat sat): p = 1/2, 1/4, 1/4 -> H2 = 1/2 + 1/2 + 1/2 = 1.5
    #   3-grams: three distinct                                         -> H3 = log2 3
    #   GE = 100 (2/3 * 1.5 + 4/3 * log2 3) / 2 = 50 + 200/3 log2 3
    # "Go, go." -> go , go . (punctuation marks are words).
    #   2-grams: (go ,), (, go), (go .) distinct -> H2 = log2 3;  3-grams: two distinct -> H3 = 1
    #   GE = 100 (2/3 log2 3 + 4/3) / 2 = 100/3 log2 3 + 200/3
    # One word has no 2-gram: GE 0.
    first = 50 + 200 / 3 * math.log2(3)
    second = 100 / 3 * math.log2(3) + 200 / 3
    assert generation_entropy(["The cat the cat sat"]) == pytest.approx(first, abs=1e-9)
    assert generation_entropy(["Go, go."]) == pytest.approx(second, abs=1e-9)
    assert generation_entropy(["hello"]) == 0.0
    # Several texts: the mean of their scores (ROME's n_gram_entropy with agg="arith").
    both = generation_entropy(["The cat the cat sat", "Go, go."])
    assert both == pytest.approx((first + second) / 2, abs=1e-9)  # 175/3 + 50 log2 3 = 137.58...
    assert math.isnan(generation_entropy([]))


# ---------------------------------------------------------------------- editing: ES ... S

# Two facts whose target probabilities the test sets. Per prompt, (p of the answer that should
# win, p of the one it should beat): the new target on rewrite, paraphrase and negated prompts,
# the true one on neighbours.
FACT_1 = EditRequest(
    "{} is in", "Aa", " new1", " true1",
    paraphrase_prompts=("Aa, in short, is in", "Aa is found in"),
    neighborhood_prompts=("Bb is in", "Cc is in"),
    negated_prompt="Aa is not in",
    other_relation_prompts=("Aa was built by", "Aa is made of"),
    other_relation_targets=(" Bob", " iron"),
)
FACT_2 = EditRequest(
    "{} lies in", "Dd", " new2", " true2",
    paraphrase_prompts=("Dd is in",),
    neighborhood_prompts=("Ee lies in",),
)
PROBABILITIES = {
    # fact 1          p(new), p(true)
    "Aa is in": (0.6, 0.2),  # ES: new wins, margin +0.4
    "Aa, in short, is in": (0.5, 0.3),  # PS: wins, +0.2
    "Aa is found in": (0.1, 0.4),  # PS: loses, -0.3
    "Bb is in": (0.1, 0.7),  # NS: true kept, margin p(true) - p(new) = +0.6
    "Cc is in": (0.3, 0.2),  # NS: lost, -0.1
    "Aa is not in": (0.3, 0.6),  # NEG: the negation is not moved
    # fact 2
    "Dd lies in": (0.1, 0.5),  # ES: loses, -0.4
    "Dd is in": (0.4, 0.2),  # PS: wins, +0.2
    "Ee lies in": (0.25, 0.5),  # NS: kept, +0.25
}


def _planted_nll(lm: object, prompts: list[str], targets: list[str]) -> torch.Tensor:
    """target_nll's stand-in: -log of the planted probability of each (prompt, target)."""
    out = []
    for prompt, target in zip(prompts, targets, strict=True):
        p_new, p_true = PROBABILITIES[prompt]
        out.append(-math.log(p_new if target.startswith(" new") else p_true))
    return torch.tensor(out)


def test_fact_scores_and_summary_equal_the_hand_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(edit_metrics, "target_nll", _planted_nll)
    # ORL: fact 1's other relations now predict token 11 (Bob's first token: kept) and 99 (iron
    # is 13: moved) -> 1/2; fact 2 has none -> NaN.
    top1 = {"Aa was built by": 11, "Aa is made of": 99}
    monkeypatch.setattr(edit_metrics, "next_token_top1", lambda lm, prompts: torch.tensor(
        [top1[p] for p in prompts], dtype=torch.long))
    lm = SimpleNamespace(continuation_ids=lambda t: {" Bob": [11, 12], " iron": [13]}[t])
    requests = [FACT_1, FACT_2]
    neighbours = [r.neighborhood_prompts for r in requests]
    scores = edit_metrics._fact_scores(lm, requests, neighbours, EvaluationConfig(generation_tokens=0))

    nan = float("nan")
    expected = {
        # ES  PS   NS   EM    PM               NM                  GE   NEG  REV  2HOP ORL
        # fact 1: PS 1 of 2, PM (0.2 - 0.3)/2, NS 1 of 2, NM (0.6 - 0.1)/2
        0: (1.0, 0.5, 0.5, 0.4, -0.05, 0.25, nan, 0.0, nan, nan, 0.5),
        # fact 2: one prompt of each kind
        1: (0.0, 1.0, 1.0, -0.4, 0.2, 0.25, nan, nan, nan, nan, nan),
    }
    for fact, row in expected.items():
        assert torch.allclose(scores[fact], torch.tensor(row), atol=1e-6, equal_nan=True), (
            fact, dict(zip(PER_FACT, scores[fact].tolist(), strict=True)))

    # Means over facts in percent (a fact's PS is its own mean first, as ROME's summary does:
    # PS = (0.5 + 1)/2 = 75, not 2 of 3 paraphrase prompts):
    #   ES 50, PS 75, NS 75, EM (0.4 - 0.4)/2 = 0, PM (-0.05 + 0.2)/2 = 7.5, NM 25,
    #   NEG 0 (fact 1 only), ORL 50 (fact 1 only), GE/REV/2HOP NaN (no fact has one)
    #   S = harmonic mean of 50, 75, 75 = 3 / (1/50 + 2/75) = 3 / (7/150) = 450/7 = 64.2857...
    summary = dict(zip(METRICS, edit_metrics._summary(scores).tolist(), strict=True))
    hand = {"S": 450 / 7, "ES": 50, "PS": 75, "NS": 75, "EM": 0, "PM": 7.5, "NM": 25, "NEG": 0, "ORL": 50}
    assert {m: summary[m] for m in hand} == pytest.approx(hand, abs=1e-4)
    assert all(math.isnan(summary[m]) for m in ("GE", "REV", "2HOP"))


def _per_fact(**columns: tuple[float, ...]) -> torch.Tensor:
    """``[fact, PER_FACT]`` rows with the given columns, NaN elsewhere."""
    n = len(next(iter(columns.values())))
    rows = torch.full((n, len(PER_FACT)), float("nan"))
    for name, values in columns.items():
        rows[:, PER_FACT.index(name)] = torch.tensor(values)
    return rows


def test_score_s_is_zero_when_one_rate_is_zero_and_ge_stays_in_its_unit() -> None:
    # NS 0 on both facts: the harmonic mean's limit is 0 (and statistics.harmonic_mean of a 0 is 0).
    rows = _per_fact(ES=(1.0, 1.0), PS=(1.0, 0.0), NS=(0.0, 0.0), GE=(500.0, 700.0))
    summary = dict(zip(METRICS, edit_metrics._summary(rows).tolist(), strict=True))
    assert summary["S"] == 0.0 and summary["ES"] == 100 and summary["PS"] == 50
    assert summary["GE"] == 600.0  # the mean of the facts' GE, not scaled by 100
    # All three at 1/2 on one fact: S = 50.
    half = dict(zip(METRICS, edit_metrics._summary(_per_fact(ES=(0.5,), PS=(0.5,), NS=(0.5,))).tolist(),
                    strict=True))
    assert half["S"] == pytest.approx(50.0)


# ---------------------------------------------------------------------- steering: perplexity


class _BigramLM:
    """What perplexity reads of a LensModel, with a next-token distribution fixed by the current
    token: p(y + 1 mod 4 | y) = 1/2, each of the other three 1/6. Texts are digit strings."""

    device = torch.device("cpu")
    pad_batch = LensModel.pad_batch  # the real right padding
    tokenizer = SimpleNamespace(decode=lambda ids, skip_special_tokens: " ".join(map(str, ids)))

    def encode(self, text: str) -> list[int]:
        return [int(c) for c in text]

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        table = torch.full((4, 4), 1 / 6)
        table[torch.arange(4), (torch.arange(4) + 1) % 4] = 1 / 2
        return table.log()[tokens]


# Prompt "0" + continuation 1 2: 0 -> 1 and 1 -> 2 are successors: NLL 2 ln 2 over 2 tokens.
# Prompt "012" + continuation 0: 2 -> 0 is not (3 is): NLL ln 6 over 1 token (its row is longer,
# so the first row is padded). Read one position off, every token would cost a different NLL.
PROMPTS, CONTINUATIONS = ["0", "012"], [[1, 2], [0]]


@pytest.mark.parametrize("batch_size", [1, 16])
def test_perplexity_is_exp_of_total_nll_over_total_tokens(batch_size: int) -> None:
    nll, count = steer_eval.continuation_nll(_BigramLM(), PROMPTS, CONTINUATIONS, batch_size=batch_size)
    assert torch.allclose(nll, torch.tensor([2 * LN2, LN6], dtype=torch.float64), atol=1e-6)
    assert count.tolist() == [2, 1]
    # exp((2 ln 2 + ln 6) / 3) = (2 * 2 * 6)^(1/3) = 24^(1/3) = 2.884...
    ppl = steer_eval.perplexity(_BigramLM(), PROMPTS, CONTINUATIONS, batch_size=batch_size)
    assert ppl == pytest.approx(24 ** (1 / 3), abs=1e-6)


def test_control_curve_perplexity_column_and_its_standard_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(steer_eval, "sentiment_scores", lambda texts: [0.0] * len(texts))  # no VADER
    row, errors, texts = steer_eval._metrics(_BigramLM(), PROMPTS, CONTINUATIONS)
    assert texts == ["1 2", "0"]
    column = steer_eval.METRICS.index("perplexity")
    assert row[column] == pytest.approx(24 ** (1 / 3), abs=1e-6)
    # Per-prompt mean NLLs ln 2 and ln 6: sample s.d. |ln 6 - ln 2| / sqrt 2 = ln 3 / sqrt 2,
    # s.e. (ln 3 / sqrt 2) / sqrt 2 = ln 3 / 2; by the delta method the perplexity's s.e. is
    # perplexity x that = 24^(1/3) ln 3 / 2 = 1.584...
    assert errors[column] == pytest.approx(24 ** (1 / 3) * LN3 / 2, abs=1e-6)


# ---------------------------------------------------------------------- steering: transfer


def _planted_transfer(
    monkeypatch: pytest.MonkeyPatch, x: torch.Tensor, y: torch.Tensor, holdout: float
) -> tuple[LMSteer, LMSteer, transfer.SteerTransfer]:
    """transfer_steer between two toy copies whose shared-token unembeddings are ``x`` (target)
    and ``y`` (source), ``[token, d_model]``; no ridge."""
    source, target = load_model("toy-2l", device="cpu"), load_model("toy-2l", device="cpu")
    ids = list(range(len(x)))
    monkeypatch.setattr(transfer, "shared_tokens", lambda s, t: (ids, ids))
    monkeypatch.setattr(transfer, "_unembedding", lambda lm: (x if lm is target else y).T)
    steer = LMSteer.for_model(source, ("sentiment",))
    moved, fit = transfer_steer(steer, source, target, TransferConfig(ridge=0.0, holdout=holdout))
    return steer, moved, fit


def test_a_noiseless_transfer_map_is_recovered_with_r2_one(monkeypatch: pytest.MonkeyPatch) -> None:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(200, 64, generator=generator)
    a = torch.eye(64) + 0.1 * torch.randn(64, 64, generator=generator)  # well conditioned
    steer, moved, fit = _planted_transfer(monkeypatch, x, x @ a, holdout=0.1)
    # u_s = aᵀ u_t exactly: M = a, B = a⁻¹, held-out residual 0 -> R² = 1 in every dimension.
    assert fit.r2 == pytest.approx(1.0, abs=1e-5)
    assert torch.allclose(fit.values, torch.ones(64), atol=1e-4)
    # P1' = Bᵀ P1 and P2' = M P2 (the module docstring), with B = a⁻¹ and M = a.
    assert torch.allclose(moved.p2, torch.einsum("ts,ksr->ktr", a, steer.p2), atol=1e-4)
    assert torch.allclose(moved.p1, torch.einsum("ts,ksr->ktr", torch.linalg.inv(a).T, steer.p1),
                          atol=1e-4)


def test_transfer_r2_on_two_held_out_points_equals_the_hand_value(monkeypatch: pytest.MonkeyPatch) -> None:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(200, 64, generator=generator)
    y = 2 * x  # the map is 2·I on the 198 training tokens, so the fit recovers it exactly
    # transfer_steer holds out the first int(200 x 0.01) = 2 tokens of its seeded permutation.
    test = torch.randperm(200, generator=torch.Generator().manual_seed(0))[:2]
    e0 = torch.eye(64)[0]
    x[test[0]], x[test[1]] = e0, 3 * e0  # predicted: 2 e0 and 6 e0
    y[test[0]], y[test[1]] = 2.5 * e0, 5.5 * e0  # noise +0.5 and -0.5 on dimension 0
    _, _, fit = _planted_transfer(monkeypatch, x, y, holdout=0.01)
    # residual 0.5² + 0.5² = 0.5; total: mean 4, (2.5 - 4)² + (5.5 - 4)² = 4.5 -> R² = 1 - 0.5/4.5
    # = 8/9 (every other dimension is 0 on both points: no residual, no variance).
    assert fit.r2 == pytest.approx(8 / 9, abs=1e-5)
    assert float(fit.values[0]) == pytest.approx(8 / 9, abs=1e-5)

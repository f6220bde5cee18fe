"""Value tests of the reported metrics: each against a hand computation on data the test builds,
with the arithmetic in a comment (issue 22, item 4).

Covered: the editing evaluation's ES/PS/NS, EM/PM/NM, S, GE and the messy columns; perplexity and
its standard error; the steer transfer map and its held-out R²; the SAE's explained variance, L0,
dead fraction and fraction of the loss recovered; the IOI finder's head classes. No model is
trained or sampled: the inputs are planted tensors, stand-ins for the model where the metric only
reads numbers from it, and the toy where the metric's own forward pass is the point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

from lmsci_mi import LensModel, load_model
from lmsci_mi.circuits import ioi
from lmsci_mi.circuits.ioi import IOIConfig
from lmsci_mi.editing import METRICS, PER_FACT, EditRequest, EvaluationConfig, generation_entropy
from lmsci_mi.editing import metrics as edit_metrics
from lmsci_mi.sae import stats as sae_stats_module
from lmsci_mi.sae.core import LensSAE
from lmsci_mi.sae.stats import SAEStats, feature_summary, reconstruction_loss, sae_stats
from lmsci_mi.sites import Head, hook_name
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


# ---------------------------------------------------------------------- SAE statistics


class _PlantedSAE:
    """What LensSAE reads of a sae-lens SAE, with planted weights: f = relu(x W_enc + b_enc),
    x̂ = f W_dec."""

    dtype, device = torch.float32, torch.device("cpu")

    def __init__(self, w_enc: torch.Tensor, b_enc: torch.Tensor, w_dec: torch.Tensor) -> None:
        self.w_enc, self.b_enc, self.w_dec = w_enc, b_enc, w_dec
        self.cfg = SimpleNamespace(d_sae=w_enc.shape[1])

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ self.w_enc + self.b_enc)

    def decode(self, f: torch.Tensor) -> torch.Tensor:
        return f @ self.w_dec


def _three_feature_sae(d_model: int, hook: str) -> LensSAE:
    """Feature 0 = relu(x0), feature 1 = relu(-x0), feature 2 = relu(x1 - 10); x̂ = (x0, 0, ...):
    the reconstruction keeps dimension 0 and drops dimension 1 (where feature 2 never fires)."""
    w_enc, w_dec = torch.zeros(d_model, 3), torch.zeros(3, d_model)
    w_enc[0, 0], w_enc[0, 1], w_enc[1, 2] = 1.0, -1.0, 1.0
    w_dec[0, 0], w_dec[1, 0], w_dec[2, 1] = 1.0, -1.0, 1.0
    inner = _PlantedSAE(w_enc, torch.tensor([0.0, 0.0, -10.0]), w_dec)
    return LensSAE(inner, hook, "toy-2l", d_model, torch.ones(3))


def _four_tokens(d_model: int) -> torch.Tensor:
    """x = (1, 1), (-1, -1), (3, 1), (1, -1) in the first two dimensions, 0 elsewhere."""
    acts = torch.zeros(4, d_model)
    acts[:, :2] = torch.tensor([[1.0, 1.0], [-1.0, -1.0], [3.0, 1.0], [1.0, -1.0]])
    return acts


# Hand values of the three-feature SAE on the four tokens:
#   x̂ = (x0, 0): residual (0, x1), ‖x - x̂‖² = 1 each -> E‖x - x̂‖² = 1
#   E‖x‖² = (2 + 2 + 10 + 2)/4 = 4, E x = (1, 0) -> total variance 4 - 1 = 3
#   explained variance (sae-lens 6's ExplainedVarianceCalculator) = 1 - 1/3 = 2/3
#   fired: feature 0 on tokens 1, 3, 4; feature 1 on token 2; feature 2 never (x1 - 10 < 0)
#   -> L0 = 4/4 = 1, density (3/4, 1/4, 0), dead fraction 1/3


def test_feature_summary_explained_variance_l0_and_density() -> None:
    sae = _three_feature_sae(2, hook_name("resid_post", 0))
    explained, l0, density, _ = feature_summary(sae, _four_tokens(2), chunk=3)  # chunks of 3 + 1
    assert explained == pytest.approx(2 / 3, abs=1e-9)
    assert l0 == 1.0 and density.tolist() == [0.75, 0.25, 0.0]


def test_sae_stats_report_the_hand_values(monkeypatch: pytest.MonkeyPatch) -> None:
    lm = load_model("toy-2l", device="cpu")
    hook = hook_name("resid_post", 0)
    sae = _three_feature_sae(lm.cfg.d_model, hook)
    monkeypatch.setattr(sae_stats_module, "collect_activations", lambda lm, rows, hooks, **kw:
                        SimpleNamespace(acts={hooks[0]: _four_tokens(lm.cfg.d_model)},
                                        position=torch.arange(1, 5), token=torch.zeros(4, dtype=torch.long)))
    losses = {"clean": 2.0, "sae": 2.5, "zero": 6.0}
    monkeypatch.setattr(sae_stats_module, "reconstruction_loss",
                        lambda lm, sae, rows, mode, **kw: losses[mode])
    stats = sae_stats(lm, sae, [[0, 1, 2, 3]], progress=False)
    assert isinstance(stats, SAEStats)
    assert stats.explained_variance == pytest.approx(2 / 3, abs=1e-9)
    assert stats.l0 == 1.0 and stats.dead_fraction == pytest.approx(1 / 3) and stats.n_tokens == 4
    # fraction of the loss recovered (sae-lens's ce_loss_score): (6 - 2.5) / (6 - 2) = 0.875;
    # loss increase 2.5 - 2 = 0.5.
    assert stats.fraction_recovered == pytest.approx(0.875) and stats.loss_increase == pytest.approx(0.5)


@torch.no_grad()
def test_reconstruction_loss_clean_exact_and_zero_ablated() -> None:
    lm = load_model("toy-2l", device="cpu")
    d = lm.cfg.d_model
    # Rows of 4 and 3 tokens (the second right-padded): the loss counts predictions from positions
    # 1.. (targets at 2..), so 2 + 1 = 3 targets.
    rows = [lm.encode("The cat sat"), lm.encode("A dog")]
    assert [len(r) for r in rows] == [4, 3]
    log_probs = lm.model(lm.pad_batch(rows).tokens).log_softmax(-1)
    clean = -(log_probs[0, 1, rows[0][2]] + log_probs[0, 2, rows[0][3]] + log_probs[1, 1, rows[1][2]]) / 3
    last = hook_name("resid_post", lm.cfg.n_layers - 1)
    # relu(x) - relu(-x) = x: an SAE that reconstructs exactly loses nothing.
    exact = LensSAE(_PlantedSAE(torch.cat([torch.eye(d), -torch.eye(d)], 1), torch.zeros(2 * d),
                                torch.cat([torch.eye(d), -torch.eye(d)], 0)), last, lm.name, d, torch.ones(2 * d))
    assert reconstruction_loss(lm, exact, rows, "clean") == pytest.approx(float(clean), abs=1e-5)
    assert reconstruction_loss(lm, exact, rows, "sae") == pytest.approx(float(clean), abs=1e-5)
    # Zeroing the last residual stream: the final RMSNorm of 0 is 0, the logits are b_U = 0, so
    # every prediction is uniform over the vocabulary: loss ln(d_vocab) = ln 49152 = 10.80...
    assert not lm.model.unembed.b_U.any()
    assert reconstruction_loss(lm, exact, rows, "zero") == pytest.approx(math.log(lm.cfg.d_vocab), abs=1e-5)


# ---------------------------------------------------------------------- IOI classes


@dataclass
class _TwoBatches:
    """What the S-inhibition step reads of an IOIDataset: batches "A" (2 prompts), "B" (1)."""

    batches: tuple[str, ...] = ("A", "B")

    def __len__(self) -> int:
        return 3


def test_ioi_assigns_each_planted_head_its_class(monkeypatch: pytest.MonkeyPatch) -> None:
    # 4 layers x 2 heads; mean logit difference 2.0. Default thresholds: movers DLA > 0.05 x 2 =
    # 0.1; S-inhibition relative drop > 0.05; the attention classes > 0.15.
    def grid(**planted: float) -> torch.Tensor:
        values = torch.zeros(4, 2)
        for name, value in planted.items():
            values[int(name[1]), int(name[3])] = value
        return values

    ev = ioi._Evidence(
        dla=grid(L3H0=1.0, L3H1=-0.5, L2H0=0.05),  # L2.H0's 0.05 is under the mover threshold
        attn_end_io=grid(L3H0=0.7),
        # S-inhibition candidates: attend END -> S, below the first mover (layer 3)
        attn_end_s=grid(L2H0=0.6, L2H1=0.3, L3H0=0.9),
        # L2.H1 is no induction head: not below the S-inhibition layer; L0.H1 is under threshold
        induction_s2=grid(L1H0=0.5, L2H1=0.9, L0H1=0.1),
        duplicate_s2=grid(L1H1=0.4, L0H0=0.1),
        # L1.H1 is no previous-token head: not below the induction layer
        previous_s1_plus_1=grid(L0H0=0.7, L1H1=0.8),
    )
    # Path patching: the logit difference per sender and prompt when the sender's ABC output
    # reaches only the name movers' queries.
    patched = {Head(2, 0): {"A": [0.9, 1.2], "B": [0.9]}, Head(2, 1): {"A": [2.1, 2.1], "B": [2.1]}}
    calls = []

    def path_patch_senders(lm: object, batch: str, senders: list[Head], receivers: list[Head]) -> torch.Tensor:
        calls.append((batch, list(senders), list(receivers)))
        return torch.tensor([patched[s][batch] for s in senders])

    monkeypatch.setattr(ioi, "path_patch_senders", path_patch_senders)
    lm = SimpleNamespace(cfg=SimpleNamespace(n_layers=4, n_heads=2))
    classes = ioi._assign_classes(lm, _TwoBatches(), ev, 2.0, IOIConfig())

    assert calls == [(b, [Head(2, 0), Head(2, 1)], [Head(3, 0)]) for b in ("A", "B")]
    # L2.H0: mean patched (0.9 + 1.2 + 0.9)/3 = 1.0 -> (1.0 - 2)/2 = -0.5 (S-inhibition);
    # L2.H1: 2.1 -> +0.05 (raises it: not); untested heads NaN.
    assert classes.path_patching[2].tolist() == pytest.approx([-0.5, 0.05], abs=1e-6)
    assert classes.path_patching.isnan().sum() == 6
    assert (classes.name_mover, classes.negative_name_mover) == ([Head(3, 0)], [Head(3, 1)])
    assert classes.s_inhibition == [Head(2, 0)]
    assert classes.induction == [Head(1, 0)]
    assert classes.duplicate_token == [Head(1, 1)]
    assert classes.previous_token == [Head(0, 0)]
    # Each head's role and its class's own score.
    heads = ioi._circuit_heads(ev, classes)
    assert {h.head: h.role for h in heads} == {
        Head(3, 0): "name_mover", Head(3, 1): "negative_name_mover", Head(2, 0): "s_inhibition",
        Head(1, 0): "induction", Head(1, 1): "duplicate_token", Head(0, 0): "previous_token",
    }
    assert [h.score for h in heads] == pytest.approx([1.0, -0.5, -0.5, 0.5, 0.4, 0.7], abs=1e-6)

"""Head detection: previous-token, duplicate-token, induction and prefix-matching scores for every
head from one batched forward pass, the OV copying score, Q/K/V composition scores, and the causal
check that induction heads matter (mean ablation).

Attention scores follow TransformerLens's ``head_detector`` (the "mul" measure, its detection
patterns, the same ``exclude_bos`` / ``exclude_current_token`` options) but run a whole batch at
once. One default differs: ``rows="matched"`` divides by the query rows that have a target, so a
perfect head scores 1; ``rows="all"`` gives exactly ``detect_head``'s number. The OV copying score
and composition scores follow Elhage et al. 2021 and Olsson et al. 2022.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens.hook_points import HookPoint

from lmsci_mi.circuits.ablation import all_heads, head_means, mean_ablated_logits
from lmsci_mi.config import Config, config, validate_choice
from lmsci_mi.data.repeated_tokens import repeated_random_tokens
from lmsci_mi.errors import UnknownNameError, UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.registry import MethodRegistry
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import Head, hook_name, layer_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "HEAD_KINDS",
    "HEAD_SCORES",
    "CompositionScores",
    "HeadScoreConfig",
    "HeadScores",
    "InductionAblation",
    "InductionAblationConfig",
    "composition_scores",
    "copying_scores",
    "detection_pattern",
    "duplicate_token_scores",
    "head_axis_labels",
    "head_scores",
    "induction_ablation",
    "induction_scores",
    "prefix_matching_scores",
    "previous_token_scores",
    "random_token_range",
    "top_heads",
]

log = logging.getLogger(__name__)

HeadKind = Literal["previous_token", "duplicate_token", "induction"]
HEAD_KINDS: tuple[str, ...] = ("previous_token", "duplicate_token", "induction")
"""The attention-pattern kinds :func:`head_scores` scores directly."""

HeadScorer = Callable[..., "HeadScores"]
HEAD_SCORES: MethodRegistry[HeadScorer] = MethodRegistry("head score")
"""Every head-score kind by name (``lmsci-mi heads --kind``); each is called
``function(lm, config=HeadScoreConfig(...))``."""


@config
class HeadScoreConfig(Config):
    """Settings of the attention head scores (and of the repeated random tokens they are scored on).

    ``n_sequences``, ``half_length`` and ``seed`` describe the draw of repeated random sequences
    (sink + 2 × ``half_length`` tokens); they are unused when the caller gives the tokens.
    """

    n_sequences: int = dataclasses.field(
        default=20, metadata={"help": "repeated random sequences", "ge": 1}
    )
    half_length: int = dataclasses.field(
        default=20, metadata={"help": "tokens in each half", "ge": 1}
    )
    seed: int = dataclasses.field(default=0, metadata={"help": "seed of the random tokens"})
    exclude_bos: bool = dataclasses.field(
        default=False,
        metadata={"help": "leave attention to position 0 (the sink) out (TransformerLens exclude_bos)"},
    )
    exclude_current_token: bool = dataclasses.field(
        default=False, metadata={"help": "leave attention to the query's own position out"}
    )
    rows: Literal["matched", "all"] = dataclasses.field(
        default="matched",
        metadata={"help": "'matched': average over query rows with a target (a perfect head "
                          "scores 1); 'all': every row, exactly TransformerLens detect_head"},
    )
    batch_size: int = dataclasses.field(
        default=32, metadata={"help": "sequences per forward pass", "ge": 1}
    )


@config
class InductionAblationConfig(Config):
    """Settings of :func:`induction_ablation`: the repeated random tokens and the random baseline."""

    n_sequences: int = dataclasses.field(
        default=20, metadata={"help": "repeated random sequences", "ge": 1}
    )
    half_length: int = dataclasses.field(
        default=20, metadata={"help": "tokens in each half", "ge": 1}
    )
    n_random_draws: int = dataclasses.field(
        default=5,
        metadata={"help": "random sets of other heads averaged for the baseline", "ge": 1},
    )
    seed: int = dataclasses.field(default=0, metadata={"help": "seed of the tokens and the draws"})


_DEFAULT_SCORES = HeadScoreConfig()
_DEFAULT_ABLATION = InductionAblationConfig()


def head_axis_labels(n_layers: int, n_heads: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Axis labels of a ``[layer, head]`` result: ``("0", "1", …)`` and ``("H0", "H1", …)``."""
    return tuple(str(i) for i in range(n_layers)), Head.axis_labels(n_heads)


def top_heads(values: Float[Tensor, "layer head"], k: int) -> tuple[tuple[Head, float], ...]:
    """The ``k`` largest entries of a ``[layer, head]`` tensor as ``(Head, value)``, best first;
    NaN ranks last.

    >>> top_heads(torch.tensor([[0.25, 0.75], [0.5, float("nan")]]), 2)
    ((Head('L0.H1'), 0.75), (Head('L1.H0'), 0.5))
    """
    if k < 1:
        raise UserInputError(f"k must be at least 1, not {k}")
    flat = values.detach().float().cpu().flatten()
    ranked = torch.nan_to_num(flat, nan=-math.inf).topk(min(k, flat.numel())).indices
    n_heads = values.shape[1]
    return tuple((Head(int(i) // n_heads, int(i) % n_heads), float(flat[i])) for i in ranked)


@result_type
class HeadScores(Result):
    """One score per attention head: ``values`` is ``[layer, head]``.

    Attributes:
        head_kind: what was scored (``"induction"``, ``"previous_token"``, ``"copying"``, …).
    """

    head_kind: str

    def top(self, k: int = 5) -> tuple[tuple[Head, float], ...]:
        """The ``k`` highest-scoring heads as ``(Head, score)``, best first (NaN last)."""
        return top_heads(self.values, k)

    def heads_above(self, threshold: float) -> tuple[Head, ...]:
        """All heads whose score exceeds ``threshold``, best first."""
        return tuple(head for head, score in self.top(self.values.numel()) if score > threshold)

    def default_title(self, **options: object) -> str:
        return f"{self.head_kind} scores — {self.meta.model}"

    def _draw(self, title: str) -> Figure:
        """Layer × head heatmap of the scores."""
        from matplotlib.figure import Figure

        from lmsci_mi.viz.plots import heatmap

        n_layers, n_heads = self.values.shape
        fig = Figure(figsize=(max(4, 0.5 * n_heads + 2), max(3, 0.22 * n_layers + 1.5)))
        ax = fig.subplots()
        heatmap(
            ax,
            torch.nan_to_num(self.values.float()),
            row_labels=self.axis_labels(0),
            col_labels=self.axis_labels(1),
            row_name="layer",
            col_name="head",
            title=title,
        )
        fig.tight_layout()
        return fig


# --------------------------------------------------------------------------- attention scores


def detection_pattern(
    tokens: Int[Tensor, "batch pos"], kind: HeadKind
) -> Float[Tensor, "batch pos pos"]:
    """The ideal attention pattern of a head kind, per sequence (query × key, 0/1 entries).

    Same definitions as TransformerLens's ``get_*_detection_pattern``: previous token = the
    sub-diagonal; duplicate token = earlier positions holding the same token; induction = the
    position right after an earlier copy of the current token, which for an adjacent repeat is
    the query's own position (the diagonal is kept, as TransformerLens keeps it).

    >>> detection_pattern(torch.tensor([[0, 5, 6, 5, 6]]), "induction")[0, 3].tolist()
    [0.0, 0.0, 1.0, 0.0, 0.0]
    """
    batch, n = tokens.shape
    causal_strict = torch.ones(n, n, dtype=torch.bool, device=tokens.device).tril(-1)
    if kind == "previous_token":
        pattern = torch.eye(n, dtype=torch.bool, device=tokens.device).roll(-1, dims=1)
        pattern = (pattern & causal_strict).expand(batch, n, n)
    elif kind in ("duplicate_token", "induction"):
        same = tokens[:, :, None] == tokens[:, None, :]
        duplicate = same & causal_strict
        if kind == "duplicate_token":
            pattern = duplicate
        else:
            # Key j+1 for every earlier copy j. A copy at the query's own previous position (an
            # adjacent repeat, "cat cat") points at the query itself: TransformerLens keeps that
            # diagonal entry (it applies tril after the shift), and so do we.
            pattern = torch.zeros_like(duplicate)
            pattern[:, :, 1:] = duplicate[:, :, :-1]
    else:
        raise UnknownNameError(f"unknown head kind {kind!r}; choose one of {HEAD_KINDS}")
    return pattern.float()


def _pattern_score(
    pattern: Float[Tensor, "batch head q k"], target: Float[Tensor, "batch q k"], config: HeadScoreConfig
) -> Float[Tensor, "batch head"]:
    """Share of each head's attention on the target, per sequence (NaN where nothing is scored)."""
    pattern = pattern.float()
    if config.exclude_bos or config.exclude_current_token:
        keep = torch.ones(pattern.shape[-2:], dtype=pattern.dtype, device=pattern.device)
        if config.exclude_bos:
            keep[:, 0] = 0
        if config.exclude_current_token:
            keep.fill_diagonal_(0)
        pattern = pattern * keep
    on_target = (pattern * target[:, None]).sum(-1)  # [batch, head, q]
    total = pattern.sum(-1)
    if config.rows == "matched":
        row_mask = target.any(-1).to(pattern.dtype)[:, None]  # [batch, 1, q]
        on_target, total = on_target * row_mask, total * row_mask
    return on_target.sum(-1) / total.sum(-1)


def _mean_pattern_scores(
    lm: LensModel, tokens: Int[Tensor, "batch pos"], kind: HeadKind, config: HeadScoreConfig
) -> Float[Tensor, "layer head"]:
    """Score every head inside the pattern hooks, one forward pass per batch, and average over
    the sequences where a score is defined."""
    n_layers = lm.cfg.n_layers
    totals = torch.zeros(n_layers, lm.cfg.n_heads, dtype=torch.float64)
    counts = torch.zeros_like(totals)
    targets: dict[str, Tensor] = {}

    def score(activation: Tensor, hook: HookPoint) -> None:
        # Scored where it fires, so the patterns of 30 layers are never all held at once.
        per_seq = _pattern_score(activation, targets["now"], config).double().cpu()
        valid = ~per_seq.isnan()
        layer = layer_of(hook.name or "")
        totals[layer] += per_seq.nan_to_num(0.0).sum(0)
        counts[layer] += valid.sum(0)

    patterns = [hook_name("pattern", layer) for layer in range(n_layers)]
    with lm.hooks.hooks(fwd=[(patterns, score)], label=f"{kind} scores"):
        for start in range(0, tokens.shape[0], config.batch_size):
            chunk = tokens[start : start + config.batch_size]
            targets["now"] = detection_pattern(chunk, kind)
            # Stopping after the last attention layer skips the unembedding, which is a large
            # share of a small model's forward pass.
            lm.model(chunk, stop_at_layer=n_layers)
    return (totals / counts).float()


@torch.no_grad()
def head_scores(
    lm: LensModel,
    tokens: Int[Tensor, "batch pos"],
    kind: HeadKind,
    config: HeadScoreConfig = _DEFAULT_SCORES,
    *,
    data_source: str = "user tokens",
) -> HeadScores:
    """Score every head for one kind of attention pattern, one forward pass per batch.

    The score of a head on a sequence is the share of its attention that falls on the kind's
    detection pattern; scores are averaged over sequences. With ``config.rows="all"`` this is
    TransformerLens's ``detect_head(..., error_measure="mul")``; the default ``"matched"``
    scores only the query rows that have a target (e.g. the second half of a repeated sequence
    for induction), so that a perfect head scores 1. On SmolLM2 the sink takes most attention:
    ``exclude_bos`` turns "share of all attention" into "share of the attention not parked on
    the sink". Reads the model only.

    Args:
        lm: the model.
        tokens: ``[batch, pos]`` sequences (all the same length).
        kind: ``"previous_token"``, ``"duplicate_token"`` or ``"induction"``.
        config: scoring options (``n_sequences``/``half_length``/``seed`` are not used here).
        data_source: where ``tokens`` came from, for ``meta``.

    Returns:
        :class:`HeadScores` ``[layer, head]``.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> toks = repeated_random_tokens(4, 8, vocab=(1000, 2000), sink_token_id=0)
    >>> head_scores(lm, toks, "induction").values.shape
    torch.Size([2, 4])
    """
    if tokens.ndim != 2:
        raise UserInputError(f"tokens must be [batch, pos], got shape {tuple(tokens.shape)}")
    lm.check_tokens(tokens)
    validate_choice("head kind", kind, HEAD_KINDS)
    values = _mean_pattern_scores(lm, tokens.to(lm.device), kind, config)
    params = {**config.params(), "kind": kind, "n_sequences_scored": int(tokens.shape[0]),
              "seq_len": int(tokens.shape[1])}
    seed = config.seed if data_source != "user tokens" else None
    return HeadScores(
        values=values,
        axes=("layer", "head"),
        labels=head_axis_labels(lm.cfg.n_layers, lm.cfg.n_heads),
        meta=lm.meta(seed=seed, data_source=data_source, params=params),
        head_kind=kind,
    )


def random_token_range(lm: LensModel) -> tuple[int, int]:
    """Token ids to draw random sequences from: ordinary word pieces, no special tokens.

    TransformerLens's demo draws from 1000..10000 on GPT-2; the same range holds for SmolLM2.
    Smaller vocabularies (trained toys) use everything after id 1.
    """
    vocab = lm.cfg.d_vocab
    return (1000, min(10000, vocab)) if vocab > 10000 else (1, vocab)


def _repeated(lm: LensModel, n_sequences: int, half_length: int, seed: int) -> tuple[Tensor, str]:
    """Repeated random tokens for ``lm`` (behind its sink token, if it has one) and a description
    for ``meta``."""
    # The model's own sink only: a sink-free model (sink=None) gets no stand-in BOS, as its
    # prompts get none (the BOS fallback dated from when None meant "the tokenizer adds one").
    tokens = repeated_random_tokens(
        n_sequences, half_length, vocab=random_token_range(lm), sink_token_id=lm.sink_token_id,
        seed=seed, device=lm.device,
    )
    return tokens, f"repeated random tokens {random_token_range(lm)}, 2x{half_length}, seed {seed}"


def _scores_on_repeated(
    lm: LensModel, kind: HeadKind, tokens: Tensor | None, config: HeadScoreConfig
) -> HeadScores:
    if tokens is not None:
        return head_scores(lm, tokens, kind, config)
    drawn, source = _repeated(lm, config.n_sequences, config.half_length, config.seed)
    return head_scores(lm, drawn, kind, config, data_source=source)


@HEAD_SCORES.register("induction", HeadScoreConfig)
def induction_scores(
    lm: LensModel,
    tokens: Int[Tensor, "batch pos"] | None = None,
    config: HeadScoreConfig = _DEFAULT_SCORES,
) -> HeadScores:
    """Induction score of every head: attention from a token to the token after its earlier copy.

    Without ``tokens``, scores ``config.n_sequences`` repeated random sequences (sink + 2 ×
    ``config.half_length``).

    >>> from lmsci_mi import load_model
    >>> cfg = HeadScoreConfig(n_sequences=2, half_length=5)
    >>> induction_scores(load_model("toy-2l"), config=cfg).head_kind
    'induction'
    """
    return _scores_on_repeated(lm, "induction", tokens, config)


@HEAD_SCORES.register("previous_token", HeadScoreConfig)
def previous_token_scores(
    lm: LensModel,
    tokens: Int[Tensor, "batch pos"] | None = None,
    config: HeadScoreConfig = _DEFAULT_SCORES,
) -> HeadScores:
    """Previous-token score of every head: attention from each position to the one before it."""
    return _scores_on_repeated(lm, "previous_token", tokens, config)


@HEAD_SCORES.register("duplicate_token", HeadScoreConfig)
def duplicate_token_scores(
    lm: LensModel,
    tokens: Int[Tensor, "batch pos"] | None = None,
    config: HeadScoreConfig = _DEFAULT_SCORES,
) -> HeadScores:
    """Duplicate-token score of every head: attention from a token to its earlier copies."""
    return _scores_on_repeated(lm, "duplicate_token", tokens, config)


@HEAD_SCORES.register("prefix_matching", HeadScoreConfig)
def prefix_matching_scores(lm: LensModel, config: HeadScoreConfig = _DEFAULT_SCORES) -> HeadScores:
    """Prefix-matching score (Olsson et al. 2022): on repeated *random* tokens, the attention
    from each second-half token to the token that followed its first occurrence.

    On random repeats this is the induction pattern; the name marks that it is measured where
    no other cue (grammar, frequency) can explain the attention.
    """
    scores = induction_scores(lm, config=config)
    return dataclasses.replace(scores, head_kind="prefix_matching")


# --------------------------------------------------------------------------- weight-based scores


@HEAD_SCORES.register("copying", HeadScoreConfig, "OV copying score (weights only)")
@torch.no_grad()
def copying_scores(lm: LensModel, config: HeadScoreConfig | None = None) -> HeadScores:
    """OV copying score per head: the share of positive eigenvalues of the full OV circuit.

    Olsson et al. 2022 measure how much a head copies the token it attends to by the eigenvalues
    λ of ``W_E W_V W_O W_U`` (vocab × vocab): ``Σ Re λ / Σ |λ|`` is 1 for a pure copier and −1
    for a head that suppresses what it reads. The non-zero eigenvalues of ``A B`` and ``B A``
    coincide, so we take them from the ``d_head × d_head`` matrix ``W_O W_U W_E W_V`` instead of
    the vocab-sized one. Normalisation layers between the pieces are left out (a per-token
    scale), as in the paper. Reads the model only; ``config`` is accepted for the
    :data:`HEAD_SCORES` registry and unused (the score needs no tokens).
    """
    model = lm.model
    # [d_model, d_model]: what the unembedding reads from an embedded token direction.
    unembed_embed = (model.W_U.float() @ model.W_E.float())
    w_v = model.W_V.float()  # [layer, head, d_model, d_head]; GQA heads are already expanded
    w_o = model.W_O.float()  # [layer, head, d_head, d_model]
    small = w_o @ unembed_embed @ w_v  # [layer, head, d_head, d_head]
    eig = torch.linalg.eigvals(small.cpu().double())
    values = (eig.real.sum(-1) / eig.abs().sum(-1)).float()
    cfg = lm.cfg
    return HeadScores(
        values=values,
        axes=("layer", "head"),
        labels=head_axis_labels(cfg.n_layers, cfg.n_heads),
        meta=lm.meta(data_source="weights", params={"measure": "OV eigenvalue positivity"}),
        head_kind="copying",
    )


@result_type
class CompositionScores(Result):
    """Composition scores between every earlier head (rows) and every later head (columns).

    ``values`` is ``[source_head, destination_head]`` over every head (labels ``L0.H0``, …);
    pairs whose destination is not in a later layer are 0.

    Attributes:
        mode: ``"Q"``, ``"K"`` or ``"V"``.
        n_heads: heads per layer (to find a head's row).
    """

    mode: str
    n_heads: int

    def score(self, source: Head | str | tuple[int, int], destination: Head | str | tuple[int, int]) -> float:
        """The score of one pair (heads as :class:`Head`, ``"L0.H1"`` or ``(layer, head)``)."""
        src, dst = Head.parse(source), Head.parse(destination)
        return float(self.values[src.layer * self.n_heads + src.head, dst.layer * self.n_heads + dst.head])


def _r_factor(w: Float[Tensor, "n d_model r"]) -> Float[Tensor, "n r r"]:
    """R of a thin QR of each ``w``: ``wᵀw = RᵀR`` (the ``r × r`` Gram), so ``‖w X‖_F = ‖R X‖_F``.

    Replacing a ``d_model × d_head`` factor by its ``d_head × d_head`` R changes no Frobenius
    norm, which is all a composition score reads.
    """
    return torch.linalg.qr(w, mode="r").R


def _composition_factors(lm: LensModel, mode: str) -> tuple[Tensor, Tensor]:
    """``P [n, d_head, d_model]`` and ``S [n, d_model, d_head]`` with, for heads ``a`` and ``b``,
    ``‖W_OV^a M^b‖_F = ‖P_a S_b‖_F``, ``‖W_OV^a‖_F = ‖P_a‖_F`` and ``‖M^b‖_F = ‖S_b‖_F``.

    ``W_OV = W_V W_O`` and ``M = X Y`` (``X``: d_model × d_head, ``Y``: d_head × d_model), so
    ``P = R(W_V) W_O`` and ``S = X R(Yᵀ)ᵀ``.
    """
    model = lm.model
    # Stacked [layer, head, ...]; under GQA TransformerLens expands W_K and W_V to every query
    # head (repeat_interleave), exactly as its all_composition_scores sees them.
    w_q, w_k, w_v, w_o = (
        w.detach().float().flatten(0, 1) for w in (model.W_Q, model.W_K, model.W_V, model.W_O)
    )
    if mode == "K":
        x, y_t = w_k, w_q  # M = W_QKᵀ = W_K W_Qᵀ: the earlier head writes what the keys read
    elif mode == "Q":
        x, y_t = w_q, w_k  # M = W_QK = W_Q W_Kᵀ
    elif mode == "V":
        x, y_t = w_v, w_o.transpose(-1, -2)  # M = W_OV = W_V W_O
    else:
        raise UserInputError(f"mode must be 'Q', 'K' or 'V', not {mode!r}")
    left = _r_factor(w_v) @ w_o
    right = x @ _r_factor(y_t).transpose(-1, -2)
    return left, right


@torch.no_grad()
def composition_scores(lm: LensModel, mode: Literal["Q", "K", "V"] = "K") -> CompositionScores:
    """Elhage et al. 2021 composition scores for all pairs of heads in different layers.

    ``‖W_OV^A · M^B‖_F / (‖W_OV^A‖_F ‖M^B‖_F)`` with ``M = W_QK^T`` for K-composition (the
    earlier head writes what the later head's keys read), ``W_QK`` for Q and ``W_OV`` for V,
    in TransformerLens's row-vector convention; equal to TransformerLens's
    ``all_composition_scores``, GQA models included (key/value weights expanded per query
    head). Each d_model-sized factor is replaced by the R of its thin QR (its d_head × d_head
    Gram's square root), so a pair costs one ``d_head × d_model × d_head`` product, one source
    layer at a time: SmolLM2's 270 heads need tens of MB, not the 11 GB of every pair's
    ``d_model × d_head`` product. Rotary position embeddings (SmolLM2) make the real QK
    circuit position-dependent; the score then reflects the unrotated weights only. Reads the
    model only.

    >>> from lmsci_mi import load_model
    >>> scores = composition_scores(load_model("toy-2l"), "K")
    >>> scores.values.shape, scores.labels[0][:2]
    (torch.Size([8, 8]), ('L0.H0', 'L0.H1'))
    """
    cfg = lm.cfg
    n_layers, n_heads, d_head = cfg.n_layers, cfg.n_heads, cfg.d_head
    left, right = _composition_factors(lm, mode)
    norm_left = left.flatten(1).norm(dim=1)
    norm_right = right.flatten(1).norm(dim=1)
    n = n_layers * n_heads
    scores = torch.zeros(n, n, device=left.device)
    for layer in range(n_layers - 1):
        src = slice(layer * n_heads, (layer + 1) * n_heads)
        dst = slice((layer + 1) * n_heads, n)
        # [src heads · d_head, d_model] @ [d_model, later heads · d_head]: every block is one
        # pair's P_a S_b; its squared entries sum to the pair's squared norm.
        blocks = left[src].flatten(0, 1) @ right[dst].transpose(0, 1).flatten(1)
        sq = blocks.square().reshape(n_heads, d_head, -1, d_head).sum((1, 3))
        scores[src, dst] = sq.sqrt() / (norm_left[src, None] * norm_right[None, dst])
    names = tuple(Head(layer, head).label for layer in range(n_layers) for head in range(n_heads))
    return CompositionScores(
        values=scores.cpu(),
        axes=("source_head", "destination_head"),
        labels=(names, names),
        meta=lm.meta(data_source="weights", params={"mode": mode}),
        mode=mode,
        n_heads=n_heads,
    )


# --------------------------------------------------------------------------- causal check


@result_type
class InductionAblation(Result):
    """Loss on the second half of repeated random sequences when heads are mean-ablated.

    ``values`` is ``[draw]``: the loss with each random draw of non-induction heads ablated.

    Attributes:
        heads: the induction heads ablated together.
        loss_clean: loss without ablation (nats per token).
        loss_induction_ablated: loss with the induction heads ablated.
        loss_random_ablated: mean of ``values`` (same number of random non-induction heads).
        excess: ``loss_induction_ablated − loss_random_ablated`` (the clean loss cancels).
    """

    heads: tuple[Head, ...]
    loss_clean: float
    loss_induction_ablated: float
    loss_random_ablated: float
    excess: float

    def summary(self, rows: int = 10) -> str:
        """The three losses and the excess of ablating the induction heads over random heads."""
        heads = ", ".join(str(h) for h in self.heads[:rows]) + (" …" if len(self.heads) > rows else "")
        return (
            f"ablating {len(self.heads)} induction heads ({heads}) on {self.meta.model}: loss "
            f"{self.loss_clean:.3f} clean, {self.loss_induction_ablated:.3f} induction heads "
            f"ablated, {self.loss_random_ablated:.3f} random heads ablated (mean of "
            f"{self.values.numel()} draws); excess {self.excess:+.3f} nats"
        )

    def default_title(self, **options: object) -> str:
        return f"Induction ablation — {self.meta.model}"

    def _draw(self, title: str) -> Figure:
        """Bars of the loss: clean, induction heads ablated, random heads ablated (the mean,
        with the spread of the draws as an error bar)."""
        from lmsci_mi.viz.plots import plot_bars

        spread = float(self.values.float().std()) if self.values.numel() > 1 else 0.0
        heads = f"{len(self.heads)} head{'s' if len(self.heads) != 1 else ''}"
        fig = plot_bars(
            ["clean", f"{heads} ablated (induction)", f"{heads} ablated (random, mean)"],
            [self.loss_clean, self.loss_induction_ablated, self.loss_random_ablated],
            errors=[0.0, 0.0, spread],
            colors=["grey", "tab:red", "tab:blue"],
            value_label="loss on the repeated half (nats per token)",
            title=title,
        )
        return fig


def _second_half_loss(logits: Tensor, tokens: Tensor, half_length: int) -> float:
    # Predictions made at second-half positions about the next second-half token; the first
    # token of the second half cannot be predicted from context, so it is left out.
    offset = tokens.shape[1] - 2 * half_length
    start = offset + half_length
    log_probs = logits[:, start:-1].float().log_softmax(-1)
    targets = tokens[:, start + 1 :]
    return float(-log_probs.gather(-1, targets[..., None]).mean())


def _random_draws(
    lm: LensModel, n_heads: int, banned: set[Head], config: InductionAblationConfig
) -> list[list[Head]]:
    """``config.n_random_draws`` sets of ``n_heads`` heads, none of them in ``banned``."""
    pool = [head for head in all_heads(lm) if head not in banned]
    if len(pool) < n_heads:
        raise UserInputError("not enough other heads for a random baseline")
    generator = torch.Generator().manual_seed(config.seed)
    return [
        [pool[i] for i in torch.randperm(len(pool), generator=generator)[:n_heads]]
        for _ in range(config.n_random_draws)
    ]


@torch.no_grad()
def induction_ablation(
    lm: LensModel,
    heads: Sequence[Head | tuple[int, int]],
    config: InductionAblationConfig = _DEFAULT_ABLATION,
    *,
    exclude: Sequence[Head | tuple[int, int]] = (),
) -> InductionAblation:
    """Check that ``heads`` do induction: mean-ablate them together and compare the loss on the
    second half of repeated random sequences with ablating as many random other heads.

    Mean ablation replaces each head's ``hook_z`` with its mean over the batch at each position,
    which removes what is specific to each sequence (the token being copied) but keeps the
    head's average contribution. Random heads are drawn from heads outside ``heads`` and
    ``exclude`` (pass every head above a looser threshold as ``exclude``). Reads the model only.

    Args:
        heads: the candidate induction heads.
        config: the sequences and the number of random baselines.
        exclude: heads never drawn for the baseline.

    Returns:
        :class:`InductionAblation`.
    """
    chosen = tuple(map(Head.parse, heads))
    if not chosen:
        raise UserInputError("no heads to ablate")
    tokens, source = _repeated(lm, config.n_sequences, config.half_length, config.seed + 1)
    means = head_means(lm, tokens)

    def loss(ablated: Sequence[Head]) -> float:
        logits = mean_ablated_logits(lm, tokens, ablated, means)
        return _second_half_loss(logits, tokens, config.half_length)

    clean, ablated = loss(()), loss(chosen)
    draws = _random_draws(lm, len(chosen), set(chosen) | set(map(Head.parse, exclude)), config)
    random_losses = [loss(draw) for draw in draws]
    random_mean = sum(random_losses) / len(random_losses)
    return InductionAblation(
        values=torch.tensor(random_losses),
        axes=("draw",),
        labels=((),),
        meta=lm.meta(
            seed=config.seed,
            data_source=source,
            params={**config.params(), "ablation": "mean over batch, per position, hook_z"},
        ),
        heads=chosen,
        loss_clean=clean,
        loss_induction_ablated=ablated,
        loss_random_ablated=random_mean,
        excess=ablated - random_mean,
    )

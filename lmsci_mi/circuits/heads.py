"""Head detection: previous-token, duplicate-token, induction and prefix-matching scores for every
head from one batched forward pass, the OV copying score, and Q/K/V composition scores.

Attention scores follow TransformerLens's ``head_detector`` ("mul" measure, same ``exclude_bos`` /
``exclude_current_token`` options) but run a whole batch at once. The OV copying score and
composition scores follow Elhage et al. 2021 and Olsson et al. 2022.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens.hook_points import HookPoint

from lmsci_mi.data.repeated_tokens import repeated_random_tokens
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import Head

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "HEAD_KINDS",
    "CompositionScores",
    "HeadScores",
    "InductionAblation",
    "composition_scores",
    "copying_scores",
    "detection_pattern",
    "duplicate_token_scores",
    "head_scores",
    "induction_ablation",
    "induction_scores",
    "prefix_matching_scores",
    "previous_token_scores",
    "random_token_range",
]

log = logging.getLogger(__name__)

HeadKind = Literal["previous_token", "duplicate_token", "induction"]
HEAD_KINDS: tuple[str, ...] = ("previous_token", "duplicate_token", "induction")


def head_label(layer: int, head: int) -> str:
    """The usual ``L.H`` name of a head, e.g. ``"5.1"``."""
    return f"{layer}.{head}"


@result_type
class HeadScores(Result):
    """One score per attention head: ``values`` is ``[layer, head]``.

    Attributes:
        head_kind: what was scored (``"induction"``, ``"previous_token"``, ``"copying"``, …).
    """

    head_kind: str = ""

    def top(self, k: int = 5) -> tuple[tuple[int, int, float], ...]:
        """The ``k`` highest-scoring heads as ``(layer, head, score)``, best first (NaN last)."""
        flat = torch.nan_to_num(self.values.float(), nan=-math.inf).flatten()
        k = min(k, flat.numel())
        top = flat.topk(k)
        n_heads = self.values.shape[1]
        return tuple(
            (int(i) // n_heads, int(i) % n_heads, float(self.values.flatten()[i]))
            for i in top.indices
        )

    def heads_above(self, threshold: float) -> tuple[tuple[int, int], ...]:
        """All heads whose score exceeds ``threshold``, best first."""
        ranked = self.top(self.values.numel())
        return tuple((layer, head) for layer, head, score in ranked if score > threshold)

    def plot(self, path: str | Path | None = None, *, title: str | None = None) -> Figure:
        """Layer × head heatmap of the scores."""
        import matplotlib.pyplot as plt

        from lmsci_mi.viz.plots import heatmap, save_figure

        n_layers, n_heads = self.values.shape
        fig, ax = plt.subplots(figsize=(max(4, 0.5 * n_heads + 2), max(3, 0.22 * n_layers + 1.5)))
        heatmap(
            ax,
            torch.nan_to_num(self.values.float()),
            row_labels=self.axis_labels(0),
            col_labels=self.axis_labels(1),
            row_name="layer",
            col_name="head",
            title=title or f"{self.head_kind} scores — {self.meta.model}",
        )
        fig.tight_layout()
        if path is not None:
            save_figure(fig, path)
        return fig


def _layer_head_labels(n_layers: int, n_heads: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return tuple(str(i) for i in range(n_layers)), tuple(str(i) for i in range(n_heads))


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
        raise ValueError(f"unknown head kind {kind!r}; choose one of {HEAD_KINDS}")
    return pattern.float()


def _pattern_score(
    pattern: Float[Tensor, "batch head q k"],
    target: Float[Tensor, "batch q k"],
    *,
    exclude_bos: bool,
    exclude_current_token: bool,
    rows: Literal["all", "matched"],
) -> Float[Tensor, "batch head"]:
    pattern = pattern.float()
    if exclude_bos or exclude_current_token:
        keep = torch.ones(pattern.shape[-2:], dtype=pattern.dtype, device=pattern.device)
        if exclude_bos:
            keep[:, 0] = 0
        if exclude_current_token:
            keep.fill_diagonal_(0)
        pattern = pattern * keep
    on_target = (pattern * target[:, None]).sum(-1)  # [batch, head, q]
    total = pattern.sum(-1)
    if rows == "matched":
        row_mask = target.any(-1).to(pattern.dtype)[:, None]  # [batch, 1, q]
        on_target, total = on_target * row_mask, total * row_mask
    return on_target.sum(-1) / total.sum(-1)


@torch.no_grad()
def head_scores(
    lm: LensModel,
    tokens: Int[Tensor, "batch pos"],
    kind: HeadKind,
    *,
    exclude_bos: bool = False,
    exclude_current_token: bool = False,
    rows: Literal["all", "matched"] = "matched",
    batch_size: int = 32,
    data_source: str = "user tokens",
    seed: int | None = None,
) -> HeadScores:
    """Score every head for one kind of attention pattern, one forward pass per batch.

    The score of a head on a sequence is the share of its attention that falls on the kind's
    detection pattern; scores are averaged over sequences. Reads the model only.

    Args:
        lm: the model.
        tokens: ``[batch, pos]`` sequences (all the same length).
        kind: ``"previous_token"``, ``"duplicate_token"`` or ``"induction"``.
        exclude_bos: drop attention to position 0 (the sink) from numerator and denominator, as
            TransformerLens's ``exclude_bos``. On SmolLM2 the sink takes most attention, so this
            turns "share of all attention" into "share of the attention not parked on the sink".
        exclude_current_token: likewise for attention to the query's own position.
        rows: ``"matched"`` (default) scores only the query positions where the pattern has a
            target (e.g. the second half of a repeated sequence for induction), so that a perfect
            head scores 1. ``"all"`` divides by every query row, exactly as
            ``transformer_lens.head_detector.detect_head`` does with ``error_measure="mul"``.
        batch_size: sequences per forward pass.

    Returns:
        :class:`HeadScores` ``[layer, head]``.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> toks = repeated_random_tokens(4, 8, vocab=(1000, 2000), sink_token_id=0)
    >>> head_scores(lm, toks, "induction").values.shape
    torch.Size([2, 4])
    """
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be [batch, pos], got shape {tuple(tokens.shape)}")
    if kind not in HEAD_KINDS:
        raise ValueError(f"unknown head kind {kind!r}; choose one of {HEAD_KINDS}")
    if rows not in ("all", "matched"):
        raise ValueError(f"rows must be 'all' or 'matched', not {rows!r}")
    cfg = lm.cfg
    totals = torch.zeros(cfg.n_layers, cfg.n_heads, dtype=torch.float64)
    counts = torch.zeros(cfg.n_layers, cfg.n_heads, dtype=torch.float64)
    tokens = tokens.to(lm.device)
    # Score inside the hook so the patterns of 30 layers are never all held at once.
    current: dict[str, Tensor] = {}

    def score(activation: Tensor, hook: HookPoint) -> None:
        layer = int((hook.name or "").split(".")[1])
        per_seq = _pattern_score(
            activation,
            current["target"],
            exclude_bos=exclude_bos,
            exclude_current_token=exclude_current_token,
            rows=rows,
        ).double().cpu()
        valid = ~per_seq.isnan()
        totals[layer] += torch.where(valid, per_seq, 0.0).sum(0)
        counts[layer] += valid.sum(0)

    is_pattern = lambda name: name.endswith("attn.hook_pattern")  # noqa: E731
    with lm.hooks.hooks(fwd=[(is_pattern, score)], label=f"{kind} scores"):
        for start in range(0, tokens.shape[0], batch_size):
            chunk = tokens[start : start + batch_size]
            current["target"] = detection_pattern(chunk, kind)
            # Stopping after the last attention layer skips the unembedding, which is a large
            # share of a small model's forward pass.
            lm.model(chunk, stop_at_layer=cfg.n_layers)
    values = (totals / counts).float()
    return HeadScores(
        values=values,
        axes=("layer", "head"),
        labels=_layer_head_labels(cfg.n_layers, cfg.n_heads),
        meta=lm.meta(
            seed=seed,
            data_source=data_source,
            params={
                "kind": kind,
                "n_sequences": int(tokens.shape[0]),
                "seq_len": int(tokens.shape[1]),
                "exclude_bos": exclude_bos,
                "exclude_current_token": exclude_current_token,
                "rows": rows,
            },
        ),
        head_kind=kind,
    )


def random_token_range(lm: LensModel) -> tuple[int, int]:
    """Token ids to draw random sequences from: ordinary word pieces, no special tokens.

    TransformerLens's demo draws from 1000..10000 on GPT-2; the same range holds for SmolLM2.
    Smaller vocabularies (trained toys) use everything after id 1.
    """
    vocab = lm.cfg.d_vocab
    return (1000, min(10000, vocab)) if vocab > 10000 else (1, vocab)


def _repeated(lm: LensModel, n_sequences: int, half_length: int, seed: int) -> Tensor:
    return repeated_random_tokens(
        n_sequences,
        half_length,
        vocab=random_token_range(lm),
        sink_token_id=lm.sink_token_id if lm.sink_token_id is not None else _bos_or_none(lm),
        seed=seed,
        device=lm.device,
    )


def _bos_or_none(lm: LensModel) -> int | None:
    tokenizer = lm.tokenizer
    return None if tokenizer is None else tokenizer.bos_token_id


def _scores_on_repeated(
    lm: LensModel,
    kind: HeadKind,
    tokens: Tensor | None,
    n_sequences: int,
    half_length: int,
    seed: int,
    **options: bool,
) -> HeadScores:
    if tokens is None:
        tokens = _repeated(lm, n_sequences, half_length, seed)
        source = f"repeated random tokens {random_token_range(lm)}, 2x{half_length}, seed {seed}"
        return head_scores(lm, tokens, kind, data_source=source, seed=seed, **options)  # type: ignore[arg-type]
    return head_scores(lm, tokens, kind, **options)  # type: ignore[arg-type]


def induction_scores(
    lm: LensModel,
    tokens: Int[Tensor, "batch pos"] | None = None,
    *,
    n_sequences: int = 20,
    half_length: int = 20,
    seed: int = 0,
    exclude_bos: bool = False,
    exclude_current_token: bool = False,
) -> HeadScores:
    """Induction score of every head: attention from a token to the token after its earlier copy.

    Without ``tokens``, scores ``n_sequences`` repeated random sequences (sink + 2 × half_length).

    >>> from lmsci_mi import load_model
    >>> induction_scores(load_model("toy-2l"), n_sequences=2, half_length=5).head_kind
    'induction'
    """
    return _scores_on_repeated(
        lm, "induction", tokens, n_sequences, half_length, seed,
        exclude_bos=exclude_bos, exclude_current_token=exclude_current_token,
    )


def previous_token_scores(
    lm: LensModel,
    tokens: Int[Tensor, "batch pos"] | None = None,
    *,
    n_sequences: int = 20,
    half_length: int = 20,
    seed: int = 0,
    exclude_bos: bool = False,
    exclude_current_token: bool = False,
) -> HeadScores:
    """Previous-token score of every head: attention from each position to the one before it."""
    return _scores_on_repeated(
        lm, "previous_token", tokens, n_sequences, half_length, seed,
        exclude_bos=exclude_bos, exclude_current_token=exclude_current_token,
    )


def duplicate_token_scores(
    lm: LensModel,
    tokens: Int[Tensor, "batch pos"] | None = None,
    *,
    n_sequences: int = 20,
    half_length: int = 20,
    seed: int = 0,
    exclude_bos: bool = False,
    exclude_current_token: bool = False,
) -> HeadScores:
    """Duplicate-token score of every head: attention from a token to its earlier copies."""
    return _scores_on_repeated(
        lm, "duplicate_token", tokens, n_sequences, half_length, seed,
        exclude_bos=exclude_bos, exclude_current_token=exclude_current_token,
    )


def prefix_matching_scores(
    lm: LensModel,
    *,
    n_sequences: int = 20,
    half_length: int = 20,
    seed: int = 0,
    exclude_bos: bool = False,
) -> HeadScores:
    """Prefix-matching score (Olsson et al. 2022): on repeated *random* tokens, the attention
    from each second-half token to the token that followed its first occurrence.

    On random repeats this is the induction pattern; the name marks that it is measured where
    no other cue (grammar, frequency) can explain the attention.
    """
    scores = induction_scores(
        lm, n_sequences=n_sequences, half_length=half_length, seed=seed, exclude_bos=exclude_bos
    )
    return HeadScores(
        values=scores.values, axes=scores.axes, labels=scores.labels, meta=scores.meta,
        head_kind="prefix_matching",
    )


# --------------------------------------------------------------------------- weight-based scores


@torch.no_grad()
def copying_scores(lm: LensModel) -> HeadScores:
    """OV copying score per head: the share of positive eigenvalues of the full OV circuit.

    Olsson et al. 2022 measure how much a head copies the token it attends to by the eigenvalues
    λ of ``W_E W_V W_O W_U`` (vocab × vocab): ``Σ Re λ / Σ |λ|`` is 1 for a pure copier and −1
    for a head that suppresses what it reads. The non-zero eigenvalues of ``A B`` and ``B A``
    coincide, so we take them from the ``d_head × d_head`` matrix ``W_O W_U W_E W_V`` instead of
    the vocab-sized one. Normalisation layers between the pieces are left out (a per-token
    scale), as in the paper. Reads the model only.
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
        labels=_layer_head_labels(cfg.n_layers, cfg.n_heads),
        meta=lm.meta(data_source="weights", params={"measure": "OV eigenvalue positivity"}),
        head_kind="copying",
    )


@result_type
class CompositionScores(Result):
    """Composition scores between every earlier head (rows) and every later head (columns).

    ``values`` is ``[source_head, destination_head]`` over all ``layer.head`` names; pairs whose
    destination is not in a later layer are 0.
    """

    mode: str = "K"
    n_heads: int = 0

    def score(self, source: tuple[int, int], destination: tuple[int, int]) -> float:
        """The score of one pair, heads given as ``(layer, head)``."""
        row = source[0] * self.n_heads + source[1]
        col = destination[0] * self.n_heads + destination[1]
        return float(self.values[row, col])


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
        raise ValueError(f"mode must be 'Q', 'K' or 'V', not {mode!r}")
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
        heads: the induction heads ablated together, as ``"L.H"``.
        loss_clean: loss without ablation (nats per token).
        loss_induction_ablated: loss with the induction heads ablated.
        loss_random_ablated: mean of ``values`` (same number of random non-induction heads).
        excess: ``(loss_induction_ablated − loss_clean) − (loss_random_ablated − loss_clean)``.
    """

    heads: tuple[str, ...] = ()
    loss_clean: float = 0.0
    loss_induction_ablated: float = 0.0
    loss_random_ablated: float = 0.0
    excess: float = 0.0


def _second_half_loss(logits: Tensor, tokens: Tensor, half_length: int) -> float:
    # Predictions made at second-half positions about the next second-half token; the first
    # token of the second half cannot be predicted from context, so it is left out.
    offset = tokens.shape[1] - 2 * half_length
    start = offset + half_length
    log_probs = logits[:, start:-1].float().log_softmax(-1)
    targets = tokens[:, start + 1 :]
    return float(-log_probs.gather(-1, targets[..., None]).mean())


def _ablated_loss(
    lm: LensModel,
    tokens: Tensor,
    heads: Sequence[tuple[int, int]],
    means: dict[str, Tensor],
    half_length: int,
) -> float:
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    hooks = []
    for layer, layer_heads in by_layer.items():
        name = f"blocks.{layer}.attn.hook_z"
        keep = torch.ones(lm.cfg.n_heads, dtype=torch.bool, device=lm.device)
        keep[layer_heads] = False

        def replace(z: Tensor, hook: HookPoint, keep: Tensor = keep) -> Tensor:
            mean = means[hook.name or ""].to(z.dtype)
            return torch.where(keep[None, None, :, None], z, mean)

        hooks.append((name, replace))
    with lm.hooks.hooks(fwd=hooks, label="ablate heads"):
        logits = lm.model(tokens)
    return _second_half_loss(logits, tokens, half_length)


@torch.no_grad()
def induction_ablation(
    lm: LensModel,
    heads: Sequence[tuple[int, int]],
    *,
    n_sequences: int = 20,
    half_length: int = 20,
    n_random_draws: int = 5,
    exclude: Sequence[tuple[int, int]] = (),
    seed: int = 0,
) -> InductionAblation:
    """Check that ``heads`` do induction: mean-ablate them together and compare the loss on the
    second half of repeated random sequences with ablating as many random other heads.

    Mean ablation replaces each head's ``hook_z`` with its mean over the batch at each position,
    which removes what is specific to each sequence (the token being copied) but keeps the
    head's average contribution. Random heads are drawn from heads outside ``heads`` and
    ``exclude`` (pass every head above a looser threshold as ``exclude``). Reads the model only.

    Args:
        heads: the candidate induction heads as ``(layer, head)``.
        n_random_draws: random baselines averaged.
        exclude: heads never drawn for the baseline.

    Returns:
        :class:`InductionAblation`.
    """
    if not heads:
        raise ValueError("no heads to ablate")
    tokens = _repeated(lm, n_sequences, half_length, seed + 1)
    z_sites = [f"blocks.{layer}.attn.hook_z" for layer in range(lm.cfg.n_layers)]
    means = lm.hooks.mean_activations(z_sites, tokens)
    clean = _second_half_loss(lm.model(tokens), tokens, half_length)
    ablated = _ablated_loss(lm, tokens, heads, means, half_length)
    banned = set(map(tuple, heads)) | set(map(tuple, exclude))
    pool = [
        (layer, head)
        for layer in range(lm.cfg.n_layers)
        for head in range(lm.cfg.n_heads)
        if (layer, head) not in banned
    ]
    if len(pool) < len(heads):
        raise ValueError("not enough other heads for a random baseline")
    generator = torch.Generator().manual_seed(seed)
    random_losses = []
    for _ in range(n_random_draws):
        pick = torch.randperm(len(pool), generator=generator)[: len(heads)]
        random_losses.append(_ablated_loss(lm, tokens, [pool[i] for i in pick], means, half_length))
    random_mean = sum(random_losses) / len(random_losses)
    return InductionAblation(
        values=torch.tensor(random_losses),
        axes=("draw",),
        labels=((),),
        meta=lm.meta(
            seed=seed,
            data_source=f"repeated random tokens {random_token_range(lm)}, 2x{half_length}",
            params={"n_sequences": n_sequences, "ablation": "mean over batch, per position"},
        ),
        heads=tuple(head_label(layer, head) for layer, head in heads),
        loss_clean=clean,
        loss_induction_ablated=ablated,
        loss_random_ablated=random_mean,
        excess=ablated - random_mean,
    )

"""Why models fail beyond their training length: LM-Infinite's diagnostics (Han et al., NAACL 2024,
arXiv:2308.16137, README and `assets/diagnosis.jpg`), per layer, on long real text.

(a) the largest attention logit as a function of query-key distance (running maximum over distance),
(b) attention entropy as a function of the number of tokens attended, (c) the first tokens'
separation in feature space, and (d) per-token NLL by position with the length at which it starts
to rise; beside them each bundled model's trained context length with its source. Long inputs run
through :func:`lmsci_mi.long_context.long_input_path`. Uses the data package's text corpus (the
standard library's prose) for the long text.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from lmsci_mi import readout
from lmsci_mi.config import NOT_IN_NOTES, Config, config, paper
from lmsci_mi.data.text_corpus import STDLIB_TEXT_SOURCE, text_chunks
from lmsci_mi.errors import UserInputError
from lmsci_mi.long_context import attention_layers, long_input_path, score_query_positions
from lmsci_mi.model import LensModel
from lmsci_mi.results import Meta, Result, result_type
from lmsci_mi.sites import hook_name, layer_hooks
from lmsci_mi.stats import standard_error

__all__ = [
    "TRAINED_CONTEXT",
    "AttentionCurvesConfig",
    "AttentionLengthCurves",
    "FirstTokenSeparation",
    "LengthCurve",
    "LongText",
    "NLLByPosition",
    "NLLByPositionConfig",
    "NLLRise",
    "SeparationConfig",
    "TrainedContext",
    "attention_length_curves",
    "first_token_separation",
    "long_text",
    "nll_by_position",
    "nll_rise",
    "token_nll",
    "trained_context",
    "window_excess",
]


# ----------------------------------------------------------------------------- trained length


@dataclass(frozen=True)
class TrainedContext:
    """A model's trained context length and the facts around it, with where each comes from.

    ``trained_length`` is the length the diagnostics call "trained" (the in-context range's end,
    the Λ-mask's default window). ``max_position_embeddings`` is what the model's file declares;
    ``n_ctx`` what loading gives TransformerLens (inputs past it need
    :func:`lmsci_mi.long_context.extended_rotary`). ``pretraining_length`` is the context of
    pretraining where a source states one apart from the final length; ``[unverified]`` in
    ``source`` marks what our notes hold no quote for.
    """

    model: str
    trained_length: int
    max_position_embeddings: int | None
    n_ctx: int
    rotary_base: float | None
    rotary_base_local: float | None
    sliding_window: int | None
    pretraining_length: int | None
    source: str


TRAINED_CONTEXT: dict[str, TrainedContext] = {
    "smollm2-135m": TrainedContext(
        model="smollm2-135m",
        trained_length=8192,
        max_position_embeddings=8192,
        n_ctx=8192,
        rotary_base=100000.0,
        rotary_base_local=None,
        sliding_window=None,
        pretraining_length=2048,
        source=(
            "bundled SmolLM2-135M-Instruct.Q4_1.gguf metadata (read offline with gguf.GGUFReader): "
            "llama.context_length 8192, llama.rope.freq_base 100000, general.finetune "
            "'8k-lc100k-mix1-ep2'; loading.py caps n_ctx at min(max_position_embeddings, 8192) = 8192. "
            "Pretraining at 2,048 tokens with a later extension to 8k is what the SmolLM2 paper "
            "(Allal et al. 2025, arXiv:2502.02737) describes for its models [unverified: our notes hold "
            "no quote, nor whether the 135M model was extended the same way]"
        ),
    ),
    "gemma3-270m": TrainedContext(
        model="gemma3-270m",
        trained_length=32768,
        max_position_embeddings=32768,
        n_ctx=8192,
        rotary_base=1_000_000.0,
        rotary_base_local=10_000.0,
        sliding_window=512,
        pretraining_length=None,
        source=(
            "bundled gemma-3-270m-q4_k_m.gguf metadata (read offline with gguf.GGUFReader): "
            "gemma3.context_length 32768, gemma3.rope.freq_base 1000000, "
            "gemma3.attention.sliding_window 512; the local layers' rotary base 10000 and n_ctx 8192 "
            "from TransformerLens's built-in config of google/gemma-3-270m (the file has no local "
            "base). The Gemma 3 report's 32K pretraining context for the small models is "
            "[unverified: not in our notes]"
        ),
    ),
}
"""Each bundled model's context facts, by registered name (``load_model``'s); a model trained here
adds its own row (:func:`register_trained_context`)."""


def register_trained_context(context: TrainedContext) -> None:
    """Record a model's context facts under its name, for a model whose loaded ``n_ctx`` is not the
    length it was trained at (the short-context LM is loaded at 8x its training length)."""
    TRAINED_CONTEXT[context.model] = context


def trained_context(lm: LensModel) -> TrainedContext:
    """The model's row of :data:`TRAINED_CONTEXT`, or, for a model not in it (a toy, a hub
    model), its loaded config's ``n_ctx`` as the trained length, so stated in ``source``.

    >>> from lmsci_mi import load_model
    >>> trained_context(load_model("toy-2l")).trained_length
    256
    """
    if lm.name in TRAINED_CONTEXT:
        return TRAINED_CONTEXT[lm.name]
    layers = attention_layers(lm)
    bases = {a.kind: a.rotary_base for a in layers}
    local = [a.window for a in layers if a.kind == "local"]
    return TrainedContext(
        model=lm.name,
        trained_length=int(lm.cfg.n_ctx),
        max_position_embeddings=None,
        n_ctx=int(lm.cfg.n_ctx),
        rotary_base=bases.get("global"),
        rotary_base_local=bases.get("local"),
        sliding_window=local[0] if local else None,
        pretraining_length=None,
        source=f"{lm.name} is not in TRAINED_CONTEXT: its loaded config's n_ctx stands in (no training record)",
    )


# ----------------------------------------------------------------------------- long text


@dataclass(frozen=True)
class LongText:
    """Rows of token ids for the length analyses, and where the text comes from."""

    tokens: Int[Tensor, "text pos"]
    source: str


def long_text(lm: LensModel, n_texts: int, length: int) -> LongText:
    """``n_texts`` rows of ``length`` tokens of the standard library's prose (docstrings and
    ``pydoc_data`` topics, documents joined by the end-of-text token), each starting with the
    model's sink token where it has one (:func:`lmsci_mi.data.text_corpus.text_chunks`).
    The source holds about half a million tokens.

    >>> from lmsci_mi import load_model
    >>> long_text(load_model("toy-2l"), 2, 300).tokens.shape
    torch.Size([2, 300])
    """
    if n_texts < 1 or length < 2:
        raise UserInputError(f"long_text needs n_texts >= 1 and length >= 2, got {n_texts} and {length}")
    per_row = length - 1 if lm.sink_token_id is not None else length
    tokens = text_chunks(lm, n_texts * per_row, seq_len=length)
    return LongText(tokens=tokens[:n_texts], source=f"{STDLIB_TEXT_SOURCE}, rows of {length} tokens")


def _tokens(lm: LensModel, text: LongText | Tensor) -> tuple[Tensor, str]:
    tokens, source = (text.tokens, text.source) if isinstance(text, LongText) else (text, "token ids given")
    if tokens.ndim != 2 or tokens.shape[1] < 2 or tokens.dtype not in (torch.long, torch.int):
        raise UserInputError(
            f"give token ids as a [text, pos] integer tensor of at least 2 positions, not "
            f"{tuple(tokens.shape)} {tokens.dtype} (long_text builds them)"
        )
    lm.check_tokens(tokens)
    return tokens.long(), source


def _batches(tokens: Tensor, batch_size: int, device: torch.device) -> Iterator[Tensor]:
    for start in range(0, tokens.shape[0], batch_size):
        yield tokens[start : start + batch_size].to(device)


_CHUNK_HELP = {"help": "queries per attention block (None: TransformerLens's own path)", "ge": 1}


# ----------------------------------------------------------------------------- (a), (b)


@config
class AttentionCurvesConfig(Config):
    """Settings of :func:`attention_length_curves`."""

    layers: tuple[int, ...] | None = field(default=None, metadata={"help": "layers (default: all)", "ge": 0})
    chunk_size: int | None = field(default=512, metadata=_CHUNK_HELP)
    batch_size: int = field(default=1, metadata={"help": "texts per forward pass", "ge": 1})


@result_type
class LengthCurve(Result):
    """A per-layer curve over length: ``values`` ``[layer, x]`` the mean over texts, ``std``
    their standard deviation; ``statistic`` says what is measured."""

    std: Tensor
    n_texts: int
    statistic: str


@dataclass(frozen=True)
class AttentionLengthCurves:
    """LM-Infinite's first two diagnostics from one pass: the running maximum attention logit
    by query-key distance, and attention entropy by query position, per layer."""

    max_logit: LengthCurve
    entropy: LengthCurve


def attention_length_curves(
    lm: LensModel, text: LongText | Tensor, cfg: AttentionCurvesConfig | None = None
) -> AttentionLengthCurves:
    """LM-Infinite's diagnostics (a) and (b), per layer, mean ± s.d. over texts. Reads the model only.

    (a) ``max_logit[layer, d]``: the largest pre-softmax score (after scaling and any soft cap;
    the largest over heads and over every query-key pair at distance ``d' <= d``: the running
    maximum, as `visualization/relative_attention_explosion.py` plots it). (b)
    ``entropy[layer, t]``: the entropy (nats) of query ``t``'s attention, the mean over heads;
    query ``t`` attends to ``t + 1`` tokens (fewer in a sliding-window layer).

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> curves = attention_length_curves(lm, long_text(lm, 2, 40), AttentionCurvesConfig(chunk_size=16))
    >>> curves.max_logit.values.shape, curves.entropy.axes
    (torch.Size([2, 40]), ('layer', 'position'))
    """
    cfg = cfg or AttentionCurvesConfig()
    tokens, source = _tokens(lm, text)
    n_pos = tokens.shape[1]
    hooks, labels = layer_hooks("attn_scores", cfg.layers, lm.cfg.n_layers, lm.name)
    layers = [int(label) for label in labels]
    max_parts: list[Tensor] = []
    entropy_parts: list[Tensor] = []
    for batch in _batches(tokens, cfg.batch_size, lm.device):
        most = torch.full((len(layers), batch.shape[0], n_pos + 1), -math.inf, device=lm.device)
        entropy = torch.full((len(layers), batch.shape[0], n_pos), math.nan, device=lm.device)
        fwd = []
        for i, layer in enumerate(layers):
            fwd.append((hooks[i], _record_max_logit(most[i])))
            fwd.append((hook_name("pattern", layer), _record_entropy(entropy[i])))
        with torch.no_grad(), long_input_path(lm, n_pos, cfg.chunk_size), lm.hooks.hooks(fwd=fwd, label="length curves"):
            lm.model(batch, stop_at_layer=max(layers) + 1)
        max_parts.append(torch.cummax(most[..., :n_pos], dim=-1).values.cpu())
        entropy_parts.append(entropy.cpu())
    meta = lm.meta(data_source=source, params=cfg.params())
    return AttentionLengthCurves(
        max_logit=_curve(torch.cat(max_parts, 1), labels, "distance", meta,
                         "max attention logit, running max over query-key distance (max over heads)"),
        entropy=_curve(torch.cat(entropy_parts, 1), labels, "position", meta,
                       "attention entropy (nats) by query position, mean over heads"),
    )


def _record_max_logit(out: Tensor) -> Callable[[Tensor, Any], None]:
    """A hook on ``hook_attn_scores`` that folds each block's scores into ``out`` ``[batch,
    distance + 1]`` (the last column collects the masked, future keys)."""

    def record(scores: Tensor, hook: Any) -> None:
        n_key = scores.shape[-1]
        distance = score_query_positions(scores)[:, None] - torch.arange(n_key, device=scores.device)
        index = torch.where(distance >= 0, distance, n_key).reshape(1, -1)
        best = scores.detach().float().amax(1).reshape(scores.shape[0], -1)
        out.scatter_reduce_(1, index.expand(scores.shape[0], -1).to(out.device), best.to(out.device), "amax")

    return record


def _record_entropy(out: Tensor) -> Callable[[Tensor, Any], None]:
    """A hook on ``hook_pattern`` that writes each query's entropy, mean over heads, to ``out``."""

    def record(pattern: Tensor, hook: Any) -> None:
        rows = torch.special.entr(pattern.detach().float()).sum(-1).mean(1)  # [batch, query]
        out[:, score_query_positions(pattern).to(out.device)] = rows.to(out.device)

    return record


def _curve(per_text: Tensor, labels: tuple[str, ...], x: str, meta: Meta, statistic: str) -> LengthCurve:
    """``per_text`` ``[layer, text, x]`` as a :class:`LengthCurve` (mean and s.d. over texts)."""
    n_texts = per_text.shape[1]
    std = per_text.std(1) if n_texts > 1 else torch.full_like(per_text[:, 0], math.nan)
    return LengthCurve(values=per_text.mean(1), axes=("layer", x), labels=(labels, ()), meta=meta,
                       std=std, n_texts=n_texts, statistic=statistic)


# ----------------------------------------------------------------------------- (c)


@config
class SeparationConfig(Config):
    """Settings of :func:`first_token_separation`."""

    first_k: int = field(default=4, metadata={"help": "how many first positions (the sink counts) are 'first'", "ge": 1})
    site: str = field(default="resid_post", metadata={"help": "the residual site read in every layer",
                                                      "choices": ("resid_pre", "resid_mid", "resid_post")})
    layers: tuple[int, ...] | None = field(default=None, metadata={"help": "layers (default: all)", "ge": 0})
    chunk_size: int | None = field(default=512, metadata=_CHUNK_HELP)
    batch_size: int = field(default=1, metadata={"help": "texts per forward pass", "ge": 1})


@result_type
class FirstTokenSeparation(Result):
    """How far the first positions' states sit from the rest, per layer.

    ``values`` ``[layer]``: the mean over texts of the first ``first_k`` positions' mean distance
    from the other positions' centroid, in units of the others' spread (root mean squared distance
    from that centroid); ``std`` its s.d. over texts; ``per_position`` ``[layer, position]`` every
    position's distance in those units (mean over texts); ``pca`` ``[layer, position, 2]`` the
    first text's states on their two principal axes, ``explained`` ``[layer, 2]`` those axes'
    shares of the variance. ``meta.sink`` says whether position 0 is a prepended sink token.
    """

    std: Tensor
    per_position: Tensor
    pca: Tensor
    explained: Tensor
    first_k: int
    n_texts: int


def first_token_separation(
    lm: LensModel, text: LongText | Tensor, cfg: SeparationConfig | None = None
) -> FirstTokenSeparation:
    """LM-Infinite's diagnostic (c): the first tokens' separation in feature space by layer (the
    code's `scripts/extract_position_features.py` fits a 2-D PCA coloured by position; the
    number here puts a scale on it). Reads the model only.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> sep = first_token_separation(lm, long_text(lm, 2, 30))
    >>> sep.values.shape, sep.pca.shape
    (torch.Size([2]), torch.Size([2, 30, 2]))
    """
    cfg = cfg or SeparationConfig()
    tokens, source = _tokens(lm, text)
    n_pos = tokens.shape[1]
    if cfg.first_k >= n_pos - 1:
        raise UserInputError(f"first_k {cfg.first_k} leaves too few other positions in {n_pos}-token texts")
    hooks, labels = layer_hooks(cfg.site, cfg.layers, lm.cfg.n_layers, lm.name)
    layers = [int(label) for label in labels]
    distances: list[list[Tensor]] = [[] for _ in layers]
    pca: list[tuple[Tensor, Tensor]] = []
    for batch in _batches(tokens, cfg.batch_size, lm.device):
        keep_pca = pca if not pca else None  # the first text's states only
        fwd = [(name, _record_separation(cfg.first_k, distances[i], keep_pca)) for i, name in enumerate(hooks)]
        with torch.no_grad(), long_input_path(lm, n_pos, cfg.chunk_size), lm.hooks.hooks(fwd=fwd, label="separation"):
            lm.model(batch, stop_at_layer=max(layers) + 1)
    per_text = torch.stack([torch.cat(parts) for parts in distances])  # [layer, text, pos]
    first = per_text[..., : cfg.first_k].mean(-1)  # [layer, text]
    n_texts = per_text.shape[1]
    return FirstTokenSeparation(
        values=first.mean(1), axes=("layer",), labels=(labels,),
        meta=lm.meta(data_source=source, params=cfg.params()),
        std=first.std(1) if n_texts > 1 else torch.full_like(first[:, 0], math.nan),
        per_position=per_text.mean(1), pca=torch.stack([c for c, _ in pca]),
        explained=torch.stack([e for _, e in pca]), first_k=cfg.first_k, n_texts=n_texts,
    )


def _record_separation(
    first_k: int, out: list[Tensor], pca: list[tuple[Tensor, Tensor]] | None
) -> Callable[[Tensor, Any], None]:
    def record(states: Tensor, hook: Any) -> None:
        x = states.detach().double()  # [batch, pos, d_model]; float64: massive activations
        rest = x[:, first_k:]
        centre = rest.mean(1, keepdim=True)
        spread = (rest - centre).pow(2).sum(-1).mean(1).sqrt()  # [batch]
        out.append(((x - centre).norm(dim=-1) / spread[:, None]).float().cpu())
        if pca is not None:
            pca.append(_pca2(x[0]))

    return record


def _pca2(x: Float[Tensor, "pos d"]) -> tuple[Tensor, Tensor]:
    """Coordinates on the two principal axes (exact, from the covariance; each axis's sign set
    so that position 0 is >= 0) and the axes' shares of the total variance."""
    centred = x - x.mean(0)
    eigenvalues, vectors = torch.linalg.eigh(centred.T @ centred)
    top = vectors[:, -2:].flip(-1)
    coords = centred @ top
    coords = coords * torch.where(coords[0] < 0, -1.0, 1.0).to(coords.dtype)
    share = eigenvalues[-2:].flip(-1) / eigenvalues.clamp_min(0).sum()
    return coords.float().cpu(), share.float().cpu()


# ----------------------------------------------------------------------------- (d)


@config
class NLLByPositionConfig(Config):
    """Settings of :func:`nll_by_position` and its rule for "the NLL starts to rise"."""

    window: int = field(default=256, metadata={
        "help": "tokens per window of the windowed mean", "ge": 1,
        **paper(NOT_IN_NOTES, "Han et al. 2024 (arXiv:2308.16137): NLL rises past the training length (the "
                "tutorial's length-generalisation section); how they smooth the curve is not in our notes")})
    stride: int | None = field(default=None, metadata={"help": "step between windows (default: window)", "ge": 1})
    in_context_start: int = field(default=64, metadata={"help": "first position of the in-context range", "ge": 1})
    in_context_stop: int | None = field(
        default=None,
        metadata={"help": "end of the in-context range (default: the trained length, or the texts' length)", "ge": 2},
    )
    n_se: float = field(default=2.0, metadata={"help": "standard errors the windowed mean must exceed it by", "gt": 0})
    chunk_size: int | None = field(default=512, metadata=_CHUNK_HELP)
    logits_chunk: int = field(default=512, metadata={"help": "positions unembedded at a time", "ge": 1})
    batch_size: int = field(default=1, metadata={"help": "texts per forward pass", "ge": 1})

    def validate(self) -> None:
        if self.in_context_stop is not None and self.in_context_stop <= self.in_context_start:
            raise UserInputError(
                f"in_context_stop ({self.in_context_stop}) must exceed in_context_start ({self.in_context_start})"
            )


@dataclass(frozen=True)
class NLLRise:
    """Where the NLL starts to rise: the first length ``L`` (a window ``[L - window, L)`` past
    the in-context range) whose mean NLL exceeds the in-context mean by ``n_se`` standard errors,
    or None. The standard error is over texts, of each text's window mean minus its in-context
    mean. ``window_ends``, ``excess`` (mean over texts) and ``se`` are per window."""

    length: int | None
    in_context: tuple[int, int]
    in_context_mean: float
    window: int
    stride: int
    n_se: float
    window_ends: Tensor
    excess: Tensor
    se: Tensor


def window_excess(
    per_text: Float[Tensor, "text pos"],
    *,
    window: int,
    in_context: tuple[int, int],
    stride: int | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """The arithmetic of :func:`nll_rise` without its test, so one text is enough: the ends ``L``
    of the windows ``[L - window, L)`` past the in-context range, each text's in-context mean NLL
    ``[text]``, and each text's window means minus it ``[text, window]``.

    >>> ends, reference, difference = window_excess(torch.ones(1, 100), window=10, in_context=(1, 50))
    >>> ends[:2].tolist(), float(difference.abs().max())
    ([60, 70], 0.0)
    """
    n_texts, n_pos = per_text.shape
    start, stop = in_context
    stride = stride or window
    if not 1 <= start < stop <= n_pos or window < 1 or stride < 1:
        raise UserInputError(
            f"in-context range {in_context} must satisfy 1 <= start < stop <= {n_pos} (the texts' length), "
            f"and window ({window}) and stride ({stride}) be >= 1"
        )
    x = per_text.double().clone()
    x[:, 0] = 0.0  # no prediction at position 0 (NaN there); never inside a window
    sums = torch.cat([torch.zeros(n_texts, 1, dtype=x.dtype), x.cumsum(1)], dim=1)
    reference = (sums[:, stop] - sums[:, start]) / (stop - start)  # [text]
    ends = torch.arange(stop + window, max(n_pos + 1, stop + window), stride)  # empty: no room past it
    means = (sums[:, ends] - sums[:, ends - window]) / window  # [text, window]
    return ends, reference, means - reference[:, None]


def nll_rise(
    per_text: Float[Tensor, "text pos"],
    *,
    window: int,
    in_context: tuple[int, int],
    stride: int | None = None,
    n_se: float = 2.0,
) -> NLLRise:
    """The issue's rule for "the NLL starts to rise", on per-token NLLs ``[text, position]``
    (position ``p``: the NLL of token ``p``; position 0 is never read).

    >>> flat = torch.ones(4, 100) + 0.01 * torch.randn(4, 100)
    >>> rising = flat.clone(); rising[:, 70:] += 1.0
    >>> nll_rise(rising, window=10, in_context=(1, 50)).length
    80
    >>> nll_rise(flat, window=10, in_context=(1, 50), n_se=50).length is None
    True
    """
    if per_text.shape[0] < 2:
        raise UserInputError("the rule's standard error is over texts: give at least 2 texts")
    stride = stride or window
    ends, reference, difference = window_excess(per_text, window=window, in_context=in_context, stride=stride)
    excess = difference.mean(0)
    se = standard_error(difference, axis=0) if len(ends) else excess.clone()
    hits = torch.nonzero(excess > n_se * se).flatten()
    return NLLRise(
        length=int(ends[hits[0]]) if len(hits) else None, in_context=(in_context[0], in_context[1]),
        in_context_mean=float(reference.mean()), window=window, stride=stride, n_se=n_se,
        window_ends=ends, excess=excess, se=se,
    )


@result_type
class NLLByPosition(Result):
    """Per-token NLL by position: ``values`` ``[position]`` the mean over texts (position ``p``:
    token ``p`` predicted from the ``p`` before it; NaN at 0), ``per_text`` ``[text, position]``,
    ``rise`` where it starts to rise, ``trained_length`` and its source."""

    per_text: Tensor
    rise: NLLRise
    trained_length: int
    trained_length_source: str


def nll_by_position(
    lm: LensModel, text: LongText | Tensor, cfg: NLLByPositionConfig | None = None
) -> NLLByPosition:
    """Per-token NLL by position on long text, and the length at which it starts to rise
    (:func:`nll_rise`). Logits go through :func:`lmsci_mi.readout.logits`, ``logits_chunk``
    positions at a time. Reads the model only (interventions active in the registry apply:
    run it inside :func:`~lmsci_mi.outliers.lambda_mask.lambda_mask` for the Λ-mask's curve).

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> curve = nll_by_position(lm, long_text(lm, 2, 40), NLLByPositionConfig(window=8, in_context_start=4))
    >>> curve.values.shape, curve.rise.in_context
    (torch.Size([40]), (4, 40))
    """
    cfg = cfg or NLLByPositionConfig()
    tokens, source = _tokens(lm, text)
    n_pos = tokens.shape[1]
    context = trained_context(lm)
    stop = cfg.in_context_stop if cfg.in_context_stop is not None else min(context.trained_length, n_pos)
    per_text = token_nll(lm, tokens, cfg)
    rise = nll_rise(per_text, window=cfg.window, in_context=(cfg.in_context_start, stop),
                    stride=cfg.stride, n_se=cfg.n_se)
    return NLLByPosition(
        values=per_text.mean(0), axes=("position",), labels=((),),
        meta=lm.meta(data_source=source, params=cfg.params()), per_text=per_text, rise=rise,
        trained_length=context.trained_length, trained_length_source=context.source,
    )


def token_nll(
    lm: LensModel, text: LongText | Tensor, cfg: NLLByPositionConfig | None = None
) -> Float[Tensor, "text pos"]:
    """Per-token NLL ``[text, position]`` of each token given those before it (NaN at position 0),
    :func:`nll_by_position`'s curves before they are averaged: one text is enough (a benchmark
    caches text by text; the rise needs two). Reads the model only.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> token_nll(lm, long_text(lm, 1, 20)).shape
    torch.Size([1, 20])
    """
    cfg = cfg or NLLByPositionConfig()
    tokens, _ = _tokens(lm, text)
    return torch.cat([_token_nll(lm, batch, cfg) for batch in _batches(tokens, cfg.batch_size, lm.device)])


def _token_nll(lm: LensModel, batch: Tensor, cfg: NLLByPositionConfig) -> Tensor:
    """``[batch, pos]`` NLL of each token given those before it (NaN at position 0)."""
    n_pos = batch.shape[1]
    out = torch.full(batch.shape, math.nan)
    with ExitStack() as stack:
        stack.enter_context(torch.no_grad())
        stack.enter_context(long_input_path(lm, n_pos, cfg.chunk_size))
        # The blocks only: unembedding every position at once is [batch, pos, vocab].
        resid = lm.model(batch, stop_at_layer=lm.cfg.n_layers)
        for start in range(0, n_pos - 1, cfg.logits_chunk):
            stop = min(n_pos - 1, start + cfg.logits_chunk)
            logits = readout.logits(lm, resid[:, start:stop], space="resid", norm="live")
            log_probs = logits.float().log_softmax(-1)
            targets = batch[:, start + 1 : stop + 1, None]
            out[:, start + 1 : stop + 1] = -log_probs.gather(-1, targets)[..., 0].cpu()
    return out

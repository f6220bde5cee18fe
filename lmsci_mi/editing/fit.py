"""The machinery ROME and MEMIT share: context prefixes, subject rows, target ids, subject keys
and the fit of the residual change δ that makes the model say the new target.

δ is added after one layer at the subject's last token (or, for ROME's edit-aware fit, wherever
the installed rank-one update reaches) and fitted with Adam on the target's NLL, a KL term on
"{subject} is a" and weight decay, as in Meng et al. 2022 (ROME, §3.1, code: rome/compute_v.py)
and 2023 (MEMIT, §4.2). Rows run grouped by width, over only the positions the loss needs.
"""

from __future__ import annotations

import itertools
import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens import HookedTransformer
from transformer_lens.cache.key_value_cache_entry import TransformerLensKeyValueCacheEntry

from lmsci_mi.editing.requests import EditRequest
from lmsci_mi.errors import UserInputError
from lmsci_mi.generation import GenerationConfig, generate
from lmsci_mi.model import LensModel
from lmsci_mi.sites import hook_name
from lmsci_mi.sweep import BaseRun

__all__ = [
    "DeltaFit",
    "FitSettings",
    "SubjectRow",
    "check_layer",
    "check_requests",
    "context_templates",
    "fit_deltas",
    "subject_activations",
    "subject_row",
]

logger = logging.getLogger(__name__)


class FitSettings(Protocol):
    """The settings of the δ fit; ROME's and MEMIT's configs both carry them.

    A config may also carry ``early_stop`` (read instead of ``early_stop_nll``), ``stop_on``
    (``"loss"`` or ``"nll"``, default ``"nll"``) and ``decay`` (``"rome"`` or ``"squared"``,
    default ``"squared"``); see :func:`fit_deltas`. ROME's config does; MEMIT's does not.
    """

    @property
    def steps(self) -> int: ...
    @property
    def lr(self) -> float: ...
    @property
    def early_stop_nll(self) -> float: ...
    @property
    def kl_factor(self) -> float: ...
    @property
    def weight_decay(self) -> float: ...
    @property
    def clamp_norm(self) -> float: ...


# ---------------------------------------------------------------------- validation


def check_requests(lm: LensModel, requests: Sequence[EditRequest]) -> None:
    """Raise ValueError (TypeError for a non-request) before any weight is touched."""
    if not requests:
        raise UserInputError("no edit requests given")
    seen: dict[tuple[str, str], int] = {}
    for i, request in enumerate(requests):
        if not isinstance(request, EditRequest):
            raise TypeError(f"expected EditRequest, got {type(request).__name__}")
        request.validate(lm)
        fact = (request.prompt, request.subject)
        if fact in seen:
            # Two rows of one fact would weigh it twice against the preserved keys, and two
            # different targets for it cannot both be installed.
            raise UserInputError(
                f"requests {seen[fact]} and {i} both rewrite {request.rewrite_prompt!r}: a batch "
                "edits each fact once; drop the duplicate (or edit conflicting targets one after "
                "the other)"
            )
        seen[fact] = i


def check_layer(lm: LensModel, layer: int) -> None:
    """Raise ValueError unless ``layer`` is a block with an MLP whose keys can be read."""
    n = lm.cfg.n_layers
    if not isinstance(layer, int) or isinstance(layer, bool) or not 0 <= layer < n:
        raise UserInputError(f"layer {layer!r} is out of range for {lm.name}: it has layers 0…{n - 1}")
    if lm.cfg.d_mlp is None or hook_name("mlp_post", layer) not in lm.model.hook_dict:
        raise UserInputError(f"layer {layer} of {lm.name} has no MLP with a hook_post key site")


# ---------------------------------------------------------------------- context prefixes

_CONTEXT_STARTS = ("The", "Therefore", "Because", "I", "You")

# Prefixes per model, dropped with the model (no global keyed by id(), which a new model can reuse).
_TEMPLATES: weakref.WeakKeyDictionary[HookedTransformer, dict[tuple, tuple[str, ...]]] = (
    weakref.WeakKeyDictionary()
)


def context_templates(
    lm: LensModel, n: int = 10, lengths: Sequence[int] = (5, 10), *, seed: int = 0
) -> tuple[str, ...]:
    """``"{}"`` plus ``n`` templates ``"<generated text>. {}"`` sampled from the model (top-5).

    Each prefix starts from one of "The", "Therefore", "Because", "I", "You" (sampling from the
    sink alone gives an instruction-tuned model's chat debris) and is sampled with a seed that
    does not touch the global RNG. The result is cached per model. Reads the model only.

    >>> from lmsci_mi import load_model
    >>> t = context_templates(load_model("toy-2l"), 2, seed=0)
    >>> len(t), t[0], t[1].endswith(". {}")
    (3, '{}', True)
    """
    key = (n, tuple(lengths), seed, lm.sink_token_id)
    cache = _TEMPLATES.setdefault(lm.model, {})
    if key not in cache:
        templates = ["{}"]
        for i, length in enumerate(lengths):
            count = n // len(lengths) + (1 if i < n % len(lengths) else 0)
            starts = [_CONTEXT_STARTS[j % len(_CONTEXT_STARTS)] for j in range(count)]
            config = GenerationConfig(max_new_tokens=length, temperature=1.0, top_k=5, seed=seed + i)
            texts = generate(lm, starts, config).texts
            for start, text in zip(starts, texts, strict=True):
                # Braces would break str.format; newlines and stray spaces would change how
                # the subject after the prefix is tokenised.
                clean = " ".join((start + text).replace("{", " ").replace("}", " ").split())
                templates.append(f"{clean}. {{}}")
        cache[key] = tuple(templates)
    return cache[key]


# ---------------------------------------------------------------------- rows and keys


@dataclass(frozen=True)
class SubjectRow:
    """One tokenised sequence: its ids, the subject's last position, and where the target starts.

    Attributes:
        ids: template ⊕ prompt(subject) ⊕ target[:-1], under the sink policy.
        subject_last: position of the subject's last token.
        target_start: position whose logits predict the first target token; -1 without a target.
    """

    ids: list[int]
    subject_last: int
    target_start: int


def subject_row(
    lm: LensModel, template: str, prompt: str, subject: str, target_ids: Sequence[int] = ()
) -> SubjectRow:
    """Tokenise ``template`` ⊕ prompt(subject) ⊕ target[:-1] and locate the subject's last token.

    The subject's character span is known from where it is inserted (the same words may also
    occur in a generated prefix); the target is tokenised on its own as a continuation
    (``lm.continuation_ids``), so no sink lands inside it.
    """
    head, tail = prompt.split("{}", 1)
    outer_head, outer_tail = template.split("{}", 1)
    text = outer_head + head + subject + tail + outer_tail
    start = len(outer_head) + len(head)
    span = lm.token_span(text, start, start + len(subject))
    if span is None:
        raise UserInputError(f"subject {subject!r} covers no token of {text!r}")
    ids = lm.encode(text)
    return SubjectRow(
        ids=ids + list(target_ids[:-1]),
        subject_last=span[-1],
        target_start=len(ids) - 1 if target_ids else -1,
    )


@torch.no_grad()
def subject_activations(
    lm: LensModel, site: str, layer: int, rows: Sequence[SubjectRow]
) -> Float[Tensor, "row d"]:
    """Activations of ``site`` at ``layer`` at each row's subject-last position (float32).

    Runs the model only up to ``layer``. ``site="mlp_post"`` gives ROME's keys, ``"resid_post"``
    MEMIT's residual at the top layer.
    """
    tokens = lm.pad_batch([row.ids for row in rows]).tokens
    name = hook_name(site, layer)
    with lm.hooks.capture(name) as cap:
        lm.model(tokens, stop_at_layer=layer + 1)
    index = torch.tensor([row.subject_last for row in rows], device=lm.device)
    return cap[name][torch.arange(len(rows), device=lm.device), index].float()


# ---------------------------------------------------------------------- the δ fit


@dataclass(frozen=True)
class _Loop:
    """The fit's settings, whatever config they come from (MEMIT's has no ``stop_on`` or
    ``decay``: its fit keeps the NLL stop and the squared decay)."""

    steps: int
    lr: float
    stop_below: float
    stop_on: str  # "loss": compute_v's loop; "nll": stop on the target's NLL
    kl_factor: float
    weight_decay: float
    decay: str  # "rome": ‖δ‖/‖v₀‖² (compute_v); "squared": (‖δ‖/‖v̄₀‖)²
    clamp_norm: float

    @classmethod
    def of(cls, settings: FitSettings) -> _Loop:
        stop = getattr(settings, "early_stop", None)
        return cls(
            steps=settings.steps, lr=settings.lr,
            stop_below=settings.early_stop_nll if stop is None else stop,
            stop_on=getattr(settings, "stop_on", "nll"), kl_factor=settings.kl_factor,
            weight_decay=settings.weight_decay, decay=getattr(settings, "decay", "squared"),
            clamp_norm=settings.clamp_norm,
        )


@dataclass(frozen=True)
class _Batch:
    """Every row of a fit and the index tensors the loss reads."""

    tokens: Int[Tensor, "row pos"]
    last: Int[Tensor, " row"]  # subject-last position per row
    needed: Int[Tensor, " row"]  # the last position the loss reads per row
    owner: Int[Tensor, " row"]  # request of each row
    first_rewrite: Int[Tensor, " request"]  # each request's first rewrite row (the first template)
    kl_rows: Int[Tensor, " request"]  # the "{subject} is a" row of each request
    rewrite: Tensor  # bool [row]: rows that carry the target
    tok_row: Int[Tensor, " tok"]  # target tokens: row, position, id, request
    tok_pos: Int[Tensor, " tok"]
    tok_gold: Int[Tensor, " tok"]
    tok_owner: Int[Tensor, " tok"]
    n_requests: int


def _batch(lm: LensModel, requests: Sequence[EditRequest], templates: Sequence[str]) -> _Batch:
    """For each request: one rewrite row per template, then its "{subject} is a" KL row."""
    rows: list[SubjectRow] = []
    owner: list[int] = []
    kl_rows: list[int] = []
    first: list[int] = []
    tokens: list[tuple[int, int, int, int]] = []  # (row, position, gold id, request)
    for i, request in enumerate(requests):
        target = lm.continuation_ids(request.target_new)
        first.append(len(rows))
        for template in templates:
            row = subject_row(lm, template, request.prompt, request.subject, target)
            tokens += [(len(rows), row.target_start + j, t, i) for j, t in enumerate(target)]
            rows.append(row)
            owner.append(i)
        kl_rows.append(len(rows))
        rows.append(subject_row(lm, "{}", "{} is a", request.subject))
        owner.append(i)
    device = lm.device
    columns = torch.tensor(tokens, device=device).T
    rewrite = torch.ones(len(rows), dtype=torch.bool, device=device)
    rewrite[kl_rows] = False
    last = torch.tensor([r.subject_last for r in rows], device=device)
    return _Batch(
        tokens=lm.pad_batch([r.ids for r in rows]).tokens,
        last=last,
        needed=last.scatter_reduce(0, columns[0], columns[1], reduce="amax"),
        owner=torch.tensor(owner, device=device),
        first_rewrite=torch.tensor(first, device=device),
        kl_rows=torch.tensor(kl_rows, device=device),
        rewrite=rewrite,
        tok_row=columns[0],
        tok_pos=columns[1],
        tok_gold=columns[2],
        tok_owner=columns[3],
        n_requests=len(requests),
    )


@dataclass(frozen=True)
class _Unedited:
    """The run without δ: the residual after the layer, v₀ per request (the mean over its
    rewrite rows, and its first row's: compute_v's ``target_init``), the KL reference and
    (edit-aware fit) how much of δ the installed update adds at each position."""

    resid: Float[Tensor, "row pos d_model"]
    v0: Float[Tensor, "request d_model"]
    v0_first: Float[Tensor, "request d_model"]
    init_kl: Float[Tensor, "request vocab"]
    coef: Float[Tensor, "row pos"] | None
    keys: list[Tensor] | None = None  # per block above the layer: its cached keys (prefix reuse)
    values: list[Tensor] | None = None


@torch.no_grad()
def _unedited(
    lm: LensModel, layer: int, batch: _Batch, site: str, key_dirs: Tensor | None, reuse: bool
) -> _Unedited:
    """The run without δ. With ``reuse`` it also keeps every block's keys and values above
    ``layer``, so a fit step can recompute only the positions from the subject's last token on."""
    names = [hook_name("resid_post", layer), hook_name(site, layer)]
    if key_dirs is not None:
        names.append(hook_name("mlp_post", layer))
    keys = values = None
    if reuse:
        base = BaseRun.record(lm, batch.tokens, capture=names)
        cap, final = base.acts, base.resid[-1]
        keys, values = base.keys[layer + 1 :], base.values[layer + 1 :]
    else:
        with lm.hooks.capture(names) as cap:
            final = lm.model(batch.tokens, stop_at_layer=lm.cfg.n_layers)
    init_kl = lm.unembed(final[batch.kl_rows, batch.last[batch.kl_rows]]).float().log_softmax(-1)
    rows = torch.arange(len(batch.last), device=lm.device)
    at_site = cap[names[1]][rows, batch.last].float()
    owner = batch.owner[batch.rewrite]
    v0 = torch.zeros(batch.n_requests, at_site.shape[-1], device=lm.device)
    v0 = v0.index_add_(0, owner, at_site[batch.rewrite])
    v0 = v0 / torch.bincount(owner, minlength=batch.n_requests)[:, None].float()
    coef = None
    if key_dirs is not None:
        dirs = key_dirs.to(device=lm.device, dtype=torch.float32)[batch.owner]
        coef = torch.einsum("rpk,rk->rp", cap[names[2]].float(), dirs)
    return _Unedited(cap[names[0]], v0, at_site[batch.first_rewrite], init_kl, coef, keys, values)


@dataclass
class _Tokens:
    """Positions run through the blocks above the layer, summed over a fit's forward passes:
    ``real`` the positions the loss depends on, ``padded`` the rest (pad tokens, and positions
    recomputed although δ cannot change them)."""

    real: int = 0
    padded: int = 0

    def add(self, computed: int, real: int) -> None:
        self.real += real
        self.padded += computed - real


@dataclass(frozen=True)
class _Layout:
    """How a fit's rows run: only from the subject on (``suffix``: δ sits at the subject's last
    token, so earlier positions are the unedited run's), and grouped by width (no padded
    position) or padded as before issue 38 (one batch, or a few buckets of subject position)."""

    suffix: bool
    grouped: bool
    tokens: _Tokens
    pass_tokens: int | None = None  # grouped: most positions one pass runs (None: a whole group)


def _place(
    batch: _Batch, base: _Unedited, delta: Tensor, rows: Tensor, start: Tensor, width: int
) -> Tensor:
    """The residual after the layer at positions ``start … start + width`` of ``rows``, with δ
    added: at the subject's last token, or (edit-aware) (k·u)·δ at every position."""
    span = start[:, None] + torch.arange(width, device=start.device)[None]
    span = span.clamp_max(base.resid.shape[1] - 1)  # a padded layout may run past a short row
    x = base.resid[rows[:, None], span]
    if base.coef is not None:
        return x + (base.coef[rows[:, None], span][..., None] * delta[batch.owner[rows]][:, None]).to(x.dtype)
    local = torch.arange(len(rows), device=x.device)
    at = batch.last[rows] - start
    return x.index_put((local, at), x[local, at] + delta[batch.owner[rows]].to(x.dtype))


def _read(
    batch: _Batch, rows: Tensor, start: Tensor, y: Tensor, tok_out: Tensor, kl_out: Tensor
) -> tuple[Tensor, Tensor]:
    """Scatter a group's final residual ``y`` (row, position from ``start``) into the readouts:
    every target-predicting token of its rows, and the subject of its "{subject} is a" rows."""
    where = torch.full_like(batch.last, -1)
    where[rows] = torch.arange(len(rows), device=rows.device)
    tok = torch.nonzero(where[batch.tok_row] >= 0).squeeze(-1)
    local = where[batch.tok_row[tok]]
    tok_out = tok_out.index_put((tok,), y[local, batch.tok_pos[tok] - start[local]])
    req = torch.nonzero(where[batch.kl_rows] >= 0).squeeze(-1)
    local = where[batch.kl_rows[req]]
    kl_out = kl_out.index_put((req,), y[local, batch.last[batch.kl_rows[req]] - start[local]])
    return tok_out, kl_out


def _groups(live: Tensor, start: Tensor, end: Tensor, layout: _Layout) -> list[tuple[Tensor, Tensor, int]]:
    """(rows, first position per row, width) of each pass. Grouped: rows of one width together
    (across requests), each from its own start, so no position is padded; at most
    ``layout.pass_tokens`` positions a pass. Padded (before issue 38): the full path
    runs every row over the longest; the suffix path a few buckets of subject position, each
    from its smallest."""
    if layout.grouped:
        width = end[live] - start[live] + 1
        out = []
        for w in torch.unique(width).tolist():
            rows = live[width == w]
            # Rows of every request share a pass, so its matmuls are large; a cap on the
            # positions per pass bounds the memory the backward keeps.
            step = len(rows) if layout.pass_tokens is None else max(1, layout.pass_tokens // w)
            out += [(rows[i : i + step], start[rows[i : i + step]], w) for i in range(0, len(rows), step)]
        return out
    if not layout.suffix:
        rows = torch.arange(len(start), device=start.device)
        return [(rows, torch.zeros_like(rows), int(end.max()) + 1)]
    out = []
    for bucket in _buckets(start[live]):
        rows = live[bucket].sort().values
        cut = start[rows].min()
        out.append((rows, torch.full_like(rows, int(cut)), int(end[rows].max() - cut) + 1))
    return out


def _prefix(
    base: _Unedited, i: int, rows: Tensor, start: Tensor
) -> tuple[TransformerLensKeyValueCacheEntry, Tensor]:
    """Block ``i``'s cached keys and values before each row's ``start``, left-padded to the
    longest, and the attention mask that hides the padding (rotary positions follow the mask)."""
    assert base.keys is not None and base.values is not None
    width = int(start.max())
    offset = torch.arange(width, device=start.device)[None] - (width - start)[:, None]
    mask = offset >= 0
    index = offset.clamp_min(0)
    entry = TransformerLensKeyValueCacheEntry(
        past_keys=base.keys[i][rows[:, None], index], past_values=base.values[i][rows[:, None], index],
        frozen=True,
    )
    return entry, mask


def _readouts(
    lm: LensModel, layer: int, batch: _Batch, base: _Unedited, delta: Tensor, active: Tensor,
    layout: _Layout,
) -> tuple[Float[Tensor, "tok d_model"], Float[Tensor, "request d_model"]]:
    """The final residual at every target token and at each "{subject} is a" row's subject, with
    δ added after ``layer``, computing the rows of the ``active`` requests only (the others'
    readouts stay zero, and their loss is never used)."""
    dim = base.resid.shape[-1]
    tok_out = base.resid.new_zeros(len(batch.tok_row), dim)
    kl_out = base.resid.new_zeros(batch.n_requests, dim)
    live = torch.nonzero(active[batch.owner]).squeeze(-1)
    changed = batch.last if base.coef is None else torch.zeros_like(batch.last)
    start = batch.last if layout.suffix else torch.zeros_like(batch.last)
    for rows, first, width in _groups(live, start, batch.needed, layout):
        x = _place(batch, base, delta, rows, first, width)
        if layout.suffix:
            for i, block in enumerate(lm.model.blocks[layer + 1 :]):
                entry, mask = _prefix(base, i, rows, first)
                if layout.grouped:
                    full = torch.cat([mask, mask.new_ones(len(rows), width)], 1).long()
                    x = block(x, past_kv_cache_entry=entry, attention_mask=full)
                else:  # each bucket starts at one position: no mask needed
                    x = block(x, past_kv_cache_entry=entry)
        else:
            x = lm.model(x, start_at_layer=layer + 1, stop_at_layer=lm.cfg.n_layers)
        tok_out, kl_out = _read(batch, rows, first, x, tok_out, kl_out)
        real = batch.needed[rows] - torch.maximum(changed[rows], first) + 1
        layout.tokens.add(len(rows) * width, int(real[active[batch.owner[rows]]].sum()))
    return tok_out, kl_out


def _losses(
    lm: LensModel, layer: int, batch: _Batch, base: _Unedited, delta: Tensor, loop: _Loop,
    active: Tensor, layout: _Layout,
) -> tuple[Float[Tensor, " request"], Float[Tensor, " request"]]:
    """(loss, mean target NLL) per request with δ added after ``layer`` (only the ``active``
    requests' values are meaningful)."""
    at_targets, at_kl = _readouts(lm, layer, batch, base, delta, active, layout)
    # Only the active requests' readouts are unembedded: a converged request's loss is never
    # used, and the unembedding (49k words) is the fit's largest matmul per position.
    tok = torch.nonzero(active[batch.tok_owner]).squeeze(-1)
    log_probs = lm.unembed(at_targets[tok]).float().log_softmax(-1)
    token_nll = -log_probs.gather(-1, batch.tok_gold[tok, None]).squeeze(-1)
    n = batch.n_requests
    count = torch.bincount(batch.tok_owner, minlength=n).float()
    nll = torch.zeros(n, device=lm.device).index_add(0, batch.tok_owner[tok], token_nll) / count
    req = torch.nonzero(active).squeeze(-1)
    kl_now = lm.unembed(at_kl[req]).float().log_softmax(-1)
    kl_req = (kl_now.exp() * (kl_now - base.init_kl[req])).sum(-1)  # KL(current ‖ unedited)
    kl = torch.zeros(n, device=lm.device).index_put((req,), kl_req)
    if loop.decay == "rome":  # compute_v: ‖δ‖ / ‖target_init‖², target_init the first row's
        decay = delta.norm(dim=-1) / base.v0_first.norm(dim=-1) ** 2
    else:
        decay = (delta.norm(dim=-1) / base.v0.norm(dim=-1)) ** 2
    return nll + loop.kl_factor * kl + loop.weight_decay * decay, nll


_BUCKETS = 4
"""Most row groups the padded suffix layout (before issue 38) runs."""


def _buckets(cuts: Tensor, n: int = _BUCKETS) -> list[Tensor]:
    """Row indices split into at most ``n`` groups of consecutive subject positions, about equal
    in rows (a group starts at its smallest position)."""
    order = torch.argsort(cuts, stable=True)
    values = cuts[order]
    bounds = [0]
    for k in range(1, n):
        at = int(k * len(order) / n)
        # Never split rows of one position: move the bound to where the position changes.
        while 0 < at < len(order) and values[at] == values[at - 1]:
            at += 1
        if bounds[-1] < at < len(order):
            bounds.append(at)
    bounds.append(len(order))
    return [order[lo:hi] for lo, hi in itertools.pairwise(bounds) if hi > lo]


@dataclass(frozen=True)
class DeltaFit:
    """The fitted residual changes.

    Attributes:
        delta: δ per request.
        v0: the unedited value at the site, averaged over the request's rewrite rows (for the
            MLP site v₀ = W k̄ + b, so v* = v₀ + δ pairs with k̄).
        nll: the target's mean NLL per request when its fit stopped.
        steps: Adam steps taken per request (it stops on its own once its loss or NLL is low
            enough).
        real_tokens: positions run through the blocks above the layer, over all forward passes,
            that the loss depends on.
        padded_tokens: positions run that it does not (pad tokens; unchanged positions
            recomputed); 0 in the grouped layout.
    """

    delta: Float[Tensor, "request d_model"]
    v0: Float[Tensor, "request d_model"]
    nll: Float[Tensor, " request"]
    steps: tuple[int, ...]
    real_tokens: int = 0
    padded_tokens: int = 0

    @property
    def padding_share(self) -> float:
        """Padded positions as a share of every position run."""
        total = self.real_tokens + self.padded_tokens
        return self.padded_tokens / total if total else 0.0


def fit_deltas(
    lm: LensModel,
    layer: int,
    requests: Sequence[EditRequest],
    templates: Sequence[str],
    settings: FitSettings,
    *,
    site: str,
    key_dirs: Float[Tensor, "request d_mlp"] | None = None,
    reuse_prefix: bool = True,
    grouped: bool = True,
    pass_tokens: int | None = None,
) -> DeltaFit:
    """Fit, per request, the δ added after ``layer`` at ``site`` that makes the model say
    ``target_new``. Reads the model only (weights' gradients are switched off meanwhile).

    Requests are fitted in one batch but independently: each δ reaches only its own rows, Adam
    is elementwise, and each request stops on its own, so a δ does not depend on its
    batch-mates. The residual after ``layer`` is computed once; each step runs only the layers
    above it and unembeds only the positions the loss reads. ``site`` is ``"mlp_out"`` (ROME) or
    ``"resid_post"`` (MEMIT): adding δ to either is the same change to the residual.

    The loop follows ``settings``: with ``stop_on="loss"`` (ROME's ``compute_v``) a request stops
    once its total loss is below ``early_stop``, and the last of ``steps`` passes only checks
    (``steps - 1`` updates at most); with ``"nll"`` (MEMIT's config, which has no ``stop_on``) it
    stops on the target's NLL after up to ``steps`` updates. ``decay="rome"`` is compute_v's
    ‖δ‖/‖v₀‖² with v₀ the first template's row (the bare prompt), which also scales the clamp;
    ``"squared"`` is (‖δ‖/‖v̄₀‖)² with v̄₀ the mean over the rewrite rows.

    ``key_dirs`` (ROME's edit-aware fit): u = C⁻¹k̄ / (k̄ᵀC⁻¹k̄) per request. The rank-one update
    adds (k·u)·δ at every position with key k, so with ``key_dirs`` the fit adds exactly that
    and fits δ for the edit that will be installed; every position of every row is recomputed.

    ``reuse_prefix`` (without ``key_dirs``: δ then changes nothing before the subject's last
    token): each step recomputes only the positions from there on, attending to the unedited
    run's cached keys and values, and leaves out the rows of converged requests. ``grouped``:
    rows run in groups of one width, each over exactly the positions it needs (no padding);
    ``False`` is the padded layout of before issue 38 (for comparisons). A group holds the rows
    of every request in the call, so fitting many requests in one call makes the passes'
    matmuls larger; ``pass_tokens`` caps the positions of one pass (a larger group is split by
    rows). Every choice gives the same δ (to float rounding).
    """
    loop = _Loop.of(settings)
    batch = _batch(lm, requests, templates)
    suffix = reuse_prefix and key_dirs is None
    base = _unedited(lm, layer, batch, site, key_dirs, suffix)
    layout = _Layout(suffix=suffix, grouped=grouped, tokens=_Tokens(), pass_tokens=pass_tokens)
    delta = torch.zeros_like(base.v0, requires_grad=True)
    optimiser = torch.optim.Adam([delta], lr=loop.lr)
    scale = base.v0_first if loop.decay == "rome" else base.v0
    max_norm = loop.clamp_norm * scale.norm(dim=-1)
    active = torch.ones(batch.n_requests, dtype=torch.bool, device=lm.device)
    steps = torch.zeros(batch.n_requests, dtype=torch.long)
    nll = torch.full((batch.n_requests,), float("inf"), device=lm.device)
    params = [p for p in lm.model.parameters() if p.requires_grad]
    try:
        for p in params:  # gradients are needed for δ only
            p.requires_grad_(False)
        for step in range(loop.steps):
            optimiser.zero_grad()
            loss, step_nll = _losses(lm, layer, batch, base, delta, loop, active, layout)
            nll = torch.where(active, step_nll.detach(), nll)
            watched = loss if loop.stop_on == "loss" else step_nll
            active &= watched.detach() >= loop.stop_below
            logger.debug("step %d: nll %s", step, [round(v, 3) for v in nll.tolist()])
            if not bool(active.any()) or (loop.stop_on == "loss" and step == loop.steps - 1):
                break
            torch.where(active, loss, 0.0).sum().backward()
            _masked_step(optimiser, delta, active, max_norm)
            steps += active.cpu().long()
    finally:
        for p in params:
            p.requires_grad_(True)
    tokens = layout.tokens
    return DeltaFit(delta.detach(), base.v0, nll, tuple(steps.tolist()), tokens.real, tokens.padded)


def _masked_step(optimiser: torch.optim.Optimizer, delta: Tensor, active: Tensor, max_norm: Tensor) -> None:
    """One Adam step for the active requests only, then the norm clamp.

    A converged request has no gradient, but Adam's momentum would still move it: keep its δ.
    """
    kept = delta.detach().clone()
    optimiser.step()
    with torch.no_grad():
        delta[~active] = kept[~active]
        norms = delta.norm(dim=-1)
        scale = torch.where(norms > max_norm, max_norm / norms.clamp_min(1e-12), torch.ones_like(norms))
        delta.mul_(scale[:, None])

"""ROME: rank-one model editing of one MLP output projection (Meng et al. 2022, "Locating and
Editing Factual Associations in GPT").

k* is the subject's last-token key averaged over generated context prefixes; v* is optimised so
that the model predicts the new target; the update ΔW = C⁻¹k* (v* − W k*)ᵀ / (k*ᵀC⁻¹k*) uses the
same averaged k* in numerator and denominator (the fix for the "disabling edits" of kmeng01/rome
PR 44). Works on any HookedTransformer; the edit changes the model's weights in place.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from lmsci_mi.editing.handle import EditHandle
from lmsci_mi.editing.requests import EditRequest
from lmsci_mi.editing.stats import DEFAULT_STATS_TOKENS, KeyStatistics, StatsConfig, key_statistics
from lmsci_mi.model import LensModel

__all__ = [
    "DEFAULT_ROME_LAYER_FRACTION",
    "ROMEHyperParams",
    "context_templates",
    "default_rome_layer",
    "rome_edit",
    "rome_update",
]

logger = logging.getLogger(__name__)

DEFAULT_ROME_LAYER_FRACTION = 0.15
"""Default ROME layer as a fraction of depth when no layer and no trace is given (layer 4 of
SmolLM2's 30: the early-MLP band where the trace and our layer sweep put subject recall; see
docs/editing.md)."""


@dataclass(frozen=True)
class ROMEHyperParams:
    """ROME's settings (defaults after the paper's code, adjusted for SmolLM2 where noted).

    Attributes:
        n_contexts: generated context prefixes for k* and v* (the bare prompt is added; ROME uses 20).
        context_lengths: token lengths of the generated prefixes, cycled.
        steps: Adam steps for v*; lr: Adam learning rate.
        early_stop_nll: stop once the target's mean NLL is below this.
        kl_factor: weight of the KL term on "{subject} is a" prompts.
        weight_decay: weight of (‖δ‖/‖v₀‖)².
        clamp_norm: ‖δ‖ is clamped to ``clamp_norm``·‖v₀‖.
        damping: ridge added to C as a fraction of its mean diagonal, for stability.
        seed: seed for the context prefixes.
        edit_aware: fit δ through the rank-one update that will be installed (each position
            gets (k·u)·δ, u = C⁻¹k̄/(k̄ᵀC⁻¹k̄)) rather than as δ at the subject's last token.
    """

    # 5 rather than 10: on SmolLM2 it halves the cost of an edit (≤ 15 s) with the same ES/PS
    # on the 30-fact evaluation (docs/editing.md).
    n_contexts: int = 5
    context_lengths: tuple[int, ...] = (5, 10)
    steps: int = 40
    lr: float = 0.5
    early_stop_nll: float = 0.05
    kl_factor: float = 0.0625
    weight_decay: float = 0.05
    clamp_norm: float = 4.0
    damping: float = 1e-4
    seed: int = 0
    edit_aware: bool = True


# ---------------------------------------------------------------------- context prefixes

_CONTEXT_STARTS = ("The", "Therefore", "Because", "I", "You")

_CONTEXT_CACHE: dict[tuple[int, str, int, tuple[int, ...], int], tuple[str, ...]] = {}


@torch.no_grad()
def context_templates(
    lm: LensModel, n: int = 10, lengths: Sequence[int] = (5, 10), *, seed: int = 0
) -> tuple[str, ...]:
    """``"{}"`` plus ``n`` templates ``"<generated text>. {}"`` sampled from the model (top-5).

    Each prefix starts from one of "The", "Therefore", "Because", "I", "You" and is sampled with
    a seed that does not touch the global RNG; the result is cached per model. Reads the model only.

    >>> from lmsci_mi import load_model
    >>> t = context_templates(load_model("toy-2l"), 2, seed=0)
    >>> len(t), t[0], t[1].endswith(". {}")
    (3, '{}', True)
    """
    key = (id(lm.model), lm.name, n, tuple(lengths), seed)
    if key in _CONTEXT_CACHE:
        return _CONTEXT_CACHE[key]
    tokenizer = lm._require_tokenizer()
    templates = ["{}"]
    # Sampling from the sink alone gives an instruction-tuned model's chat debris ("-_n_n"), so
    # each prefix starts from a common word, as MEMIT's code does.
    starts = [lm.encode(word) for word in _CONTEXT_STARTS]
    devices = [lm.device] if lm.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        for i, length in enumerate(lengths):
            count = n // len(lengths) + (1 if i < n % len(lengths) else 0)
            batch = [starts[j % len(starts)] for j in range(count)]
            # One generate call per group of equal-length starts (no padding, so no shifted positions).
            groups: dict[int, list[list[int]]] = {}
            for ids in batch:
                groups.setdefault(len(ids), []).append(ids)
            for group in groups.values():
                start = torch.tensor(group, dtype=torch.long, device=lm.device)
                out = lm.model.generate(
                    start,
                    max_new_tokens=length,
                    do_sample=True,
                    top_k=5,
                    stop_at_eos=False,
                    verbose=False,
                )
                assert isinstance(out, torch.Tensor)  # token ids in, token ids out
                for row in out.tolist():
                    text = tokenizer.decode(row[1:], skip_special_tokens=True)
                    # Braces would break str.format; newlines and stray spaces would change how
                    # the subject after the prefix is tokenised.
                    text = " ".join(text.replace("{", " ").replace("}", " ").split())
                    templates.append(f"{text}. {{}}" if text else "{}")
    result = tuple(templates)
    _CONTEXT_CACHE[key] = result
    return result


# ---------------------------------------------------------------------- shared machinery


def default_rome_layer(lm: LensModel) -> int:
    """The layer ROME edits when none is given and no causal trace is asked for."""
    return max(0, min(lm.cfg.n_layers - 1, round(DEFAULT_ROME_LAYER_FRACTION * lm.cfg.n_layers)))


@dataclass(frozen=True)
class _Row:
    """One tokenised sequence: ids, the subject's last position, and target positions."""

    ids: list[int]
    subject_last: int
    target_start: int  # position whose logits predict the first target token; -1 for KL rows


def _subject_row(
    lm: LensModel, template: str, prompt: str, subject: str, target_ids: Sequence[int]
) -> _Row:
    """Tokenise ``template`` ⊕ prompt(subject) ⊕ target[:-1] and locate the subject's last token.

    The subject's character span is known from where it is inserted (it may also occur in a
    generated prefix), and token offsets map it to positions; the target is tokenised on its own
    as a continuation (leading space, no special tokens) so no sink lands inside it.
    """
    tokenizer = lm._require_tokenizer()
    head, tail = prompt.split("{}", 1)
    outer_head, outer_tail = template.split("{}", 1)
    text = outer_head + head + subject + tail + outer_tail
    start = len(outer_head) + len(head)
    end = start + len(subject)
    encoded = tokenizer(text, add_special_tokens=True, return_offsets_mapping=True)
    ids = lm.encode(text)
    shift = len(ids) - len(encoded["input_ids"])
    hits = [
        i + shift
        for i, (s, e) in enumerate(encoded["offset_mapping"])
        if e > s and s < end and e > start
    ]
    if not hits:
        raise ValueError(f"subject {subject!r} covers no token of {text!r}")
    full = ids + list(target_ids[:-1])
    return _Row(ids=full, subject_last=hits[-1], target_start=len(ids) - 1 if target_ids else -1)


def _target_ids(lm: LensModel, target: str) -> list[int]:
    ids = list(lm._require_tokenizer()(target, add_special_tokens=False)["input_ids"])
    if not ids:
        raise ValueError(f"target {target!r} has no tokens")
    return ids


def _pad(rows: Sequence[_Row], device: torch.device) -> Tensor:
    """Right-pad (causal attention: padding after a row's tokens cannot change them; rotary
    positions stay those of the unpadded row, unlike left padding)."""
    width = max(len(r.ids) for r in rows)
    return torch.tensor([r.ids + [r.ids[-1]] * (width - len(r.ids)) for r in rows], device=device)


def validate_layer(lm: LensModel, layer: int) -> None:
    n = lm.cfg.n_layers
    if not isinstance(layer, int) or isinstance(layer, bool) or not 0 <= layer < n:
        raise ValueError(f"layer {layer!r} is out of range for {lm.name}: it has layers 0…{n - 1}")
    if lm.cfg.d_mlp is None or f"blocks.{layer}.mlp.hook_post" not in lm.model.hook_dict:
        raise ValueError(f"layer {layer} of {lm.name} has no MLP with a hook_post key site")


@torch.no_grad()
def _keys(lm: LensModel, layer: int, rows: Sequence[_Row]) -> Float[Tensor, "row d_mlp"]:
    """MLP keys (``hook_post``) at each row's subject-last position; runs only up to ``layer``."""
    tokens = _pad(rows, lm.device)
    site = f"blocks.{layer}.mlp.hook_post"
    with lm.hooks.capture(site) as cap:
        lm.model(tokens, stop_at_layer=layer + 1)
    index = torch.tensor([r.subject_last for r in rows], device=lm.device)
    return cap[site][torch.arange(len(rows), device=lm.device), index].float()


def _unembed(lm: LensModel, resid: Tensor) -> Tensor:
    """Logits from final-layer residuals (ln_final, unembed, soft cap), for selected positions only."""
    model = lm.model
    if model.cfg.normalization_type is not None:
        resid = model.ln_final(resid)
    logits = model.unembed(resid).float()
    cap = getattr(model.cfg, "output_logits_soft_cap", -1.0)
    return cap * torch.tanh(logits / cap) if cap and cap > 0 else logits


def _optimise_delta(
    lm: LensModel,
    layer: int,
    request: EditRequest,
    templates: Sequence[str],
    hp: ROMEHyperParams,
    *,
    site: str,
    key_dir: Float[Tensor, " d_mlp"] | None = None,
) -> tuple[Float[Tensor, " d_model"], Float[Tensor, " d_model"]]:
    """:func:`_optimise_deltas` for one request."""
    dirs = None if key_dir is None else key_dir[None]
    deltas, v0 = _optimise_deltas(lm, layer, [request], templates, hp, site=site, key_dirs=dirs)
    return deltas[0], v0[0]


def _optimise_deltas(
    lm: LensModel,
    layer: int,
    requests: Sequence[EditRequest],
    templates: Sequence[str],
    hp: ROMEHyperParams,
    *,
    site: str,
    key_dirs: Float[Tensor, "request d_mlp"] | None = None,
) -> tuple[Float[Tensor, "request d_model"], Float[Tensor, "request d_model"]]:
    """Find, per request, δ added at ``layer`` (after its MLP) at the subject's last token that
    makes the model say ``target_new``: mean per-token NLL + KL on "{subject} is a" + weight
    decay, Adam, norm clamp. Requests are optimised jointly but independently (each δ only
    reaches its own rows, and Adam is elementwise).

    The residual after ``layer`` is computed once without δ; each step runs only the layers above
    it (``start_at_layer``) and unembeds only the positions the loss reads. Adding δ to
    ``hook_mlp_out`` (ROME) or to ``hook_resid_post`` (MEMIT) of the same layer is the same
    change there.

    ``key_dirs`` (ROME): u = C⁻¹k̄ / (k̄ᵀC⁻¹k̄) per request. The rank-one update adds
    (k·u)·δ at every position with key k, not δ at the subject's last token only; with
    ``key_dirs`` the optimisation adds exactly that, so it fits δ for the edit that will be
    installed. Without it, a prompt whose key has k·u < 1 (the bare prompt often has, since k̄
    averages prefixed contexts) receives less than the δ that was optimised.

    Returns:
        (δ, v₀) per request: the optimised δ and the unedited value at the site averaged over the
        request's rewrite rows (for the MLP site v₀ = W k̄ + b, so v* = v₀ + δ pairs with k̄).
    """
    rows: list[_Row] = []
    owner: list[int] = []
    is_kl: list[bool] = []
    tok_row: list[int] = []
    tok_pos: list[int] = []
    tok_gold: list[int] = []
    tok_owner: list[int] = []
    for i, request in enumerate(requests):
        target = _target_ids(lm, request.target_new)
        for template in templates:
            row = _subject_row(lm, template, request.prompt, request.subject, target)
            for j, token in enumerate(target):
                tok_row.append(len(rows))
                tok_pos.append(row.target_start + j)
                tok_gold.append(token)
                tok_owner.append(i)
            rows.append(row)
            owner.append(i)
            is_kl.append(False)
        rows.append(_subject_row(lm, "{}", "{} is a", request.subject, []))
        owner.append(i)
        is_kl.append(True)
    device = lm.device
    n_req = len(requests)
    tokens = _pad(rows, device)
    arange = torch.arange(len(rows), device=device)
    last = torch.tensor([r.subject_last for r in rows], device=device)
    owner_t = torch.tensor(owner, device=device)
    kl_rows = torch.tensor([i for i, k in enumerate(is_kl) if k], device=device)
    rw_mask = ~torch.tensor(is_kl, device=device)
    tok_row_t, tok_pos_t = (
        torch.tensor(tok_row, device=device),
        torch.tensor(tok_pos, device=device),
    )
    tok_gold_t, tok_owner_t = (
        torch.tensor(tok_gold, device=device),
        torch.tensor(tok_owner, device=device),
    )
    tok_count = torch.zeros(n_req, device=device).index_add_(
        0, tok_owner_t, torch.ones(len(tok_owner), device=device)
    )

    names = [f"blocks.{layer}.hook_resid_post", f"blocks.{layer}.{site}"]
    if key_dirs is not None:
        names.append(f"blocks.{layer}.mlp.hook_post")
    n_layers = lm.cfg.n_layers
    with torch.no_grad(), lm.hooks.capture(names) as cap:
        final = lm.model(tokens, stop_at_layer=n_layers)
        init_kl = _unembed(lm, final[kl_rows, last[kl_rows]]).log_softmax(-1)
    resid = cap[names[0]]
    at_site = cap[names[1]][arange, last].float()
    coef: Tensor | None = None
    if key_dirs is not None:  # [row, pos]: how much of δ the installed update adds there
        dirs = key_dirs.to(device=device, dtype=torch.float32)[owner_t]
        coef = torch.einsum("rpk,rk->rp", cap[names[2]].float(), dirs)
    v0 = torch.zeros(n_req, at_site.shape[-1], device=device).index_add_(
        0, owner_t[rw_mask], at_site[rw_mask]
    )
    v0 = v0 / torch.bincount(owner_t[rw_mask], minlength=n_req)[:, None].float()

    delta = torch.zeros_like(v0, requires_grad=True)
    optimiser = torch.optim.Adam([delta], lr=hp.lr)
    max_norm = hp.clamp_norm * v0.norm(dim=-1)
    params = [p for p in lm.model.parameters() if p.requires_grad]
    try:
        for p in params:  # gradients are needed for δ only; skip the weights' grads
            p.requires_grad_(False)
        for step in range(hp.steps):
            optimiser.zero_grad()
            if coef is None:
                x = resid.clone()
                x[arange, last] = x[arange, last] + delta[owner_t].to(x.dtype)
            else:
                x = resid + (coef[..., None] * delta[owner_t][:, None, :]).to(resid.dtype)
            final = lm.model(x, start_at_layer=layer + 1, stop_at_layer=n_layers)
            log_probs = _unembed(lm, final[tok_row_t, tok_pos_t]).log_softmax(-1)
            token_nll = -log_probs.gather(-1, tok_gold_t[:, None]).squeeze(-1)
            nll = torch.zeros(n_req, device=device).index_add(0, tok_owner_t, token_nll) / tok_count
            kl_now = _unembed(lm, final[kl_rows, last[kl_rows]]).log_softmax(-1)
            kl = (kl_now.exp() * (kl_now - init_kl)).sum(-1)  # KL(current ‖ unedited), per request
            decay = (delta.norm(dim=-1) / v0.norm(dim=-1)) ** 2
            loss = (nll + hp.kl_factor * kl + hp.weight_decay * decay).sum()
            logger.debug(
                "step %d: nll %s kl %.4f",
                step,
                [round(v, 3) for v in nll.tolist()],
                kl.mean().item(),
            )
            if bool((nll < hp.early_stop_nll).all()):
                break
            loss.backward()
            optimiser.step()
            with torch.no_grad():
                norms = delta.norm(dim=-1)
                scale = torch.where(
                    norms > max_norm, max_norm / norms.clamp_min(1e-12), torch.ones_like(norms)
                )
                delta.mul_(scale[:, None])
    finally:
        for p in params:
            p.requires_grad_(True)
    return delta.detach(), v0


def _solve(c: Tensor, rhs: Tensor, damping: float) -> Tensor:
    """(C + damping·mean(diag C)·I)⁻¹ rhs in float64, by a solve, never an inverse."""
    c = c.double()
    ridge = damping * c.diagonal().mean()
    eye = torch.eye(c.shape[0], dtype=c.dtype, device=c.device)
    return torch.linalg.solve(c + ridge * eye, rhs.double().to(c.device))


def rome_update(
    c: Float[Tensor, "d_mlp d_mlp"],
    key: Float[Tensor, " d_mlp"],
    residual: Float[Tensor, " d_model"],
    *,
    damping: float = 1e-4,
) -> Float[Tensor, "d_mlp d_model"]:
    """ROME's rank-one ΔW_out = C⁻¹k (r)ᵀ / (kᵀC⁻¹k), float64, with one key ``k`` throughout.

    Using the same key in numerator and denominator makes ``k @ ΔW == r`` exactly: the edited
    layer maps k̄ to v* (the original code's k₀ in the denominator breaks that, kmeng01/rome PR 44).

    >>> c = torch.eye(3, dtype=torch.float64)
    >>> k, r = torch.tensor([1.0, 2.0, 0.0]), torch.tensor([0.5, -1.0])
    >>> torch.allclose(k.double() @ rome_update(c, k, r), r.double())
    True
    """
    c_inv_k = _solve(c, key, damping)
    return torch.outer(c_inv_k / (c_inv_k @ key.double()), residual.double())


def _check_requests(lm: LensModel, requests: Sequence[EditRequest]) -> None:
    if not requests:
        raise ValueError("no edit requests given")
    for request in requests:
        if not isinstance(request, EditRequest):
            raise TypeError(f"expected EditRequest, got {type(request).__name__}")
        request.validate(lm)


# ---------------------------------------------------------------------- ROME


def rome_edit(
    lm: LensModel,
    request: EditRequest,
    *,
    layer: int | None = None,
    stats: KeyStatistics | None = None,
    stats_tokens: int = DEFAULT_STATS_TOKENS,
    hparams: ROMEHyperParams | None = None,
) -> EditHandle:
    """Rewrite one fact with ROME. **Changes ``lm``'s weights in place** (one ``W_out``).

    Everything is validated before any weight is touched: a subject missing from the prompt, an
    empty target or a layer out of range raise ``ValueError`` and leave the model as it was.

    Args:
        lm: the model to edit.
        request: the fact to rewrite.
        layer: the MLP whose ``W_out`` is edited. ``None`` runs an MLP causal trace on the
            rewrite prompt (``lmsci_mi.circuits.causal_trace``) and takes its peak layer; if
            tracing is unavailable, :func:`default_rome_layer`.
        stats: key statistics for ``layer`` (default: :func:`key_statistics`, cached on disk).
        stats_tokens: text tokens for the statistics when they must be computed.
        hparams: :class:`ROMEHyperParams`.

    Returns:
        An :class:`EditHandle`; ``handle.restore()`` (or leaving ``with``) restores the weights.

    >>> import tempfile
    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> stats = key_statistics(lm, 1, StatsConfig(n_tokens=512), cache_dir=tempfile.mkdtemp())
    >>> req = EditRequest("{} is located in the city of", "The Eiffel Tower", " Rome", " Paris")
    >>> with rome_edit(lm, req, layer=1, stats=stats, hparams=ROMEHyperParams(n_contexts=2, steps=3)) as h:
    ...     h.layers
    (1,)
    """
    hp = hparams or ROMEHyperParams()
    _check_requests(lm, [request])
    if layer is not None:
        validate_layer(lm, layer)
    if stats is not None and layer is not None and layer not in stats.layers:
        raise ValueError(f"the statistics given cover layers {stats.layers}, not layer {layer}")
    begin = time.perf_counter()
    if layer is None:
        layer = _traced_layer(lm, request)
        validate_layer(lm, layer)
    if stats is None or layer not in stats.layers:
        stats = key_statistics(lm, layer, StatsConfig(n_tokens=stats_tokens))

    templates = context_templates(lm, hp.n_contexts, hp.context_lengths, seed=hp.seed)
    target = _target_ids(lm, request.target_new)
    rows = [_subject_row(lm, t, request.prompt, request.subject, target) for t in templates]
    k_bar = _keys(lm, layer, rows).mean(0)
    c = stats.for_layer(layer)
    c_inv_k = _solve(c, k_bar, hp.damping)
    key_dir = (c_inv_k / (c_inv_k @ k_bar.double())).float() if hp.edit_aware else None
    delta, _ = _optimise_delta(
        lm, layer, request, templates, hp, site="hook_mlp_out", key_dir=key_dir
    )

    # v* = v₀ + δ with v₀ = W k̄ + b (the mean output over the same rows), so the residual the
    # update must add at k̄ is exactly δ; k̄ is used in both numerator and denominator.
    weight = lm.model.blocks[layer].mlp.W_out
    update = rome_update(c, k_bar, delta, damping=hp.damping).to(weight.dtype)
    seconds = time.perf_counter() - begin
    logger.info("ROME edit at layer %d: ‖δ‖ %.2f, %.1f s", layer, delta.norm().item(), seconds)
    handle = EditHandle(
        lm,
        {f"blocks.{layer}.mlp.W_out": update},
        method="rome",
        requests=[request],
        seconds=seconds,
    )
    return handle.apply()


def _traced_layer(lm: LensModel, request: EditRequest) -> int:
    """The MLP layer where restoring the subject's last token recovers the answer most."""
    try:
        from lmsci_mi.circuits import causal_trace
    except ImportError:  # an install without the circuits package
        layer = default_rome_layer(lm)
        logger.info("causal tracing unavailable; using the default ROME layer %d", layer)
        return layer
    trace = causal_trace(lm, request.rewrite_prompt, request.subject, kinds=("mlp",))
    layer = int(trace.peak_layer(kind="mlp"))
    logger.info("causal trace of %r: MLP peak at layer %d", request.rewrite_prompt, layer)
    return layer

"""MEMIT: many fact edits at once, spread over a range of MLP layers (Meng et al. 2023,
"Mass-Editing Memory in a Transformer").

For each request a residual change δ at the last layer of the range is fitted (as ROME's v*);
then, layer by layer, the remaining residual is split evenly over the layers left and installed by
a least-squares update ΔW = (λC + KKᵀ)⁻¹ K Rᵀ, solved in float64. Changes the weights in place.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import field
from typing import Any, ClassVar

import torch
from jaxtyping import Float
from torch import Tensor
from tqdm.auto import tqdm

from lmsci_mi._deprecation import renamed
from lmsci_mi.cache import cache_key, cache_root, weights_fingerprint
from lmsci_mi.config import Config, config, paper
from lmsci_mi.editing.fit import (
    DeltaFit,
    SubjectRow,
    check_layer,
    check_requests,
    context_templates,
    fit_deltas,
    subject_activations,
    subject_row,
)
from lmsci_mi.editing.handle import EditHandle
from lmsci_mi.editing.methods import EDITING_METHODS
from lmsci_mi.editing.requests import EditRequest
from lmsci_mi.editing.stats import (
    DEFAULT_STATS_TOKENS,
    KeyStatistics,
    StatsConfig,
    check_statistics,
    key_statistics,
)
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.sites import weight_name

__all__ = [
    "LayerSolver",
    "MEMITConfig",
    "checked_layers",
    "default_memit_layers",
    "memit_edit",
    "memit_targets",
    "spread_edit",
]

logger = logging.getLogger(__name__)

__getattr__ = renamed(__name__, {"MEMITHyperParams": "MEMITConfig"})  # the old name, deprecated


_CODE = "Meng et al. 2023 (MEMIT), code: kmeng01/memit"
_HPARAMS = f"{_CODE} hparams/MEMIT/gpt2-xl.json and EleutherAI_gpt-j-6B.json"
_COMPUTE_Z = f"{_CODE} memit/compute_z.py"


def _as_paper(default: Any, help: str, source: str, **rules: Any) -> Any:
    """A field whose default is the paper's value, declared with its source."""
    return field(default=default, metadata={"help": help, **rules, **paper(default, source)})


@config
class MEMITConfig(Config):
    """MEMIT's settings: the paper's code (kmeng01/memit ``compute_z``, GPT-2 XL and GPT-J
    hparams) for the δ fit; λ checked on SmolLM2.

    Attributes:
        layers: the MLP layers to spread the edit over (None: :func:`default_memit_layers`).
        n_contexts: generated prefixes (MEMIT uses 5 of 10 tokens, plus the bare prompt).
        context_lengths: their token lengths.
        steps, lr, kl_factor, weight_decay: as in ROME's config (compute_z is compute_v's loop).
        early_stop_nll: stop a request once what ``stop_on`` watches is below this.
        stop_on: ``"loss"`` (the total loss, compute_z) or ``"nll"`` (the target's mean NLL,
            this library's MEMIT before issue 38).
        decay: ``"rome"``: ‖δ‖/‖h₀‖², h₀ the bare prompt's residual (compute_z's
            ``target_init``); ``"squared"``: (‖δ‖/‖h̄₀‖)², h̄₀ the mean over the rewrite rows
            (before issue 38). The clamp is against the same h₀.
        clamp_norm: ‖δ‖ ≤ clamp_norm·‖h₀‖ (h₀ = the residual at the last layer).
        mom2_weight: λ in λC + KKᵀ: how strongly the keys of ordinary text are preserved
            against installing the batch. The paper's 15000 (GPT-J; 20000 for GPT-2 XL, batches
            of up to 10,000 edits) installs fewer facts of a 50-fact SmolLM2 batch and scores a
            lower S than 5000, for a higher NS (the λ sweep, docs/data/editing_sweeps.json).
        seed: seed for the prefixes.
        batch_size: requests whose δ are fitted in one call: their rows of one width share a
            pass through the blocks, so more requests make larger matmuls (docs/editing.md, Cost).
        pass_tokens: most positions one pass runs (a larger width group is split by rows): a
            bound on the memory the backward keeps.
        reuse_prefix: each fit step recomputes only the positions from the subject's last token
            on, and only for requests not yet converged (the same δ; off: every position of
            every row, the slower way it was done before).
        cache_fits: keep each request's fitted δ on disk, keyed by the weights, the request and
            the fit settings, and read it back instead of fitting again (MEMIT then AlphaEdit on
            the same facts, or a resumed benchmark, fit each request once).
        stats_tokens: text tokens for the key statistics when they must be computed.
    """

    one_fact_per_edit: ClassVar[bool] = False

    layers: tuple[int, ...] | None = field(
        default=None,
        metadata={"help": "MLP layers (none: default range)", "ge": 0, "min_length": 1,
                  **paper("3…8 of 28 (GPT-J), 13…17 of 48 (GPT-2 XL)", _HPARAMS + " layers",
                          why="default_memit_layers: 2…6 of 30, the band after the causal trace's "
                              "early-MLP peak; no layer sweep yet")},
    )
    n_contexts: int = _as_paper(5, "generated context prefixes",
                                f"{_CODE} memit/memit_main.py get_context_templates: [(10, 5)]", ge=1)
    context_lengths: tuple[int, ...] = _as_paper(
        (10,), "prefix lengths", f"{_CODE} memit/memit_main.py get_context_templates: [(10, 5)]",
        ge=1, min_length=1,
    )
    steps: int = _as_paper(20, "forward passes of the delta fit",
                           _HPARAMS + " v_num_grad_steps (GPT-2 XL; GPT-J 25)", ge=1)
    lr: float = _as_paper(0.5, "Adam learning rate", _HPARAMS + " v_lr", gt=0)
    early_stop_nll: float = _as_paper(0.05, "stop below this (see --stop-on)",
                                      f"{_COMPUTE_Z}: if loss < 5e-2: break", ge=0)
    stop_on: str = _as_paper("loss", "what early_stop_nll watches: loss (total) or nll (target)",
                             f"{_COMPUTE_Z}: the total loss", choices=("loss", "nll"))
    kl_factor: float = _as_paper(0.0625, "weight of the KL term", _HPARAMS + " kl_factor", ge=0)
    weight_decay: float = _as_paper(0.5, "weight of the decay term", _HPARAMS + " v_weight_decay", ge=0)
    decay: str = _as_paper("rome", "rome: |delta|/|h0|^2 (compute_z); squared: (|delta|/|mean h0|)^2",
                           f"{_COMPUTE_Z}: norm(delta) / norm(target_init) ** 2",
                           choices=("rome", "squared"))
    clamp_norm: float = _as_paper(0.75, "|delta| <= clamp_norm*|h0|", _HPARAMS + " clamp_norm_factor", gt=0)
    mom2_weight: float = field(
        default=5000.0,
        metadata={"help": "lambda in lambda*C + K K^T (AlphaEdit does not use it)", "ge": 0,
                  **paper(15000.0, "Meng et al. 2023 (MEMIT), code: kmeng01/memit hparams/MEMIT/"
                          "EleutherAI_gpt-j-6B.json mom2_update_weight (gpt2-xl.json: 20000)",
                          why="docs/data/editing_sweeps.json (benchmarks/editing_sweeps.py)")},
    )
    seed: int = field(default=0, metadata={"help": "seed of the context prefixes"})
    batch_size: int = field(default=64, metadata={"help": "requests fitted together", "ge": 1})
    pass_tokens: int = field(default=1024, metadata={"help": "most positions per fit pass", "ge": 1})
    reuse_prefix: bool = field(
        default=True,
        metadata={"help": "fit steps recompute only from the subject's last token (exact)"},
    )
    cache_fits: bool = field(
        default=False, metadata={"help": "cache each request's fitted delta on disk"}
    )
    stats_tokens: int = field(
        default=DEFAULT_STATS_TOKENS, metadata={"help": "text tokens for C", "ge": 1}
    )


MEMIT_TOP_FRACTION = 0.15
"""MEMIT's top layer is two above this fraction of depth: layers 2…6 on SmolLM2's 30 (the band
after the early-MLP layer the causal trace first suggested; kept on its own when ROME's default
moved to its layer sweep, so that MEMIT's results do not change with it)."""


def default_memit_layers(lm: LensModel) -> tuple[int, ...]:
    """Five consecutive layers ending two above 15 % of depth: 2…6 on SmolLM2's 30."""
    top = min(lm.cfg.n_layers - 1, round(MEMIT_TOP_FRACTION * lm.cfg.n_layers) + 2)
    return tuple(range(max(0, top - 4), top + 1))


def memit_edit(
    lm: LensModel,
    requests: Sequence[EditRequest],
    config: MEMITConfig | None = None,
    *,
    stats: KeyStatistics | None = None,
    targets: Tensor | None = None,
) -> EditHandle:
    """Install many facts at once with MEMIT. **Changes ``lm``'s weights in place** (one
    ``W_out`` per layer of the range).

    All requests and layers are validated before any weight changes.

    Args:
        lm: the model.
        requests: the facts (distinct subjects work best, as in the paper).
        config: :class:`MEMITConfig` (its ``layers`` pick the range).
        stats: key statistics covering the layers (default: computed or read from the cache).
        targets: the requests' target residuals from :func:`memit_targets` (same model, layers
            and fit settings), to solve again without fitting; None fits them.

    Returns:
        An :class:`EditHandle` holding one delta per layer; ``restore()`` undoes all of them.
        ``details`` report the δ fits: requests fitted (not read from ``cache_fits``), their
        Adam steps, and the positions run above the top layer (``real_tokens``,
        ``padded_tokens``).

    >>> import tempfile
    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> stats = key_statistics(lm, [0, 1], StatsConfig(n_tokens=512), cache_dir=tempfile.mkdtemp())
    >>> reqs = [EditRequest("{} is in", s, t) for s, t in [("Paris", " Rome"), ("Berlin", " Oslo")]]
    >>> with memit_edit(lm, reqs, MEMITConfig(layers=(0, 1), steps=2), stats=stats) as h:
    ...     h.layers
    (0, 1)
    """
    hp = config or MEMITConfig()
    requests = list(requests)
    begin = time.perf_counter()
    layers, stats = checked_layers(lm, requests, hp, stats)

    def solve(layer: int, keys: Tensor, remaining: Tensor) -> Tensor:
        c = stats.for_layer(layer).double().to(keys.device)
        return torch.linalg.solve(hp.mom2_weight * c + keys.T @ keys, keys.T @ remaining)

    handles = spread_edit(lm, requests, layers, hp, solve, targets=targets)
    handle = EditHandle.combine(
        handles, method="memit", requests=requests, seconds=time.perf_counter() - begin
    )
    handle.details.update(handles[0].details)
    return handle


LayerSolver = Callable[[int, Tensor, Tensor], Tensor]
"""``(layer, keys [request, d_mlp], residual [request, d_model]) -> ΔW_out [d_mlp, d_model]``,
in float64: how a MEMIT-family method turns one layer's keys and residual into its update."""


def checked_layers(
    lm: LensModel, requests: Sequence[EditRequest], hp: MEMITConfig,
    stats: KeyStatistics | None,
) -> tuple[list[int], KeyStatistics]:
    """The layer range and its key statistics, after every check (nothing is changed yet).

    Raises:
        ValueError: a bad request or layer, or statistics of another model or other layers.
    """
    check_requests(lm, requests)
    layers = sorted(set(hp.layers if hp.layers is not None else default_memit_layers(lm)))
    for layer in layers:
        check_layer(lm, layer)
    if stats is not None:
        check_statistics(lm, stats, layers)
    else:
        stats = key_statistics(lm, layers, StatsConfig(n_tokens=hp.stats_tokens))
    return layers, stats


def memit_targets(
    lm: LensModel,
    requests: Sequence[EditRequest],
    config: MEMITConfig | None = None,
    *,
    layers: Sequence[int] | None = None,
) -> Float[Tensor, "request d_model"]:
    """MEMIT's target residuals z = h + δ at the top layer of the range, one per request: the
    fit, most of an edit's cost. No solver setting (λ, AlphaEdit's projection and α) changes
    them, so several settings can be solved from one fit (``memit_edit(..., targets=z)``).
    Reads the model only.

    Args:
        lm: the model.
        requests: the facts.
        config: the fit settings (:class:`MEMITConfig` or :class:`AlphaEditConfig`).
        layers: the range (default: ``config.layers``, else :func:`default_memit_layers`).

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> memit_targets(lm, [EditRequest("{} is in", "Paris", " Rome")], MEMITConfig(steps=2), layers=(0, 1)).shape
    torch.Size([1, 64])
    """
    hp = config or MEMITConfig()
    requests = list(requests)
    check_requests(lm, requests)
    chosen = layers if layers is not None else hp.layers or default_memit_layers(lm)
    top = max(chosen)
    check_layer(lm, top)
    return _fit_targets(lm, requests, hp, top)[0]


def _fit_targets(
    lm: LensModel, requests: Sequence[EditRequest], hp: MEMITConfig, top: int
) -> tuple[Tensor, dict[str, object]]:
    """z = h + δ at layer ``top`` for every request, and the fit's report (steps, positions)."""
    templates = context_templates(lm, hp.n_contexts, hp.context_lengths, seed=hp.seed)
    plain = [subject_row(lm, "{}", r.prompt, r.subject, lm.continuation_ids(r.target_new)) for r in requests]
    deltas, summary = _fit_top_deltas(lm, top, requests, templates, hp)
    return subject_activations(lm, "resid_post", top, plain) + deltas, summary


def spread_edit(
    lm: LensModel, requests: Sequence[EditRequest], layers: Sequence[int], hp: MEMITConfig,
    solve: LayerSolver, *, targets: Tensor | None = None,
) -> list[EditHandle]:
    """MEMIT's pipeline with a given per-layer solver: fit each request's residual change at the
    top layer (or take the given ``targets``, :func:`memit_targets`), then install it layer by
    layer (:func:`_spread`). Returns the applied per-layer handles (restored, all of them, on
    error); when it fits, the first one's ``details`` report the fit.

    Raises:
        ValueError: ``targets`` is not one ``d_model`` vector per request.
    """
    templates = context_templates(lm, hp.n_contexts, hp.context_lengths, seed=hp.seed)
    plain = [subject_row(lm, "{}", r.prompt, r.subject, lm.continuation_ids(r.target_new)) for r in requests]
    summary: dict[str, object] = {}
    if targets is None:
        targets, summary = _fit_targets(lm, requests, hp, layers[-1])
    elif tuple(targets.shape) != (len(requests), lm.cfg.d_model):
        raise UserInputError(
            f"targets must be [request, d_model] = [{len(requests)}, {lm.cfg.d_model}], not "
            f"{list(targets.shape)}: pass memit_targets(lm, requests, config) of the same requests"
        )
    handles = _spread(lm, requests, templates, targets.to(lm.device), plain, layers, solve)
    handles[0].details.update(summary)  # the first layer's handle carries the fit's report
    return handles


@EDITING_METHODS.register("memit", MEMITConfig, "many facts in one edit, spread over MLP layers")
def memit_requests(
    lm: LensModel,
    requests: Sequence[EditRequest],
    config: MEMITConfig,
    *,
    stats: KeyStatistics | None = None,
) -> EditHandle:
    """The registry's entry for MEMIT: :func:`memit_edit`."""
    return memit_edit(lm, requests, config, stats=stats)


def _fit_top_deltas(
    lm: LensModel, top: int, requests: Sequence[EditRequest], templates: Sequence[str],
    hp: MEMITConfig,
) -> tuple[Float[Tensor, "request d_model"], dict[str, Any]]:
    """δ per request on the top layer's residual, fitted in batches of ``hp.batch_size``, and
    what the fits report (:func:`_fit_summary`).

    A request's δ depends only on the weights, the request, the prefixes and the fit settings
    (it never sees its batch-mates), so with ``hp.cache_fits`` each is cached on disk under
    those: MEMIT and AlphaEdit on the same facts, or a resumed run, fit each request once. An
    edited model has other weights, so a sequential session never reads a δ of the model before
    its edits."""

    def fit(chunk: Sequence[EditRequest]) -> DeltaFit:
        return fit_deltas(lm, top, chunk, templates, hp, site="resid_post", reuse_prefix=hp.reuse_prefix,
                          pass_tokens=hp.pass_tokens)

    if not hp.cache_fits:
        chunks = range(0, len(requests), hp.batch_size)
        fits = [fit(requests[s : s + hp.batch_size])
                for s in tqdm(chunks, desc="MEMIT targets", unit="batch", disable=len(chunks) < 2)]
        return torch.cat([f.delta for f in fits]), _fit_summary(fits)
    settings = {
        "version": 2, "top": top, "templates": list(templates),
        **{k: v for k, v in hp.params().items() if k in _FIT_FIELDS},
    }
    folder = cache_root() / "edit-fits" / cache_key(weights_fingerprint(lm), settings)
    paths = [folder / f"{cache_key(r.to_json())}.pt" for r in requests]
    missing = [i for i, path in enumerate(paths) if not path.exists()]
    chunks = range(0, len(missing), hp.batch_size)
    fits = []
    for start in tqdm(chunks, desc="MEMIT targets", unit="batch", disable=len(chunks) < 2):
        chunk = missing[start : start + hp.batch_size]
        fits.append(fit([requests[i] for i in chunk]))
        folder.mkdir(parents=True, exist_ok=True)
        for i, delta in zip(chunk, fits[-1].delta, strict=True):
            partial = paths[i].with_suffix(f".{os.getpid()}.partial")
            torch.save(delta.detach().cpu().clone(), partial)
            os.replace(partial, paths[i])  # never a half-written δ
    deltas = torch.stack([torch.load(path) for path in paths]).to(lm.device)
    return deltas, _fit_summary(fits)


def _fit_summary(fits: Sequence[DeltaFit]) -> dict[str, Any]:
    """What a MEMIT handle reports about the δ fits it ran (none for requests read from the
    cache): Adam steps per fitted request, and the positions run through the blocks above the
    top layer, real and padded."""
    return {"fitted": sum(len(f.steps) for f in fits), "fit_steps": [s for f in fits for s in f.steps],
            "real_tokens": sum(f.real_tokens for f in fits), "padded_tokens": sum(f.padded_tokens for f in fits)}


_FIT_FIELDS = ("n_contexts", "context_lengths", "steps", "lr", "early_stop_nll", "stop_on", "kl_factor",
               "weight_decay", "decay", "clamp_norm", "seed")
"""The settings a δ depends on (not the batch size, the pass size, the prefix reuse or the solve's
λ)."""


def _spread(
    lm: LensModel, requests: Sequence[EditRequest], templates: Sequence[str],
    targets: Tensor, plain: Sequence[SubjectRow], layers: Sequence[int], solve: LayerSolver,
) -> list[EditHandle]:
    """Install the target residuals layer by layer, ascending; each layer's update is applied
    before the next layer reads its keys. On error every update made so far is restored."""
    context_rows = [subject_row(lm, t, r.prompt, r.subject) for r in requests for t in templates]
    handles: list[EditHandle] = []
    try:
        for i, layer in enumerate(layers):
            # Keys and the remaining residual are re-read after each layer's update, so later
            # layers install what the earlier ones did not.
            keys = subject_activations(lm, "mlp_post", layer, context_rows)
            keys = keys.view(len(requests), len(templates), -1).mean(1).double()  # k̄ per request
            now = subject_activations(lm, "resid_post", layers[-1], plain)
            remaining = (targets - now).double() / (len(layers) - i)
            update = solve(layer, keys, remaining)
            weight = lm.model.blocks[layer].mlp.W_out
            deltas = {weight_name("W_out", layer): update.to(weight.dtype)}
            handles.append(EditHandle(lm, deltas, method="memit").apply())
            logger.info("MEMIT layer %d: ‖ΔW‖ %.3f", layer, update.norm().item())
    except BaseException:
        for handle in reversed(handles):
            handle.restore()
        raise
    return handles

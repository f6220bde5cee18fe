"""ROME: rank-one model editing of one MLP output projection (Meng et al. 2022, "Locating and
Editing Factual Associations in GPT").

k̄ is the subject's last-token key averaged over generated context prefixes; v* = v₀ + δ is fitted
so that the model predicts the new target; the update ΔW = C⁻¹k̄ δᵀ / (k̄ᵀC⁻¹k̄) uses the same k̄
in numerator and denominator (the fix for the "disabling edits" of kmeng01/rome PR 44), so the
edited layer maps k̄ to exactly v₀ + δ. The edit changes the model's weights in place.
"""

from __future__ import annotations

import functools
import logging
import time
import warnings
from collections.abc import Sequence
from dataclasses import field
from typing import Any, ClassVar

import torch
from jaxtyping import Float
from torch import Tensor

from lmsci_mi._deprecation import renamed
from lmsci_mi.config import Config, config, paper
from lmsci_mi.editing.fit import (
    DeltaFit,
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
    "DEFAULT_ROME_LAYER_FRACTION",
    "MIN_TRACED_GAP",
    "MIN_TRACED_GAP_SHARE",
    "ROMEConfig",
    "default_rome_layer",
    "rome_edit",
    "rome_key",
    "rome_update",
    "traced_gap_is_material",
    "traced_layer",
]

logger = logging.getLogger(__name__)

__getattr__ = renamed(__name__, {"ROMEHyperParams": "ROMEConfig"})  # the old name, deprecated

DEFAULT_ROME_LAYER_FRACTION = 0.15
"""Default ROME layer as a fraction of depth: layer 4 of SmolLM2's 30, where the layer sweep
(``benchmarks/rome_layers.py``, docs/editing.md "Which layer") found the best score S; layers
0-4 are within each other's intervals, and NS falls from layer 6 on."""


_CODE = "Meng et al. 2022 (ROME), code: kmeng01/rome"
_HPARAMS = f"{_CODE} hparams/ROME/gpt2-xl.json and EleutherAI_gpt-j-6B.json"
_NOT_MEASURED = "not measured yet"
FITS = ("rome", "edit_aware")
"""``ROMEConfig.fit``: ROME's own fit (compute_v), or the edit-aware fit of issue 21."""


def _as_paper(default: Any, help: str, source: str, **rules: Any) -> Any:
    """A field whose default is the paper's value, declared with its source."""
    return field(default=default, metadata={"help": help, **rules, **paper(default, source)})


@config
class ROMEConfig(Config):
    """ROME's settings: the paper's code (kmeng01/rome ``compute_v``, GPT-2 XL and GPT-J
    hparams) by default; each default that differs declares the paper's value and why.

    Attributes:
        layer: the MLP whose ``W_out`` is edited; None is :func:`default_rome_layer`.
        trace_layer: choose the layer per fact by a causal trace of its rewrite prompt
            (:func:`traced_layer`; refuses a trace with no gap to locate, or a peak within
            noise). Only with ``layer`` None.
        fit: ``"rome"``: δ added at the subject's last token only, as compute_v, so each step
            recomputes only the positions from there on (the prefix is the unedited run's);
            ``"edit_aware"``: δ added through the rank-one update that will be installed (each
            position gets (k·u)·δ, u = C⁻¹k̄/(k̄ᵀC⁻¹k̄)), every position recomputed.
        n_contexts: generated context prefixes for k̄ and v* (the bare prompt is added).
        context_lengths: token lengths of the generated prefixes, cycled.
        steps: forward passes of the δ fit (with ``stop_on="loss"`` the last only checks, as
            compute_v: at most ``steps - 1`` Adam updates); lr: Adam learning rate.
        early_stop: stop once the watched quantity is below this.
        stop_on: ``"loss"`` (the total loss, compute_v) or ``"nll"`` (the target's mean NLL).
        kl_factor: weight of the KL term on "{subject} is a" prompts.
        weight_decay: weight of the decay term.
        decay: ``"rome"``: ‖δ‖/‖v₀‖², v₀ the bare prompt's MLP output (compute_v's
            ``target_init``); ``"squared"``: (‖δ‖/‖v̄₀‖)², v̄₀ the mean over the rewrite rows.
            The clamp is against the same v₀.
        clamp_norm: ‖δ‖ is clamped to ``clamp_norm``·‖v₀‖.
        damping: ridge added to C as a fraction of its mean diagonal, for stability.
        seed: seed for the context prefixes.
        pad_rows: run the fit's rows padded as before issue 38 (for speed comparisons; the δ
            is the same to float rounding).
        stats_tokens: text tokens for the key statistics when they must be computed.

    ``edit_aware=`` (a bool) and ``early_stop_nll=`` are the deprecated names of ``fit`` and
    ``early_stop``.
    """

    one_fact_per_edit: ClassVar[bool] = True
    """ROME installs one fact per edit; an evaluation restores the weights between facts."""

    layer: int | None = field(
        default=None,
        metadata={"help": "MLP layer to edit (none: the default layer)", "ge": 0,
                  **paper("17 of 48 (GPT-2 XL), 5 of 28 (GPT-J)", _HPARAMS + " layers",
                          why="benchmarks/rome_layers.py, docs/data/rome_layers.json (layer 4 of 30)")},
    )
    trace_layer: bool = field(
        default=False, metadata={"help": "pick each fact's layer by a causal trace"}
    )
    fit: str = field(
        default="rome",
        metadata={"help": "rome: delta at the subject's last token (compute_v); edit_aware: "
                          "through the installed update", "choices": FITS,
                  **paper("rome", f"{_CODE} rome/compute_v.py (delta at lookup_idxs)")},
    )
    n_contexts: int = _as_paper(20, "generated context prefixes",
                                _HPARAMS + " context_template_length_params [[5, 10], [10, 10]]", ge=1)
    context_lengths: tuple[int, ...] = _as_paper((5, 10), "prefix lengths",
                                                 _HPARAMS + " context_template_length_params",
                                                 ge=1, min_length=1)
    steps: int = _as_paper(20, "forward passes of the delta fit", _HPARAMS + " v_num_grad_steps", ge=1)
    lr: float = _as_paper(0.5, "Adam learning rate", _HPARAMS + " v_lr", gt=0)
    early_stop: float = _as_paper(0.05, "stop below this (see --stop-on)",
                                  f"{_CODE} rome/compute_v.py: if loss < 5e-2: break", ge=0)
    stop_on: str = _as_paper("loss", "what early_stop watches: loss (total) or nll (target)",
                             f"{_CODE} rome/compute_v.py: the total loss", choices=("loss", "nll"))
    kl_factor: float = _as_paper(0.0625, "weight of the KL term", _HPARAMS + " kl_factor", ge=0)
    weight_decay: float = _as_paper(0.5, "weight of the decay term", _HPARAMS + " v_weight_decay", ge=0)
    decay: str = _as_paper("rome", "rome: |delta|/|v0|^2 (compute_v); squared: (|delta|/|mean v0|)^2",
                           f"{_CODE} rome/compute_v.py: norm(delta) / norm(target_init) ** 2",
                           choices=("rome", "squared"))
    clamp_norm: float = _as_paper(4.0, "|delta| <= clamp_norm*|v0|", _HPARAMS + " clamp_norm_factor", gt=0)
    damping: float = field(
        default=1e-4,
        metadata={"help": "ridge on C (fraction of its mean diagonal)", "ge": 0,
                  **paper(0.0, f"{_CODE} rome/compute_u.py: C inverted with no ridge",
                          why=f"a guard for a near-singular C from few statistics tokens; {_NOT_MEASURED}")},
    )
    seed: int = field(default=0, metadata={"help": "seed of the context prefixes"})
    pad_rows: bool = field(
        default=False,
        metadata={"help": "fit rows padded as before issue 38 (speed comparisons)", "cli": False},
    )
    stats_tokens: int = field(
        default=DEFAULT_STATS_TOKENS, metadata={"help": "text tokens for C", "ge": 1}
    )


_RENAMED_FIELDS = {"edit_aware": "fit", "early_stop_nll": "early_stop"}


def _accept_old_names(cls: type[ROMEConfig]) -> None:
    """Take ``edit_aware=`` (True: ``fit="edit_aware"``) and ``early_stop_nll=`` as deprecated
    keywords, and read them as attributes, each with a DeprecationWarning."""
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self: ROMEConfig, **kwargs: Any) -> None:
        old = [name for name in _RENAMED_FIELDS if name in kwargs]
        if old:
            _warn_renamed(old)
        if "edit_aware" in kwargs:
            kwargs["fit"] = "edit_aware" if kwargs.pop("edit_aware") else "rome"
        if "early_stop_nll" in kwargs:
            kwargs["early_stop"] = kwargs.pop("early_stop_nll")
        init(self, **kwargs)

    cls.__init__ = __init__  # type: ignore[method-assign]
    cls.edit_aware = property(lambda self: _warn_renamed(["edit_aware"]) or self.fit == "edit_aware")  # type: ignore[attr-defined]
    cls.early_stop_nll = property(lambda self: _warn_renamed(["early_stop_nll"]) or self.early_stop)  # type: ignore[attr-defined]


def _warn_renamed(names: Sequence[str]) -> None:
    where = ", ".join(f"{name} -> {_RENAMED_FIELDS[name]}" for name in names)
    warnings.warn(f"ROMEConfig: {where}; the old names are deprecated", DeprecationWarning, stacklevel=3)


_accept_old_names(ROMEConfig)


def default_rome_layer(lm: LensModel) -> int:
    """The layer ROME edits when none is given and no causal trace is asked for."""
    return max(0, min(lm.cfg.n_layers - 1, round(DEFAULT_ROME_LAYER_FRACTION * lm.cfg.n_layers)))


def solve_ridge(c: Tensor, rhs: Tensor, damping: float) -> Tensor:
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
    c_inv_k = solve_ridge(c, key, damping)
    return torch.outer(c_inv_k / (c_inv_k @ key.double()), residual.double())


def rome_key(
    lm: LensModel, layer: int, request: EditRequest, templates: Sequence[str]
) -> Float[Tensor, " d_mlp"]:
    """k̄: the subject's last-token MLP key at ``layer``, averaged over the context templates."""
    target = lm.continuation_ids(request.target_new)
    rows = [subject_row(lm, t, request.prompt, request.subject, target) for t in templates]
    return subject_activations(lm, "mlp_post", layer, rows).mean(0)


def rome_edit(
    lm: LensModel,
    request: EditRequest,
    config: ROMEConfig | None = None,
    *,
    stats: KeyStatistics | None = None,
) -> EditHandle:
    """Rewrite one fact with ROME. **Changes ``lm``'s weights in place** (one ``W_out``).

    Everything is validated before any weight is touched: a subject missing from the prompt, an
    empty target or a layer out of range raise ``ValueError`` and leave the model as it was.

    Args:
        lm: the model to edit.
        request: the fact to rewrite.
        config: :class:`ROMEConfig`; its ``layer`` None edits :func:`default_rome_layer`,
            or with ``trace_layer`` the peak of an MLP causal trace of the rewrite prompt
            (:func:`traced_layer`).
        stats: key statistics for the layer (default: :func:`key_statistics`, cached on disk).

    Returns:
        An :class:`EditHandle`; ``handle.restore()`` (or leaving ``with``) restores the weights.
        ``handle.details`` holds the fit (:func:`fit_details`): its kind, steps, final NLL and
        the real and padded positions it ran.

    >>> import tempfile
    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> stats = key_statistics(lm, 1, StatsConfig(n_tokens=512), cache_dir=tempfile.mkdtemp())
    >>> req = EditRequest("{} is located in the city of", "The Eiffel Tower", " Rome", " Paris")
    >>> with rome_edit(lm, req, ROMEConfig(layer=1, n_contexts=2, steps=3), stats=stats) as h:
    ...     h.layers
    (1,)
    """
    hp = config or ROMEConfig()
    check_requests(lm, [request])
    if hp.trace_layer and hp.layer is not None:
        raise UserInputError(
            f"layer={hp.layer} and trace_layer=True both choose the layer: give one of them"
        )
    fixed = hp.layer if hp.layer is not None else default_rome_layer(lm)
    if not hp.trace_layer:
        check_layer(lm, fixed)
        if stats is not None:
            check_statistics(lm, stats, [fixed])
    begin = time.perf_counter()
    layer = traced_layer(lm, request) if hp.trace_layer else fixed
    check_layer(lm, layer)
    if stats is not None and hp.trace_layer:
        check_statistics(lm, stats, [])  # the traced layer may fall outside them: computed below
    if stats is None or layer not in stats.layers:
        stats = key_statistics(lm, layer, StatsConfig(n_tokens=hp.stats_tokens))
    templates = context_templates(lm, hp.n_contexts, hp.context_lengths, seed=hp.seed)
    k_bar = rome_key(lm, layer, request, templates)
    c = stats.for_layer(layer)
    c_inv_k = solve_ridge(c, k_bar, hp.damping)
    key_dir = (c_inv_k / (c_inv_k @ k_bar.double())).float()[None] if hp.fit == "edit_aware" else None
    fit = fit_deltas(lm, layer, [request], templates, hp, site="mlp_out", key_dirs=key_dir,
                     grouped=not hp.pad_rows)
    # v* = v₀ + δ with v₀ = W k̄ + b (the mean output over the same rows), so the residual the
    # update must add at k̄ is exactly δ.
    weight = lm.model.blocks[layer].mlp.W_out
    update = rome_update(c, k_bar, fit.delta[0], damping=hp.damping).to(weight.dtype)
    seconds = time.perf_counter() - begin
    logger.info("ROME edit at layer %d: ‖δ‖ %.2f, %.1f s", layer, fit.delta.norm().item(), seconds)
    deltas = {weight_name("W_out", layer): update}
    handle = EditHandle(lm, deltas, method="rome", requests=[request], seconds=seconds)
    handle.details.update(fit_details(fit, hp.fit))
    return handle.apply()


def fit_details(fit: DeltaFit, kind: str) -> dict[str, Any]:
    """What an edit's handle reports about its δ fit: the fit, its steps and final NLL, and the
    positions it ran through the blocks above the layer (real and padded)."""
    return {"fit": kind, "fit_steps": fit.steps[0], "fit_nll": float(fit.nll[0]),
            "real_tokens": fit.real_tokens, "padded_tokens": fit.padded_tokens}


@EDITING_METHODS.register("rome", ROMEConfig, "rank-one edit of one MLP, one fact per edit")
def rome_requests(
    lm: LensModel,
    requests: Sequence[EditRequest],
    config: ROMEConfig,
    *,
    stats: KeyStatistics | None = None,
) -> EditHandle:
    """The registry's entry for ROME: :func:`rome_edit` of the single request given.

    Raises:
        ValueError: not exactly one request (ROME installs one fact per edit; use MEMIT).
    """
    if len(requests) != 1:
        raise UserInputError(f"ROME edits one fact at a time, got {len(requests)}; use method 'memit'")
    return rome_edit(lm, requests[0], config, stats=stats)


MIN_TRACED_GAP = 0.05
"""The least clean − corrupted gap in p(answer) :func:`traced_layer` accepts: 5 points of
probability. Below it the clean run hardly gives the answer, and the trace has no material answer
to locate (see :func:`traced_gap_is_material`)."""

MIN_TRACED_GAP_SHARE = 0.5
"""The least share of the clean p(answer) the corruption must take away for :func:`traced_layer`:
more than half of the answer rests on the subject, not on the rest of the prompt."""


def traced_gap_is_material(clean: float, corrupted: float) -> bool:
    """Does a causal trace have a material answer to locate: is the gap ``clean - corrupted`` (the
    clean run's p(answer) minus the corrupted runs' mean) at least :data:`MIN_TRACED_GAP` and at
    least :data:`MIN_TRACED_GAP_SHARE` of ``clean``?

    The rule says what a fact's trace must show, and was fixed before the traces it is judged
    on were run (docs/circuits.md, "The traced-layer guard"): the model predicts the fact's answer,
    and the answer rests on the subject, so noising the subject takes away most of it. A
    significant gap can be a real but tiny one (a word at p = 10⁻⁵ clean, 10⁻⁷ noised: an
    association, not an answer), or a large probability the corruption barely moves (the answer
    comes from the prompt's template, not from its subject); neither is a fact a layer could hold.
    The share is of the clean probability, not of the restored effect: on SmolLM2 one MLP window
    restores under 2 % of the Eiffel Tower's gap (docs/editing.md), so a share of the gap to be
    restored would refuse the editing fact itself.

    >>> traced_gap_is_material(0.75, 0.02), traced_gap_is_material(1.3e-5, 1.8e-7)
    (True, False)
    >>> traced_gap_is_material(0.30, 0.20)  # the corruption leaves two thirds of the answer
    False
    """
    gap = clean - corrupted
    return gap >= MIN_TRACED_GAP and gap >= MIN_TRACED_GAP_SHARE * clean


def traced_layer(lm: LensModel, request: EditRequest) -> int:
    """The MLP layer where restoring the subject's last token recovers the answer most.

    Three conditions, in this order (the tests at ``PEAK_TEST_ALPHA``, 0.05):

    1. :meth:`~lmsci_mi.circuits.CausalTrace.gap_test`: the clean run gives the answer more than
       the corrupted runs (one-sided sign-flip test over the noise samples). Without that gap the
       noise destroys nothing, and whatever the restorations move is not the fact.
    2. :func:`traced_gap_is_material`: the gap is material, at least :data:`MIN_TRACED_GAP` and
       at least :data:`MIN_TRACED_GAP_SHARE` of the clean p(answer). The test of 1 asks whether
       the corruption removes something, not whether it is an answer: a word the model gives
       10⁻⁵ passes it when the clean subject raises it over every noised run.
    3. :meth:`~lmsci_mi.circuits.CausalTrace.peak_test`: the peak beats the largest of the
       layers' effects under sign flips of the noise samples. The largest of 30 correlated
       effects often clears two of its own standard errors with no effect at any layer; this
       test keeps that rate at 5 %. A peak that passes is above zero (half the flips of a
       non-positive peak reach it).

    Each alone passes traces with no fact; their rates, and the guard's, on SmolLM2 are in
    docs/circuits.md ("The traced-layer guard", docs/data/guard_null.json). The guard asks
    whether the trace locates an answer that flows from the subject, not whether the answer is a
    fact: on the facts' prompts about made-up names the model guesses from the name (a made-up
    city "in the country of" Italy), and the guard accepts over half of those traces. Whether
    the model knows the fact is the caller's question.

    Raises:
        ValueError: a condition does not hold: the trace does not single out a layer, and an
            edit there would rest on noise (docs/editing.md, "Which layer").
    """
    # A documented one-way use of a public circuits function (STYLE.md): editing may trace.
    from lmsci_mi.circuits import TraceConfig, causal_trace
    from lmsci_mi.circuits.tracing import PEAK_TEST_ALPHA

    # Only the last subject token is read: restoring the other positions would cost 8x more.
    cfg = TraceConfig(kinds=("mlp",), last_subject_only=True)
    trace = causal_trace(lm, request.rewrite_prompt, request.subject, cfg)
    instead = f"give a layer instead (ROMEConfig(layer=...), the default is {default_rome_layer(lm)})"
    clean, corrupted = trace.clean_metric, trace.corrupted_metric
    gap = trace.gap_test()
    if not gap.rejects(PEAK_TEST_ALPHA):
        raise UserInputError(
            f"the causal trace of {request.rewrite_prompt!r} has no gap to locate: noising "
            f"{request.subject!r} does not lower p({trace.target!r}) (clean {clean:.4g}, "
            f"corrupted {corrupted:.4g}, the mean of {gap.n_samples} noise samples; "
            f"one-sided sign-flip p = {gap.p_value:.3g} > {PEAK_TEST_ALPHA}), so no layer carries "
            f"the answer from the subject; {instead}"
        )
    if not traced_gap_is_material(clean, corrupted):
        raise UserInputError(
            f"the causal trace of {request.rewrite_prompt!r} has no material answer to locate: "
            f"noising {request.subject!r} lowers p({trace.target!r}) from {clean:.4g} to "
            f"{corrupted:.4g}, a gap under {MIN_TRACED_GAP:g} or under {MIN_TRACED_GAP_SHARE:.0%} "
            f"of the clean p, so the answer does not rest on the subject (or the model hardly "
            f"gives it); {instead}"
        )
    test = trace.peak_test(kind="mlp")
    layer = test.argmax
    if not test.rejects(PEAK_TEST_ALPHA):
        raise UserInputError(
            f"the causal trace of {request.rewrite_prompt!r} has no MLP peak above noise: layer "
            f"{layer} restores p({trace.target!r}) by {test.statistic:.4f}, and the largest of "
            f"the {test.n_tests} layers' effects is at least that large under {test.p_value:.0%} "
            f"of {test.n_flips} sign flips of the {test.n_samples} noise samples (p = "
            f"{test.p_value:.3g} > {PEAK_TEST_ALPHA}): the trace does not single out a layer; "
            f"{instead}"
        )
    logger.info(
        "causal trace of %r: MLP peak at layer %d (gap %.3g, p = %.3g; peak p = %.3g)",
        request.rewrite_prompt, layer, clean - corrupted, gap.p_value, test.p_value,
    )
    return layer

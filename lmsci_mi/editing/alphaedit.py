"""AlphaEdit: MEMIT's update projected onto the null space of the preserved keys (Fang et al.,
ICLR 2025, "AlphaEdit: Null-Space Constrained Knowledge Editing for Language Models").

Per edited layer, P projects onto the directions where the preserved keys (the uncentred second
moment C = E[kkᵀ] of ordinary text, MEMIT's statistics) have almost no mass: the eigenvectors of C
whose eigenvalues lie below a threshold: absolute, as in the paper's code, or set by the share of
trace(C) the null space may hold (the maintainers' relative rule, AlphaEdit issues 26 and 38). The
update, in TransformerLens's ``W_out [d_mlp,
d_model]`` orientation, is

    ΔW = (P (K₁ᵀK₁ + K_pᵀK_p) + αI)⁻¹ P K₁ᵀ R

(the paper's ``R K₁ᵀ P (K_p K_pᵀ P + K₁ K₁ᵀ P + αI)⁻¹`` transposed, with keys as rows; K₁ the
edit's keys, K_p earlier edits' keys, R the residual to install). ΔW lies in P's range, so a key
that P removes reads the same output as before: ``k₀ᵀ(W + ΔW) = k₀ᵀW``. Earlier edits' keys come
from an explicit argument (an editing session carries them), never from a global cache.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
from jaxtyping import Float
from torch import Tensor

from lmsci_mi._deprecation import renamed
from lmsci_mi.config import config, paper
from lmsci_mi.editing.handle import EditHandle
from lmsci_mi.editing.memit import MEMITConfig, checked_layers, spread_edit
from lmsci_mi.editing.methods import EDITING_METHODS
from lmsci_mi.editing.requests import EditRequest
from lmsci_mi.editing.stats import KeyStatistics
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel

__all__ = [
    "AlphaEditConfig",
    "NullSpace",
    "alphaedit_edit",
    "alphaedit_update",
    "null_space",
    "null_space_projector",
    "trace_share_rank",
]

__getattr__ = renamed(__name__, {"AlphaEditHyperParams": "AlphaEditConfig"})  # deprecated name


_CODE = "Fang et al. 2025 (AlphaEdit), code: jianghoucheng/AlphaEdit"


@config
class AlphaEditConfig(MEMITConfig):
    """AlphaEdit's settings: MEMIT's (targets, layers, contexts) plus the projection.

    Attributes:
        nullspace_threshold: eigenvalues of C below this span the null space P projects onto
            (the AlphaEdit code's 2e-2 on E[kkᵀ]; its scale depends on the model's keys, so the
            handle reports the dimension kept per layer).
        nullspace_trace_share: when set, replaces the absolute threshold: the null space is the
            eigen-directions of C with the smallest eigenvalues whose sum is at most this share
            of trace(C) (a rule that does not depend on the keys' scale). None: the threshold.
        l2: α in ``P(K₁ᵀK₁ + K_pᵀK_p) + αI`` (the code's 10). MEMIT's ``mom2_weight`` is not used.
    """

    nullspace_threshold: float = field(
        default=2e-2,
        metadata={"help": "eigenvalues of C below this span the null space", "gt": 0,
                  **paper(2e-2, f"{_CODE} hparams/AlphaEdit/*.json nullspace_threshold (the paper's "
                          "§3.2 footnote 1 says 1e-2)")},
    )
    nullspace_trace_share: float | None = field(
        default=None,
        metadata={"help": "instead of the threshold: the null space holds at most this share of "
                  "trace(C) (smallest eigenvalues first)", "gt": 0, "lt": 1},
    )
    l2: float = field(
        default=10.0,
        metadata={"help": "alpha in P(K1K1 + KpKp) + alpha I", "gt": 0,
                  **paper(10.0, f"{_CODE} AlphaEdit_main.py: L2 in solve(P(K1K1' + cache_c) + L2 I, ...)")},
    )


@dataclass(frozen=True)
class NullSpace:
    """What AlphaEdit's projector P is at one layer, and what it keeps of one edit's keys.

    Attributes:
        layer: the MLP layer.
        rule: ``"threshold"`` (absolute) or ``"trace_share"``.
        cut: the rule's value (the threshold, or the share of trace(C)).
        dims: directions in the null space (P's rank), of ``d_mlp``.
        d_mlp: the key dimension.
        trace_share: the share of trace(C) the null space holds (the preserved keys' energy
            the edit may still touch).
        key_norm_kept: per edit key, ‖P k‖/‖k‖ (empty until an edit's keys are projected).
    """

    layer: int | None
    rule: str
    cut: float
    dims: int
    d_mlp: int
    trace_share: float
    key_norm_kept: tuple[float, ...] = ()

    @property
    def direction_share(self) -> float:
        """The share of the key directions in the null space, ``dims / d_mlp``."""
        return self.dims / self.d_mlp


def trace_share_rank(values: Float[Tensor, " d"], share: float) -> int:
    """How many of the smallest eigenvalues ``values`` (any order, of a PSD matrix) sum to at
    most ``share`` of their total: the null space's dimension under the trace-share rule.

    Raises:
        ValueError: ``share`` not in (0, 1).

    >>> trace_share_rank(torch.tensor([4.0, 3.0, 2.0, 1.0]), 0.3)  # 1 + 2 <= 3, 1 + 2 + 3 > 3
    2
    """
    if not 0 < share < 1:
        fix = ("a share of 0 leaves no null space and nothing could be edited" if share <= 0 else
               "a share of 1 or more puts every direction in the null space (P = I: no key of "
               "ordinary text is preserved)")
        raise UserInputError(f"nullspace_trace_share must lie in (0, 1), not {share:g}: {fix}; "
                             "give a share such as 1e-2")
    ascending = values.double().clamp_min(0).sort().values  # eigh's tiny negative round-off is 0
    cumulative = ascending.cumsum(0)
    # A relative slack of 1e-9: eigh's round-off must not drop a direction whose eigenvalues
    # meet the share exactly (1 + 2 + 3 of a trace of 10 at a share of 0.6).
    return int((cumulative <= share * cumulative[-1] * (1 + 1e-9)).sum())


def null_space(
    c: Float[Tensor, "d_mlp d_mlp"],
    threshold: float = 2e-2,
    *,
    trace_share: float | None = None,
    layer: int | None = None,
) -> tuple[Float[Tensor, "d_mlp d_mlp"], NullSpace]:
    """P = U Uᵀ over the eigenvectors of ``c`` in the null space (float64), and its record.

    The null space is the eigenvectors whose eigenvalues lie below ``threshold``, or, with
    ``trace_share``, the most eigenvectors, smallest eigenvalues first, whose eigenvalues sum to
    at most that share of trace(c).

    Raises:
        ValueError: the rule leaves no direction (P would be zero: no edit possible), or a
            ``trace_share`` outside (0, 1).

    >>> c = torch.diag(torch.tensor([4.0, 3.0, 2.0, 1.0]))
    >>> p, record = null_space(c, trace_share=0.3)
    >>> record.dims, round(record.trace_share, 2), record.direction_share
    (2, 0.3, 0.5)
    """
    values, vectors = torch.linalg.eigh(c.double())  # ascending
    if trace_share is None:
        rule, cut, dims = "threshold", threshold, int((values < threshold).sum())
        fix = "raise nullspace_threshold (or set nullspace_trace_share)"
    else:
        rule, cut, dims = "trace_share", trace_share, trace_share_rank(values, trace_share)
        fix = "raise nullspace_trace_share"
    if dims == 0:
        where = "" if layer is None else f" of layer {layer}"
        raise UserInputError(
            f"no eigenvalue of the key statistics{where} falls in the null space under the "
            f"{rule} {cut:g} (smallest {float(values.min()):.3g}, trace {float(values.sum()):.3g}): "
            f"the null space has no dimension and nothing could be edited; {fix}"
        )
    kept = vectors[:, :dims]
    positive = values.clamp_min(0)
    share = float(positive[:dims].sum() / positive.sum().clamp_min(1e-300))
    return kept @ kept.T, NullSpace(layer, rule, cut, dims, int(c.shape[0]), share)


def null_space_projector(
    c: Float[Tensor, "d_mlp d_mlp"], threshold: float, *, layer: int | None = None
) -> tuple[Float[Tensor, "d_mlp d_mlp"], int]:
    """P = U Uᵀ over the eigenvectors of ``c`` with eigenvalues below ``threshold``, and their
    count (float64): :func:`null_space` under the absolute rule.

    Raises:
        ValueError: no eigenvalue is below the threshold (P would be zero: no edit possible).
    """
    projector, record = null_space(c, threshold, layer=layer)
    return projector, record.dims


def alphaedit_update(
    keys: Float[Tensor, "request d_mlp"],
    residual: Float[Tensor, "request d_model"],
    projector: Float[Tensor, "d_mlp d_mlp"],
    previous: Float[Tensor, "earlier d_mlp"] | None,
    l2: float,
) -> Float[Tensor, "d_mlp d_model"]:
    """ΔW_out for one layer: ``(P(K₁ᵀK₁ + K_pᵀK_p) + αI)⁻¹ P K₁ᵀ R`` (float64)."""
    gram = keys.T @ keys
    if previous is not None and previous.numel():
        gram = gram + previous.T @ previous
    eye = torch.eye(gram.shape[0], dtype=gram.dtype, device=gram.device)
    return torch.linalg.solve(projector @ gram + l2 * eye, projector @ keys.T @ residual)


def alphaedit_edit(
    lm: LensModel,
    requests: Sequence[EditRequest],
    config: AlphaEditConfig | None = None,
    *,
    stats: KeyStatistics | None = None,
    previous_keys: Mapping[int, Tensor] | None = None,
    targets: Tensor | None = None,
) -> EditHandle:
    """Install many facts at once with AlphaEdit. **Changes ``lm``'s weights in place.**

    All requests, layers, statistics and projectors are checked before any weight changes.

    Args:
        lm: the model.
        requests: the facts.
        config: :class:`AlphaEditConfig`.
        stats: key statistics covering the layers (default: computed or read from the cache).
        previous_keys: per layer, the keys of earlier edits to keep (``[n, d_mlp]``), as a
            sequential-editing session carries them; None for an independent edit.
        targets: the requests' target residuals from :func:`~lmsci_mi.editing.memit.memit_targets`
            (same model, layers and fit settings), to solve again without fitting.

    Returns:
        An :class:`EditHandle`; ``details``: the fit's report (as MEMIT's), per layer a
        :class:`NullSpace` (``null_space``), its dimension, ‖PK₁‖/‖K₁‖ (``key_share_kept``), the
        keys (a session's ``previous_keys``), and the statistics' token count and source.

    Raises:
        ValueError: bad requests, layers or statistics, or an empty null space (weights untouched).

    >>> import tempfile
    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.editing.stats import StatsConfig, key_statistics
    >>> lm = load_model("toy-2l")
    >>> stats = key_statistics(lm, [0, 1], StatsConfig(n_tokens=512), cache_dir=tempfile.mkdtemp())
    >>> reqs = [EditRequest("{} is in", "Paris", " Rome")]
    >>> hp = AlphaEditConfig(layers=(0, 1), steps=2, nullspace_threshold=1e-2)
    >>> with alphaedit_edit(lm, reqs, hp, stats=stats) as h:
    ...     sorted(h.details["null_space_dims"]), h.details["null_space"][0].rule
    ([0, 1], 'threshold')
    """
    hp = config or AlphaEditConfig()
    requests = list(requests)
    begin = time.perf_counter()
    layers, stats = checked_layers(lm, requests, hp, stats)
    rule = {"trace_share": hp.nullspace_trace_share}
    projectors = {i: null_space(stats.for_layer(i), hp.nullspace_threshold, **rule, layer=i) for i in layers}
    used: dict[int, Tensor] = {}
    records: dict[int, NullSpace] = {}
    survives: dict[int, float] = {}

    def solve(layer: int, keys: Tensor, residual: Tensor) -> Tensor:
        projector, record = projectors[layer]
        projector = projector.to(keys.device)
        earlier = None if previous_keys is None else previous_keys.get(layer)
        earlier = None if earlier is None else earlier.to(keys.device, torch.float64)
        used[layer] = keys.detach().cpu()
        projected = keys @ projector  # rows P k (P is symmetric)
        kept = projected.norm(dim=1) / keys.norm(dim=1).clamp_min(1e-30)
        survives[layer] = float(projected.norm() / keys.norm().clamp_min(1e-30))
        records[layer] = dataclasses.replace(record, key_norm_kept=tuple(kept.tolist()))
        return alphaedit_update(keys, residual, projector, earlier, hp.l2)

    handles = spread_edit(lm, requests, layers, hp, solve, targets=targets)
    handle = EditHandle.combine(
        handles, method="alphaedit", requests=requests, seconds=time.perf_counter() - begin
    )
    handle.details = {
        **handles[0].details,  # the fit's report, when it fitted
        "null_space": records,
        "null_space_dims": {layer: projectors[layer][1].dims for layer in layers},
        "key_share_kept": survives,
        "keys": used,
        "stats_tokens": stats.n_tokens,
        "stats_source": stats.source,
    }
    return handle


@EDITING_METHODS.register(
    "alphaedit", AlphaEditConfig, "MEMIT's update projected onto the preserved keys' null space"
)
def alphaedit_requests(
    lm: LensModel,
    requests: Sequence[EditRequest],
    config: AlphaEditConfig,
    *,
    stats: KeyStatistics | None = None,
) -> EditHandle:
    """The registry's entry for AlphaEdit: :func:`alphaedit_edit` (an independent edit)."""
    return alphaedit_edit(lm, requests, config, stats=stats)

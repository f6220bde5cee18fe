"""AlphaEdit: MEMIT's update projected onto the null space of the preserved keys (Fang et al.,
ICLR 2025, "AlphaEdit: Null-Space Constrained Knowledge Editing for Language Models").

Per edited layer, P projects onto the directions where the preserved keys (the uncentred second
moment C = E[kkᵀ] of ordinary text, MEMIT's statistics) have almost no mass: the eigenvectors of C
whose eigenvalues lie below a threshold. The update, in TransformerLens's ``W_out [d_mlp,
d_model]`` orientation, is

    ΔW = (P (K₁ᵀK₁ + K_pᵀK_p) + αI)⁻¹ P K₁ᵀ R

(the paper's ``R K₁ᵀ P (K_p K_pᵀ P + K₁ K₁ᵀ P + αI)⁻¹`` transposed, with keys as rows; K₁ the
edit's keys, K_p earlier edits' keys, R the residual to install). ΔW lies in P's range, so a key
that P removes reads the same output as before: ``k₀ᵀ(W + ΔW) = k₀ᵀW``. Earlier edits' keys come
from an explicit argument (an editing session carries them), never from a global cache.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import field

import torch
from jaxtyping import Float
from torch import Tensor

from lmsci_mi._deprecation import renamed
from lmsci_mi.config import config
from lmsci_mi.editing.handle import EditHandle
from lmsci_mi.editing.memit import MEMITConfig, checked_layers, spread_edit
from lmsci_mi.editing.methods import EDITING_METHODS
from lmsci_mi.editing.requests import EditRequest
from lmsci_mi.editing.stats import KeyStatistics
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel

__all__ = ["AlphaEditConfig", "alphaedit_edit", "alphaedit_update", "null_space_projector"]

__getattr__ = renamed(__name__, {"AlphaEditHyperParams": "AlphaEditConfig"})  # deprecated name


@config
class AlphaEditConfig(MEMITConfig):
    """AlphaEdit's settings: MEMIT's (targets, layers, contexts) plus the projection.

    Attributes:
        nullspace_threshold: eigenvalues of C below this span the null space P projects onto
            (the AlphaEdit code's 2e-2 on E[kkᵀ]; its scale depends on the model's keys, so the
            handle reports the dimension kept per layer).
        l2: α in ``P(K₁ᵀK₁ + K_pᵀK_p) + αI`` (the code's 10). MEMIT's ``mom2_weight`` is not used.
    """

    nullspace_threshold: float = field(
        default=2e-2, metadata={"help": "eigenvalues of C below this span the null space", "gt": 0}
    )
    l2: float = field(default=10.0, metadata={"help": "alpha in P(K1K1 + KpKp) + alpha I", "gt": 0})


def null_space_projector(
    c: Float[Tensor, "d_mlp d_mlp"], threshold: float, *, layer: int | None = None
) -> tuple[Float[Tensor, "d_mlp d_mlp"], int]:
    """P = U Uᵀ over the eigenvectors of ``c`` with eigenvalues below ``threshold``, and their
    count (float64).

    Raises:
        ValueError: no eigenvalue is below the threshold (P would be zero: no edit possible).
    """
    values, vectors = torch.linalg.eigh(c.double())
    kept = vectors[:, values < threshold]
    if kept.shape[1] == 0:
        raise UserInputError(
            f"no eigenvalue of the key statistics{'' if layer is None else f' of layer {layer}'} is "
            f"below the null-space threshold {threshold:g} (smallest {float(values.min()):.3g}): "
            "the null space has no dimension and nothing could be edited; raise nullspace_threshold"
        )
    return kept @ kept.T, int(kept.shape[1])


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

    Returns:
        An :class:`EditHandle`. ``details`` holds, per layer, the null-space dimension, the share
        ‖PK₁‖/‖K₁‖ of the edit's keys that survives the projection, the keys themselves (for a
        session's ``previous_keys``), and the statistics' token count and source.

    Raises:
        ValueError: bad requests or layers, statistics of another model, or a threshold that
            leaves no null space; the weights are untouched.

    >>> import tempfile
    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.editing.stats import StatsConfig, key_statistics
    >>> lm = load_model("toy-2l")
    >>> stats = key_statistics(lm, [0, 1], StatsConfig(n_tokens=512), cache_dir=tempfile.mkdtemp())
    >>> reqs = [EditRequest("{} is in", "Paris", " Rome")]
    >>> hp = AlphaEditConfig(layers=(0, 1), steps=2, nullspace_threshold=1e-2)
    >>> with alphaedit_edit(lm, reqs, hp, stats=stats) as h:
    ...     sorted(h.details["null_space_dims"])
    [0, 1]
    """
    hp = config or AlphaEditConfig()
    requests = list(requests)
    begin = time.perf_counter()
    layers, stats = checked_layers(lm, requests, hp, stats)
    projectors = {
        layer: null_space_projector(stats.for_layer(layer), hp.nullspace_threshold, layer=layer)
        for layer in layers
    }
    used: dict[int, Tensor] = {}
    survives: dict[int, float] = {}

    def solve(layer: int, keys: Tensor, residual: Tensor) -> Tensor:
        projector = projectors[layer][0].to(keys.device)
        earlier = None if previous_keys is None else previous_keys.get(layer)
        earlier = None if earlier is None else earlier.to(keys.device, torch.float64)
        used[layer] = keys.detach().cpu()
        survives[layer] = float((projector @ keys.T).norm() / keys.norm().clamp_min(1e-30))
        return alphaedit_update(keys, residual, projector, earlier, hp.l2)

    handle = EditHandle.combine(
        spread_edit(lm, requests, layers, hp, solve),
        method="alphaedit",
        requests=requests,
        seconds=time.perf_counter() - begin,
    )
    handle.details = {
        "null_space_dims": {layer: projectors[layer][1] for layer in layers},
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

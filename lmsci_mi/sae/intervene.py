"""Steer with an SAE feature, or clamp one, through the hook registry, during cached generation.

Steering adds ``coefficient × typical max × direction`` at every position but the sink.
Clamping keeps the SAE's error term: x' = x + decode(f') − decode(f), where f' is f with one
feature set to a value, everywhere ("original", Templeton et al. 2024) or only where the feature
is active ("conditional"). Both act per position, so they give the same tokens with and without
the KV cache (the sae-lens tutorial's hook skips single-position steps, which steers only the
prompt once the cache is on).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import torch
from jaxtyping import Bool
from torch import Tensor

from lmsci_mi.config import validate_choice
from lmsci_mi.model import LensModel
from lmsci_mi.sae.compact import check_not_dropped
from lmsci_mi.sae.core import LensSAE
from lmsci_mi.sites import hook_name

__all__ = ["CLAMP_MODES", "clamp_sae_feature", "steer_with_sae_feature"]

CLAMP_MODES = ("everywhere", "where_active")


class _SinkPositions:
    """Marks which positions of the running forward pass hold the sink at position 0.

    A hook on the first block's input compares each position with the sink's own first-block
    input (embedding, plus position 0's embedding where the model has one), so the mark is right
    with and without the KV cache, where a step sees only the newest position, and under
    TransformerLens's ``generate``, which embeds without ``hook_embed``. The sink is never steered
    or clamped: the SAE never saw it.
    """

    site = hook_name("resid_pre", 0)

    def __init__(self, lm: LensModel) -> None:
        self.mask: Tensor | None = None
        self.reference: Tensor | None = None
        if lm.sink_token_id is not None:
            tokens = torch.tensor([[lm.sink_token_id]], device=lm.device)
            with torch.no_grad(), lm.hooks.capture([self.site]) as captured:
                lm.model(tokens, stop_at_layer=1)
            self.reference = captured[self.site][0, 0]

    def record(self, activation: Tensor, hook: Any) -> None:
        if self.reference is None:
            self.mask = None
            return
        self.mask = (activation == self.reference.to(activation.device, activation.dtype)).all(-1)

    def keep(self, activation: Tensor) -> Bool[Tensor, "batch pos 1"]:
        """True where the intervention applies (every position but the sink)."""
        if self.mask is None or self.mask.shape != activation.shape[:2]:
            return torch.ones(*activation.shape[:2], 1, dtype=torch.bool, device=activation.device)
        return ~self.mask.unsqueeze(-1)


@contextmanager
def steer_with_sae_feature(
    lm: LensModel, sae: LensSAE, feature: int, coefficient: float
) -> Iterator[Tensor]:
    """Add feature ``feature``'s decoder direction at the SAE's site while the block runs.

    The vector added is ``coefficient × feature_scale[feature] × (decode(e_i) − decode(0))``, so
    a coefficient of 1 adds one typical maximum activation of the feature. It is added at every
    position but the sink, at every generation step (cached or not). The model's weights are not
    changed; the hook is removed on exit.

    Args:
        lm: the model (must be the SAE's).
        sae: the SAE.
        feature: the feature index.
        coefficient: in units of the feature's typical maximum activation.

    Yields:
        The vector added, ``[d_model]``.

    Raises:
        ValueError: a feature index out of range, a feature dropped from the shipped SAE, or an
            SAE of another model.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.sae.train import SAETrainConfig, untrained_sae
    >>> lm = load_model("toy-2l")
    >>> sae = untrained_sae(lm, SAETrainConfig(layer=1, d_sae=32, k=4))
    >>> with steer_with_sae_feature(lm, sae, 3, 2.0) as vector:
    ...     text = lm.generate("The cat", 3)
    >>> tuple(vector.shape), len(lm.hooks.active())
    ((64,), 0)
    """
    sae.check(lm)
    i = sae.feature(feature)
    check_not_dropped(sae, i)
    vector = float(coefficient) * float(sae.feature_scale[i]) * sae.direction(i)
    vector = vector.to(lm.device)
    sinks = _SinkPositions(lm)

    def add(activation: Tensor, hook: Any) -> Tensor:
        return activation + sinks.keep(activation) * vector.to(activation.dtype)

    with lm.hooks.hooks(
        fwd=[(sinks.site, sinks.record), (sae.hook, add)],
        label=f"sae steer f{i}",
    ):
        yield vector


@contextmanager
def clamp_sae_feature(
    lm: LensModel,
    sae: LensSAE,
    feature: int,
    value: float,
    *,
    mode: Literal["everywhere", "where_active"] = "everywhere",
) -> Iterator[None]:
    """Set feature ``feature`` to ``value`` (in units of its typical maximum activation) and keep
    the SAE's error term, so that only that feature changes.

    At the SAE's site each position becomes ``x + decode(f') − decode(f)`` with ``f = encode(x)``
    and ``f'`` equal to ``f`` but for the feature: set everywhere (``"everywhere"``) or only where
    it fires (``"where_active"``). The sink is left alone. Works during cached generation; the
    model's weights are not changed.

    Raises:
        ValueError: a feature index out of range, a feature dropped from the shipped SAE, an
            unknown mode, or an SAE of another model.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.sae.train import SAETrainConfig, untrained_sae
    >>> lm = load_model("toy-2l")
    >>> sae = untrained_sae(lm, SAETrainConfig(layer=1, d_sae=32, k=4))
    >>> with clamp_sae_feature(lm, sae, 3, 0.0, mode="where_active"):
    ...     text = lm.generate("The cat", 3)
    >>> len(lm.hooks.active())
    0
    """
    validate_choice("mode", mode, CLAMP_MODES)
    sae.check(lm)
    i = sae.feature(feature)
    check_not_dropped(sae, i)
    target = float(value) * float(sae.feature_scale[i])
    sinks = _SinkPositions(lm)

    def clamp(activation: Tensor, hook: Any) -> Tensor:
        x = activation.float()
        f = sae.encode(x)
        edited = f.clone()
        if mode == "everywhere":
            edited[..., i] = target
        else:
            edited[..., i] = torch.where(
                f[..., i] > 0, torch.full_like(f[..., i], target), f[..., i]
            )
        delta = sae.decode(edited) - sae.decode(f)
        return (x + sinks.keep(activation) * delta).to(activation.dtype)

    with lm.hooks.hooks(
        fwd=[(sinks.site, sinks.record), (sae.hook, clamp)],
        label=f"sae clamp f{i}",
    ):
        yield

"""Steer with an SAE feature, or clamp one, through the hook registry, during cached generation.

Steering adds ``coefficient × typical max × direction`` at every position but the sink (and any
other position an :class:`~lmsci_mi.positions.Exclude` names: ``exclude=``).
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
from torch import Tensor

from lmsci_mi.config import validate_choice
from lmsci_mi.model import LensModel
from lmsci_mi.positions import Exclude
from lmsci_mi.sae.compact import check_not_dropped
from lmsci_mi.sae.core import LensSAE

__all__ = ["CLAMP_MODES", "clamp_sae_feature", "steer_with_sae_feature"]

CLAMP_MODES = ("everywhere", "where_active")


@contextmanager
def steer_with_sae_feature(
    lm: LensModel,
    sae: LensSAE,
    feature: int,
    coefficient: float,
    *,
    exclude: Exclude | None = None,
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
        exclude: the positions left alone (None: the sink, which the SAE never saw); marked in
            each forward pass by :class:`~lmsci_mi.hooks.RunningExclusion`.

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
    running = lm.running_exclusion(exclude)

    def add(activation: Tensor, hook: Any) -> Tensor:
        return activation + running.keep(activation) * vector.to(activation.dtype)

    with lm.hooks.hooks(
        fwd=[*running.hooks(), (sae.hook, add)],
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
    exclude: Exclude | None = None,
) -> Iterator[None]:
    """Set feature ``feature`` to ``value`` (in units of its typical maximum activation) and keep
    the SAE's error term, so that only that feature changes.

    At the SAE's site each position becomes ``x + decode(f') − decode(f)`` with ``f = encode(x)``
    and ``f'`` equal to ``f`` but for the feature: set everywhere (``"everywhere"``) or only where
    it fires (``"where_active"``). The sink is left alone, with any other position ``exclude``
    names (None: the sink only). Works during cached generation; the model's weights are not
    changed.

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
    running = lm.running_exclusion(exclude)

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
        return (x + running.keep(activation) * delta).to(activation.dtype)

    with lm.hooks.hooks(
        fwd=[*running.hooks(), (sae.hook, clamp)],
        label=f"sae clamp f{i}",
    ):
        yield

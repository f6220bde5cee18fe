"""Choosing a steering strength at a fluency budget: the largest strength whose continuations'
perplexity (under the unsteered model) stays within a multiple of the unsteered continuations'.

Steering methods scale differently (a steer value, a multiple of a mean difference, of a feature's
typical maximum), so they are compared where each costs the same fluency, not at one number.
LM-Steer (Han et al. 2024) reports its steer beside perplexity for the same reason. Every function
reads :class:`~lmsci_mi.steering.evaluate.ControlCurve` results only.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from lmsci_mi.errors import UserInputError
from lmsci_mi.steering.evaluate import METRICS, ControlCurve

__all__ = [
    "FLUENCY_BUDGET",
    "BudgetPoint",
    "at_fluency_budget",
    "choose_within_budget",
    "symmetric_strength_within_budget",
]

FLUENCY_BUDGET = 1.5
"""The default budget: perplexity at most 1.5x the unsteered model's."""

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class BudgetPoint:
    """A control curve read at its largest strength within the budget.

    Attributes:
        index: the setting's row in the curve.
        strength: its strength (the curve's ``attribute`` entry of the setting).
        metric: the metric read (``"sentiment"`` by default).
        value, value_se: the metric there, and its standard error over prompts.
        gain: ``value`` minus the unsteered model's.
        perplexity, perplexity_se: the continuations' perplexity there, with its standard error.
        budget_perplexity: the limit: the budget times the unsteered perplexity.
        within: whether any setting met the budget (otherwise ``index`` is the weakest setting).
    """

    index: int
    strength: float
    metric: str
    value: float
    value_se: float
    gain: float
    perplexity: float
    perplexity_se: float
    budget_perplexity: float
    within: bool


def _column(curve: ControlCurve, attribute: str | int) -> int:
    return attribute if isinstance(attribute, int) else curve.attributes.index(attribute)


def at_fluency_budget(
    curve: ControlCurve,
    budget: float = FLUENCY_BUDGET,
    *,
    metric: str = "sentiment",
    attribute: str | int = 0,
) -> BudgetPoint:
    """The curve at its largest strength whose perplexity is at most ``budget`` times the
    unsteered model's; the weakest setting when none is.

    Args:
        curve: a control curve (:func:`~lmsci_mi.steering.evaluate_intervention` or
            :func:`~lmsci_mi.steering.evaluate_settings`).
        budget: the allowed multiple of the unsteered perplexity.
        metric: the metric to report (one of :data:`~lmsci_mi.steering.evaluate.METRICS`).
        attribute: which entry of each setting is the strength (a name of ``curve.attributes``
            or an index).

    >>> import torch
    >>> from lmsci_mi import GenerationConfig, load_model
    >>> from lmsci_mi.steering import SteerEvalConfig, evaluate_intervention, steering_vector
    >>> lm = load_model("toy-2l")
    >>> v = steering_vector(lm, torch.ones(64), 1)
    >>> curve = evaluate_intervention(lm, lambda c: v.apply(lm, c), [0.0, 1.0, 50.0],
    ...     SteerEvalConfig(n_prompts=2, generation=GenerationConfig(max_new_tokens=3), progress=False))
    >>> point = at_fluency_budget(curve)
    >>> point.perplexity <= point.budget_perplexity, point.strength in (0.0, 1.0, 50.0)
    (True, True)
    """
    if metric not in METRICS:
        raise UserInputError(f"metric must be one of {list(METRICS)}, not {metric!r}")
    column = _column(curve, attribute)
    strengths = [float(s[column]) for s in curve.settings]
    limit = budget * curve.unsteered[METRICS.index("perplexity")]
    perplexity = curve.metric("perplexity").tolist()
    within = [i for i, p in enumerate(perplexity) if p <= limit]
    if within:
        i = max(within, key=lambda k: strengths[k])
    else:
        i = min(range(len(strengths)), key=lambda k: strengths[k])
    value = float(curve.metric(metric)[i])
    return BudgetPoint(
        index=i,
        strength=strengths[i],
        metric=metric,
        value=value,
        value_se=float(curve.error(metric)[i]),
        gain=value - curve.unsteered[METRICS.index(metric)],
        perplexity=perplexity[i],
        perplexity_se=float(curve.error("perplexity")[i]),
        budget_perplexity=limit,
        within=bool(within),
    )


def choose_within_budget(
    curves: Mapping[K, ControlCurve],
    unsteered_perplexity: float,
    budget: float = FLUENCY_BUDGET,
    *,
    metric: str = "sentiment",
    setting: int = -1,
) -> K:
    """Among candidate steers (layers, features), each evaluated at one strength, the one with
    the highest ``metric`` whose perplexity is within the budget; when none is, the one with the
    lowest perplexity.

    Args:
        curves: a control curve per candidate, all on the same prompts.
        unsteered_perplexity: the reference (the unsteered perplexity of those prompts).
        budget: the allowed multiple of it.
        metric: what the chosen candidate maximises.
        setting: which row of each curve to read (the last by default).

    >>> import torch
    >>> from lmsci_mi.results import Meta
    >>> def curve(sentiment, ppl):  # one strength; metrics: sentiment, topic, perplexity, distinct
    ...     return ControlCurve(values=torch.tensor([[sentiment, 0, ppl, 1, 1, 1]]),
    ...         axes=("setting", "metric"), labels=(("c=+4",), METRICS),
    ...         meta=Meta(model="demo", sink=None), attributes=("c",), settings=((4.0,),),
    ...         unsteered=(0, 0, 20, 1, 1, 1), continuations=())
    >>> choose_within_budget({6: curve(0.4, 25), 9: curve(0.6, 40), 12: curve(0.3, 22)}, 20.0)
    6
    """
    if not curves:
        raise UserInputError("give at least one candidate curve")

    def read(name: str, key: K) -> float:
        return float(curves[key].metric(name)[setting])

    limit = budget * unsteered_perplexity
    ok = [k for k in curves if read("perplexity", k) <= limit]
    if ok:
        return max(ok, key=lambda k: read(metric, k))
    return min(curves, key=lambda k: read("perplexity", k))


def symmetric_strength_within_budget(
    curve: ControlCurve,
    candidates: Sequence[float] = (2.0, 1.0, 0.5),
    budget: float = FLUENCY_BUDGET,
    *,
    attribute: str | int = 0,
) -> float:
    """The largest candidate ``s`` whose perplexity at both ``+s`` and ``-s`` is within the
    budget, for a curve over a symmetric grid (the end of a two-sided control curve); the
    smallest candidate when none is.

    Raises:
        ValueError: a candidate whose ``+s`` or ``-s`` the curve does not hold.

    >>> import torch
    >>> from lmsci_mi.results import Meta
    >>> ppl = {-2.0: 50, -1.0: 24, 0.0: 20, 1.0: 29, 2.0: 40}
    >>> curve = ControlCurve(values=torch.tensor([[0, 0, p, 1, 1, 1] for p in ppl.values()]),
    ...     axes=("setting", "metric"), labels=(tuple(map(str, ppl)), METRICS),
    ...     meta=Meta(model="demo", sink=None), attributes=("sentiment",),
    ...     settings=tuple((s,) for s in ppl), unsteered=(0, 0, 20, 1, 1, 1), continuations=())
    >>> symmetric_strength_within_budget(curve, (2.0, 1.0))  # 50 at -2 is over 1.5 x 20
    1.0
    """
    column = _column(curve, attribute)
    perplexity = dict(zip((float(s[column]) for s in curve.settings),
                          curve.metric("perplexity").tolist(), strict=True))
    missing = [s for c in candidates for s in (c, -c) if s not in perplexity]
    if missing:
        raise UserInputError(f"the curve holds no setting at {missing}")
    limit = budget * curve.unsteered[METRICS.index("perplexity")]
    fits = [s for s in candidates if max(perplexity[s], perplexity[-s]) <= limit]
    return max(fits) if fits else min(candidates)

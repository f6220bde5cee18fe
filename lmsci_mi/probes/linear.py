"""Linear probes: L2-regularised multinomial logistic regression and ridge regression, with control
tasks (Hewitt & Liang 2019).

Features are standardised with the train split's statistics, the regularisation strength is chosen
on the validation split from a log grid, and the test split is scored once. Probes of many layers
(and a control task beside the real one) are fitted together as one batch of independent problems:
logistic regression full-batch with L-BFGS, ridge in closed form. After Conneau et al. 2018 and
Hewitt & Liang 2019; the logistic loss is scikit-learn's ``LogisticRegression``'s, rescaled.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
from jaxtyping import Float, Int
from torch import Tensor

from lmsci_mi.config import NOT_IN_NOTES, Config, config, paper
from lmsci_mi.errors import UnknownNameError, UserInputError
from lmsci_mi.registry import MethodRegistry
from lmsci_mi.stats import bootstrap_each, percentile_bounds

__all__ = [
    "PROBE_KINDS",
    "LinearProbe",
    "ProbeConfig",
    "ProbeFit",
    "ProbeKind",
    "Split",
    "control_labels",
    "fit_probe",
    "fit_probes",
]


# ---------------------------------------------------------------------- splits


@dataclass(frozen=True)
class Split:
    """Train, validation and test indices into a set of examples."""

    train: Int[Tensor, " n_train"]
    val: Int[Tensor, " n_val"]
    test: Int[Tensor, " n_test"]

    @classmethod
    def random(
        cls,
        n: int,
        *,
        fractions: Sequence[float] = (0.6, 0.2, 0.2),
        seed: int = 0,
        groups: Sequence[Hashable] | None = None,
    ) -> Split:
        """A seeded random split of ``n`` examples.

        Args:
            fractions: train, validation and test shares (they must sum to 1).
            groups: one key per example; a group goes whole into one split (e.g. all sentences
                about one city), so a probe cannot pass by recognising what it saw in training.

        Raises:
            ValueError: too few examples (or groups) to give every split at least one.

        >>> split = Split.random(10, seed=0)
        >>> len(split.train), len(split.val), len(split.test)
        (6, 2, 2)
        """
        if (
            len(fractions) != 3
            or not math.isclose(sum(fractions), 1.0, abs_tol=1e-6)
            or min(fractions) <= 0
        ):
            raise UserInputError(
                f"split fractions must be three positive shares summing to 1, not {fractions}"
            )
        keys = list(range(n)) if groups is None else list(dict.fromkeys(groups))
        if groups is not None and len(groups) != n:
            raise UserInputError(
                f"got {len(groups)} groups for {n} examples; give one group per example"
            )
        if len(keys) < 3:
            raise UserInputError(
                f"need at least 3 {'groups' if groups is not None else 'examples'} to "
                f"split into train/val/test, got {len(keys)}"
            )
        order = torch.randperm(len(keys), generator=torch.Generator().manual_seed(seed)).tolist()
        n_train = max(1, round(fractions[0] * len(keys)))
        n_val = max(1, min(round(fractions[1] * len(keys)), len(keys) - n_train - 1))
        n_train = min(n_train, len(keys) - n_val - 1)
        part = {
            keys[k]: 0 if r < n_train else 1 if r < n_train + n_val else 2
            for r, k in enumerate(order)
        }
        which = torch.tensor([part[i] if groups is None else part[groups[i]] for i in range(n)])
        return cls(*(torch.nonzero(which == s).flatten() for s in range(3)))


def control_labels(
    word_types: Sequence[Hashable], labels: Tensor, split: Split, *, seed: int = 0
) -> Tensor:
    """Hewitt & Liang's control task: each word type gets one label, drawn once (seeded) from the
    task's label distribution on the train split.

    Class indices are drawn from the train split's class frequencies; regression targets from the
    train split's values. Every occurrence of a type gets the same label, so the only way to fit
    the control task is to recognise the type.

    >>> y = torch.tensor([0, 1, 1, 0])
    >>> c = control_labels(["a", "b", "a", "c"], y, Split.random(4, seed=0))
    >>> bool(c[0] == c[2])
    True
    """
    if len(word_types) != labels.shape[0]:
        raise UserInputError(
            f"{len(word_types)} word types for {labels.shape[0]} labels; give one per example"
        )
    types = list(dict.fromkeys(word_types))
    index = {t: i for i, t in enumerate(types)}
    generator = torch.Generator().manual_seed(seed)
    pool = labels[split.train.to(labels.device)].cpu()
    draws = pool[torch.randint(len(pool), (len(types),), generator=generator)]
    return draws[torch.tensor([index[t] for t in word_types])].to(labels.device)


# ---------------------------------------------------------------------- config and results


@config
class ProbeConfig(Config):
    """How a linear probe is fitted and scored."""

    kind: str = field(
        default="logistic", metadata={"help": "probe kind: logistic (classes) or ridge (R²)"}
    )
    l2_grid: tuple[float, ...] = field(
        default=(1e-4, 1e-3, 1e-2, 1e-1, 1.0),
        metadata={
            "help": "L2 strengths tried on the validation split (loss = mean CE + l2/2·|W|²)",
            "ge": 0,
            "min_length": 1,
            **paper(
                NOT_IN_NOTES,
                "Hewitt & Liang 2019, EMNLP (weight decay raises selectivity; the strengths they "
                "used are not in our notes)",
            ),
        },
    )
    max_iter: int = field(default=100, metadata={"help": "L-BFGS iterations per strength", "ge": 1})
    fractions: tuple[float, ...] = field(
        default=(0.6, 0.2, 0.2),
        metadata={"help": "train/val/test shares", "min_length": 3, "max_length": 3},
    )
    seed: int = field(
        default=0, metadata={"help": "seed of the split, the control labels and the bootstrap"}
    )
    control: bool = field(
        default=True,
        metadata={
            "help": "also fit a control task (selectivity)",
            **paper(
                True,
                "Hewitt & Liang 2019, EMNLP, code: john-hewitt/control-tasks (each word type gets a "
                "label drawn once from the task's label distribution; selectivity = task accuracy "
                "− control accuracy)",
            ),
        },
    )
    bootstrap: int = field(
        default=1000, metadata={"help": "bootstrap resamples of the test score (0: none)", "ge": 0}
    )

    def validate(self) -> None:
        if self.kind not in PROBE_KINDS:
            raise UnknownNameError(
                f"unknown probe kind {self.kind!r}; choose one of {list(PROBE_KINDS.names())}"
            )


@dataclass(frozen=True)
class LinearProbe:
    """A fitted linear probe: ``standardise(x) @ weight + bias``.

    Attributes:
        weight, bias: ``[d, out]`` and ``[out]`` (``out`` = classes, or 1 for regression).
        mean, std: the train split's feature statistics.
        classes: the label of each output (classification), or ``()`` for regression.
        l2: the regularisation strength chosen on the validation split.
    """

    weight: Float[Tensor, "d out"]
    bias: Float[Tensor, " out"]
    mean: Float[Tensor, " d"]
    std: Float[Tensor, " d"]
    classes: tuple[Hashable, ...]
    l2: float

    def decision(self, features: Float[Tensor, "n d"]) -> Float[Tensor, "n out"]:
        """Logits (classification) or predictions ``[n, 1]`` (regression)."""
        x = (features.to(self.weight) - self.mean) / self.std
        return x @ self.weight + self.bias

    def predict(self, features: Float[Tensor, "n d"]) -> list[Hashable] | Tensor:
        """Predicted labels (classification) or values (regression)."""
        out = self.decision(features)
        if not self.classes:
            return out[:, 0]
        return [self.classes[i] for i in out.argmax(-1).tolist()]


@dataclass(frozen=True)
class ProbeFit:
    """One probe's fit and its scores.

    Attributes:
        probe: the fitted probe.
        score: test accuracy (logistic) or R² (ridge), scored once.
        val_score: the validation score of the chosen strength.
        baseline: the majority class's test accuracy (logistic) or the train mean's R² (ridge).
        interval: a 95% bootstrap interval of ``score`` over test resamples (NaN without one).
    """

    probe: LinearProbe
    score: float
    val_score: float
    baseline: float
    interval: tuple[float, float]


# ---------------------------------------------------------------------- probe kinds


class ProbeKind(Protocol):
    """A probe family: how targets are encoded, fitted and scored."""

    classification: bool

    def fit(
        self, x: Tensor, targets: Tensor, split: Split, n_out: int, config: ProbeConfig
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Fit every (target set, layer) problem; returns weight ``[K, L, d, out]``, bias
        ``[K, L, out]``, the chosen strength ``[K, L]`` and its validation score ``[K, L]``."""
        ...

    def score(self, out: Tensor, targets: Tensor) -> Tensor:
        """Scores ``[...]`` of outputs ``[..., n, out]`` against targets ``[..., n]``."""
        ...


PROBE_KINDS: MethodRegistry[type[ProbeKind]] = MethodRegistry("probe kind")
"""Probe kinds by name (``ProbeConfig.kind``); each is a class following :class:`ProbeKind`."""


@PROBE_KINDS.register("logistic", ProbeConfig, "multinomial logistic regression (accuracy)")
class LogisticProbe:
    """L2-regularised multinomial logistic regression, full-batch L-BFGS, warm-started along the
    grid from the strongest strength down.

    L-BFGS runs in preconditioned coordinates: the features' principal axes, each scaled by
    ``(eig/4 + l2)^-1/2``, the inverse square root of a bound on the loss's curvature along it.
    The objective and its minimum are unchanged (the penalty is still ``l2/2·|W|²`` in the
    standardised features); only the optimiser's path is. Real residual streams are strongly
    correlated, and without it L-BFGS needs several times more iterations to converge.
    """

    classification = True

    def fit(
        self, x: Tensor, targets: Tensor, split: Split, n_out: int, config: ProbeConfig
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        n_sets, n_layers, d = targets.shape[0], x.shape[0], x.shape[-1]
        axes, curvature = _principal_axes(x[:, split.train])
        train, val = x[:, split.train] @ axes, x[:, split.val] @ axes  # rotated, [L, n, d]
        y_train, y_val = targets[:, split.train], targets[:, split.val]
        params = torch.zeros(n_sets, n_layers, d + 1, n_out, device=x.device, dtype=x.dtype)
        best = torch.full((n_sets, n_layers), -1.0, device=x.device)
        best_params, best_l2 = params.clone(), torch.zeros(n_sets, n_layers, device=x.device)
        for l2 in sorted(config.l2_grid, reverse=True):
            scale = _preconditioner(curvature, l2)  # [L, d]
            params = _lbfgs_logistic(train, y_train, params, l2, config.max_iter, scale)
            score = self.score(_affine(val, params), y_val[:, None])
            better = score > best  # ties keep the stronger strength (smaller capacity)
            best = torch.where(better, score, best)
            best_params[better] = params[better]
            best_l2[better] = l2
        weight = torch.einsum("lde,kleo->kldo", axes, best_params[..., :-1, :])
        return weight, best_params[..., -1, :], best_l2, best

    def score(self, out: Tensor, targets: Tensor) -> Tensor:
        return (out.argmax(-1) == targets).float().mean(-1)


@PROBE_KINDS.register("ridge", ProbeConfig, "ridge regression (R²)")
class RidgeProbe:
    """Ridge regression in closed form, every strength from one eigendecomposition per layer."""

    classification = False

    def fit(
        self, x: Tensor, targets: Tensor, split: Split, n_out: int, config: ProbeConfig
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        train, val = x[:, split.train], x[:, split.val]
        y_train = targets[:, split.train].to(x.dtype)  # [K, n]
        offset = y_train.mean(-1)  # [K]; features are centred, so the bias is the mean target
        n = train.shape[1]
        evals, evecs = torch.linalg.eigh(train.transpose(1, 2) @ train)  # [L, d], [L, d, d]
        xty = torch.einsum("lnd,kn->kld", train, y_train - offset[:, None])
        rotated = torch.einsum("lde,kld->kle", evecs, xty)
        best = torch.full(targets.shape[:1] + x.shape[:1], -math.inf, device=x.device)
        best_w = torch.zeros(*best.shape, x.shape[-1], device=x.device, dtype=x.dtype)
        best_l2 = torch.zeros_like(best)
        for l2 in sorted(config.l2_grid, reverse=True):
            w = torch.einsum("lde,kle->kld", evecs, rotated / (evals + n * l2).clamp_min(1e-12))
            out = torch.einsum("lnd,kld->kln", val, w) + offset[:, None, None]
            score = self.score(out[..., None], targets[:, None, split.val].to(x.dtype))
            better = score > best
            best = torch.where(better, score, best)
            best_w[better] = w[better]
            best_l2[better] = l2
        bias = offset[:, None, None].expand(*best.shape, 1)
        return best_w[..., None], bias, best_l2, best

    def score(self, out: Tensor, targets: Tensor) -> Tensor:
        pred = out[..., 0]
        residual = ((targets - pred) ** 2).sum(-1)
        total = ((targets - targets.mean(-1, keepdim=True)) ** 2).sum(-1).clamp_min(1e-12)
        return 1 - residual / total


def _affine(x: Tensor, params: Tensor) -> Tensor:
    """``x [L, n, d]`` through ``params [K, L, d+1, out]`` (last row the bias) -> ``[K, L, n, out]``."""
    return torch.einsum("lnd,kldc->klnc", x, params[..., :-1, :]) + params[..., None, -1, :]


def _principal_axes(train: Tensor) -> tuple[Tensor, Tensor]:
    """Per layer, the eigenvectors ``[L, d, d]`` of the train features' covariance and the
    logistic loss's curvature bound along each (a quarter of the eigenvalue)."""
    covariance = train.transpose(1, 2) @ train / train.shape[1]
    eigenvalues, axes = torch.linalg.eigh(covariance)
    return axes, eigenvalues.clamp_min(0) / 4


def _preconditioner(curvature: Tensor, l2: float) -> Tensor:
    """``[L, d]`` coordinate scales ``(curvature + l2)^-1/2``, floored so that an unregularised
    fit on rank-deficient features stays finite."""
    floor = 1e-4 * curvature.amax(-1, keepdim=True).clamp_min(1e-12)
    return (curvature + l2).clamp_min(floor).rsqrt()


def _lbfgs_logistic(
    x: Tensor, y: Tensor, init: Tensor, l2: float, max_iter: int, scale: Tensor | None = None
) -> Tensor:
    """Minimise Σ_problems [mean cross-entropy + l2/2·|W|²] (bias unpenalised) from ``init``.

    The problems are independent, so the sum's minimum is each problem's minimum; one L-BFGS over
    all of them runs every layer's matrix products as one batched call. With ``scale`` ``[L, d]``
    the optimiser's variables are ``W / scale`` (the features are multiplied by ``scale``), a
    change of variables that keeps the same minimiser but evens out the curvature.
    """
    scale = torch.ones(x.shape[0], x.shape[-1], device=x.device) if scale is None else scale
    scaled_x = x * scale[:, None, :]
    weight_scale = scale[None, :, :, None]
    variables = init.clone()
    variables[..., :-1, :] /= weight_scale
    variables.requires_grad_(True)
    optimiser = torch.optim.LBFGS(
        [variables],
        lr=1,
        max_iter=max_iter,
        history_size=20,
        tolerance_grad=1e-4,
        tolerance_change=1e-9,
        line_search_fn="strong_wolfe",
    )
    n_classes = variables.shape[-1]
    flat_y = y[:, None, :].expand(-1, x.shape[0], -1).reshape(-1)

    def closure() -> Tensor:
        optimiser.zero_grad()
        logits = _affine(scaled_x, variables)
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, n_classes), flat_y, reduction="sum"
        )
        penalty = (variables[..., :-1, :] * weight_scale).pow(2).sum()
        loss = loss / x.shape[1] + 0.5 * l2 * penalty
        loss.backward()
        return loss

    with torch.enable_grad():
        optimiser.step(closure)  # type: ignore[arg-type]
    params = variables.detach()
    params[..., :-1, :] *= weight_scale
    return params


# ---------------------------------------------------------------------- fitting


def fit_probes(
    features: Float[Tensor, "layer n d"],
    labels: Sequence[Hashable] | Tensor,
    split: Split,
    config: ProbeConfig = ProbeConfig(),  # noqa: B008  (frozen, so a shared default is safe)
    *,
    word_types: Sequence[Hashable] | None = None,
) -> tuple[list[ProbeFit], list[ProbeFit] | None]:
    """Fit one probe per layer of ``features`` (and one per layer on the control task).

    Args:
        features: ``[layer, n, d]`` activations (any number of "layers": hooks, sites).
        labels: ``n`` class labels (logistic; any hashable) or values (ridge).
        split: train/validation/test indices.
        config: probe kind, strength grid, control task, bootstrap.
        word_types: the token at each probed position; with ``config.control``, the control task
            gives each type one random label (Hewitt & Liang) and is fitted the same way.

    Returns:
        ``(task fits, control fits or None)``, one :class:`ProbeFit` per layer each.

    Raises:
        ValueError: features and labels of different lengths, fewer than two classes in the train
            split, or an empty split.

    >>> x = torch.randn(1, 60, 4, generator=torch.Generator().manual_seed(0)); y = (x[0, :, 0] > 0).long()
    >>> fits, control = fit_probes(x, y, Split.random(60), ProbeConfig(control=False, bootstrap=0))
    >>> fits[0].score > 0.8, control is None
    (True, True)
    """
    kind = PROBE_KINDS.get(config.kind).function()
    if features.ndim != 3:
        raise UserInputError(f"features must be [layer, n, d], got shape {tuple(features.shape)}")
    n = features.shape[1]
    if len(labels) != n:
        raise UserInputError(
            f"{len(labels)} labels for {n} examples; give exactly one label per example"
        )
    if min(len(split.train), len(split.val), len(split.test)) == 0:
        raise UserInputError("every split (train, val, test) needs at least one example")
    classes, stacked = _target_sets(kind, labels, split, config, word_types, features.device)
    x, mean, std = _standardise(features, split)
    n_out = len(classes) if kind.classification else 1
    weight, bias, l2, val = kind.fit(x, stacked, split, n_out, config)
    test_out = torch.einsum("lnd,kldc->klnc", x[:, split.test], weight) + bias[:, :, None]
    test_y = stacked[:, split.test]
    scores = kind.score(test_out, test_y[:, None])
    baseline = _baseline(kind, stacked, split, n_out)
    intervals = _bootstrap(kind, test_out, test_y, config)
    fits = [
        [
            ProbeFit(
                LinearProbe(
                    weight[k, layer],
                    bias[k, layer],
                    mean[layer, 0],
                    std[layer, 0],
                    classes,
                    float(l2[k, layer]),
                ),
                float(scores[k, layer]),
                float(val[k, layer]),
                float(baseline[k]),
                (float(intervals[k, layer, 0]), float(intervals[k, layer, 1])),
            )
            for layer in range(x.shape[0])
        ]
        for k in range(stacked.shape[0])
    ]
    return fits[0], (fits[1] if config.control else None)


def fit_probe(
    features: Float[Tensor, "n d"],
    labels: Sequence[Hashable] | Tensor,
    split: Split,
    config: ProbeConfig = ProbeConfig(control=False),  # noqa: B008
    *,
    word_types: Sequence[Hashable] | None = None,
) -> ProbeFit:
    """Fit one probe on ``[n, d]`` features (see :func:`fit_probes`); the task's fit only.

    >>> x = torch.randn(90, 3, generator=torch.Generator().manual_seed(0))
    >>> y = ["hi" if v > 0 else "lo" for v in x[:, 1].tolist()]
    >>> fit = fit_probe(x, y, Split.random(90), ProbeConfig(control=False, bootstrap=0))
    >>> fit.probe.classes, fit.score > 0.8
    (('hi', 'lo'), True)
    """
    return fit_probes(features[None], labels, split, config, word_types=word_types)[0][0]


def _target_sets(
    kind: ProbeKind,
    labels: Sequence[Hashable] | Tensor,
    split: Split,
    config: ProbeConfig,
    word_types: Sequence[Hashable] | None,
    device: torch.device,
) -> tuple[tuple[Hashable, ...], Tensor]:
    """The classes and the ``[K, n]`` targets: the task's, then (with ``config.control``) the
    control task's."""
    classes, targets = _encode_targets(labels, kind.classification, device)
    if kind.classification and len(set(targets[split.train].tolist())) < 2:
        raise UserInputError(
            f"the train split holds a single class ({classes[int(targets[split.train][0])]!r}); "
            "a probe needs at least two classes"
        )
    sets = [targets]
    if config.control:
        if word_types is None:
            raise UserInputError("config.control needs word_types (the token at each probed position)")
        sets.append(control_labels(word_types, targets, split, seed=config.seed))
    return classes, torch.stack(sets)


def _standardise(features: Tensor, split: Split) -> tuple[Tensor, Tensor, Tensor]:
    """Features standardised with the train split's mean and std (per layer), and those stats."""
    x = features.float()
    mean = x[:, split.train].mean(1, keepdim=True)
    std = x[:, split.train].std(1, keepdim=True).clamp_min(1e-6)
    return (x - mean) / std, mean, std


def _encode_targets(
    labels: Sequence[Hashable] | Tensor, classification: bool, device: torch.device
) -> tuple[tuple[Hashable, ...], Tensor]:
    if not classification:
        return (), torch.as_tensor(labels, dtype=torch.float32, device=device)
    values = labels.tolist() if isinstance(labels, Tensor) else list(labels)
    classes = tuple(sorted(set(values), key=lambda v: (str(type(v)), v)))
    index = {c: i for i, c in enumerate(classes)}
    return classes, torch.tensor([index[v] for v in values], device=device)


def _baseline(kind: ProbeKind, targets: Tensor, split: Split, n_out: int) -> Tensor:
    """The majority class's test accuracy, or the train mean's test R², per target set."""
    train, test = targets[:, split.train], targets[:, split.test]
    if kind.classification:
        majority = torch.stack([torch.bincount(row, minlength=n_out).argmax() for row in train])
        return (test == majority[:, None]).float().mean(-1)
    pred = train.float().mean(-1, keepdim=True).expand_as(test)
    return kind.score(pred[..., None], test.float())


def _bootstrap(kind: ProbeKind, out: Tensor, targets: Tensor, config: ProbeConfig) -> Tensor:
    """95% percentile intervals ``[K, L, 2]`` of the test score over resampled test examples."""
    n_sets, n_layers, n_test = out.shape[:3]
    if config.bootstrap == 0:
        return torch.full((n_sets, n_layers, 2), math.nan)
    # One resample at a time: all of them at once would hold B copies of the test outputs.
    scores = bootstrap_each(
        lambda d: kind.score(out[:, :, d], targets[:, None, d]),
        n_test,
        n_resamples=config.bootstrap,
        seed=config.seed,
        device=out.device,
    )  # [B, K, L]
    return percentile_bounds(scores, axis=0, nan_policy="omit").float().cpu()

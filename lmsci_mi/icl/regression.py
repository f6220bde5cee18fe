"""A transformer that learns linear regression in context (Garg et al. 2022), the algorithms it is
compared with (least squares, ridge, one step of gradient descent, k-nearest neighbours,
averaging), the squared prediction difference between them (Akyürek et al. 2022) and probes of the
algorithms' intermediate quantities (Xᵀy, the least-squares ŵ, w) by layer. Trained on the CPU by
:mod:`lmsci_mi.training`; the probes fit the probes package's ridge probe (a documented use).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens import HookedTransformer, HookedTransformerConfig

from lmsci_mi.config import Config, config, paper
from lmsci_mi.errors import UserInputError
from lmsci_mi.hooks import registry_for
from lmsci_mi.probes.linear import ProbeConfig, Split, fit_probes
from lmsci_mi.results import Meta, Result, result_type
from lmsci_mi.sites import hook_name, layer_hooks
from lmsci_mi.stats import (
    Interval,
    bootstrap_each,
    bootstrap_interval,
    bootstrap_replicates,
    percentile_bounds,
)
from lmsci_mi.training import (
    TrainConfig,
    TrainingRecord,
    load_or_train,
    train_model,
    trained_folder,
    training_key,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "ALGORITHMS",
    "PROBE_TARGETS",
    "ICLRegressionConfig",
    "RegressionBatch",
    "RegressionCurves",
    "RegressionEvaluation",
    "RegressionProbes",
    "RegressionTransformer",
    "averaging",
    "best_step_sizes",
    "evaluate_regression",
    "gradient_descent_step",
    "interleave",
    "k_nearest_neighbours",
    "least_squares",
    "load_regression_model",
    "predict_regression",
    "random_regression_model",
    "regression_folder",
    "regression_probes",
    "ridge",
    "sample_regression",
    "squared_errors",
    "squared_prediction_difference",
    "train_regression_model",
]

_GARG = "Garg et al. 2022, code: dtsip/in-context-learning"
_AKYUREK = "Akyürek et al. 2022, code: google-research incontext/"
_DATA = "docs/data/icl_regression.json"

# Bump when the code changes what a config trains, so that stale cached weights are not reused.
_TRAIN_FORMAT = 1
_CHECKPOINT_EVERY = 500
"""Steps between checkpoints of a cached run (not in the key: they leave the weights alone)."""

_EVAL_SEED = 2**40
"""Evaluation, dev and probe prompts draw from seeds at and above this; the trainer's are
``seed * 1_000_003 + step``, below it for any seed under 10⁶, so no test prompt was trained on."""


@config
class ICLRegressionConfig(Config):
    """The task, the GPT and its training run: every field is part of the weights' cache key.

    Garg et al.'s setup shrunk to this 2-core CPU. Their curriculum (dimensions 5 -> 20 and points
    11 -> 41, one step every 2,000 steps) is dropped: our whole task (d = 5, about 2d–3d points)
    is its first stage. Each step draws fresh prompts, as theirs does; the loss is the mean squared
    error of every y prediction given its prefix, read at the x positions. The noise (σ = 1; theirs
    is noiseless) gives least squares a non-zero error to compare with and makes ridge with λ = σ²
    the Bayes predictor. Each default that differs from theirs says why; the trained model's
    numbers are in docs/data/icl_regression.json (benchmarks/icl_regression.py).
    """

    d: int = field(default=5, metadata={
        "help": "input dimension d (x, w ~ N(0, I_d))", "ge": 1,
        **paper(20, f"{_GARG} src/conf/base.yaml model.n_dims (the curriculum starts at 5)",
                why="CPU budget: d = 5 is the curriculum's first stage"),
    })
    n_points: int = field(default=16, metadata={
        "help": "(x, y) pairs per training prompt; predictions use 0 … n_points − 1 examples", "ge": 2,
        **paper(41, f"{_GARG} src/conf/linear_regression.yaml curriculum.points.end (start 11)",
                why="n up to 3d = 15 examples covers the acceptance point n = 2d at d = 5"),
    })
    noise_std: float = field(default=1.0, metadata={
        "help": "standard deviation of the noise added to y = w·x (0: noiseless)", "ge": 0,
        **paper(0.0, f"{_GARG} src/tasks.py LinearRegression (y = w·x, no noise)",
                why="noiseless least squares is exact (error 0) at n >= d, so no model can come "
                    "'within 20 %' of it; with noise σ = 1 least squares' error at n = 2d is "
                    "σ²(1 + d/(n − d − 1)) = 2.25 and ridge with λ = σ² is the Bayes predictor"),
    })
    n_layers: int = field(default=4, metadata={
        "help": "transformer layers", "ge": 1,
        **paper(12, f"{_GARG} src/conf/models/standard.yaml n_layer (small: 6, tiny: 3)",
                why="CPU budget (between their tiny and small models)"),
    })
    d_model: int = field(default=64, metadata={
        "help": "residual width", "ge": 1,
        **paper(256, f"{_GARG} src/conf/models/standard.yaml n_embd (small: 128, tiny: 64)",
                why="CPU budget (their tiny model's width): at 2,000 steps it was within 10 % of "
                    "ridge at n = 2d, at 0.12 CPU s per step; width 128 costs 0.30"),
    })
    n_heads: int = field(default=4, metadata={
        "help": "attention heads per layer", "ge": 1,
        **paper(8, f"{_GARG} src/conf/models/standard.yaml n_head (small: 4, tiny: 2)",
                why="CPU budget (their small model's heads)"),
    })
    steps: int = field(default=10000, metadata={
        "help": "optimiser steps", "ge": 1,
        **paper(500001, f"{_GARG} src/conf/base.yaml training.train_steps",
                why=f"CPU budget: about 20 min at 1 thread ({_DATA}: training)"),
    })
    batch_size: int = field(default=64, metadata={
        "help": "prompts per step", "ge": 1,
        **paper(64, f"{_GARG} src/conf/base.yaml training.batch_size"),
    })
    lr: float = field(default=1e-3, metadata={
        "help": "peak AdamW learning rate (cosine decay to 10 % after a linear warm-up)", "gt": 0,
        **paper(1e-4, f"{_GARG} src/conf/base.yaml training.learning_rate (Adam, constant)",
                why="1/50 of their steps: a larger rate with warm-up and decay, clipped to norm 1"),
    })
    warmup: int = field(default=300, metadata={
        "help": "linear warm-up steps", "ge": 0,
        **paper(0, f"{_GARG} src/train.py (a constant learning rate)",
                why="the larger peak rate starts from a ramp"),
    })
    weight_decay: float = field(default=0.0, metadata={
        "help": "AdamW weight decay", "ge": 0,
        **paper(0.0, f"{_GARG} src/train.py (torch.optim.Adam, no weight decay)"),
    })
    seed: int = field(default=0, metadata={"help": "seeds the initial weights and the prompts"})

    def validate(self) -> None:
        if self.d_model % self.n_heads:
            raise UserInputError(
                f"d_model ({self.d_model}) must be a multiple of n_heads ({self.n_heads})"
            )

    def hooked_config(self) -> HookedTransformerConfig:
        """The GPT-2-style backbone: learned positions, LayerNorm, GELU MLPs, no dropout. The
        embedding matrix is the read-in (``d_vocab`` = d) and the unembedding the read-out
        (``d_vocab_out`` = 1)."""
        return HookedTransformerConfig(
            n_layers=self.n_layers, d_model=self.d_model, n_heads=self.n_heads,
            d_head=self.d_model // self.n_heads, d_mlp=4 * self.d_model,
            n_ctx=2 * self.n_points, d_vocab=self.d, d_vocab_out=1, act_fn="gelu_new",
            normalization_type="LN", positional_embedding_type="standard", seed=self.seed,
            # on the CPU, so that a seed gives the same weights (and cache entry) everywhere
            device="cpu",
        )

    def train_config(self) -> TrainConfig:
        """The run in :mod:`lmsci_mi.training`'s terms: AdamW, warm-up and cosine decay to 10 %,
        gradients clipped to norm 1."""
        return TrainConfig(
            steps=self.steps, batch_size=self.batch_size, lr=self.lr, schedule="cosine",
            warmup=min(self.warmup, self.steps), final_lr_fraction=0.1,
            weight_decay=self.weight_decay, grad_clip=1.0, seed=self.seed,
            checkpoint_every=_CHECKPOINT_EVERY,
        )


# ---------------------------------------------------------------------- the task


@dataclass(frozen=True)
class RegressionBatch:
    """Prompts of one task each: ``ys[b, i] = ws[b] · xs[b, i] + noise``."""

    xs: Float[Tensor, "batch point d"]
    ys: Float[Tensor, "batch point"]
    ws: Float[Tensor, "batch d"]


def sample_regression(
    n_prompts: int, d: int, n_points: int, *, noise_std: float = 0.0, seed: int = 0
) -> RegressionBatch:
    """Seeded prompts of Garg et al.'s task: x_i, w ~ N(0, I_d), y_i = w·x_i + N(0, noise_std²).

    Draws from its own generator, never the global random state.

    Raises:
        UserInputError: a count below 1 or a negative noise.

    >>> batch = sample_regression(2, 3, 4, seed=1)
    >>> tuple(batch.xs.shape), bool(torch.allclose(batch.ys, torch.einsum("bnd,bd->bn", batch.xs, batch.ws)))
    ((2, 4, 3), True)
    """
    for name, value in (("n_prompts", n_prompts), ("d", d), ("n_points", n_points)):
        if value < 1:
            raise UserInputError(f"{name} must be at least 1, not {value}")
    if noise_std < 0:
        raise UserInputError(f"noise_std must be >= 0, not {noise_std}")
    generator = torch.Generator().manual_seed(seed)
    xs = torch.randn(n_prompts, n_points, d, generator=generator)
    ws = torch.randn(n_prompts, d, generator=generator)
    ys = torch.einsum("bnd,bd->bn", xs, ws)
    if noise_std:
        ys = ys + noise_std * torch.randn(n_prompts, n_points, generator=generator)
    return RegressionBatch(xs, ys, ws)


def _checked(xs: Tensor, ys: Tensor, d: int | None = None) -> None:
    if xs.ndim != 3 or ys.ndim != 2 or xs.shape[:2] != ys.shape:
        raise UserInputError(
            f"xs must be [batch, point, d] and ys [batch, point] with the same batch and points; "
            f"got xs {tuple(xs.shape)} and ys {tuple(ys.shape)}"
        )
    if d is not None and xs.shape[-1] != d:
        raise UserInputError(f"xs have d = {xs.shape[-1]}, but the model reads d = {d}")


def interleave(xs: Float[Tensor, "batch point d"], ys: Float[Tensor, "batch point"]) -> Tensor:
    """The model's input ``[batch, 2·point, d]``: x_1, y_1, x_2, y_2, …, each y zero-padded to d
    (Garg et al.'s ``_combine``).

    >>> interleave(torch.ones(1, 2, 3), torch.tensor([[5.0, 6.0]]))[0, :, 0].tolist()
    [1.0, 5.0, 1.0, 6.0]
    """
    _checked(xs, ys)
    wide = torch.zeros_like(xs)
    wide[..., 0] = ys
    return torch.stack((xs, wide), dim=2).flatten(1, 2)


# ---------------------------------------------------------------------- the model


class RegressionTransformer(HookedTransformer):
    """A HookedTransformer that reads real vectors: ``input_to_embed`` maps a ``[batch, pos, d]``
    input through the embedding matrix (the read-in, ``z @ W_E``) instead of looking up token ids,
    so every hook point (``hook_embed``, ``hook_pos_embed``, the blocks) works as on a language
    model; the unembedding (``d_vocab_out`` = 1) is the read-out."""

    def input_to_embed(  # type: ignore[override]
        self, input: Tensor, prepend_bos: Any = None, padding_side: Any = None,
        attention_mask: Tensor | None = None, past_kv_cache: Any = None,
    ) -> tuple[Tensor, None, Tensor | None, None]:
        if not torch.is_floating_point(input) or input.ndim != 3 or input.shape[-1] != self.cfg.d_vocab:
            raise UserInputError(
                f"the regression transformer reads [batch, pos, {self.cfg.d_vocab}] float "
                f"vectors (interleave(xs, ys)), not {input.dtype} {tuple(input.shape)}"
            )
        if input.shape[1] > self.cfg.n_ctx:
            raise UserInputError(
                f"{input.shape[1]} positions exceed the model's {self.cfg.n_ctx} "
                f"({self.cfg.n_ctx // 2} points)"
            )
        # Garg et al.'s read-in is Linear(d, d_model) with a bias; here the learned position
        # embedding added next carries any constant offset, so W_E alone is as expressive.
        embed = self.hook_embed(input.to(self.embed.W_E) @ self.embed.W_E)
        residual, shortformer = self.get_residual(embed, 0, return_shortformer_pos_embed=True)
        return residual, None, shortformer, None


def predict_regression(
    model: HookedTransformer, xs: Tensor, ys: Tensor, *, batch_size: int = 500
) -> Float[Tensor, "batch point"]:
    """The model's prediction of each y_i from x_1, y_1, …, x_i (read at the x positions), in
    batches, without gradients. Reads the model only.

    Raises:
        UserInputError: ``xs`` of another d than the model's, or mismatched shapes.
    """
    _checked(xs, ys, model.cfg.d_vocab)
    device = next(model.parameters()).device
    out = []
    with torch.no_grad():
        for start in range(0, xs.shape[0], batch_size):
            z = interleave(xs[start : start + batch_size], ys[start : start + batch_size])
            out.append(model(z.to(device))[:, ::2, 0].float().cpu())
    return torch.cat(out)


def _loss(model: HookedTransformer, batch: tuple[Tensor, Tensor]) -> Tensor:
    """Mean squared error of every y prediction given its prefix (Garg et al.'s training loss)."""
    xs, ys = batch
    return (model(interleave(xs, ys))[:, ::2, 0] - ys).pow(2).mean()


def _sampler(config: ICLRegressionConfig) -> Callable[[int, int], tuple[Tensor, Tensor]]:
    def sample(step: int, batch_size: int) -> tuple[Tensor, Tensor]:
        batch = sample_regression(batch_size, config.d, config.n_points,
                                  noise_std=config.noise_std, seed=config.seed * 1_000_003 + step)
        return batch.xs, batch.ys
    return sample


def train_regression_model(
    config: ICLRegressionConfig | None = None,
    *,
    checkpoints: Path | None = None,
    threads: int | None = None,
    progress: bool = False,
    on_step: Callable[[int, Any], None] | None = None,
) -> tuple[RegressionTransformer, TrainingRecord]:
    """Train the regression GPT from its seeded initial weights (no cache; see
    :func:`load_regression_model`), on the CPU, with :func:`lmsci_mi.training.train_model`:
    ``checkpoints`` is the folder a stopped run resumes from (bitwise, at one thread), and
    ``on_step(step, model)`` runs after each step, outside the recorded cost.

    >>> tiny = ICLRegressionConfig(d=2, n_points=3, n_layers=1, d_model=8, n_heads=2, steps=2,
    ...                            batch_size=4)
    >>> model, record = train_regression_model(tiny)
    >>> record.steps, model.cfg.d_vocab_out
    (2, 1)
    """
    config = config if config is not None else ICLRegressionConfig()
    model, record = train_model(
        lambda: RegressionTransformer(config.hooked_config()), _sampler(config), _loss,
        config.train_config(), checkpoints=checkpoints, threads=threads, progress=progress,
        desc="icl regression", on_step=on_step,
    )
    return model, record


def regression_folder(config: ICLRegressionConfig) -> Path:
    """The cache folder of the model trained with ``config``."""
    key = training_key(_TRAIN_FORMAT, model=config.params())
    return trained_folder("icl", f"regression-{key}")


def load_regression_model(
    config: ICLRegressionConfig | None = None,
    *,
    train: bool = True,
    retrain: bool = False,
    threads: int | None = None,
    progress: bool = False,
) -> tuple[RegressionTransformer, dict[str, Any]]:
    """The trained model from the cache, else trained (resuming an interrupted run) and cached
    (:func:`lmsci_mi.training.load_or_train`); with its record: the config and the run's cost and
    loss curve (:class:`~lmsci_mi.training.TrainingRecord`).

    Raises:
        FileNotFoundError: nothing cached and ``train`` is False.
    """
    config = config if config is not None else ICLRegressionConfig()
    folder = regression_folder(config)

    def run(checkpoints: Path) -> tuple[RegressionTransformer, dict[str, Any]]:
        model, record = train_regression_model(config, checkpoints=checkpoints, threads=threads,
                                               progress=progress)
        return model, {"config": config.params(), "run": record.to_dict()}

    return load_or_train(
        folder, lambda: RegressionTransformer(config.hooked_config()), run, retrain=retrain,
        missing=None if train else f"no trained regression model cached at {folder}",
    )


def random_regression_model(config: ICLRegressionConfig | None = None) -> RegressionTransformer:
    """The same architecture with its seeded initial weights (the trained model's start): the
    probes' baseline."""
    config = config if config is not None else ICLRegressionConfig()
    torch.manual_seed(config.seed)
    return RegressionTransformer(config.hooked_config()).eval()


# ---------------------------------------------------------------------- the algorithms
# Each predicts y_i from the i examples before it (online, as Garg et al. and Akyürek et al. run
# their baselines), returns [batch, point], and predicts 0 with no example. They compute in float64:
# near n = d the least-squares system is ill-conditioned, and float32 would add its own error.


def _online(xs: Tensor, ys: Tensor, weights: Callable[[Tensor, Tensor], Tensor]) -> Tensor:
    """``pred[:, i] = x_i · weights(X[:, :i], y[:, :i])`` for i >= 1, and 0 at i = 0."""
    _checked(xs, ys)
    x, y = xs.double(), ys.double()
    pred = torch.zeros_like(y)
    for i in range(1, x.shape[1]):
        w = weights(x[:, :i], y[:, :i])  # [batch, d]
        pred[:, i] = (x[:, i] * w).sum(-1)
    return pred.to(ys.dtype)


def least_squares(xs: Tensor, ys: Tensor) -> Float[Tensor, "batch point"]:
    """Ordinary least squares on the examples so far: ŵ = X⁺y, the minimum-norm solution when
    there are fewer examples than dimensions (Garg et al.'s ``LeastSquaresModel``).

    >>> b = sample_regression(3, 2, 4, seed=0)
    >>> bool(torch.allclose(least_squares(b.xs, b.ys)[:, 2:], b.ys[:, 2:], atol=1e-5))
    True
    """
    return _online(xs, ys, lambda x, y: (torch.linalg.pinv(x) @ y[..., None])[..., 0])


def ridge(xs: Tensor, ys: Tensor, lam: float) -> Float[Tensor, "batch point"]:
    """Ridge regression, ŵ = (XᵀX + λI)⁻¹Xᵀy (sklearn's ``Ridge(alpha=λ, fit_intercept=False)``,
    Akyürek et al.'s ``alpha``). With w ~ N(0, I) and noise variance σ², λ = σ² gives the
    posterior mean of w: the Bayes-optimal predictor.

    Raises:
        UserInputError: λ <= 0 (use :func:`least_squares`).

    >>> ridge(torch.ones(1, 2, 1), torch.tensor([[2.0, 2.0]]), 1.0).tolist()  # ŵ = 2·1/(1 + 1)
    [[0.0, 1.0]]
    """
    if lam <= 0:
        raise UserInputError(f"ridge needs λ > 0, not {lam}; λ = 0 is least_squares")

    def fit(x: Tensor, y: Tensor) -> Tensor:
        gram = x.transpose(1, 2) @ x + lam * torch.eye(x.shape[-1], dtype=x.dtype)
        return torch.linalg.solve(gram, (x.transpose(1, 2) @ y[..., None]))[..., 0]

    return _online(xs, ys, fit)


def _gd_direction(xs: Tensor, ys: Tensor) -> Tensor:
    """``a[:, i] = x_i · (1/i) Σ_{j<i} x_j y_j`` (0 at i = 0): one gradient step from w = 0 on
    L(w) = 1/(2i) Σ (w·x_j − y_j)² moves w by η/i · Xᵀy, so that step predicts η · a."""
    _checked(xs, ys)
    x, y = xs.double(), ys.double()
    xty = torch.cumsum(x * y[..., None], dim=1)  # through point i
    before = torch.cat([torch.zeros_like(xty[:, :1]), xty[:, :-1]], dim=1)
    counts = torch.arange(x.shape[1], dtype=x.dtype).clamp_min(1)
    return (x * before).sum(-1) / counts


def gradient_descent_step(
    xs: Tensor, ys: Tensor, step_size: float | Tensor = 1.0
) -> Float[Tensor, "batch point"]:
    """One step of gradient descent from w = 0 on the mean squared error of the examples so far
    (von Oswald et al. 2023's GD; Akyürek et al.'s one-step SGD with the full window):
    w₁ = (η/n)Xᵀy. ``step_size`` is one η or one per number of examples ``[point]``
    (:func:`best_step_sizes`). With η = 1 it is :func:`averaging`.

    >>> xs, ys = torch.tensor([[[1.0], [2.0]]]), torch.tensor([[3.0, 4.0]])
    >>> gradient_descent_step(xs, ys, 0.5).tolist()  # x_2 · 0.5 · (1·3)/1
    [[0.0, 3.0]]
    """
    eta = torch.as_tensor(step_size, dtype=torch.float64)
    if eta.ndim == 1 and eta.shape[0] != xs.shape[1]:
        raise UserInputError(f"{eta.shape[0]} step sizes for {xs.shape[1]} points; give one per point")
    return (eta * _gd_direction(xs, ys)).to(ys.dtype)


def best_step_sizes(xs: Tensor, ys: Tensor) -> Float[Tensor, " point"]:
    """For each number of examples n, the step size η that minimises the mean squared error of
    :func:`gradient_descent_step` on this (dev) batch, in closed form: η_n = Σ a·y / Σ a² over
    the prompts (0 at n = 0, where the step predicts 0 whatever η is).

    >>> b = sample_regression(4000, 3, 6, seed=0)
    >>> [round(v, 1) for v in best_step_sizes(b.xs, b.ys)[1:3].tolist()]  # ≈ n / (n + d + 1)
    [0.2, 0.3]
    """
    a, y = _gd_direction(xs, ys), ys.double()
    return ((a * y).sum(0) / (a * a).sum(0).clamp_min(1e-300)).float()


def k_nearest_neighbours(xs: Tensor, ys: Tensor, k: int = 3) -> Float[Tensor, "batch point"]:
    """The mean y of the k nearest earlier examples in Euclidean distance (all of them while
    there are fewer than k; Garg et al.'s ``NNModel(n_neighbors=3)``, uniform weights).

    Raises:
        UserInputError: k < 1.

    >>> xs = torch.tensor([[[0.0], [10.0], [1.0], [9.0]]]); ys = torch.tensor([[1.0, 5.0, 2.0, 0.0]])
    >>> k_nearest_neighbours(xs, ys, k=1).tolist()  # x=1 is nearest 0 (y 1), x=9 nearest 10 (y 5)
    [[0.0, 1.0, 1.0, 5.0]]
    """
    if k < 1:
        raise UserInputError(f"k must be at least 1, not {k}")
    _checked(xs, ys)
    x, y = xs.double(), ys.double()
    pred = torch.zeros_like(y)
    for i in range(1, x.shape[1]):
        distance = (x[:, :i] - x[:, i : i + 1]).pow(2).sum(-1)
        nearest = distance.topk(min(k, i), dim=1, largest=False).indices
        pred[:, i] = y[:, :i].gather(1, nearest).mean(1)
    return pred.to(ys.dtype)


def averaging(xs: Tensor, ys: Tensor) -> Float[Tensor, "batch point"]:
    """ŵ = the mean of x_j y_j over the examples so far (Garg et al.'s ``AveragingModel``):
    one gradient step with η = 1.

    >>> averaging(torch.tensor([[[1.0], [2.0]]]), torch.tensor([[3.0, 4.0]])).tolist()
    [[0.0, 6.0]]
    """
    return gradient_descent_step(xs, ys, 1.0)


ALGORITHMS: tuple[str, ...] = ("least_squares", "ridge", "gd_step", "knn", "averaging")
"""The algorithms :func:`evaluate_regression` compares with the model, in its series order."""


# ---------------------------------------------------------------------- errors and differences


@result_type
class RegressionCurves(Result):
    """A squared error or difference per number of in-context examples, for several series.

    ``values`` ``[series, n]``: the mean over prompts of the squared error of each series'
    prediction (``metric`` "squared_error"), or of its squared difference from the model's
    (``metric`` "squared_prediction_difference"), divided by d as Garg et al. plot it (predicting
    0 scores 1 + σ²/d). ``low``/``high`` hold the 95 % percentile-bootstrap interval over prompts.
    """

    low: Tensor
    high: Tensor
    metric: str
    n_prompts: int

    def at(self, series: str, n: int) -> tuple[float, float, float]:
        """``(mean, low, high)`` of one series at ``n`` examples."""
        names = self.axis_labels(0)
        if series not in names:
            raise UserInputError(f"no series {series!r}; the curves hold {names}")
        row = names.index(series)
        return float(self.values[row, n]), float(self.low[row, n]), float(self.high[row, n])

    def _draw(self, title: str) -> Figure:
        from lmsci_mi.viz.plots import plot_curves

        return plot_curves(self.values, series=self.axis_labels(0),
                           x_label="in-context examples n", title=title)


def _curves(
    per_prompt: Mapping[str, Tensor], metric: str, meta: Meta, *, n_resamples: int, seed: int
) -> RegressionCurves:
    """Means over prompts ``[series, n]`` of ``[prompt, n]`` values, with percentile-bootstrap
    intervals (the prompts resampled; one series at a time to bound memory)."""
    means, bounds = [], []
    for values in per_prompt.values():
        by_n = values.double().T  # [n, prompt]: the bootstrap resamples the last axis
        means.append(by_n.mean(-1))
        replicates = bootstrap_replicates(by_n, n_resamples=n_resamples, seed=seed)
        bounds.append(percentile_bounds(replicates))
    n_points = means[0].shape[0]
    interval = torch.stack(bounds)
    return RegressionCurves(
        values=torch.stack(means).float(), axes=("series", "n"),
        labels=(tuple(per_prompt), tuple(str(n) for n in range(n_points))), meta=meta,
        low=interval[..., 0].float(), high=interval[..., 1].float(), metric=metric,
        n_prompts=int(next(iter(per_prompt.values())).shape[0]),
    )


def _meta(name: str, params: Mapping[str, Any], seed: int) -> Meta:
    return Meta(model=name, seed=seed, data_source="sample_regression (x, w ~ N(0, I_d))",
                params=dict(params), sink=None)


def squared_errors(
    predictions: Mapping[str, Tensor], ys: Tensor, *, d: int = 1, n_resamples: int = 1000,
    seed: int = 0, meta: Meta | None = None,
) -> RegressionCurves:
    """Each series' squared error per number of examples, divided by ``d``, with intervals over
    prompts (see :class:`RegressionCurves`). ``predictions``: series -> ``[prompt, point]``.

    >>> ys = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> squared_errors({"zero": torch.zeros(2, 2)}, ys, n_resamples=10).values.tolist()
    [[5.0, 10.0]]
    """
    meta = meta if meta is not None else _meta("predictions", {"d": d}, seed)
    per_prompt = {name: (p.double() - ys.double()).pow(2) / d for name, p in predictions.items()}
    return _curves(per_prompt, "squared_error", meta, n_resamples=n_resamples, seed=seed)


def squared_prediction_difference(
    model: Tensor, algorithms: Mapping[str, Tensor], *, d: int = 1, n_resamples: int = 1000,
    seed: int = 0, meta: Meta | None = None,
) -> RegressionCurves:
    """Akyürek et al.'s squared prediction difference: the mean over prompts of (ŷ_model −
    ŷ_algorithm)² per number of examples, divided by ``d``, with intervals over prompts.

    >>> spd = squared_prediction_difference(torch.ones(3, 2), {"zero": torch.zeros(3, 2)}, n_resamples=10)
    >>> spd.values.tolist(), spd.metric
    ([[1.0, 1.0]], 'squared_prediction_difference')
    """
    meta = meta if meta is not None else _meta("predictions", {"d": d}, seed)
    per_prompt = {name: (model.double() - p.double()).pow(2) / d for name, p in algorithms.items()}
    return _curves(per_prompt, "squared_prediction_difference", meta, n_resamples=n_resamples,
                   seed=seed)


@dataclass(frozen=True)
class RegressionEvaluation:
    """The model against the algorithms on held-out prompts.

    Attributes:
        errors: squared error / d per n of the model and each algorithm (series "model", then
            :data:`ALGORITHMS`).
        differences: squared prediction difference / d per n between the model and each
            algorithm.
        ridge_lambda: the ridge's λ.
        step_sizes: the one-step GD's η per n, chosen on the dev prompts (:func:`best_step_sizes`).
        k: the nearest neighbours' k.
        n_dev: dev prompts the step sizes were chosen on.
        predictions: each series' predictions ``[prompt, point]`` on the held-out prompts.
        ys: the held-out prompts' targets ``[prompt, point]``.
    """

    errors: RegressionCurves
    differences: RegressionCurves
    ridge_lambda: float
    step_sizes: tuple[float, ...]
    k: int
    n_dev: int
    predictions: Mapping[str, Tensor]
    ys: Tensor

    def error_ratio(
        self, n: int, series: str = "model", reference: str = "least_squares", *,
        n_resamples: int = 1000, seed: int = 0,
    ) -> Interval:
        """The ratio of two series' mean squared errors at ``n`` examples (the acceptance's
        model / least squares at n = 2d), with a paired percentile-bootstrap interval: each
        resample draws the same prompts for both."""
        for name in (series, reference):
            if name not in self.predictions:
                raise UserInputError(f"no series {name!r}; the evaluation holds {list(self.predictions)}")
        if not 0 <= n < self.ys.shape[1]:
            raise UserInputError(f"n must lie in 0 … {self.ys.shape[1] - 1}, not {n}")
        a, b = ((self.predictions[s][:, n].double() - self.ys[:, n].double()).pow(2)
                for s in (series, reference))
        interval = bootstrap_interval(
            (a, b), lambda x, y, axis: x.mean(axis) / y.mean(axis), n_resamples=n_resamples,
            seed=seed,
        )
        return replace(interval, method="paired percentile bootstrap (ratio of means)")


def evaluate_regression(
    model: HookedTransformer,
    config: ICLRegressionConfig,
    *,
    n_prompts: int = 1000,
    n_dev: int = 1000,
    ridge_lambda: float | None = None,
    k: int = 3,
    n_resamples: int = 1000,
    seed: int = 0,
) -> RegressionEvaluation:
    """Error curves and squared prediction differences on ``n_prompts`` held-out prompts of the
    config's task (seeds the trainer never draws). Reads the model only.

    Args:
        ridge_lambda: λ (None: σ², the Bayes-optimal value; 0.1 when the task is noiseless).
        k: the nearest neighbours' k (Garg et al.'s 3; Akyürek et al. use 5).
        seed: picks the held-out and dev prompts and the bootstrap.
    """
    lam = ridge_lambda if ridge_lambda is not None else (config.noise_std**2 or 0.1)
    draw = _EVAL_SEED + 16 * seed  # + 0: test, 1: dev, 2: the probes' prompts

    def prompts(n: int, offset: int) -> RegressionBatch:
        return sample_regression(n, config.d, config.n_points, noise_std=config.noise_std,
                                 seed=draw + offset)

    dev, test = prompts(n_dev, 1), prompts(n_prompts, 0)
    eta = best_step_sizes(dev.xs, dev.ys)
    algorithms = {
        "least_squares": least_squares(test.xs, test.ys),
        "ridge": ridge(test.xs, test.ys, lam),
        "gd_step": gradient_descent_step(test.xs, test.ys, eta),
        "knn": k_nearest_neighbours(test.xs, test.ys, k),
        "averaging": averaging(test.xs, test.ys),
    }
    own = predict_regression(model, test.xs, test.ys)
    params = {**config.params(), "ridge_lambda": lam, "k": k, "n_dev": n_dev}
    meta = _meta(f"icl-regression-{regression_folder(config).name}", params, seed)
    errors = squared_errors({"model": own, **algorithms}, test.ys, d=config.d,
                            n_resamples=n_resamples, seed=seed, meta=meta)
    differences = squared_prediction_difference(own, algorithms, d=config.d,
                                                n_resamples=n_resamples, seed=seed, meta=meta)
    return RegressionEvaluation(errors, differences, lam, tuple(eta.tolist()), k, n_dev,
                                {"model": own, **algorithms}, test.ys)


# ---------------------------------------------------------------------- probes


PROBE_TARGETS: tuple[str, ...] = ("xty", "w_least_squares", "w")
"""What :func:`regression_probes` reads: Xᵀy (the one GD step's direction), the least-squares
estimate ŵ = X⁺y, and the task's true w (Akyürek et al.'s probe target)."""


@result_type
class RegressionProbes(Result):
    """Ridge probes of the algorithms' intermediate quantities, read at the query's position.

    ``values`` ``[target, layer]``: the held-out R² of a ridge probe (:func:`lmsci_mi.probes.
    linear.fit_probes`, kind "ridge", its strength chosen on a validation split), averaged over
    the target's d coordinates; layer "embed" is the stream entering block 0, layer i the stream
    leaving block i. ``low``/``high``: 95 % percentile-bootstrap interval over the test prompts.
    """

    low: Tensor
    high: Tensor
    n_examples: int
    n_train: int
    n_test: int

    def _draw(self, title: str) -> Figure:
        from lmsci_mi.viz.plots import plot_curves

        return plot_curves(self.values, series=self.axis_labels(0), x_label="layer (0: embed)",
                           title=title)


def _probe_targets(batch: RegressionBatch, n: int) -> dict[str, Tensor]:
    x, y = batch.xs[:, :n].double(), batch.ys[:, :n].double()
    return {
        "xty": torch.einsum("bnd,bn->bd", x, y).float(),
        "w_least_squares": (torch.linalg.pinv(x) @ y[..., None])[..., 0].float(),
        "w": batch.ws,
    }


def _last_position_states(model: HookedTransformer, z: Tensor) -> tuple[Tensor, tuple[str, ...]]:
    """``[layer, prompt, d_model]``: the stream entering block 0, then leaving each block, at the
    last position (captured through the hook registry)."""
    hooks, labels = layer_hooks("resid_post", None, model.cfg.n_layers)
    names = [hook_name("resid_pre", 0), *hooks]
    with torch.no_grad(), registry_for(model).capture(names) as captured:
        model(z.to(next(model.parameters()).device), return_type=None)
    states = torch.stack([captured[name][:, -1].float().cpu() for name in names])
    return states, ("embed", *labels)


def _r2(pred: Tensor, truth: Tensor) -> Tensor:
    """R² over the last axis (prompts), against the scored prompts' own mean."""
    residual = (truth - pred).pow(2).sum(-1)
    total = (truth - truth.mean(-1, keepdim=True)).pow(2).sum(-1).clamp_min(1e-12)
    return 1 - residual / total


def regression_probes(
    model: HookedTransformer,
    config: ICLRegressionConfig,
    *,
    n_prompts: int = 2000,
    n_examples: int | None = None,
    probe: ProbeConfig | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
) -> RegressionProbes:
    """Fit ridge probes from each layer's stream at the query x (after ``n_examples`` examples,
    default 2d) to each of :data:`PROBE_TARGETS`, one probe per coordinate, and score them on
    held-out prompts. Reads the model only.

    Raises:
        UserInputError: ``n_examples`` outside 1 … n_points − 1.
    """
    n = n_examples if n_examples is not None else 2 * config.d
    if not 1 <= n < config.n_points:
        raise UserInputError(
            f"n_examples must lie in 1 … {config.n_points - 1} (the model's n_points − 1), not {n}"
        )
    probe = probe if probe is not None else ProbeConfig(kind="ridge", control=False, bootstrap=0)
    batch = sample_regression(n_prompts, config.d, n + 1, noise_std=config.noise_std,
                              seed=_EVAL_SEED + 16 * seed + 2)
    states, layers = _last_position_states(model, interleave(batch.xs, batch.ys)[:, :-1])
    split = Split.random(n_prompts, fractions=probe.fractions, seed=probe.seed)
    test = split.test
    preds, truths = [], []
    for values in _probe_targets(batch, n).values():
        per_coordinate = []
        for c in range(config.d):
            fits, _ = fit_probes(states, values[:, c], split, probe)
            per_coordinate.append(torch.stack(
                [fit.probe.decision(states[layer, test])[:, 0] for layer, fit in enumerate(fits)]))
        preds.append(torch.stack(per_coordinate))  # [coordinate, layer, test]
        truths.append(values[test].T[:, None, :])  # [coordinate, 1, test]
    pred, truth = torch.stack(preds), torch.stack(truths)  # [target, coordinate, layer, test]
    scores = _r2(pred, truth).mean(1)
    replicates = bootstrap_each(lambda i: _r2(pred[..., i], truth[..., i]).mean(1), len(test),
                                n_resamples=n_resamples, seed=seed)
    bounds = percentile_bounds(replicates, axis=0).float()
    meta = _meta(f"icl-regression-{regression_folder(config).name}",
                 {**config.params(), "n_examples": n, "n_prompts": n_prompts}, seed)
    return RegressionProbes(
        values=scores, axes=("target", "layer"), labels=(PROBE_TARGETS, layers), meta=meta,
        low=bounds[..., 0], high=bounds[..., 1], n_examples=n, n_train=len(split.train),
        n_test=len(test),
    )

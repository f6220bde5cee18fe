"""The in-context regression transformer (issue 39, item 4): the algorithms are the formulas they
are named after, the sampler is seeded, a short run lowers the loss and resumes bitwise, the
curves and probes have their shapes and intervals, and bad input gets a clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lmsci_mi.errors import UserInputError
from lmsci_mi.hooks import registry_for
from lmsci_mi.icl import regression
from lmsci_mi.icl.regression import (
    ALGORITHMS,
    PROBE_TARGETS,
    ICLRegressionConfig,
    RegressionCurves,
    averaging,
    best_step_sizes,
    evaluate_regression,
    gradient_descent_step,
    interleave,
    k_nearest_neighbours,
    least_squares,
    load_regression_model,
    predict_regression,
    regression_probes,
    ridge,
    sample_regression,
    squared_prediction_difference,
    train_regression_model,
)

TINY = ICLRegressionConfig(d=2, n_points=5, n_layers=1, d_model=16, n_heads=2, steps=12,
                           batch_size=16, lr=1e-2, warmup=2, noise_std=0.0, seed=3)


@pytest.fixture(scope="module")
def trained() -> regression.RegressionTransformer:
    return train_regression_model(TINY, threads=1)[0]


# ---------------------------------------------------------------------- the algorithms


def test_least_squares_recovers_w_from_d_noiseless_examples_and_is_min_norm_below() -> None:
    batch = sample_regression(20, 4, 9, seed=0)
    pred = least_squares(batch.xs, batch.ys)
    assert torch.allclose(pred[:, 4:], batch.ys[:, 4:], atol=1e-4)  # n >= d: exact
    assert not torch.allclose(pred[:, 1:4], batch.ys[:, 1:4], atol=1e-2)  # n < d: not
    # below d: the minimum-norm solution lies in the row space of the examples
    x, y = batch.xs[:, :2].double(), batch.ys[:, :2].double()
    w = x.transpose(1, 2) @ torch.linalg.solve(x @ x.transpose(1, 2), y[..., None])
    assert torch.allclose(pred[:, 2], (batch.xs[:, 2, None].double() @ w)[:, 0, 0].float(), atol=1e-5)
    assert torch.equal(pred[:, 0], torch.zeros(20))


def test_ridge_is_its_closed_form_and_rejects_lambda_zero() -> None:
    batch = sample_regression(5, 3, 6, noise_std=0.5, seed=1)
    pred = ridge(batch.xs, batch.ys, 0.7)
    x, y = batch.xs[:, :4].double(), batch.ys[:, :4].double()
    w = torch.linalg.inv(x.transpose(1, 2) @ x + 0.7 * torch.eye(3)) @ x.transpose(1, 2) @ y[..., None]
    assert torch.allclose(pred[:, 4], (batch.xs[:, 4, None].double() @ w)[:, 0, 0].float(), atol=1e-5)
    with pytest.raises(UserInputError, match="λ > 0"):
        ridge(batch.xs, batch.ys, 0.0)


def test_one_gd_step_is_the_autograd_step_from_zero() -> None:
    batch = sample_regression(3, 3, 5, noise_std=0.3, seed=2)
    eta, n = 0.4, 3
    w = torch.zeros(3, 3, requires_grad=True)
    loss = 0.5 * ((batch.xs[:, :n] @ w[..., None])[..., 0] - batch.ys[:, :n]).pow(2).mean(1).sum()
    (grad,) = torch.autograd.grad(loss, w)
    expected = (batch.xs[:, n] * (-eta * grad)).sum(-1)
    assert torch.allclose(gradient_descent_step(batch.xs, batch.ys, eta)[:, n], expected, atol=1e-5)
    assert torch.allclose(averaging(batch.xs, batch.ys), gradient_descent_step(batch.xs, batch.ys, 1.0))


def test_the_best_step_size_minimises_the_dev_error() -> None:
    dev = sample_regression(500, 3, 7, seed=4)
    eta = best_step_sizes(dev.xs, dev.ys)

    def error(step: torch.Tensor) -> torch.Tensor:
        return (gradient_descent_step(dev.xs, dev.ys, step) - dev.ys).pow(2).mean(0)[1:]

    best = error(eta)
    assert (best <= error(eta * 1.1) + 1e-6).all() and (best <= error(eta * 0.9) + 1e-6).all()
    with pytest.raises(UserInputError, match="one per point"):
        gradient_descent_step(dev.xs, dev.ys, eta[:3])


def test_k_nearest_neighbours_on_a_toy() -> None:
    xs = torch.tensor([[[0.0, 0.0], [5.0, 5.0], [1.0, 0.0], [4.0, 5.0], [0.0, 1.0]]])
    ys = torch.tensor([[1.0, 9.0, 3.0, 7.0, 0.0]])
    # point 3 (4, 5): nearest (5, 5) y 9 and (1, 0) y 3; point 4 (0, 1): (0, 0) y 1 and (1, 0)
    # y 3, and with k = 3 also (4, 5) y 7
    assert k_nearest_neighbours(xs, ys, k=2)[0].tolist() == [0.0, 1.0, 5.0, 6.0, 2.0]
    assert k_nearest_neighbours(xs, ys, k=3)[0, 4].item() == pytest.approx(11 / 3)
    with pytest.raises(UserInputError, match="k must be"):
        k_nearest_neighbours(xs, ys, k=0)


# ---------------------------------------------------------------------- the task and the model


def test_the_sampler_is_seeded_and_adds_the_stated_noise() -> None:
    a, b = sample_regression(400, 3, 6, noise_std=0.5, seed=7), sample_regression(400, 3, 6, noise_std=0.5, seed=7)
    assert torch.equal(a.xs, b.xs) and torch.equal(a.ys, b.ys) and torch.equal(a.ws, b.ws)
    assert not torch.equal(a.xs, sample_regression(400, 3, 6, noise_std=0.5, seed=8).xs)
    noise = a.ys - torch.einsum("bnd,bd->bn", a.xs, a.ws)
    assert noise.std().item() == pytest.approx(0.5, rel=0.05)
    assert interleave(a.xs, a.ys).shape == (400, 12, 3)


@pytest.mark.parametrize("bad", [{"n_prompts": 0}, {"d": 0}, {"n_points": -1}, {"noise_std": -1.0}])
def test_bad_task_sizes_are_refused(bad: dict) -> None:
    args = {"n_prompts": 2, "d": 2, "n_points": 3, **bad}
    noise = args.pop("noise_std", 0.0)
    with pytest.raises(UserInputError, match="must be"):
        sample_regression(**args, noise_std=noise)


def test_a_short_run_lowers_the_loss_and_resumes_bitwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trained: regression.RegressionTransformer
) -> None:
    held_out = sample_regression(200, TINY.d, TINY.n_points, seed=99)
    start = regression.random_regression_model(TINY)

    def error(model: torch.nn.Module) -> float:
        return (predict_regression(model, held_out.xs, held_out.ys) - held_out.ys).pow(2).mean().item()

    assert error(trained) < 0.95 * error(start)  # 12 steps: towards predicting 0 (error d)
    monkeypatch.setattr(regression, "_CHECKPOINT_EVERY", 4)

    def stop(step: int, model: object) -> None:
        if step == 9:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_regression_model(TINY, checkpoints=tmp_path, threads=1, on_step=stop)
    resumed, record = train_regression_model(TINY, checkpoints=tmp_path, threads=1)
    assert record.resumed_from == 8
    assert all(torch.equal(v, resumed.state_dict()[k]) for k, v in trained.state_dict().items())


def test_the_cache_trains_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                               trained: regression.RegressionTransformer) -> None:
    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no trained regression model"):
        load_regression_model(TINY, train=False)
    model, record = load_regression_model(TINY, threads=1)
    again, cached = load_regression_model(TINY, train=False)
    assert torch.equal(model.W_E, trained.W_E) and torch.equal(again.W_E, trained.W_E)
    assert cached == json.loads(json.dumps(record))
    assert cached["config"]["d"] == TINY.d and len(cached["run"]["losses"]) == TINY.steps


def test_the_model_refuses_another_d_and_token_ids(trained: regression.RegressionTransformer) -> None:
    other = sample_regression(2, TINY.d + 1, 3, seed=0)
    with pytest.raises(UserInputError, match="model reads d = 2"):
        predict_regression(trained, other.xs, other.ys)
    with pytest.raises(UserInputError, match="float"):
        trained(torch.zeros(1, 4, dtype=torch.long))
    with pytest.raises(UserInputError, match="same batch"):
        least_squares(other.xs, other.ys[:1])


# ---------------------------------------------------------------------- curves and probes


def test_the_evaluation_compares_every_algorithm_with_intervals(
    trained: regression.RegressionTransformer,
) -> None:
    result = evaluate_regression(trained, TINY, n_prompts=60, n_dev=60, n_resamples=50)
    errors, spd = result.errors, result.differences
    assert errors.axis_labels(0) == ["model", *ALGORITHMS] and spd.axis_labels(0) == list(ALGORITHMS)
    assert errors.values.shape == (6, TINY.n_points) and errors.n_prompts == 60
    assert (errors.low <= errors.values + 1e-6).all() and (errors.values <= errors.high + 1e-6).all()
    assert errors.at("least_squares", 2 * TINY.d)[0] < 1e-6  # noiseless: exact once n >= d
    assert result.ridge_lambda == 0.1 and len(result.step_sizes) == TINY.n_points
    assert isinstance(RegressionCurves.from_dict(spd.to_dict()), RegressionCurves)


def test_the_difference_to_oneself_is_zero() -> None:
    pred = torch.randn(30, 4, generator=torch.Generator().manual_seed(0))
    spd = squared_prediction_difference(pred, {"same": pred, "zero": torch.zeros(30, 4)}, d=2,
                                        n_resamples=20)
    assert spd.values[0].abs().max() == 0
    assert torch.allclose(spd.values[1], pred.pow(2).mean(0) / 2)


def test_probes_read_every_layer_and_leave_no_hook(trained: regression.RegressionTransformer) -> None:
    probes = regression_probes(trained, TINY, n_prompts=150, n_examples=3, n_resamples=50)
    assert probes.values.shape == (len(PROBE_TARGETS), TINY.n_layers + 1)
    assert probes.axis_labels(1) == ["embed", "0"] and probes.n_test == 30
    assert (probes.values <= 1).all() and (probes.low <= probes.values + 1e-6).all()
    assert registry_for(trained).active() == []
    with pytest.raises(UserInputError, match="n_examples must lie"):
        regression_probes(trained, TINY, n_examples=TINY.n_points)


def test_the_error_ratio_is_paired_and_names_its_series(trained: regression.RegressionTransformer) -> None:
    result = evaluate_regression(trained, TINY, n_prompts=40, n_dev=40, n_resamples=20)
    same = result.error_ratio(3, "ridge", "ridge", n_resamples=50)
    assert (same.estimate, same.low, same.high) == (1.0, 1.0, 1.0)  # paired: the prompts cancel
    ratio = result.error_ratio(1, "averaging", "knn", n_resamples=50)
    assert ratio.low <= ratio.estimate <= ratio.high and ratio.n == 40
    with pytest.raises(UserInputError, match="no series"):
        result.error_ratio(1, "lasso")


def test_the_probes_read_the_query_position(trained: regression.RegressionTransformer) -> None:
    batch = sample_regression(4, TINY.d, 3, seed=5)
    z = interleave(batch.xs, batch.ys)[:, :-1]  # two examples, then the query x
    states, layers = regression._last_position_states(trained, z)
    read_in = batch.xs[:, 2] @ trained.W_E + trained.W_pos[4]
    assert layers == ("embed", "0") and torch.allclose(states[0], read_in, atol=1e-6)

"""A transformer that learns linear regression in context (Garg et al. 2022), against the algorithms
(issue 39, item 4).

Trains the regression GPT of ``ICLRegressionConfig()`` (cached under the lmsci-mi cache folder,
keyed by its config; a stopped run resumes from its last checkpoint), then on held-out prompts
writes docs/data/icl_regression.json: the squared error per number of in-context examples n of the
model and of least squares, ridge, one step of gradient descent (η per n chosen on dev prompts),
k-nearest neighbours and averaging; the squared prediction difference between the model and each
algorithm (Akyürek et al. 2022); the model's error over least squares' at n = 2d with a paired
interval; ridge probes of Xᵀy, the least-squares ŵ and w by layer, trained and at the seeded
initial weights; and the training cost. Errors and differences are divided by d (Garg et al.'s
plots); every interval is a 95 % percentile bootstrap over the held-out prompts. Each section is
cached as it finishes.

    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/icl_regression.py --threads 1
    PYTHONPATH=. python benchmarks/icl_regression.py --quick     # a tiny model, 40 steps (out/quick/)
"""

from __future__ import annotations

import argparse
from typing import Any

import harness
from doc_tables.schemas.icl_regression import (
    Curve,
    ICLRegressionData,
    ProbeCurves,
    RegressionAcceptance,
    RegressionEvaluationData,
    RegressionProbesData,
    RegressionTraining,
)

from lmsci_mi.icl.regression import (
    ICLRegressionConfig,
    RegressionCurves,
    RegressionProbes,
    evaluate_regression,
    load_regression_model,
    random_regression_model,
    regression_probes,
)

QUICK = ICLRegressionConfig(d=3, n_points=8, n_layers=2, d_model=32, n_heads=2, steps=40,
                            batch_size=32, warmup=5)
"""The --quick run's model: every section end to end in seconds, no claim about learning."""
CURVE_EVERY = 50
"""Steps per point of the stored loss curve."""
WITHIN = 0.2
"""The issue's acceptance: the model's error at n = 2d within 20 % of least squares', read as at
most 20 % above it. With noise, ridge (λ = σ², the Bayes predictor) is itself about 24 % below
least squares at n = 2d (d = 5, σ = 1), so a two-sided band would fail the optimal predictor."""


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--retrain", action="store_true", help="train even when cached")
    parser.add_argument("--prompts", type=int, default=2000, help="held-out prompts (default 2000)")
    parser.add_argument("--dev-prompts", type=int, default=1000,
                        help="dev prompts that choose the GD step sizes (default 1000)")
    parser.add_argument("--probe-prompts", type=int, default=3000,
                        help="prompts the probes are fitted and scored on (default 3000: 60/20/20 split)")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples (default 1000)")
    parser.add_argument("--progress", action="store_true", help="show the training progress bar")
    parser.add_argument("--quiet-machine", action="store_true",
                        help="label the training cost as timed on a quiet machine (default: shared)")


def curves(result: RegressionCurves) -> dict[str, Curve]:
    return {
        name: Curve(mean=[round(float(v), 6) for v in result.values[i]],
                    ci95=[[round(float(lo), 6), round(float(hi), 6)]
                          for lo, hi in zip(result.low[i], result.high[i], strict=True)])
        for i, name in enumerate(result.axis_labels(0))
    }


def probe_curves(result: RegressionProbes) -> ProbeCurves:
    targets = result.axis_labels(0)
    return ProbeCurves(
        r2={t: [round(float(v), 4) for v in result.values[i]] for i, t in enumerate(targets)},
        ci95={t: [[round(float(lo), 4), round(float(hi), 4)]
                  for lo, hi in zip(result.low[i], result.high[i], strict=True)]
              for i, t in enumerate(targets)},
    )


def training_section(record: dict[str, Any], quiet: bool) -> RegressionTraining:
    run = record["run"]
    losses = run["losses"]
    blocks = [losses[i : i + CURVE_EVERY] for i in range(0, len(losses), CURVE_EVERY)]
    tail = losses[-100:]
    return RegressionTraining(
        seconds=round(run["seconds"], 1), cpu_seconds=round(run["cpu_seconds"], 1),
        threads=run["threads"], device=run["device"], steps=run["steps"],
        resumed_from=run["resumed_from"], final_loss=round(sum(tail) / len(tail), 5),
        curve_every=CURVE_EVERY, loss_curve=[round(sum(b) / len(b), 5) for b in blocks],
        label=f"{'quiet' if quiet else 'shared'} machine, {run['threads']} thread{'s' if run['threads'] > 1 else ''}",
    )


def evaluation_section(model: Any, config: ICLRegressionConfig, args: argparse.Namespace,
                       n_prompts: int, n_dev: int) -> dict[str, Any]:
    """The curves and the acceptance ratios (one cache item: they share the held-out prompts)."""
    result = evaluate_regression(model, config, n_prompts=n_prompts, n_dev=n_dev,
                                 n_resamples=args.bootstrap)
    n = min(2 * config.d, config.n_points - 1)
    ratios = {s: result.error_ratio(n, s, n_resamples=args.bootstrap) for s in ("model", "ridge")}
    model_ratio = ratios["model"]
    return {
        "evaluation": RegressionEvaluationData(
            n_prompts=n_prompts, n_dev=n_dev, ridge_lambda=result.ridge_lambda, k=result.k,
            step_sizes=[round(v, 5) for v in result.step_sizes],
            errors=curves(result.errors), differences=curves(result.differences),
        ),
        "acceptance": RegressionAcceptance(
            n=n,
            model_over_least_squares={"estimate": round(model_ratio.estimate, 4),
                                      "ci95": [round(v, 4) for v in model_ratio.as_list()]},
            ridge_over_least_squares={"estimate": round(ratios["ridge"].estimate, 4),
                                      "ci95": [round(v, 4) for v in ratios["ridge"].as_list()]},
            within_20_percent=model_ratio.estimate <= 1 + WITHIN,
            interval_within_20_percent=model_ratio.high <= 1 + WITHIN,
        ),
    }


def probes_section(model: Any, config: ICLRegressionConfig, args: argparse.Namespace,
                   n_prompts: int) -> dict[str, Any]:
    trained = regression_probes(model, config, n_prompts=n_prompts, n_resamples=args.bootstrap)
    baseline = regression_probes(random_regression_model(config), config, n_prompts=n_prompts,
                                 n_resamples=args.bootstrap)
    return dict(RegressionProbesData(
        n_examples=trained.n_examples, n_train=trained.n_train, n_test=trained.n_test,
        layers=trained.axis_labels(1), trained=probe_curves(trained),
        random=probe_curves(baseline),
    ))


def main() -> None:
    run = harness.start(__doc__, __file__, threads=1, flags=add_flags)
    args = run.args
    config = QUICK if run.quick else ICLRegressionConfig()
    n_prompts, n_dev, n_probe = (
        (200, 200, 300) if run.quick else (args.prompts, args.dev_prompts, args.probe_prompts)
    )
    with run.timed("train"):
        model, record = load_regression_model(config, retrain=args.retrain, threads=args.threads,
                                              progress=args.progress)
    # keyed by the flags and the model's config (not --retrain: the same config trains the same
    # weights); the trained weights' own cache is keyed by the config alone
    cache = run.cache({**run.settings(exclude=["retrain", "progress", "quiet_machine"]), "model": config.params()})
    with run.timed("evaluate"):
        compared = cache.get("evaluation", lambda: evaluation_section(model, config, args, n_prompts, n_dev))
    with run.timed("probes"):
        probes = cache.get("probes", lambda: probes_section(model, config, args, n_probe))
    acceptance = compared["acceptance"]
    harness.log.info("model / least squares at n = %d: %s (within 20 %%: %s)", acceptance["n"],
                     acceptance["model_over_least_squares"], acceptance["within_20_percent"])
    run.write(ICLRegressionData(
        config=config.params(), training=training_section(record, args.quiet_machine),
        evaluation=compared["evaluation"], acceptance=acceptance, probes=probes,
        timings={k: round(v, 3) for k, v in run.timings.items()},
    ))


if __name__ == "__main__":
    main()

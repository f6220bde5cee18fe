"""Renderers of docs/icl.md's regression section, from docs/data/icl_regression.json
(benchmarks/icl_regression.py): the model's error against each algorithm at a few n, the
acceptance check at n = 2d, the probes by layer and the training cost."""

from __future__ import annotations

from . import ci, markdown, table
from .schemas.icl_regression import ICLRegressionData


def _at(curve: dict, n: int, digits: int = 3) -> str:
    low, high = curve["ci95"][n]
    return ci(curve["mean"][n], low, high, digits)


@table("icl_regression_errors")
def icl_regression_errors(data: ICLRegressionData) -> str:
    """Squared error / d of the model and each algorithm at n = 1, d, 2d and the last n, and the
    squared prediction difference between the model and each algorithm, with 95 % intervals."""
    d = int(data["config"]["d"])  # type: ignore[call-overload]
    last = len(data["evaluation"]["errors"]["model"]["mean"]) - 1
    points = sorted({1, d, min(2 * d, last), last})
    errors, differences = data["evaluation"]["errors"], data["evaluation"]["differences"]
    rows = [[f"error: {name}", *(_at(curve, n) for n in points)] for name, curve in errors.items()]
    rows += [[f"difference to the model: {name}", *(_at(curve, n) for n in points)]
             for name, curve in differences.items()]
    return markdown(["series (÷ d)", *(f"n = {n}" for n in points)], rows)


@table("icl_regression_findings")
def icl_regression_findings(data: ICLRegressionData) -> str:
    """The acceptance at n = 2d, the nearest algorithm there, the probes' best layers and the cost."""
    a, t = data["acceptance"], data["training"]
    ratio, ridge = a["model_over_least_squares"], a["ridge_over_least_squares"]
    n = a["n"]
    differences = data["evaluation"]["differences"]
    nearest = min(differences, key=lambda k: differences[k]["mean"][n])
    probes = data["probes"]["trained"]["r2"]
    best = {k: max(range(len(v)), key=v.__getitem__) for k, v in probes.items()}
    layers = data["probes"]["layers"]
    return "\n".join([
        f"- At n = 2d = {n}: the model's error over least squares' "
        f"{ci(ratio['estimate'], *ratio['ci95'], 2)} (ridge's {ci(ridge['estimate'], *ridge['ci95'], 2)}); "
        f"within 20 % of least squares: **{'yes' if a['within_20_percent'] else 'no'}** (the interval "
        f"below 1.2: {'yes' if a['interval_within_20_percent'] else 'no'}). The band is read one-sided: "
        "with noise, ridge (the Bayes predictor at λ = σ²) is itself below least squares.",
        f"- Nearest algorithm to the model at n = {n} by squared prediction difference: **{nearest}** "
        f"({_at(differences[nearest], n)}).",
        "- Probes (held-out R², mean over coordinates) peak at "
        + ", ".join(f"{k} {probes[k][best[k]]:.2f} ({layers[best[k]]})" for k in probes) + ".",
        f"- Training: {t['steps']:,} steps, {t['seconds'] / 60:.0f} min ({t['label']}); final loss "
        f"{t['final_loss']:.3f}.",
    ])

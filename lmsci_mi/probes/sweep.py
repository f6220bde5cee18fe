"""Probe sweeps: one linear probe per layer at a site, with a control task and a majority baseline,
as a result with one row per layer that exports to CSV/Parquet/JSON and plots against layer.

Activations come from the core collection (one batched pass over all layers); every layer's probe,
and its control, is fitted in one batch (:mod:`lmsci_mi.probes.linear`). After Conneau et al. 2018
(probing across layers) and Hewitt & Liang 2019 (selectivity).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float
from torch import Tensor

from lmsci_mi.collect import Activations, CollectConfig, PositionChoice, collect_activations
from lmsci_mi.config import config
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.probes.linear import PROBE_KINDS, ProbeConfig, ProbeFit, Split, fit_probes
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import layer_hooks
from lmsci_mi.sites import site as site_row

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from lmsci_mi.cluster import ClusterConfig

__all__ = ["METRICS", "ProbePeak", "ProbeSweep", "ProbeSweepConfig", "probe_sweep"]

METRICS = (
    "score",
    "control",
    "selectivity",
    "baseline",
    "ci_low",
    "ci_high",
    "val_score",
    "l2",
    "control_l2",
)
"""The columns of :attr:`ProbeSweep.values`: test score (accuracy or R²), the control task's test
score, selectivity (score − control), the majority-class (or mean) baseline, the score's 95%
bootstrap interval, the validation score, and the chosen L2 strengths."""


@config
class ProbeSweepConfig(ProbeConfig):
    """A probe sweep: where to read (site, layers) plus how each probe is fitted."""

    site: str = field(default="resid_post", metadata={"help": "site of the site table to probe"})
    layers: tuple[int, ...] | None = field(
        default=None, metadata={"help": "layers to probe (default: all)", "ge": 0, "min_length": 1}
    )
    token_budget: int = field(
        default=8192, metadata={"help": "tokens per forward pass while collecting", "ge": 1}
    )
    autocast: str | None = field(
        default=None,
        metadata={
            "help": "collect under autocast to this dtype (bfloat16: ~3.5x faster on CPUs with "
            "AMX, ~6x slower on CPUs without; default: exact float32)",
            "choices": ("bfloat16", "float16"),
        },
    )

    def validate(self) -> None:
        super().validate()
        row = site_row(self.site)
        if row.layout.position_axis != 1:
            raise UserInputError(
                f"site {self.site!r} has no vector per position; probe a residual, MLP or "
                "per-head site instead"
            )
        if self.layers is not None and not row.per_layer:
            raise UserInputError(f"site {self.site!r} exists once per model; give no layers")


@dataclass(frozen=True)
class ProbePeak:
    """The best layer of a sweep and its numbers."""

    layer: str
    score: float
    selectivity: float
    control: float
    baseline: float


@result_type
class ProbeSweep(Result):
    """Probe scores per layer: ``values[layer, metric]`` with the metrics of :data:`METRICS`.

    Attributes:
        task: the probed property.
        site: the site probed at each layer (``hooks`` gives the hook names).
        score_name: ``"accuracy"`` (logistic) or ``"r2"`` (ridge).
        classes: the class labels (logistic), as strings.
        weight, bias, mean, std: each layer's probe, ``[layer, d, out]``, ``[layer, out]`` and
            the standardisation ``[layer, d]``; ``weight[l, :, c]`` is a direction in
            standardised activation space.
        n_train, n_val, n_test: the split sizes.
    """

    task: str
    site: str
    hooks: tuple[str, ...]
    score_name: str
    classes: tuple[str, ...]
    weight: Tensor
    bias: Tensor
    mean: Tensor
    std: Tensor
    n_train: int
    n_val: int
    n_test: int

    def metric(self, name: str) -> Tensor:
        """One metric's column, ``[layer]``."""
        return self.values[:, METRICS.index(name)]

    def peak(self) -> ProbePeak:
        """The layer with the best test score."""
        best = int(self.metric("score").argmax())
        row = dict(zip(METRICS, self.values[best].tolist(), strict=True))
        return ProbePeak(
            self.axis_labels(0)[best],
            row["score"],
            row["selectivity"],
            row["control"],
            row["baseline"],
        )

    def to_dataframe(self) -> pd.DataFrame:
        """One row per layer: ``layer``, ``hook``, the score under its own name (``accuracy`` or
        ``r2``), ``control_<score>``, ``selectivity``, ``majority`` (or ``mean_baseline``), the
        interval, the chosen strengths, and the task, site and model."""
        import pandas as pd

        baseline = "majority" if self.score_name == "accuracy" else "mean_baseline"
        names = {
            "score": self.score_name,
            "control": f"control_{self.score_name}",
            "baseline": baseline,
            "val_score": f"val_{self.score_name}",
        }
        frame = pd.DataFrame(
            self.values.cpu().float().numpy(), columns=[names.get(m, m) for m in METRICS]
        )
        frame.insert(0, "hook", list(self.hooks))
        frame.insert(0, "layer", self.axis_labels(0))
        frame["task"], frame["site"], frame["model"] = self.task, self.site, self.meta.model
        frame["n_train"], frame["n_val"], frame["n_test"] = self.n_train, self.n_val, self.n_test
        return frame

    def default_title(self, **options: object) -> str:
        return f"{self.task} probe — {self.meta.model}"

    def _draw(self, title: str) -> Figure:
        """Test score, control score and baseline against layer, with the score's 95% interval."""
        from lmsci_mi.viz.plots import plot_layer_scores

        label = "accuracy" if self.score_name == "accuracy" else "R²"
        fig = plot_layer_scores(
            self.axis_labels(0),
            {
                f"probe {label}": self.metric("score"),
                f"control task {label}": self.metric("control"),
                "selectivity": self.metric("selectivity"),
                (
                    "majority class" if self.score_name == "accuracy" else "mean baseline"
                ): self.metric("baseline"),
            },
            band=(self.metric("ci_low"), self.metric("ci_high")),
            x_label=f"layer ({self.site})",
            y_label=label,
            title=title,
        )
        return fig


_DEFAULT = ProbeSweepConfig()


def probe_sweep(
    lm: LensModel,
    texts: Sequence[str],
    labels: Sequence[Hashable],
    *,
    positions: PositionChoice = "last",
    groups: Sequence[Hashable] | None = None,
    config: ProbeSweepConfig = _DEFAULT,
    task: str = "probe",
    data_source: str = "",
    cluster: ClusterConfig | None = None,
) -> ProbeSweep:
    """Probe ``config.site`` at every layer (or ``config.layers``) for ``labels``.

    With nothing else given, probes the residual stream after every layer at each text's last
    token, with a seeded 60/20/20 split, a control task and a 1000-sample bootstrap. Reads the
    model only.

    Args:
        lm: the model.
        texts: the texts.
        labels: one label per text; or, when ``positions`` keeps several positions of a text,
            one label per kept position (in text, then position order).
        positions: ``"last"``, ``"all"`` or one position list per text (see
            :func:`lmsci_mi.collect.collect_activations`).
        groups: one key per text; a group goes whole into one split. When several positions of
            a text are probed, the text is the group by default.
        config: site, layers and the probe's settings.
        task, data_source: recorded in the result.
        cluster: collect the activations in shards on a Ray cluster
            (:func:`~lmsci_mi.collect.collect_activations`'s ``cluster``; the same rows as in
            one process).

    Returns:
        A :class:`ProbeSweep`, one row per layer.

    Raises:
        ValueError: labels and texts of different lengths, a single class, a site or layer that
            does not exist, or bad positions.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> texts = [f"{w} is here" for w in ["cat", "dog", "fish", "bird"] * 10]
    >>> labels = [t.startswith(("cat", "dog")) for t in texts]
    >>> sweep = probe_sweep(lm, texts, labels, config=ProbeSweepConfig(bootstrap=0, control=False))
    >>> sweep.values.shape, sweep.axes
    (torch.Size([2, 9]), ('layer', 'metric'))
    """
    hooks, layer_labels = layer_hooks(config.site, config.layers, lm.cfg.n_layers, lm.name)
    _check_labels(texts, labels, positions, config)
    collect_config = CollectConfig(token_budget=config.token_budget, autocast=config.autocast)
    acts = collect_activations(
        lm, texts, hooks, positions=positions, config=collect_config, cluster=cluster
    )
    if len(labels) != len(acts):
        raise UserInputError(
            f"{len(labels)} labels for {len(acts)} probed positions of {len(texts)} texts; "
            "give one label per text, or one per probed position"
        )
    split = Split.random(
        len(acts),
        fractions=config.fractions,
        seed=config.seed,
        groups=_row_groups(acts, len(texts), groups),
    )
    features: Float[Tensor, "layer n d"] = acts.stack(hooks).flatten(2).to(lm.device)
    fits, control = fit_probes(
        features, list(labels), split, config, word_types=acts.token.tolist()
    )
    return _sweep_result(
        lm, texts, fits, control, split, hooks, layer_labels, task, config, data_source
    )


def _check_labels(
    texts: Sequence[str],
    labels: Sequence[Hashable],
    positions: PositionChoice,
    config: ProbeSweepConfig,
) -> None:
    """What can be checked before the model runs: texts, one label per text, two classes."""
    if len(texts) == 0:
        raise UserInputError("probe_sweep needs texts and labels; got no texts")
    if isinstance(positions, str) and positions == "last" and len(labels) != len(texts):
        raise UserInputError(
            f"{len(labels)} labels for {len(texts)} texts; give exactly one label per text"
        )
    if PROBE_KINDS.get(config.kind).function.classification and len(set(labels)) < 2:
        raise UserInputError(
            f"every label is {next(iter(labels))!r}: a probe needs at least two classes"
        )


def _row_groups(acts: Activations, n_texts: int, groups: Sequence[Hashable] | None) -> list | None:
    """The split groups of the collected rows: the caller's per-text groups, or the text itself
    when several positions of a text are probed (so the test texts are unseen texts)."""
    if groups is not None:
        if len(groups) != n_texts:
            raise UserInputError(f"{len(groups)} groups for {n_texts} texts; give one group per text")
        return acts.per_item(list(groups))
    return acts.example.tolist() if len(acts) != n_texts else None


def _sweep_result(
    lm: LensModel,
    texts: Sequence[str],
    fits: list[ProbeFit],
    control: list[ProbeFit] | None,
    split: Split,
    hooks: list[str],
    layer_labels: tuple[str, ...],
    task: str,
    config: ProbeSweepConfig,
    data_source: str,
) -> ProbeSweep:
    nan = float("nan")
    rows = []
    for i, fit in enumerate(fits):
        ctrl = control[i] if control is not None else None
        rows.append(
            [
                fit.score,
                ctrl.score if ctrl else nan,
                fit.score - ctrl.score if ctrl else nan,
                fit.baseline,
                *fit.interval,
                fit.val_score,
                fit.probe.l2,
                ctrl.probe.l2 if ctrl else nan,
            ]
        )
    kind = PROBE_KINDS.get(config.kind).function
    return ProbeSweep(
        values=torch.tensor(rows, dtype=torch.float32),
        axes=("layer", "metric"),
        labels=(layer_labels, METRICS),
        meta=lm.meta(
            tuple(texts), seed=config.seed, data_source=data_source, params=config.params()
        ),
        task=task,
        site=config.site,
        hooks=tuple(hooks),
        score_name="accuracy" if kind.classification else "r2",
        classes=tuple(str(c) for c in fits[0].probe.classes),
        weight=torch.stack([f.probe.weight for f in fits]).cpu(),
        bias=torch.stack([f.probe.bias for f in fits]).cpu(),
        mean=torch.stack([f.probe.mean for f in fits]).cpu(),
        std=torch.stack([f.probe.std for f in fits]).cpu(),
        n_train=len(split.train),
        n_val=len(split.val),
        n_test=len(split.test),
    )

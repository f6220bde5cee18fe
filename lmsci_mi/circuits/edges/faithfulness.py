"""Faithfulness curves of edge circuits: normalised faithfulness at MIB's edge budgets, CPR and CMD.

For each edge fraction a circuit is pruned from edge scores (greedy or top-n, dead nodes removed)
and evaluated exactly: every edge outside it takes its corrupted value, in one patched forward.
Faithfulness is ``(m(C) − m(∅)) / (m(N) − m(∅))``; CPR and CMD are the trapezoid areas of ``f``
and ``|1 − f|`` over the fraction axis, as MIB's ``evaluate_area_under_curve`` (Mueller et al.
2025) computes them; the paper's curves are Hanna et al. 2024 (EAP-IG), Figure 2.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any, Literal

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from lmsci_mi.circuits.edges.graph import EdgeGraph
from lmsci_mi.circuits.edges.patching import evaluate_circuits
from lmsci_mi.circuits.edges.pruning import (
    PRUNE_METHODS,
    check_fractions,
    edge_budget,
    node_map,
    prune_to_fractions,
)
from lmsci_mi.circuits.metrics import Metric
from lmsci_mi.config import Config, config
from lmsci_mi.data.pairs import PairsArg, accepts_pairs
from lmsci_mi.errors import UserInputError
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import Head
from lmsci_mi.stats import bootstrap_replicates, percentile_bounds

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from lmsci_mi.model import LensModel
    from lmsci_mi.viz.circuit_graph import CircuitEdge, CircuitNode
    from lmsci_mi.viz.circuit_viewer import CircuitViewer, ViewerConfig

__all__ = [
    "MIB_FRACTIONS",
    "Circuit",
    "CurveConfig",
    "FaithfulnessCurve",
    "area_under_curve",
    "bootstrap_faithfulness",
    "faithfulness_curve",
    "plot_faithfulness_curves",
]

MIB_FRACTIONS: tuple[float, ...] = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
"""MIB's edge budgets, in percent of the graph's edges (``evaluate_area_under_curve``)."""


def area_under_curve(
    fractions: Sequence[float], faithfulness: Sequence[float], *, log_scale: bool = False
) -> tuple[float, float]:
    """CPR and CMD of a faithfulness curve, as MIB's ``evaluate_area_under_curve``.

    The x axis is the fraction of edges as a proportion (0.001 … 1, so percentages are divided
    by 100), linear unless ``log_scale`` (then natural log of the proportion); the area is the
    trapezoid rule between consecutive points, from the smallest fraction to the largest (MIB
    does not extend the curve to 0 edges). CPR is the area under ``f`` (higher is better; at most
    ``1 − 0.001`` on MIB's grid); CMD the area of ``|1 − f|`` (lower is better).

    Args:
        fractions: edge fractions in percent, increasing.
        faithfulness: normalised faithfulness at each fraction.
        log_scale: integrate over log(fraction), MIB's ``log_scale=True``.

    Returns:
        ``(cpr, cmd)``.

    >>> area_under_curve([50, 100], [0.5, 1.0])
    (0.375, 0.125)
    """
    xs = [f / 100.0 for f in check_fractions(fractions)]
    ys = [float(f) for f in faithfulness]
    if len(xs) != len(ys):
        raise UserInputError(f"{len(xs)} fractions but {len(ys)} faithfulness values")
    if any(b <= a for a, b in itertools.pairwise(xs)):
        raise UserInputError(f"fractions must increase strictly, got {list(fractions)}")
    if log_scale:
        xs = [math.log(x) for x in xs]
    cpr = cmd = 0.0
    for (x1, y1), (x2, y2) in itertools.pairwise(zip(xs, ys, strict=True)):
        cpr += (x2 - x1) * (y1 + y2) / 2
        cmd += (x2 - x1) * (abs(1 - y1) + abs(1 - y2)) / 2
    return cpr, cmd


def bootstrap_faithfulness(
    per_prompt: Float[Tensor, "point prompt"],
    clean: Float[Tensor, " prompt"],
    corrupted: Float[Tensor, " prompt"],
    *,
    n_resamples: int = 1000,
    seed: int = 0,
) -> Float[Tensor, "point 2"]:
    """95 % percentile bootstrap interval of normalised faithfulness, resampling prompts.

    Each resample recomputes the three means (circuit, clean, corrupted) on the same prompts, so
    the interval includes the baselines' own noise.

    Returns:
        ``[point, 2]``: lower and upper bounds.
    """

    def normalised(circuit: Tensor, clean: Tensor, corrupted: Tensor, axis: int = -1) -> Tensor:
        low, high = clean.mean(axis), corrupted.mean(axis)
        return (circuit.mean(axis) - high) / (low - high)  # [point, resample]

    values = bootstrap_replicates(
        (per_prompt.double(), clean.double(), corrupted.double()),
        normalised,
        n_resamples=n_resamples,
        seed=seed,
    )
    return percentile_bounds(values).float()


@config
class CurveConfig(Config):
    """How a faithfulness curve is pruned and summarised (the evaluation's batching is the
    edge-patching config's)."""

    fractions: tuple[float, ...] = field(
        default=MIB_FRACTIONS,
        metadata={
            "help": "edge fractions in percent (MIB's grid by default)",
            "gt": 0.0,
            "le": 100.0,
            "min_length": 2,
        },
    )
    prune: Literal["greedy", "topn"] = field(
        default="greedy",
        metadata={
            "help": "greedy: grow from the logits by the best connected edge; topn: best |score| "
            "anywhere",
            "choices": PRUNE_METHODS,
        },
    )
    absolute: bool = field(default=True, metadata={"help": "rank edges by |score| (MIB default)"})
    log_scale: bool = field(
        default=False,
        metadata={
            "help": "CPR/CMD over log(fraction) instead of the fraction (MIB default: linear)"
        },
    )
    batch_size: int = field(default=16, metadata={"help": "prompt pairs per pass", "ge": 1})
    circuits_per_pass: int = field(
        default=5,
        metadata={"help": "circuits stacked along the batch of one patched pass", "ge": 1},
    )
    n_bootstrap: int = field(
        default=1000,
        metadata={"help": "bootstrap resamples of the prompts for the 95% band (0: none)", "ge": 0},
    )

    def validate(self) -> None:
        if any(b <= a for a, b in itertools.pairwise(self.fractions)):
            raise UserInputError(f"CurveConfig.fractions must increase strictly, got {self.fractions}")


@result_type
class Circuit(Result):
    """A circuit: the kept edges of a computational graph, with their scores.

    ``values`` is the ``[sender, receiver]`` bool mask (axes ``("sender", "receiver")``, labelled
    with the senders' and receivers' names).

    Attributes:
        scores: the edge scores the circuit was pruned from (``[sender, receiver]``), or None.
        graph: the edge graph the mask is laid out for (names, GQA layout).
        fraction: the edge budget in percent, when pruned to one; None otherwise.
        faithfulness: its normalised faithfulness, when evaluated; None otherwise.
    """

    scores: Tensor | None
    graph: EdgeGraph
    fraction: float | None = None
    faithfulness: float | None = None

    @property
    def n_edges(self) -> int:
        """Edges kept."""
        return int(self.values.sum())

    def edge_list(self) -> list[tuple[str, str, float]]:
        """Kept edges as ``(sender, receiver, score)``, by decreasing |score|."""
        senders, receivers = self.values.nonzero(as_tuple=True)
        s_names, r_names = self.axis_labels(0), self.axis_labels(1)
        scores = (
            self.scores[senders, receivers]
            if self.scores is not None
            else torch.zeros(len(senders))
        ).tolist()
        rows = [
            (s_names[s], r_names[r], float(v))
            for s, r, v in zip(senders.tolist(), receivers.tolist(), scores, strict=True)
        ]
        return sorted(rows, key=lambda row: -abs(row[2]))

    def node_names(self) -> list[str]:
        """Names of the nodes the kept edges touch, in graph order (a grouped k/v edge touches
        every head of its group)."""
        nodes = node_map(self.graph)
        senders, receivers = self.values.nonzero(as_tuple=True)
        used = set(senders.tolist()) | set(
            nodes.receiver_nodes[receivers].any(0).nonzero().flatten().tolist()
        )
        return [nodes.names[i] for i in sorted(used)]

    def heads(self) -> list[Head]:
        """The heads in the circuit (as senders or receivers)."""
        return [Head.parse(n) for n in self.node_names() if n.startswith("L")]

    def _drawn_edges(self) -> list[CircuitEdge]:
        from lmsci_mi.viz.circuit_graph import CircuitEdge

        nodes = node_map(self.graph)
        senders, receivers = self.values.nonzero(as_tuple=True)
        sending = set(senders.tolist())
        out = []
        for s, r in zip(senders.tolist(), receivers.tolist(), strict=True):
            score = float(self.scores[s, r]) if self.scores is not None else 1.0
            targets = nodes.receiver_nodes[r].nonzero().flatten().tolist()
            # A grouped k/v receiver feeds its whole group: draw it into the group's heads that
            # are in the circuit (those that send on), or the first if none does.
            shown = [t for t in targets if t in sending] or targets[:1]
            out += [CircuitEdge(s, t, nodes.receiver_inputs[r], score) for t in shown]
        return out

    def _nodes(self) -> list[CircuitNode]:
        from lmsci_mi.viz.circuit_graph import CircuitNode

        nodes = node_map(self.graph)
        return [
            CircuitNode(n, r, k, c)
            for n, r, k, c in zip(nodes.names, nodes.rows, nodes.kinds, nodes.columns, strict=True)
        ]

    def _title(self) -> str:
        parts = [f"{self.meta.model}: {self.n_edges} edges, {len(self.node_names())} nodes"]
        if self.fraction is not None:
            parts.append(f"{self.fraction:g} % budget")
        if self.faithfulness is not None:
            parts.append(f"faithfulness {self.faithfulness:.2f}")
        return ", ".join(parts)

    def default_title(self, **options: object) -> str:
        return self._title()

    def _draw(self, title: str) -> Figure:
        """The circuit drawn layer by layer (input at the bottom, logits at the top)."""
        from lmsci_mi.viz.circuit_graph import circuit_figure
        return circuit_figure(self._nodes(), self._drawn_edges(), title=title)

    def to_svg(self, *, title: str | None = None) -> str:
        """The drawing as an inline ``<svg>`` element, for an HTML report."""
        from lmsci_mi.viz.circuit_graph import circuit_svg

        return circuit_svg(self._nodes(), self._drawn_edges(), title=title or self._title())

    def to_graph(self) -> dict[str, Any]:
        """The circuit as the interactive viewer's plain graph (nodes by depth and head index,
        scored by their edges' summed |score|; see :mod:`lmsci_mi.viz.circuit_viewer`)."""
        from lmsci_mi.viz.circuit_viewer import graph_from_circuit

        return graph_from_circuit(self._nodes(), self._drawn_edges(), title=self._title())

    def viewer(self, config: ViewerConfig | None = None) -> CircuitViewer:
        """The circuit in the interactive viewer: hover, prune with a slider, follow paths
        (shown in a notebook cell; ``.save("circuit.html")`` writes an offline page)."""
        from lmsci_mi.viz.circuit_viewer import circuit_viewer

        return circuit_viewer(self.to_graph(), config)

    def interactive_html(self) -> str:
        """The viewer as an HTML fragment: what a report and a notebook cell show instead of the
        static drawing (:func:`lmsci_mi.viz.result_html.result_html`)."""
        return self.viewer().html()

    def summary(self, rows: int = 10) -> str:
        lines = [self._title()]
        heads = [str(h) for h in self.heads()]
        lines.append(
            f"heads ({len(heads)}): {', '.join(heads[:40])}{' …' if len(heads) > 40 else ''}"
        )
        lines += [f"  {s:>12} → {r:<14} {v:+.4g}" for s, r, v in self.edge_list()[:rows]]
        return "\n".join(lines)


def plot_faithfulness_curves(
    curves: Sequence[FaithfulnessCurve], *, ax: Axes | None = None, title: str = ""
) -> Figure:
    """Several faithfulness curves on one log-x axis (e.g. EAP vs EAP-IG, greedy vs top-n)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.2)) if ax is None else ax.figure
    axes = fig.subplots() if ax is None else ax
    for curve in curves:
        x = list(curve.fractions)
        line = axes.plot(
            x,
            curve.values.tolist(),
            marker="o",
            markersize=3,
            label=f"{curve.label} (CPR {curve.cpr:.2f}, CMD {curve.cmd:.2f})",
        )[0]
        if curve.interval is not None:
            axes.fill_between(
                x,
                curve.interval[:, 0].tolist(),
                curve.interval[:, 1].tolist(),
                color=line.get_color(),
                alpha=0.15,
                linewidth=0,
            )
    axes.set_xscale("log")
    axes.axhline(1.0, color="grey", linewidth=0.6, linestyle="--")
    axes.axhline(0.0, color="grey", linewidth=0.6)
    axes.set_xlabel("edges kept (% of the graph, log scale)")
    axes.set_ylabel("normalised faithfulness")
    axes.set_title(title or (curves[0].meta.model if curves else ""), fontsize=10)
    axes.legend(fontsize=7)
    axes.grid(alpha=0.3)
    if isinstance(fig, Figure):
        fig.tight_layout()
    return fig  # type: ignore[return-value]


@result_type
class FaithfulnessCurve(Result):
    """Normalised faithfulness of pruned circuits at several edge budgets, with CPR and CMD.

    ``values`` is the faithfulness per budget (axis ``("fraction",)``, labelled ``"5%"`` …).

    Attributes:
        fractions: the budgets in percent; requested / kept: edges asked for and left after
            dead-node pruning, per budget; total_edges: edges in the graph.
        metric_values: the raw metric of each circuit (mean over prompts).
        clean_value / corrupted_value: the metric of the full model (all edges) and of the empty
            circuit (every edge corrupted).
        cpr / cmd: MIB's areas (see :func:`area_under_curve`); log_scale: their x axis.
        interval: 95 % bootstrap interval per budget over prompts, ``[point, 2]``, or None.
        n_prompts: prompts evaluated; label: the scoring method ("EAP-IG (m=5), greedy").
        masks: the circuits, ``[point, sender, receiver]`` bool; scores: the edge scores.
        graph: the edge graph.
    """

    fractions: tuple[float, ...]
    requested: tuple[int, ...]
    kept: tuple[int, ...]
    total_edges: int
    metric_values: Tensor
    clean_value: float
    corrupted_value: float
    cpr: float
    cmd: float
    log_scale: bool
    interval: Tensor | None
    n_prompts: int
    label: str
    masks: Bool[Tensor, "point sender receiver"]
    scores: Tensor
    graph: EdgeGraph

    def at(self, fraction: float) -> float:
        """Faithfulness at one of the curve's budgets (percent)."""
        return float(self.values[self._index(fraction)])

    def _index(self, fraction: float) -> int:
        for i, f in enumerate(self.fractions):
            if math.isclose(f, fraction, rel_tol=1e-9):
                return i
        raise UserInputError(
            f"{fraction} % is not on this curve; its budgets are {list(self.fractions)}"
        )

    def circuit(self, fraction: float) -> Circuit:
        """The circuit kept at one budget (percent), with its scores and faithfulness."""
        i = self._index(fraction)
        return Circuit(
            values=self.masks[i],
            axes=("sender", "receiver"),
            labels=(self.graph.sender_names, self.graph.receiver_names),
            meta=self.meta,
            scores=self.scores,
            graph=self.graph,
            fraction=self.fractions[i],
            faithfulness=float(self.values[i]),
        )

    def default_title(self, **options: object) -> str:
        return ""

    def _draw(self, title: str) -> Figure:
        """The curve on a log-x axis with its bootstrap band, CPR and CMD in the legend."""
        return plot_faithfulness_curves([self], title=title)

    def summary(self, rows: int = 10) -> str:
        head = (
            f"faithfulness curve on {self.meta.model}, {self.label}, {self.n_prompts} prompts, "
            f"{self.total_edges} edges: CPR {self.cpr:.3f}, CMD {self.cmd:.3f} "
            f"({'log' if self.log_scale else 'linear'} fraction axis); metric clean "
            f"{self.clean_value:.3f}, corrupted {self.corrupted_value:.3f}"
        )
        lines = [head, f"{'edges %':>8} {'kept':>7} {'faithfulness':>13} {'95% CI':>16}"]
        for i, fraction in enumerate(self.fractions):
            band = ""
            if self.interval is not None:
                band = f"[{float(self.interval[i, 0]):.2f}, {float(self.interval[i, 1]):.2f}]"
            lines.append(
                f"{fraction:>8g} {self.kept[i]:>7} {float(self.values[i]):>13.3f} {band:>16}"
            )
        return "\n".join(lines)


def _score_tensor(graph: EdgeGraph, scores: Any) -> Tensor:
    """Edge scores as a ``[sender, receiver]`` CPU tensor (a result's ``values`` or a tensor)."""
    tensor = scores.values if isinstance(scores, Result) else scores
    if not isinstance(tensor, Tensor) or tuple(tensor.shape) != tuple(graph.real.shape):
        shape = tuple(tensor.shape) if isinstance(tensor, Tensor) else type(tensor).__name__
        raise UserInputError(
            f"edge scores must be a {tuple(graph.real.shape)} [sender, receiver] "
            f"tensor for {graph.describe()}, not {shape}"
        )
    return tensor.detach().float().cpu()


def _band(result: Any, cfg: CurveConfig) -> Tensor:
    """The 95 % bootstrap band of each budget's faithfulness, resampling the prompts."""
    return bootstrap_faithfulness(
        result.per_prompt,
        result.clean_per_prompt,
        result.corrupted_per_prompt,
        n_resamples=cfg.n_bootstrap,
    )


@accepts_pairs(3)
def faithfulness_curve(
    lm: LensModel,
    graph: EdgeGraph,
    scores: Tensor | Result,
    pairs: PairsArg,
    metric: Metric | None = None,
    config: CurveConfig | None = None,
    *,
    label: str = "",
    answer_positions: int | Sequence[int] | Tensor | None = None,
) -> FaithfulnessCurve:
    """Prune ``scores`` at each edge budget and evaluate every circuit by exact edge patching.

    Reads the model only. All budgets' circuits run as one batched evaluation
    (:func:`~lmsci_mi.circuits.edges.patching.evaluate_circuits`: per prompt batch one clean and
    one corrupted pass, then ``circuits_per_pass`` circuits per patched pass).

    Args:
        lm: the model; graph: its edge graph (:func:`~lmsci_mi.circuits.edges.graph.edge_graph`).
        scores: edge scores ``[sender, receiver]`` (EAP / EAP-IG scores, or any result whose
            ``values`` are laid out so).
        pairs: :class:`~lmsci_mi.data.pairs.PromptPairs` (or token ids), each pair of one token
            length; the loose ``clean, corrupted, metric`` form is deprecated, for one release.
        metric: e.g. ``LogitDiff(io_ids, s_ids)``, which faithfulness normalises; None: each
            pair's logit difference (``LogitDiff.of_pairs``).
        config: budgets, pruning method, CPR/CMD axis, batching (:class:`CurveConfig`).
        label: how the scores were made, for legends ("EAP-IG (m=5)").
        answer_positions: the positions the metric reads (default each prompt's last token).

    Returns:
        A :class:`FaithfulnessCurve`; ``.circuit(5)`` is the 5 % circuit, ``.plot()`` the curve.

    Raises:
        ValueError: scores of another layout, a budget outside (0, 100], bad prompts.

    >>> from lmsci_mi import load_model; from lmsci_mi.data.pairs import PromptPairs
    >>> from lmsci_mi.circuits.edges.graph import edge_graph; lm = load_model("toy-2l"); g = edge_graph(lm)
    >>> scores = torch.randn(g.real.shape, generator=torch.Generator().manual_seed(0))
    >>> pairs = PromptPairs("Mary and John: John gave it to", "Mary and John: Mary gave it to", 5, 6)
    >>> cfg = CurveConfig(fractions=(50.0, 100.0), n_bootstrap=0)
    >>> round(faithfulness_curve(lm, g, scores, pairs, config=cfg).at(100.0), 4)
    1.0
    """
    cfg = config or CurveConfig()
    table = _score_tensor(graph, scores)
    masks = prune_to_fractions(graph, table, cfg.fractions, method=cfg.prune, absolute=cfg.absolute)
    # Exact patching needs no gradients; no_grad also keeps every returned tensor grad-free.
    with torch.no_grad():
        result = evaluate_circuits(lm, graph, masks, pairs, metric,
                                   batch_size=cfg.batch_size, circuits_per_pass=cfg.circuits_per_pass,
                                   answer_positions=answer_positions)  # fmt: skip
    faithfulness = result.normalised().float()
    n_prompts = int(result.per_prompt.shape[1])
    interval = _band(result, cfg) if cfg.n_bootstrap > 0 and n_prompts > 1 else None
    cpr, cmd = area_under_curve(cfg.fractions, faithfulness.tolist(), log_scale=cfg.log_scale)
    name = label or "edge scores"
    params = {**cfg.params(), "label": name, "graph": graph.describe()}
    return FaithfulnessCurve(
        values=faithfulness,
        axes=("fraction",),
        labels=(tuple(f"{f:g}%" for f in cfg.fractions),),
        meta=lm.meta(pairs.prompts, data_source=pairs.source, params=params),
        fractions=cfg.fractions,
        requested=tuple(edge_budget(graph, f) for f in cfg.fractions),
        kept=tuple(int(m.sum()) for m in masks),
        total_edges=graph.n_edges,
        metric_values=result.values.float(),
        clean_value=result.clean_value,
        corrupted_value=result.corrupted_value,
        cpr=cpr,
        cmd=cmd,
        log_scale=cfg.log_scale,
        interval=interval,
        n_prompts=n_prompts,
        label=f"{name}, {cfg.prune}",
        masks=masks,
        scores=table,
        graph=graph,
    )

"""Drawing an edge-level circuit: kept nodes layered by depth, kept edges coloured by the input they feed.

Rows run from the input (bottom) to the logits (top); a layer's heads share a row and its MLP sits
on the next, and rows with no kept node are dropped so that a 50–300-edge circuit stays readable.
Edges into a head's query, key and value inputs get their own colours (as in Hanna et al. 2024's
circuit figures); line width follows |score|. The same figure is written as SVG for HTML reports.
"""

from __future__ import annotations

import html
import io
from collections.abc import Sequence
from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch

__all__ = ["INPUT_COLOURS", "CircuitEdge", "CircuitNode", "circuit_figure", "circuit_svg"]

INPUT_COLOURS = {
    "q": "#1f77b4",
    "k": "#ff7f0e",
    "v": "#2ca02c",
    "mlp": "#7f7f7f",
    "logits": "#9467bd",
}
"""Edge colour by the receiving input (a head's q, k or v; an MLP; the logits)."""

_NODE_COLOURS = {"input": "#dddddd", "head": "#cfe2f3", "mlp": "#d9ead3", "logits": "#ead1dc"}


@dataclass(frozen=True)
class CircuitNode:
    """One node to draw: its label, its row (depth: input 0 … logits last), its kind and its
    column (a head's index, so a layer's heads spread across; None to centre the node)."""

    name: str
    row: int
    kind: str  # "input", "head", "mlp" or "logits"
    column: float | None = None


@dataclass(frozen=True)
class CircuitEdge:
    """One edge to draw, between node indices, with the input it feeds and its score."""

    sender: int
    receiver: int
    input: str  # "q", "k", "v", "mlp" or "logits"
    score: float


def _positions(nodes: Sequence[CircuitNode], used: set[int]) -> dict[int, tuple[float, float]]:
    """x, y of each used node: rows compressed to the used ones; x from the node's column (a
    head's index), so that edges between layers slant instead of piling up on one vertical."""
    rows = sorted({nodes[i].row for i in used})
    level = {row: k for k, row in enumerate(rows)}
    columns = [c for c in (nodes[i].column for i in used) if c is not None]
    centre = (min(columns) + max(columns)) / 2 if columns else 0.0
    out: dict[int, tuple[float, float]] = {}
    for i in used:
        column = nodes[i].column
        out[i] = (0.5 + (centre if column is None else column), float(level[nodes[i].row]))
    return out


def circuit_figure(
    nodes: Sequence[CircuitNode], edges: Sequence[CircuitEdge], *, title: str = ""
) -> Figure:
    """The circuit as a matplotlib figure (no pyplot; save with ``viz.plots.save_figure``).

    Args:
        nodes: every node of the graph (only those touched by ``edges`` are drawn).
        edges: the kept edges.
        title: the figure title.

    Returns:
        The figure.

    >>> fig = circuit_figure([CircuitNode("input", 0, "input"), CircuitNode("logits", 1, "logits")],
    ...                      [CircuitEdge(0, 1, "logits", 1.0)])
    >>> len(fig.axes)
    1
    """
    used = {e.sender for e in edges} | {e.receiver for e in edges}
    pos = _positions(nodes, used)
    width = max((x for x, _ in pos.values()), default=1.0) + 0.5
    height = max((y for _, y in pos.values()), default=0.0) + 1
    fig = Figure(
        figsize=(min(max(7.0, 0.9 * width + 2), 22.0), min(max(3.0, 0.6 * height + 1), 24.0))
    )
    ax = fig.subplots()
    _draw_edges(ax, edges, pos)
    for i, (x, y) in pos.items():
        node = nodes[i]
        ax.text(
            x,
            y,
            node.name,
            ha="center",
            va="center",
            fontsize=7,
            zorder=3,
            bbox={
                "boxstyle": "round,pad=0.25",
                "fc": _NODE_COLOURS.get(node.kind, "white"),
                "ec": "#555555",
                "lw": 0.6,
            },
        )
    ax.set_xlim(-0.3, width + 0.6)
    ax.set_ylim(-0.6, height - 0.4)
    ax.axis("off")
    handles = [
        Line2D([0], [0], color=c, lw=2, label=k)
        for k, c in INPUT_COLOURS.items()
        if any(e.input == k for e in edges)
    ]
    if handles:
        handles.append(Line2D([0], [0], color="black", lw=1, linestyle="--", label="score < 0"))
        ax.legend(
            handles=handles,
            title="edge into",
            fontsize=7,
            title_fontsize=7,
            loc="upper left",
            bbox_to_anchor=(1.0, 1.0),
            frameon=False,
        )
    ax.set_title(title or f"{len(used)} nodes, {len(edges)} edges", fontsize=10)
    fig.tight_layout()
    return fig


def _draw_edges(
    ax: Axes, edges: Sequence[CircuitEdge], pos: dict[int, tuple[float, float]]
) -> None:
    biggest = max((abs(e.score) for e in edges), default=0.0) or 1.0
    # q, k and v edges between the same pair of nodes bend apart so all three stay visible.
    bend = {"q": 0.12, "k": 0.0, "v": -0.12}
    for e in sorted(edges, key=lambda e: abs(e.score)):
        start, end = pos[e.sender], pos[e.receiver]
        # same-row or same-column edges bend more, so they clear the nodes between their ends
        rad = bend.get(e.input, 0.05) + (0.3 if start[0] == end[0] or start[1] == end[1] else 0.0)
        patch = FancyArrowPatch(
            start,
            end,
            arrowstyle="-|>",
            mutation_scale=6,
            shrinkA=9,
            shrinkB=9,
            connectionstyle=f"arc3,rad={rad}",
            color=INPUT_COLOURS.get(e.input, "black"),
            linewidth=0.4 + 2.6 * abs(e.score) / biggest,
            alpha=0.35 + 0.5 * abs(e.score) / biggest,
            linestyle="-" if e.score >= 0 else "--",
            zorder=2,
        )
        ax.add_patch(patch)


def circuit_svg(
    nodes: Sequence[CircuitNode], edges: Sequence[CircuitEdge], *, title: str = ""
) -> str:
    """The same drawing as an inline ``<svg>`` element (for HTML reports; no network needed)."""
    fig = circuit_figure(nodes, edges, title=title)
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg")
    text = buffer.getvalue()
    start = text.find("<svg")
    return text[start:] if start >= 0 else html.escape(text)

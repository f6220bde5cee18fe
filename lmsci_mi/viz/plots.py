"""Matplotlib figures for results: heatmaps over (layer, position) or (layer, head), layer curves.

The figures are plain ``matplotlib.figure.Figure`` objects made without pyplot, so importing this
module leaves the process's matplotlib backend alone, and saving renders through an Agg canvas,
which works on a headless machine and in CI.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from torch import Tensor

__all__ = [
    "heatmap",
    "plot_bars",
    "plot_curves",
    "plot_layer_scores",
    "plot_tensor",
    "plot_tokens",
    "save_figure",
]

TokenRow = tuple[str, Sequence[str], Sequence[float]]
"""One line of a token view: a caption, the tokens and one value per token."""


def heatmap(
    ax: Axes,
    values: Tensor,
    *,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    row_name: str,
    col_name: str,
    title: str = "",
    cmap: str | None = None,
) -> None:
    """Draw one 2-D heatmap; a diverging map centred on 0 when the values change sign."""
    array = values.detach().cpu().float().numpy()
    low, high = float(array.min()), float(array.max())
    if cmap is None and low < 0 < high:
        bound = max(abs(low), abs(high))
        image = ax.imshow(array, cmap="RdBu_r", vmin=-bound, vmax=bound, aspect="auto")
    else:
        image = ax.imshow(array, cmap=cmap or "viridis", aspect="auto")
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    _ticks(ax, "y", row_labels)
    _ticks(ax, "x", col_labels, rotate=True)
    ax.set_ylabel(row_name)
    ax.set_xlabel(col_name)
    if title:
        ax.set_title(title, fontsize=10)


def _ticks(ax: Axes, which: str, labels: Sequence[str], rotate: bool = False) -> None:
    step = max(1, len(labels) // 30)  # keep 30 layers readable
    idx = list(range(0, len(labels), step))
    shown = [labels[i] for i in idx]
    if which == "x":
        ax.set_xticks(idx, shown, rotation=60 if rotate else 0, ha="right" if rotate else "center")
    else:
        ax.set_yticks(idx, shown)


def plot_tensor(
    values: Tensor,
    *,
    axes: Sequence[str],
    labels: Sequence[Sequence[str]],
    title: str,
) -> Figure:
    """A line (1-D), a heatmap (2-D) or one heatmap per leading index (3-D)."""
    values = values.detach().cpu().float()
    if values.ndim == 1:
        return plot_curves(values[None], series=[title], x_label=axes[0], title=title)
    if values.ndim == 2:
        fig = Figure(figsize=(max(5, 0.35 * values.shape[1] + 2), 5))
        ax = fig.subplots()
        heatmap(ax, values, row_labels=labels[0], col_labels=labels[1], row_name=axes[0],
                col_name=axes[1], title=title)
        fig.tight_layout()
        return fig
    if values.ndim == 3 and values.shape[0] <= 6:
        n = values.shape[0]
        fig = Figure(figsize=(5 * n, 5))
        grid = fig.subplots(1, n, squeeze=False)
        for i in range(n):
            heatmap(grid[0][i], values[i], row_labels=labels[1], col_labels=labels[2],
                    row_name=axes[1], col_name=axes[2], title=f"{axes[0]} = {labels[0][i]}")
        fig.suptitle(title)
        fig.tight_layout()
        return fig
    raise ValueError(
        f"no default plot for a tensor of shape {tuple(values.shape)}; "
        "select a slice or use to_dataframe()"
    )


def plot_curves(values: Tensor, *, series: Sequence[str], x_label: str, title: str) -> Figure:
    """One line per row of ``values`` (e.g. probe accuracy per layer for several probes)."""
    values = torch.as_tensor(values).detach().cpu().float()
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    for row, name in zip(values, series, strict=True):
        ax.plot(range(len(row)), row.numpy(), marker="o", markersize=3, label=name)
    ax.set_xlabel(x_label)
    ax.set_title(title, fontsize=10)
    if len(series) > 1:
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_bars(
    labels: Sequence[str],
    values: Sequence[float],
    *,
    title: str,
    value_label: str,
    errors: Sequence[float] | None = None,
    colors: Sequence[str] | None = None,
) -> Figure:
    """Horizontal bars, one per label, top to bottom in the order given (a ranking, categories).

    Labels are shown as text (``repr`` of a token keeps its spaces visible when the caller
    passes it so), and each bar carries its value.
    """
    heights = [float(v) for v in values]
    longest = max((len(str(label)) for label in labels), default=0)
    fig = Figure(figsize=(6 + 0.07 * longest, max(2.2, 0.32 * len(heights) + 1.2)))
    ax = fig.subplots()
    y = list(range(len(heights)))
    ax.barh(y, heights, xerr=errors, color=colors or "tab:blue", capsize=3 if errors else 0)
    ax.set_yticks(y, [_shown(label) for label in labels])
    ax.invert_yaxis()
    span = max((abs(h) for h in heights), default=1.0) or 1.0
    for i, h in enumerate(heights):
        past = 0.01 * span + (float(errors[i]) if errors else 0.0)  # beyond the error bar
        ax.text(h + past * (1 if h >= 0 else -1), i, f"{h:.3g}", va="center",
                ha="left" if h >= 0 else "right", fontsize=8, parse_math=False)
    ax.set_xlabel(value_label)
    ax.set_title(title, fontsize=10)
    ax.axvline(0, color="grey", linewidth=0.5)
    ax.margins(x=0.15)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def plot_tokens(
    rows: Sequence[TokenRow],
    *,
    title: str,
    value_label: str,
    signed: bool = False,
    width: int = 100,
) -> Figure:
    """Tokens drawn as text, each on a background coloured by its value: a highlight, a feature's
    top contexts. One caption and one (wrapped) line of tokens per row.

    Args:
        rows: ``(caption, tokens, values)`` per row.
        signed: a diverging map centred on 0 (evidence for/against) instead of a sequential one
            from 0 (activations).
        width: characters per line before a row wraps.
    """
    finite = [abs(float(v)) for _, _, vals in rows for v in vals if float(v) == float(v)]
    bound = max(finite, default=1.0) or 1.0
    cmap = colormaps["RdBu_r" if signed else "Oranges"]
    norm = Normalize(-bound if signed else 0.0, bound)
    longest = max((sum(len(t) + 0.6 for t in tokens) for _, tokens, _ in rows), default=1.0)
    width = int(min(width, max(40, longest + 1)))
    lines = [(caption, _wrap(tokens, values, width)) for caption, tokens, values in rows]
    n_lines = sum(bool(caption) + len(wrapped) for caption, wrapped in lines)
    fig = Figure(figsize=(0.085 * width + 1.5, 0.26 * n_lines + 1.3))
    ax = fig.add_axes((0.02, 0.02, 0.84, 0.96 - 0.45 / fig.get_figheight()))
    ax.set_xlim(0, width)
    ax.set_ylim(n_lines, 0)
    ax.axis("off")
    y = 0.5
    for caption, wrapped in lines:
        if caption:  # a row without a caption continues the group above it
            ax.text(0, y, caption, fontsize=8, color="#555", va="center", parse_math=False)
            y += 1
        for line in wrapped:
            for x, text, value in line:
                rgba = cmap(norm(value))
                dark = 0.299 * rgba[0] + 0.587 * rgba[1] + 0.114 * rgba[2] < 0.5
                ax.text(x, y, text, family="monospace", fontsize=9, va="center",
                        color="white" if dark else "black", parse_math=False,
                        bbox={"facecolor": rgba, "edgecolor": "none", "pad": 1.5})
            y += 1
    bar = fig.add_axes((0.88, 0.1, 0.015, 0.8))
    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), cax=bar, label=value_label)
    fig.suptitle(title, fontsize=10)
    return fig


def _shown(token: str) -> str:
    """A token as a label: newlines and tabs visible, nothing that matplotlib would parse."""
    return token.replace("\n", "\\n").replace("\t", "\\t").replace("$", "\\$")


def _wrap(
    tokens: Sequence[str], values: Sequence[float], width: int
) -> list[list[tuple[float, str, float]]]:
    """Tokens laid out in lines of ``width`` characters: ``(x, text, value)`` per token."""
    lines: list[list[tuple[float, str, float]]] = [[]]
    x = 0.0
    for token, value in zip(tokens, values, strict=True):
        text = token.replace("\n", "⏎").replace("\t", "⇥") or "∅"
        size = len(text) + 0.6  # a little room between the coloured boxes
        if x + size > width and lines[-1]:
            lines.append([])
            x = 0.0
        lines[-1].append((x, text, float(value)))
        x += size
    return lines


def plot_layer_scores(
    layers: Sequence[str],
    lines: dict[str, Tensor],
    *,
    band: tuple[Tensor, Tensor] | None,
    x_label: str,
    y_label: str,
    title: str,
) -> Figure:
    """Scores against layer, one line per entry of ``lines``; ``band`` shades the first line's
    interval (a probe's bootstrap interval)."""
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    x = range(len(layers))
    for i, (name, values) in enumerate(lines.items()):
        # The probe's own line is solid with markers; the references are dashed, the baseline dotted.
        style = "o-" if i == 0 else "--" if i < 3 else ":"
        ax.plot(x, torch.as_tensor(values).cpu().float().numpy(), style, label=name, markersize=3)
    if band is not None:
        low, high = (torch.as_tensor(b).cpu().float().numpy() for b in band)
        ax.fill_between(x, low, high, alpha=0.2, label="95% bootstrap interval")
    step = max(1, len(layers) // 15)
    ax.set_xticks(list(x)[::step], list(layers)[::step])
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_title(title, fontsize=10)
    ax.axhline(0, color="grey", linewidth=0.5)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as PNG, whatever the process's backend.

    ``savefig`` renders a PNG through an Agg canvas when the figure has no interactive one, so
    this works headless. A figure made with pyplot (by a user, or a result's own ``plot``) is
    also closed, since pyplot keeps every open figure alive; figures made here are not
    registered with pyplot.
    """
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120, format="png")
    if fig.canvas.manager is not None:
        import matplotlib.pyplot as plt

        plt.close(fig)
    return out

"""One result as HTML: its plot (an inlined PNG), its largest numbers and its ``meta``.

The report builds each result's part of a section here, and ``Result._repr_html_`` shows the same
block in a notebook cell, so a result looks the same in both. Nothing references the network: the
plot is a data URI and the style sits in the block. Results are read through their public API
only (``plot``, ``to_dataframe``, ``summary``, ``meta``); this module imports no result type.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


class Result(Protocol):
    """What this module reads of a ``lmsci_mi.results.Result``. A protocol rather than an import:
    ``results`` imports this module for ``_repr_html_``, so importing it back would be a circle."""

    @property
    def values(self) -> Any: ...
    @property
    def meta(self) -> Any: ...
    def plot(self, path: Any = None, *, title: str | None = None) -> Any: ...
    def to_dataframe(self) -> pd.DataFrame: ...
    def summary(self, rows: int = 10) -> str: ...

    # Optional: ``interactive_html() -> str``, an HTML view (script inlined) shown instead of the
    # plot; read with getattr, so results without one need nothing.


Meta = Any

__all__ = [
    "CSS",
    "PLOT_DPI",
    "TABLE_ROWS",
    "clip",
    "esc",
    "html_page",
    "notebook_html",
    "plot_png",
    "result_html",
    "save_page",
    "truncate",
]

TABLE_ROWS = 30
"""Tables longer than this show the rows of largest |value| (or the first rows), and say so."""

PLOT_DPI = 90
"""Resolution of embedded plots: sharp on screen, some 30-150 kB a plot."""


def result_html(name: str, result: Result, *, rows: int = TABLE_ROWS, summary: bool = False) -> str:
    """The block of one result: a heading, optionally its ``summary()``, the plot beside a table
    of its ``rows`` largest numbers, and its meta in a folded ``<details>``.

    Needs :data:`CSS` on the page (the report puts it in its head; a notebook cell adds it).
    """
    kind = type(result).__name__
    parts = [f"<div class='result'><h3>{esc(name)} <span class='kind'>{esc(kind)}</span></h3>"]
    if summary:
        parts.append(f"<pre class='text'>{esc(_summary_text(result))}</pre>")
    interactive = _interactive_html(result)
    if interactive is not None:  # the interactive view takes the page's width, the numbers follow
        parts.append(interactive)
    # The plot and its numbers side by side (they wrap on a narrow window).
    plot = _plot_html(result) if interactive is None else ""
    parts.append(f"<div class='pair'><div>{plot}</div><div>")
    parts.append(_table_html(result, rows))
    parts.append(_meta_html(result.meta))
    parts.append("</div></div></div>")
    return "".join(parts)


def plot_png(result: Result, *, dpi: int = PLOT_DPI) -> bytes:
    """``result.plot()`` as PNG bytes (rendered through Agg; the figure is closed after, so a
    notebook does not draw it a second time)."""
    fig = result.plot()
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, dpi=dpi, format="png")
    finally:
        if fig.canvas.manager is not None:  # made through pyplot: pyplot would keep it alive
            import matplotlib.pyplot as plt

            plt.close(fig)
    return buffer.getvalue()


def truncate(frame: pd.DataFrame, rows: int = TABLE_ROWS) -> tuple[pd.DataFrame, str]:
    """At most ``rows`` rows: the largest |value| when there is a value column; and a note."""
    # An axis's `<name>_index` repeats its label column's information; keep the labels only.
    redundant = [
        c for c in frame.columns if str(c).endswith("_index") and str(c)[:-6] in frame.columns
    ]
    frame = frame.drop(columns=redundant)
    n = len(frame)
    if n <= rows:
        return frame, f"all {n} rows"
    if "value" in frame.columns and frame["value"].dtype.kind in "fiu":
        magnitude = np.abs(frame["value"].to_numpy(dtype=float))
        order = np.argsort(-magnitude, kind="stable")  # NaN sorts last
        return (
            frame.iloc[order[:rows]],
            f"the {rows} of {n} rows with the largest |value| (all rows: result.to_dataframe())",
        )
    return frame.head(rows), f"the first {rows} of {n} rows (all rows: result.to_dataframe())"


def esc(text: object) -> str:
    """``text`` escaped for HTML text and attribute values."""
    return html.escape(str(text), quote=True)


def html_page(body: str, *, title: str = "", head: str = "") -> str:
    """A whole HTML document around ``body`` (UTF-8; ``head`` goes in its head)."""
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{esc(title)}</title>{head}</head><body>{body}</body></html>\n"
    )


def save_page(path: str | Path, page: str) -> Path:
    """Write ``page`` to ``path`` (folders are made) and return the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out


def clip(text: str, limit: int = 600) -> str:
    """``text`` cut to ``limit`` characters, marked when cut."""
    return text if len(text) <= limit else text[:limit] + " …"


def _summary_text(result: Result) -> str:
    """The result's own summary; only the headline of the base's, whose rows the table repeats."""
    try:
        text = result.summary()
    except Exception as error:  # a notebook cell must still show the rest of the result
        return f"(no summary: {type(error).__name__}: {error})"
    own = type(result).summary is not type(result).__mro__[-2].summary  # Result, under object
    return text if own else text.splitlines()[0]


def _interactive_html(result: Result) -> str | None:
    """The result's interactive view (``interactive_html()``, e.g. a circuit's viewer), which
    replaces its static plot; None when it has none, or it failed (the plot is shown then)."""
    make = getattr(result, "interactive_html", None)
    if not callable(make):
        return None
    try:
        return str(make())
    except Exception:  # the static plot still shows the result
        return None


def _plot_html(result: Result) -> str:
    try:
        png = plot_png(result)
    except Exception as error:
        return f"<p class='note'>No plot: {esc(type(error).__name__)}: {esc(error)}</p>"
    data = base64.b64encode(png).decode("ascii")
    return f"<img class='plot' alt='plot of {esc(type(result).__name__)}' src='data:image/png;base64,{data}'>"


def _table_html(result: Result, rows: int) -> str:
    try:
        frame = result.to_dataframe()
    except Exception as error:
        return f"<p class='note'>No table: {esc(type(error).__name__)}: {esc(error)}</p>"
    shown, note = truncate(frame, rows)
    table = shown.to_html(index=False, border=0, classes="numbers", float_format=_number, na_rep="")
    # Short tables are open; long ones start folded so that the plots come first.
    state = " open" if len(shown) <= 12 else ""
    return f"<details{state}><summary>Numbers: {esc(note)}</summary><div class='scroll'>{table}</div></details>"


def _number(value: float) -> str:
    return f"{value:.4g}"


def _meta_html(meta: Meta) -> str:
    prompts = list(meta.prompts)
    shown = prompts[:5]
    more = f" … and {len(prompts) - 5} more" if len(prompts) > 5 else ""
    rows = [
        ("model", meta.model),
        ("sink", repr(meta.sink)),
        ("seed", "" if meta.seed is None else str(meta.seed)),
        ("data source", meta.data_source),
        ("version", meta.version),
        (f"prompts ({len(prompts)})", "; ".join(repr(p) for p in shown) + more),
    ]
    rows += [(f"param {k}", repr(v)) for k, v in meta.params.items()]
    body = "".join(f"<tr><th>{esc(k)}</th><td>{esc(clip(v))}</td></tr>" for k, v in rows if v != "")
    return f"<details><summary>Meta</summary><table class='meta'>{body}</table></details>"


CSS = """
pre{background:#f6f6f6;padding:.6em;overflow-x:auto;font-size:.85em;white-space:pre-wrap;
font-family:ui-monospace,Menlo,Consolas,monospace}
h3{margin:1em 0 .3em}.kind{color:#777;font-weight:normal;font-size:.9em}
img.plot{max-width:100%;height:auto;display:block;max-height:520px;width:auto}
table.numbers,table.meta{border-collapse:collapse;font-size:.8em;margin:.4em 0}
table.numbers td,table.numbers th,table.meta td,table.meta th{border:1px solid #ddd;padding:2px 6px;
text-align:left}summary{cursor:pointer;color:#444;font-size:.9em}.note{color:#777}
.pair{display:flex;flex-wrap:wrap;gap:1.2em;align-items:flex-start}.pair>div{min-width:0}
.pair>div:first-child{flex:0 1 auto;max-width:100%}.pair>div:last-child{flex:1 1 300px}
.scroll{overflow-x:auto;max-width:100%}
"""
"""The style of a result block (:func:`result_html`); the report and a notebook cell use it."""


def notebook_html(result: Result, *, rows: int = 10) -> str:
    """The block of :func:`result_html` with its summary, scoped style included: a notebook
    cell's view of ``result`` (what ``Result._repr_html_`` returns)."""
    block = result_html(result.meta.model, result, rows=rows, summary=True)
    return f"<div class='lmsci-result'><style>{_scoped(CSS, '.lmsci-result')}</style>{block}</div>"


def _scoped(css: str, scope: str) -> str:
    """``css`` with every selector prefixed by ``scope``, so it styles nothing else in a notebook."""
    rules = []
    for rule in css.replace("\n", "").split("}"):
        if "{" not in rule:
            continue
        selectors, body = rule.split("{", 1)
        prefixed = ",".join(f"{scope} {s.strip()}" for s in selectors.split(","))
        rules.append(f"{prefixed}{{{body}}}")
    return "".join(rules)

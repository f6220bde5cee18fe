"""An interactive circuit viewer: attribution graphs and edge circuits as self-contained HTML.

Nodes sit in rows by layer (the input at the bottom, the logits at the top) and in columns by
position; a slider keeps the highest-scoring nodes (at most 40 at first), hovering a node shows its
details (a feature's top contexts, its promoted tokens), and clicking it lights its ancestors and
descendants, as in circuit-tracer's graph frontend (Ameisen et al. 2025). The script and style are
lmsci-mi's own (``viz/assets/``), inlined in every view; nothing is fetched.

The graph is plain data, so any producer can draw through it::

    {"nodes": [{"id", "kind", "layer", "position", "label", "score", "details", "pinned"}],
     "edges": [{"source", "target", "weight", "kind"}],
     "meta": {"title", "note", "row_labels", "column_labels", "edge_colours", "node_colours",
              "show_coordinates"}}

``layer`` is a number (larger is later), ``position`` a number or None (centred in its row),
``score`` ranks nodes for the slider (by its absolute value; ``pinned`` nodes come first, by
default those of kind token, input, embedding, logit or logits), ``details`` is text, a list, or a
mapping of either; an edge's ``kind`` picks its colour from ``meta["edge_colours"]`` (else its
sign does). Row and column labels map a layer or a position to its name (a list indexed by it, or
a mapping); without them, ``meta["tokens"]`` labels the columns and ``meta["layers"]`` (names of
special layers, ``{"token": -1, "logit": 12}``) the rows, as an attribution graph's
``to_viewer_json`` gives them. ``show_coordinates: False`` leaves a node's layer and position out
of its tooltip. The title is ``meta["title"]``, else the model and the prompt.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from lmsci_mi.config import Config, config
from lmsci_mi.errors import UnknownNameError, UserInputError
from lmsci_mi.viz.circuit_graph import INPUT_COLOURS, CircuitEdge, CircuitNode
from lmsci_mi.viz.result_html import esc as _esc
from lmsci_mi.viz.result_html import html_page, save_page

__all__ = [
    "CircuitViewer",
    "ViewerConfig",
    "check_graph",
    "circuit_viewer",
    "graph_from_circuit",
]

_PINNED_KINDS = ("input", "token", "embedding", "logit", "logits")
"""Kinds pinned when a node does not say: the prompt's tokens and the logits, which
circuit-tracer's pruning always keeps."""

_DETAIL_EDGES = 8
"""Incoming and outgoing edges listed in an edge-circuit node's details."""


@config
class ViewerConfig(Config):
    """How a circuit viewer starts.

    Attributes:
        max_nodes: nodes shown at the slider's default (the highest-scoring; pinned first).
        height_limit: the view's height in pixels before it scrolls (0: never scrolls).
    """

    max_nodes: int = field(default=40, metadata={"help": "nodes shown at first", "ge": 1})
    height_limit: int = field(
        default=900, metadata={"help": "px before the view scrolls (0: never)", "ge": 0}
    )


@dataclass(frozen=True)
class CircuitViewer:
    """A graph ready to draw: ``_repr_html_`` for a notebook cell, :meth:`html` for a report,
    :meth:`save` for a page of its own. Build it with :func:`circuit_viewer`.

    Attributes:
        graph: the checked graph (:func:`check_graph`).
        config: how the view starts.
    """

    graph: Mapping[str, Any]
    config: ViewerConfig = dataclasses.field(default_factory=ViewerConfig)

    @property
    def title(self) -> str:
        meta = self.graph["meta"]
        if meta.get("title"):
            return str(meta["title"])
        return ": ".join(str(meta[k]) for k in ("model", "prompt") if meta.get(k))

    def html(self) -> str:
        """The view as an HTML fragment with its style and script (each view carries its own
        ~15 kB copy, so a fragment works alone in any page, notebook or export)."""
        nodes = self.graph["nodes"]
        start = min(self.config.max_nodes, len(nodes))
        uid = f"lmsci-cv-{uuid.uuid4().hex[:12]}"
        title = _esc(self.title)
        note = self.graph["meta"].get("note")
        limit = self.config.height_limit
        scroll = f" style='max-height:{limit}px;overflow-y:auto'" if limit else ""
        return (
            f"<div class='lmsci-cv' id='{uid}'><style>{_asset('circuit_viewer.css')}</style>"
            "<div class='lmsci-cv-head'>"
            + (f"<span class='lmsci-cv-title'>{title}</span>" if title else "")
            + f"<label>nodes <input type='range' class='lmsci-cv-nodes' min='{min(1, start)}' "
            f"max='{len(nodes)}' value='{start}' aria-label='nodes shown'></label>"
            "<label>edges <input type='range' class='lmsci-cv-edges' min='1' max='100' "
            "value='100' aria-label='share of the strongest edges shown, in percent'></label>"
            f"<span class='lmsci-cv-count'>{start} of {len(nodes)} nodes</span></div>"
            "<div class='lmsci-cv-legend'></div>"
            + (f"<p class='lmsci-cv-note'>{_esc(note)}</p>" if note else "")
            + ("" if nodes else "<p class='lmsci-cv-note'>No nodes: the graph is empty.</p>")
            + f"<div class='lmsci-cv-scroll'{scroll}><svg class='lmsci-cv-svg' "
            "role='img' aria-label='circuit graph'></svg></div><div class='lmsci-cv-tip'></div>"
            "<p class='lmsci-cv-fallback lmsci-cv-note'>The interactive circuit needs JavaScript "
            "(in a notebook: trust it; its data is in the page).</p>"
            f"<script type='application/json' class='lmsci-cv-data'>{_json(self.graph)}</script>"
            f"<script>{_asset('circuit_viewer.js')}\nlmsciCircuitViewer.mount('{uid}');</script>"
            "</div>"
        )

    def page(self) -> str:
        """A self-contained HTML page of the view (it opens from disk with no network)."""
        viewport = "<meta name='viewport' content='width=device-width'>"
        return html_page(self.html(), title=self.title or "circuit", head=viewport)

    def save(self, path: str | Path) -> Path:
        """Write :meth:`page` to ``path`` (folders are made) and return the path."""
        return save_page(path, self.page())

    def _repr_html_(self) -> str:
        return self.html()


def circuit_viewer(graph: Mapping[str, Any], config: ViewerConfig | None = None) -> CircuitViewer:
    """An interactive view of ``graph`` (the plain graph of this module's docstring).

    Args:
        graph: ``{"nodes": [...], "edges": [...], "meta": {...}}``.
        config: how the view starts (default: 40 nodes).

    Returns:
        The viewer: it shows itself in a notebook cell; ``.html()`` embeds it in a page.

    Raises:
        UserInputError: a malformed graph (the message names the node or edge and the fix).

    >>> view = circuit_viewer({"nodes": [{"id": "a", "kind": "token", "layer": 0, "score": 1},
    ...                                  {"id": "b", "kind": "logits", "layer": 1, "score": 1}],
    ...                        "edges": [{"source": "a", "target": "b", "weight": 0.5}]})
    >>> page = view.page()
    >>> "lmsciCircuitViewer.mount" in page and "https://" not in page
    True
    """
    return CircuitViewer(check_graph(graph), config or ViewerConfig())


def check_graph(graph: Mapping[str, Any]) -> dict[str, Any]:
    """``graph`` checked and made plain: ids as strings, numbers as finite floats, the optional
    keys filled in (``kind`` "node", ``position`` None, ``label`` the id, ``score`` 0, ``details``
    None, ``pinned`` False; an edge's ``kind`` None), ``details`` and ``meta`` JSON-serialisable.

    Raises:
        UserInputError: not a mapping with ``nodes``, a node without ``id`` or ``layer``, a
            duplicate id, an edge to an unknown node, a non-finite number, data JSON cannot hold.
    """
    if not isinstance(graph, Mapping) or "nodes" not in graph:
        raise UserInputError(
            'a circuit graph is a mapping {"nodes": [...], "edges": [...], "meta": {...}}; '
            f"got {type(graph).__name__}"
            + (f" with keys {sorted(graph)}" if isinstance(graph, Mapping) else "")
        )
    nodes = [_check_node(i, node) for i, node in enumerate(graph["nodes"])]
    ids = [n["id"] for n in nodes]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise UserInputError(f"node ids must be unique; repeated: {repeated[:10]}")
    known = set(ids)
    edges = [_check_edge(i, edge, known) for i, edge in enumerate(graph.get("edges", ()))]
    meta = dict(graph.get("meta") or {})
    _json_or_error(meta, "the graph's meta")
    return {"nodes": nodes, "edges": edges, "meta": meta}


def _check_node(index: int, node: Any) -> dict[str, Any]:
    where = f"node {index}"
    if not isinstance(node, Mapping) or "id" not in node or "layer" not in node:
        raise UserInputError(f"{where} needs at least an 'id' and a 'layer'; got {node!r:.200}")
    where = f"node {node['id']!r}"
    position = node.get("position")
    out = {
        "id": str(node["id"]),
        "kind": str(node.get("kind") or "node"),
        "layer": _finite(node["layer"], f"{where}'s layer"),
        "position": None if position is None else _finite(position, f"{where}'s position"),
        "label": str(node.get("label", node["id"])),
        "score": _finite(node.get("score", 0.0), f"{where}'s score"),
        "details": node.get("details"),
        "pinned": bool(node.get("pinned", str(node.get("kind")) in _PINNED_KINDS)),
    }
    _json_or_error(out["details"], f"{where}'s details")
    return out


def _check_edge(index: int, edge: Any, known: set[str]) -> dict[str, Any]:
    if not isinstance(edge, Mapping) or not {"source", "target", "weight"} <= set(edge):
        raise UserInputError(
            f"edge {index} needs a 'source', a 'target' and a 'weight'; got {edge!r:.200}"
        )
    source, target = str(edge["source"]), str(edge["target"])
    for end in (source, target):
        if end not in known:
            close = difflib.get_close_matches(end, sorted(known), n=3)
            hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
            raise UnknownNameError(
                f"edge {index} ({source} → {target}) names no node {end!r}{hint}: every edge's "
                f"source and target must be the id of one of the {len(known)} nodes",
                name=end,
            )
    kind = edge.get("kind")
    return {
        "source": source,
        "target": target,
        "weight": _finite(edge["weight"], f"edge {source} → {target}'s weight"),
        "kind": None if kind is None else str(kind),
    }


def _finite(value: Any, what: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UserInputError(f"{what} must be a number, not {value!r:.80}") from None
    if not math.isfinite(number):
        raise UserInputError(f"{what} is {number}: give a finite number (drop or clip the node)")
    return number


def _json_or_error(value: Any, what: str) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise UserInputError(
            f"{what} cannot be written as JSON ({error}): give text, numbers, lists and mappings"
        ) from None


def graph_from_circuit(
    nodes: Sequence[CircuitNode], edges: Sequence[CircuitEdge], *, title: str = ""
) -> dict[str, Any]:
    """An edge circuit (the nodes and edges :mod:`lmsci_mi.viz.circuit_graph` draws) as the
    viewer's plain graph: rows by depth, heads in columns by index, a node scored by the summed
    |score| of its edges, the input and the logits pinned, edges coloured by the input they feed.

    >>> graph = graph_from_circuit(
    ...     [CircuitNode("input", 0, "input"), CircuitNode("L0.H1", 1, "head", 1.0),
    ...      CircuitNode("logits", 2, "logits")],
    ...     [CircuitEdge(0, 1, "q", 0.5), CircuitEdge(1, 2, "logits", -0.25)])
    >>> [(n["id"], n["score"], n["pinned"]) for n in graph["nodes"]]
    [('input', 0.5, True), ('L0.H1', 0.75, False), ('logits', 0.25, True)]
    """
    used = sorted({e.sender for e in edges} | {e.receiver for e in edges})
    total = dict.fromkeys(used, 0.0)
    incoming: dict[int, list[CircuitEdge]] = {i: [] for i in used}
    outgoing: dict[int, list[CircuitEdge]] = {i: [] for i in used}
    for e in edges:
        total[e.sender] += abs(e.score)
        total[e.receiver] += abs(e.score)
        outgoing[e.sender].append(e)
        incoming[e.receiver].append(e)

    def listed(rows: list[CircuitEdge], other: str) -> list[str]:
        rows = sorted(rows, key=lambda e: -abs(e.score))
        shown = [
            f"{nodes[getattr(e, other)].name} ({e.input}) {e.score:+.4g}"
            for e in rows[:_DETAIL_EDGES]
        ]
        return shown + (
            [f"… {len(rows) - _DETAIL_EDGES} more"] if len(rows) > _DETAIL_EDGES else []
        )

    out_nodes = [
        {
            "id": nodes[i].name,
            "kind": nodes[i].kind,
            "layer": nodes[i].row,
            "position": nodes[i].column,
            "label": nodes[i].name,
            "score": total[i],
            "pinned": nodes[i].kind in ("input", "logits"),
            "details": {
                "summed |score| of its edges": f"{total[i]:.4g}",
                "from": listed(incoming[i], "sender"),
                "to": listed(outgoing[i], "receiver"),
            },
        }
        for i in used
    ]
    out_edges = [
        {
            "source": nodes[e.sender].name,
            "target": nodes[e.receiver].name,
            "weight": e.score,
            "kind": e.input,
        }
        for e in edges
    ]
    # Rows are depths (a layer's heads, then its MLP) and columns head indices: the node names
    # say the layer and head, so the tooltip leaves the coordinates out.
    meta = {"title": title, "edge_colours": dict(INPUT_COLOURS), "show_coordinates": False}
    return {"nodes": out_nodes, "edges": out_edges, "meta": meta}


@cache
def _asset(name: str) -> str:
    """A viewer asset's text, checked to be safe inside a ``<style>`` or ``<script>`` element."""
    text = resources.files("lmsci_mi.viz").joinpath("assets", name).read_text(encoding="utf-8")
    if "</" in text:  # would end the element early in an HTML page
        raise RuntimeError(f"lmsci_mi/viz/assets/{name} contains '</'")
    return text


SIGNIFICANT_DIGITS = 6
"""Digits a number keeps in the page: the viewer shows 3 and ranks by the rest, and a float's full
17 digits would more than double a large graph's page."""


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.{SIGNIFICANT_DIGITS}g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(v) for v in value]
    return value


def _json(value: Any) -> str:
    """JSON for a ``<script type="application/json">`` element: numbers to ``SIGNIFICANT_DIGITS``,
    and no ``<``, ``>`` or ``&`` left, so no label can end the element or open a comment."""
    text = json.dumps(_rounded(value), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")

"""The interactive circuit viewer: graph checks, the edge-circuit adapter, the report's use of it,
and (slow, in headless Chromium) the DOM a reader gets: at most 40 nodes at first, no two labels
overlapping, labels of at least 10 px at a 900 px width, a slider that prunes, paths that light up
on a click, and no network request."""

from __future__ import annotations

import html
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from headless_chromium import chromium_or_skip, dump_dom, screenshot

from lmsci_mi.circuits.edges.faithfulness import Circuit
from lmsci_mi.circuits.edges.graph import EdgeGraph
from lmsci_mi.circuits.edges.pruning import prune_topn
from lmsci_mi.errors import UserInputError
from lmsci_mi.results import Meta
from lmsci_mi.viz.circuit_viewer import (
    SIGNIFICANT_DIGITS,
    ViewerConfig,
    check_graph,
    circuit_viewer,
)

# ---------------------------------------------------------------------- graphs to draw


def attribution_like_graph(seed: int = 0, *, n_features: int = 90, n_layers: int = 6) -> dict:
    """An attribution graph's shape: pinned tokens below and logits above, features and errors
    in (layer, position) cells that hold several nodes, long labels, details with top contexts."""
    rng = random.Random(seed)
    tokens = ["<bos>", "The", " Eiffel", " Tower", " is", " located", " in", " the", " city", " of"]
    nodes: list[dict[str, Any]] = [
        {
            "id": f"t{p}",
            "kind": "token",
            "layer": -1,
            "position": p,
            "label": repr(t)[1:-1],
            "score": 0.0,
            "pinned": True,
            "details": f"token {t!r} at position {p}",
        }
        for p, t in enumerate(tokens)
    ]
    for i in range(n_features):
        layer, position = rng.randrange(n_layers), rng.choice([1, 2, 3, 3, 3, 8, 9, 9, 9, 9])
        nodes.append(
            {
                "id": f"f{i}",
                "kind": "feature",
                "layer": layer,
                "position": position,
                "label": f"L{layer}#{rng.randrange(4096)} "
                + rng.choice(
                    ["landmarks in Paris and France", "the word 'city'", "capital", "tower"]
                ),
                "score": rng.expovariate(1.0),
                "details": {
                    "top contexts": [f"… visited the [[Tower]] in {c} …" for c in "ABC"],
                    "promoted tokens": [" Paris", " France", " Lyon"],
                },
            }
        )
    for layer in range(n_layers):
        nodes.append(
            {
                "id": f"e{layer}",
                "kind": "error",
                "layer": layer,
                "position": 9,
                "label": f"error L{layer}",
                "score": rng.expovariate(2.0),
            }
        )
    for k, answer in enumerate([" Paris", " London", " Rome"]):
        nodes.append(
            {
                "id": f"logit{k}",
                "kind": "logit",
                "layer": n_layers,
                "position": 9,
                "label": f"{answer} (p={0.7 / (k + 1):.2f})",
                "score": 1.0,
                "pinned": True,
            }
        )
    edges = []
    for target in nodes:
        below = [n for n in nodes if n["layer"] < target["layer"]]
        for source in rng.sample(below, min(len(below), 3)):
            edges.append(
                {"source": source["id"], "target": target["id"], "weight": rng.gauss(0.0, 1.0)}
            )
    meta = {
        "title": "attribution graph (random, realistic shape)",
        "column_labels": tokens,
        "row_labels": {
            "-1": "tokens",
            **{str(i): f"L{i}" for i in range(n_layers)},
            str(n_layers): "logits",
        },
    }
    return {"nodes": nodes, "edges": edges, "meta": meta}


def edge_circuit(n_edges: int = 100, seed: int = 0) -> Circuit:
    """An edge circuit the size of the tour's (about 100 edges, some 30 nodes) on an 8-layer,
    8-head graph: random input → heads/MLPs → logits paths scored high over weak noise, pruned to
    ``n_edges`` as the tour prunes EAP-IG's scores."""
    graph = EdgeGraph(model="toy-8l", n_layers=8, n_heads=8, n_kv_heads=8, grouped=False)
    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    scores = 0.01 * torch.randn(graph.real.shape, generator=gen)
    while int((scores.abs() > 0.1).sum()) < n_edges:
        layers = sorted(rng.sample(range(8), rng.randint(2, 4)))
        path = ["input"] + [
            f"L{k}.H{rng.randrange(8)}" if rng.random() < 0.8 else f"MLP{k}" for k in layers
        ]
        for sender, receiver in zip(path, [*path[1:], "logits"], strict=True):
            into = f"{receiver}.{rng.choice('qkv')}" if ".H" in receiver else receiver
            s, r = graph.edge_index(f"{sender}->{into}")
            scores[s, r] = rng.choice([-1, 1]) * rng.uniform(0.2, 1.0)
    mask = prune_topn(graph, scores * graph.real, n_edges)
    return Circuit(
        values=mask,
        axes=("sender", "receiver"),
        labels=(graph.sender_names, graph.receiver_names),
        meta=Meta(model="toy-8l", sink=None),
        scores=scores,
        graph=graph,
        fraction=1.0,
    )


def page_data(page: str) -> dict:
    found = re.search(r"<script type='application/json' class='lmsci-cv-data'>(.*?)</script>", page)
    assert found is not None
    return json.loads(found.group(1))


# ---------------------------------------------------------------------- fast checks


def assert_same_graph(page: Any, checked: Any) -> None:
    """The page's graph is the checked one, its numbers to ``SIGNIFICANT_DIGITS``."""
    if isinstance(checked, float):
        assert page == pytest.approx(checked, rel=10.0 ** (1 - SIGNIFICANT_DIGITS), abs=0.0)
    elif isinstance(checked, dict):
        assert set(page) == set(checked)
        for key in checked:
            assert_same_graph(page[key], checked[key])
    elif isinstance(checked, list | tuple):
        assert len(page) == len(checked)
        for a, b in zip(page, checked, strict=True):
            assert_same_graph(a, b)
    else:
        assert page == checked


def test_the_view_starts_at_40_nodes_and_carries_the_checked_graph() -> None:
    graph = attribution_like_graph()
    view = circuit_viewer(graph)
    fragment = view.html()
    assert "value='40'" in fragment and f"max='{len(graph['nodes'])}'" in fragment
    assert_same_graph(page_data(fragment), check_graph(graph))
    assert "value='7'" in circuit_viewer(graph, ViewerConfig(max_nodes=7)).html()
    assert view._repr_html_().startswith("<div class='lmsci-cv'")
    # An attribution graph's export names no pins and no title: its tokens and logits are pinned,
    # and the model and prompt title it.
    plain = {
        "nodes": [{"id": k, "kind": k, "layer": 0} for k in ("token", "feature", "logit")],
        "edges": [],
        "meta": {"model": "toy-2l", "prompt": "The cat"},
    }
    assert [n["pinned"] for n in check_graph(plain)["nodes"]] == [True, False, True]
    assert circuit_viewer(plain).title == "toy-2l: The cat"


def test_the_page_fetches_nothing_and_no_label_can_end_its_script() -> None:
    graph = attribution_like_graph()
    graph["nodes"][0]["label"] = "</script><script>alert(1)</script>"
    graph["nodes"][1]["details"] = "<!-- & <img src=x>"
    page = circuit_viewer(graph).page()
    assert "http:" not in page and "https:" not in page  # no address to fetch from
    assert not re.search(r"\b(src|href)\s*=\s*['\"]?//", page)  # nor a protocol-relative one
    assert "alert(1)" in page and "</script><script>alert" not in page
    assert page.count("</script>") == 2  # the data and the viewer's script, nothing injected
    assert page_data(page)["nodes"][0]["label"] == "</script><script>alert(1)</script>"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda g: g["nodes"].append({"id": "t0", "layer": 0}), "unique"),
        (lambda g: g["nodes"].append({"label": "x", "layer": 0}), "'id' and a 'layer'"),
        (
            lambda g: g["edges"].append({"source": "f1", "target": "f999", "weight": 1}),
            "no node 'f999'",
        ),
        (lambda g: g["edges"].append({"source": "f1", "target": "f2"}), "'weight'"),
        (lambda g: g["nodes"][3].update(score=float("nan")), "finite"),
        (lambda g: g["nodes"][3].update(layer="two"), "must be a number"),
        (lambda g: g["nodes"][3].update(details={"x": object()}), "JSON"),
    ],
)
def test_a_malformed_graph_is_a_clear_error(change: Any, message: str) -> None:
    graph = attribution_like_graph()
    change(graph)
    with pytest.raises(UserInputError, match=re.escape(message)):
        circuit_viewer(graph)
    with pytest.raises(UserInputError, match="mapping"):
        circuit_viewer([graph])  # type: ignore[arg-type]


def test_an_edge_circuit_becomes_the_viewers_graph() -> None:
    circuit = edge_circuit()
    graph = circuit.to_graph()
    drawn = circuit._drawn_edges()
    assert len(graph["edges"]) == len(drawn) >= 90
    assert {n["id"] for n in graph["nodes"]} == set(circuit.node_names())
    pinned = {n["id"] for n in graph["nodes"] if n["pinned"]}
    assert pinned == {"input", "logits"}
    # a node's score is the summed |score| of the edges it touches
    node = max(graph["nodes"], key=lambda n: n["score"])
    touching = [e["weight"] for e in graph["edges"] if node["id"] in (e["source"], e["target"])]
    assert node["score"] == pytest.approx(sum(abs(w) for w in touching))
    assert {e["kind"] for e in graph["edges"]} <= {"q", "k", "v", "mlp", "logits"}


def test_results_with_a_viewer_show_it_instead_of_the_static_plot() -> None:
    from lmsci_mi.viz.result_html import result_html

    block = result_html("circuit", edge_circuit(40))
    assert "class='lmsci-cv'" in block and "<img class='plot'" not in block
    assert "Numbers:" in block  # the table and the meta stay


def test_a_notebook_cell_shows_a_circuit_interactively() -> None:
    # (the report's page: tests/unit/test_report.py, where the report is imported anyway)
    assert "lmsciCircuitViewer.mount('lmsci-cv-" in edge_circuit(40)._repr_html_()


def test_the_assets_are_packaged() -> None:
    import fnmatch

    import tomllib

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text("utf-8"))
    patterns = pyproject["tool"]["setuptools"]["package-data"]["lmsci_mi"]
    for name in ("circuit_viewer.js", "circuit_viewer.css"):
        assert any(fnmatch.fnmatch(f"viz/assets/{name}", p) for p in patterns), name


# ---------------------------------------------------------------------- Chromium

_PROBE = """<script>
window.addEventListener('load', function () { setTimeout(function () {
  var out = {views: []};
  document.querySelectorAll('.lmsci-cv').forEach(function (root) {
    var r = {};
    var count = function () { return root.querySelectorAll('g.lmsci-cv-node').length; };
    r.total = root.querySelector('input.lmsci-cv-nodes').max | 0;
    r.initial = count();
    r.edges = root.querySelectorAll('path.lmsci-cv-edge').length;
    var svg = root.querySelector('svg');
    r.svg_width = svg.getBoundingClientRect().width;
    r.svg_attr_width = +svg.getAttribute('width');
    r.labels = Array.prototype.map.call(root.querySelectorAll('text.lmsci-cv-label'), function (t) {
      var b = t.getBoundingClientRect();
      return {text: t.firstChild ? t.firstChild.nodeValue : '', x: b.left, y: b.top, w: b.width, h: b.height,
              font: parseFloat(getComputedStyle(t).fontSize)};
    });
    var slider = root.querySelector('input.lmsci-cv-nodes');
    slider.value = 10; slider.dispatchEvent(new Event('input'));
    r.after_slider = count();
    r.edges_after = root.querySelectorAll('path.lmsci-cv-edge').length;
    var first = root.querySelector('g.lmsci-cv-node');
    first.dispatchEvent(new MouseEvent('mouseenter'));
    r.tip = root.querySelector('.lmsci-cv-tip').textContent;
    first.dispatchEvent(new MouseEvent('click', {bubbles: true}));
    r.highlighted = +root.getAttribute('data-highlighted');
    r.lit = root.querySelectorAll('g.lmsci-cv-node.lmsci-cv-on').length;
    r.fallback = root.querySelectorAll('.lmsci-cv-fallback').length;
    out.views.push(r);
  });
  out.resources = performance.getEntriesByType('resource').map(function (e) { return e.name; });
  out.linked = Array.prototype.map.call(document.querySelectorAll('[src],[href]'), function (e) {
    return e.getAttribute('src') || e.getAttribute('href');
  }).filter(function (u) { return !/^(data:|#|$)/.test(u); });
  var pre = document.createElement('pre'); pre.id = 'probe';
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
}, 50); });
</script>"""


@pytest.fixture(scope="module")
def chromium() -> str:
    return chromium_or_skip()


def _probe(chromium: str, page: Path) -> dict:
    dom = dump_dom(chromium, page)
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.DOTALL)
    assert found is not None, dom[-2000:]
    return json.loads(html.unescape(found.group(1)))


def _overlaps(labels: list[dict]) -> list[tuple[str, str]]:
    boxes = [b for b in labels if b["w"] > 0]
    return [
        (a["text"], b["text"])
        for i, a in enumerate(boxes)
        for b in boxes[i + 1 :]
        if a["x"] < b["x"] + b["w"] - 0.5
        and b["x"] < a["x"] + a["w"] - 0.5
        and a["y"] < b["y"] + b["h"] - 0.5
        and b["y"] < a["y"] + a["h"] - 0.5
    ]


@pytest.mark.slow  # starts a browser: seconds
@pytest.mark.chromium
def test_the_viewer_reads_well_in_headless_chromium(chromium: str, tmp_path: Path) -> None:
    from PIL import Image, ImageStat

    views = [circuit_viewer(attribution_like_graph()), edge_circuit().viewer()]
    page = tmp_path / "viewer.html"
    body = "".join(v.html() for v in views)
    page.write_text(
        f"<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>{body}{_PROBE}</body></html>",
        encoding="utf-8",
    )
    probe = _probe(chromium, page)
    assert probe["resources"] == [] and probe["linked"] == []  # nothing fetched, nothing linked
    assert len(probe["views"]) == 2
    for view in probe["views"]:
        assert view["fallback"] == 0  # the script ran
        assert view["initial"] == min(40, view["total"]) and view["edges"] > 0
        assert view["svg_width"] == pytest.approx(view["svg_attr_width"])  # drawn 1:1, not scaled
        assert view["labels"] and not _overlaps(view["labels"])
        assert min(b["font"] for b in view["labels"]) >= 10
        assert min(b["h"] for b in view["labels"] if b["text"]) >= 10
        assert view["after_slider"] == 10 and view["edges_after"] < view["edges"]
        assert view["highlighted"] == view["lit"] >= 1 and view["tip"]
    assert any("\u2026" in b["text"] for b in probe["views"][0]["labels"])  # long ones cut
    shot = screenshot(chromium, views[0].save(tmp_path / "a.html"), tmp_path / "viewer.png")
    assert shot.exists() and max(ImageStat.Stat(Image.open(shot).convert("L")).stddev) > 10

/* lmsci-mi circuit viewer: an attribution graph or an edge circuit, laid out by layer (rows,
   input at the bottom) and position (columns), pruned by a slider, with hover details and
   click-to-follow paths. Written for lmsci-mi (MIT); no dependency, fetches nothing.

   Each viewer is a <div class="lmsci-cv"> holding its graph as JSON in
   <script type="application/json" class="lmsci-cv-data">; lmsciCircuitViewer.mount(id) draws it.
   The script may be included once per viewer: the second copy only mounts. */
(function () {
  "use strict";
  if (window.lmsciCircuitViewer) return;

  var FONT_PX = 11; // >= 10 px: the labels are drawn at 1:1, the SVG is never scaled down
  var FONT = FONT_PX + "px system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif";
  var BOX_H = 22, GAP = 6, SLOT_MIN = 64, SLOT_MAX = 150, PAD = 10, AXIS_H = 20;
  var NODE_COLOURS = {
    input: "#e4e4e4", token: "#e4e4e4", embedding: "#e4e4e4", head: "#cfe2f3",
    mlp: "#d9ead3", feature: "#fde3c4", error: "#f0f0f0", logits: "#ead1dc", logit: "#ead1dc"
  };
  var POSITIVE = "#2166ac", NEGATIVE = "#b2182b";
  var measurer = null;

  function textWidth(text) {
    // Canvas metrics work while the viewer is hidden (a folded section), unlike SVG's.
    if (!measurer) measurer = document.createElement("canvas").getContext("2d");
    measurer.font = FONT;
    return measurer.measureText(text).width;
  }

  function fit(text, width) {
    // The longest prefix of `text` that fits `width` px, with an ellipsis when cut.
    text = String(text);
    if (textWidth(text) <= width) return text;
    var lo = 0, hi = text.length;
    while (lo < hi) {
      var mid = (lo + hi + 1) >> 1;
      if (textWidth(text.slice(0, mid) + "\u2026") <= width) lo = mid; else hi = mid - 1;
    }
    return lo > 0 ? text.slice(0, lo) + "\u2026" : "";
  }

  function el(name, attrs, parent) {
    // The page's own <svg> gives the namespace (no address written here: nothing to fetch).
    var node = document.createElementNS(parent ? parent.namespaceURI : null, name);
    for (var key in attrs) node.setAttribute(key, attrs[key]);
    if (parent) parent.appendChild(node);
    return node;
  }

  function html(tag, cls, text, parent) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (parent) parent.appendChild(node);
    return node;
  }

  function label(map, key) {
    // meta.row_labels / meta.column_labels: a list indexed by the value, or an object keyed by it.
    if (!map || key === null || key === undefined) return null;
    if (map._named) return map._named[key] !== undefined ? String(map._named[key]) : "L" + key;
    var value = Array.isArray(map) ? map[key] : map[String(key)];
    return value === undefined || value === null ? null : String(value);
  }

  function rank(graph) {
    // Pinned nodes first (the input and the logits), then by |score|, ties in the given order.
    var order = graph.nodes.map(function (n, i) { return i; });
    order.sort(function (a, b) {
      var na = graph.nodes[a], nb = graph.nodes[b];
      if (!!na.pinned !== !!nb.pinned) return na.pinned ? -1 : 1;
      var d = Math.abs(nb.score) - Math.abs(na.score);
      return d !== 0 ? d : a - b;
    });
    return order;
  }

  function layout(nodes, width, meta) {
    // Rows: the layers shown, latest at the top. Columns: the positions shown, in equal bands.
    // A node wants the centre of its position's band; in each row the boxes are then pushed
    // apart (right, then back left) so none overlaps, so a crowded cell borrows its neighbours'
    // room instead of widening every row. A row of nodes without a position is centred.
    var left = meta.row_labels ? 78 : PAD;
    var layers = [], positions = [], rows = {};
    nodes.forEach(function (n) {
      if (layers.indexOf(n.layer) < 0) layers.push(n.layer);
      (rows[n.layer] = rows[n.layer] || []).push(n);
    });
    layers.sort(function (a, b) { return b - a; });
    nodes.forEach(function (n) {
      var positioned = rows[n.layer].some(function (m) { return m.position !== null; });
      n._col = n.position === null ? (positioned ? "end" : null) : n.position;
      if (n._col !== null && positions.indexOf(n._col) < 0) positions.push(n._col);
    });
    positions.sort(function (a, b) {
      if (a === "end" || b === "end") return a === "end" ? 1 : -1;
      return a - b;
    });
    var widest = Math.max.apply(null, layers.map(function (l) { return rows[l].length; }).concat([1]));
    var room = Math.max(width - left - PAD, 1);
    var band = room / Math.max(positions.length, 1);
    var slot = Math.max(SLOT_MIN, Math.min(SLOT_MAX, band, room / widest));
    var inner = Math.max(room, slot * widest);
    band = inner / Math.max(positions.length, 1);
    // Rows close up when there are many (down to 12 px between boxes), so that a 30-layer
    // circuit fits a screen.
    var ROW_H = Math.max(BOX_H + 12, Math.min(48, Math.floor(720 / Math.max(layers.length, 1))));
    var hasAxis = !!meta.column_labels;
    var height = layers.length * ROW_H + 2 * PAD + (hasAxis ? AXIS_H : 0);
    var out = { width: Math.ceil(left + inner + PAD), height: height, box: slot - GAP, rows: [], columns: [] };
    layers.forEach(function (l, r) {
      var y = PAD + r * ROW_H + (ROW_H - BOX_H) / 2;
      out.rows.push({ layer: l, y: y + BOX_H / 2 });
      var row = rows[l].map(function (n, k) {
        var want = n._col === null ? left + inner / 2 : left + (positions.indexOf(n._col) + 0.5) * band;
        return { node: n, x: want - slot / 2, k: k };
      });
      row.sort(function (a, b) { return a.x - b.x || a.k - b.k; });
      if (row.every(function (c) { return c.node._col === null; })) {
        row.forEach(function (c, i) { c.x = left + (inner - row.length * slot) / 2 + i * slot; });
      }
      for (var i = 0; i < row.length; i++) {
        row[i].x = Math.max(row[i].x, left, i ? row[i - 1].x + slot : left);
      }
      for (i = row.length - 1; i >= 0; i--) {
        row[i].x = Math.min(row[i].x, i < row.length - 1 ? row[i + 1].x - slot : left + inner - slot);
      }
      row.forEach(function (c) { c.node._x = c.x + GAP / 2; c.node._y = y; });
    });
    positions.forEach(function (c, i) {
      out.columns.push({ position: c, x: left + i * band, width: band });
    });
    return out;
  }

  function edgePath(s, t, offset) {
    var x1 = s._x + s._w / 2 + offset, x2 = t._x + t._w / 2 + offset;
    var up = t._y < s._y;
    var y1 = up ? s._y : s._y + BOX_H, y2 = up ? t._y + BOX_H : t._y;
    if (s._y === t._y) { // same row: an arc above the boxes
      var lift = 18 + Math.abs(x2 - x1) / 6;
      return "M" + x1 + "," + s._y + " C" + x1 + "," + (s._y - lift) + " " + x2 + "," +
        (t._y - lift) + " " + x2 + "," + t._y;
    }
    var mid = (y1 + y2) / 2;
    return "M" + x1 + "," + y1 + " C" + x1 + "," + mid + " " + x2 + "," + mid + " " + x2 + "," + y2;
  }

  function labelsFrom(meta) {
    // Row and column labels where the graph names them another way: the prompt's tokens for the
    // columns, and named layers ({"token": -1, "logit": 12}) with "L<n>" between for the rows.
    var out = {};
    for (var key in meta) out[key] = meta[key];
    if (!out.column_labels && Array.isArray(meta.tokens)) out.column_labels = meta.tokens;
    if (!out.row_labels && meta.layers && typeof meta.layers === "object") {
      var named = {};
      for (var name in meta.layers) named[meta.layers[name]] = name;
      out.row_labels = { _named: named };
    }
    return out;
  }

  function Viewer(root) {
    this.root = root;
    this.graph = JSON.parse(root.querySelector("script.lmsci-cv-data").textContent);
    this.meta = labelsFrom(this.graph.meta || {});
    this.order = rank(this.graph);
    this.byId = {};
    var self = this;
    this.graph.nodes.forEach(function (n) { self.byId[n.id] = n; });
    this.selected = null;
    this.nodeSlider = root.querySelector("input.lmsci-cv-nodes");
    this.edgeSlider = root.querySelector("input.lmsci-cv-edges");
    this.svg = root.querySelector("svg.lmsci-cv-svg");
    this.tip = root.querySelector(".lmsci-cv-tip");
    this.count = root.querySelector(".lmsci-cv-count");
    this.nodeSlider.addEventListener("input", function () { self.select(null); self.draw(); });
    this.edgeSlider.addEventListener("input", function () { self.select(null); self.draw(); });
    this.svg.addEventListener("click", function (e) {
      if (e.target === self.svg || e.target.classList.contains("lmsci-cv-bg")) self.select(null);
    });
    var fallback = root.querySelector(".lmsci-cv-fallback");
    if (fallback) fallback.remove();
    this.legend();
    this.draw();
    if (window.ResizeObserver) {
      var last = root.clientWidth;
      new ResizeObserver(function () {
        if (Math.abs(root.clientWidth - last) > 8) { last = root.clientWidth; self.draw(); }
      }).observe(root);
    }
  }

  Viewer.prototype.shown = function () {
    // The slider's nodes, then the strongest share of the edges between them.
    var n = parseInt(this.nodeSlider.value, 10), keep = {}, self = this;
    var nodes = this.order.slice(0, n).map(function (i) { keep[self.graph.nodes[i].id] = true; return self.graph.nodes[i]; });
    var edges = this.graph.edges.filter(function (e) { return keep[e.source] && keep[e.target]; });
    edges.sort(function (a, b) { return Math.abs(b.weight) - Math.abs(a.weight); });
    var share = parseInt(this.edgeSlider.value, 10) / 100;
    edges = edges.slice(0, Math.ceil(edges.length * share));
    return { nodes: nodes, edges: edges };
  };

  Viewer.prototype.legend = function () {
    var box = this.root.querySelector(".lmsci-cv-legend");
    var colours = this.meta.edge_colours || {}, used = {};
    this.graph.edges.forEach(function (e) { if (e.kind) used[e.kind] = true; });
    var kinds = Object.keys(colours).filter(function (k) { return used[k]; });
    var items = kinds.length ? kinds.map(function (k) { return [colours[k], "into " + k]; })
      : [[POSITIVE, "positive"], [NEGATIVE, "negative"]];
    items.forEach(function (item) {
      var span = html("span", "lmsci-cv-key", null, box);
      html("i", null, null, span).style.background = item[0];
      span.appendChild(document.createTextNode(item[1]));
    });
    if (kinds.length) html("span", "lmsci-cv-key", "dashed: negative", box);
  };

  Viewer.prototype.draw = function () {
    var self = this, svg = this.svg, meta = this.meta;
    var view = this.shown();
    var width = this.root.clientWidth || 900;
    var geo = layout(view.nodes, width, meta);
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    svg.setAttribute("width", geo.width);
    svg.setAttribute("height", geo.height);
    el("rect", { x: 0, y: 0, width: geo.width, height: geo.height, class: "lmsci-cv-bg" }, svg);
    view.nodes.forEach(function (n) { n._w = geo.box; });
    var rowLabels = el("g", { class: "lmsci-cv-rows" }, svg);
    geo.rows.forEach(function (row) {
      var text = label(meta.row_labels, row.layer);
      if (text === null) return;
      var t = el("text", { x: 4, y: row.y + 4, class: "lmsci-cv-label lmsci-cv-row" }, rowLabels);
      t.textContent = fit(text, 70);
      el("title", {}, t).textContent = text;
    });
    if (meta.column_labels) {
      var axisY = geo.height - AXIS_H / 2 + 4;
      geo.columns.forEach(function (col) {
        var text = label(meta.column_labels, col.position);
        if (text === null) return;
        var shown = fit(text, col.width - GAP);
        if (!shown) return; // a band too narrow for even one letter: the tooltip of the token says it
        var t = el("text", { x: col.x + col.width / 2, y: axisY, class: "lmsci-cv-label lmsci-cv-col" }, svg);
        t.textContent = shown;
        el("title", {}, t).textContent = text;
      });
    }
    this.drawEdges(view.edges, el("g", { class: "lmsci-cv-edges" }, svg));
    var layer = el("g", { class: "lmsci-cv-nodes" }, svg);
    view.nodes.forEach(function (n) { self.drawNode(n, layer); });
    this.view = view;
    var cut = view.nodes.filter(function (n) { return !n.pinned; });
    var least = cut.length ? Math.abs(cut[cut.length - 1].score) : null;
    this.count.textContent = view.nodes.length + " of " + this.graph.nodes.length + " nodes, " +
      view.edges.length + " edges" + (least !== null && view.nodes.length < this.graph.nodes.length ?
        " (|score| \u2265 " + least.toPrecision(3) + ")" : "");
    this.root.setAttribute("data-shown-nodes", view.nodes.length);
    this.root.setAttribute("data-shown-edges", view.edges.length);
    this.highlight();
  };

  Viewer.prototype.drawEdges = function (edges, group) {
    var self = this, colours = this.meta.edge_colours || {};
    var biggest = Math.max.apply(null, edges.map(function (e) { return Math.abs(e.weight); }).concat([1e-30]));
    var pairs = {};
    edges.forEach(function (e) { var k = e.source + "\u0000" + e.target; (pairs[k] = pairs[k] || []).push(e); });
    edges.slice().reverse().forEach(function (e) { // strongest drawn last, on top
      var s = self.byId[e.source], t = self.byId[e.target];
      var twins = pairs[e.source + "\u0000" + e.target], k = twins.indexOf(e);
      var share = Math.abs(e.weight) / biggest;
      var colour = e.kind && colours[e.kind] ? colours[e.kind] : (e.weight >= 0 ? POSITIVE : NEGATIVE);
      var path = el("path", {
        d: edgePath(s, t, (k - (twins.length - 1) / 2) * 5),
        class: "lmsci-cv-edge", stroke: colour, "stroke-width": (0.6 + 3.4 * share).toFixed(2),
        "stroke-opacity": (0.25 + 0.6 * share).toFixed(2), fill: "none"
      }, group);
      if (e.kind && colours[e.kind] && e.weight < 0) path.setAttribute("stroke-dasharray", "4 3");
      path.setAttribute("data-source", e.source);
      path.setAttribute("data-target", e.target);
      el("title", {}, path).textContent = (s.label || s.id) + " \u2192 " + (t.label || t.id) +
        (e.kind ? " (" + e.kind + ")" : "") + ": " + Number(e.weight).toPrecision(3);
    });
  };

  Viewer.prototype.drawNode = function (n, group) {
    var self = this;
    var g = el("g", { class: "lmsci-cv-node", "data-id": n.id }, group);
    var colours = this.meta.node_colours || {};
    el("rect", {
      x: n._x, y: n._y, width: n._w, height: BOX_H, rx: 4,
      fill: colours[n.kind] || NODE_COLOURS[n.kind] || "#ffffff",
      class: n.kind === "error" ? "lmsci-cv-box lmsci-cv-error" : "lmsci-cv-box"
    }, g);
    var text = el("text", { x: n._x + n._w / 2, y: n._y + BOX_H / 2 + 4, class: "lmsci-cv-label" }, g);
    text.textContent = fit(n.label, n._w - 6);
    el("title", {}, g).textContent = n.label;
    g.addEventListener("mouseenter", function () { self.show(n); });
    g.addEventListener("mouseleave", function () { self.show(self.selected); });
    g.addEventListener("click", function (e) {
      e.stopPropagation();
      self.select(self.selected === n ? null : n);
    });
  };

  Viewer.prototype.select = function (node) {
    this.selected = node;
    this.highlight();
    this.show(node);
  };

  Viewer.prototype.paths = function (node) {
    // The node's ancestors and descendants along the edges shown, and the edges between them.
    var up = {}, down = {}, edges = this.view.edges;
    function walk(seen, from, to) {
      var stack = [node.id];
      seen[node.id] = true;
      while (stack.length) {
        var id = stack.pop();
        edges.forEach(function (e) {
          if (e[from] === id && !seen[e[to]]) { seen[e[to]] = true; stack.push(e[to]); }
        });
      }
    }
    walk(down, "source", "target");
    walk(up, "target", "source");
    return { up: up, down: down };
  };

  Viewer.prototype.highlight = function () {
    var svg = this.svg, node = this.selected;
    this.root.classList.toggle("lmsci-cv-focus", !!node);
    if (!node || !this.view) {
      svg.querySelectorAll(".lmsci-cv-on").forEach(function (x) {
        x.classList.remove("lmsci-cv-on", "lmsci-cv-selected");
      });
      this.root.removeAttribute("data-highlighted");
      return;
    }
    var p = this.paths(node), lit = 0;
    svg.querySelectorAll("g.lmsci-cv-node").forEach(function (g) {
      var id = g.getAttribute("data-id"), on = !!(p.up[id] || p.down[id]);
      g.classList.toggle("lmsci-cv-on", on);
      g.classList.toggle("lmsci-cv-selected", id === node.id);
      lit += on ? 1 : 0;
    });
    svg.querySelectorAll("path.lmsci-cv-edge").forEach(function (e) {
      var s = e.getAttribute("data-source"), t = e.getAttribute("data-target");
      e.classList.toggle("lmsci-cv-on", !!((p.down[s] && p.down[t]) || (p.up[s] && p.up[t])));
    });
    this.root.setAttribute("data-highlighted", lit);
  };

  Viewer.prototype.show = function (node) {
    var tip = this.tip;
    while (tip.firstChild) tip.removeChild(tip.firstChild);
    if (!node) { tip.style.display = "none"; return; }
    html("b", null, node.label, tip);
    var facts = [node.kind];
    if (this.meta.show_coordinates !== false) { // an edge circuit's rows are depths, not layers
      facts.push("layer " + node.layer);
      if (node.position !== null) facts.push("position " + node.position);
    }
    facts.push("score " + Number(node.score).toPrecision(3));
    html("div", "lmsci-cv-facts", facts.join(" \u00b7 "), tip);
    details(node.details, tip);
    tip.style.display = "block";
    var host = this.root.getBoundingClientRect(), scroll = this.svg.parentNode;
    var x = node._x - scroll.scrollLeft + node._w + 8;
    var y = node._y + scroll.offsetTop - scroll.scrollTop;
    if (x + 300 > host.width) x = node._x - scroll.scrollLeft - 308;
    x = Math.max(0, Math.min(x, host.width - 310));
    // Kept inside the viewer: a node near the bottom gets its details above it.
    if (y + tip.offsetHeight > host.height) y = Math.max(0, host.height - tip.offsetHeight);
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  };

  function details(value, parent) {
    // Whatever the graph's `details` holds: text, a list, or named parts of either.
    if (value === null || value === undefined || value === "") return;
    if (Array.isArray(value)) {
      var list = html("ul", null, null, parent);
      value.slice(0, 20).forEach(function (v) { details(v, html("li", null, null, list)); });
      if (value.length > 20) html("li", null, "\u2026 " + (value.length - 20) + " more", list);
    } else if (typeof value === "object") {
      Object.keys(value).forEach(function (key) {
        var part = html("div", "lmsci-cv-part", null, parent);
        html("span", "lmsci-cv-key-name", key + ": ", part);
        details(value[key], part);
      });
    } else {
      html("span", null, value, parent);
    }
  }

  window.lmsciCircuitViewer = {
    mount: function (id) {
      var root = document.getElementById(id);
      if (root && !root.lmsciViewer) root.lmsciViewer = new Viewer(root);
      return root ? root.lmsciViewer : null;
    },
    layout: layout,
    fit: fit
  };
})();

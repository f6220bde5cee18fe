"""Attribution graphs: the direct effects between features, errors, tokens and logits of one prompt.

Exactly circuit-tracer v0.5.0's ``attribute`` (Ameisen et al. 2025, "Circuit Tracing"): in the
frozen replacement model (:mod:`.replacement`) a target's input direction (a feature's encoder
row, a logit's demeaned unembedding column) is injected as the gradient at its site, and each
source's edge is that gradient contracted with the source's vector (``a_s · W_dec,s``, an error
vector, a token embedding). Rows are computed a batch of targets per backward pass over one
retained forward pass; features are visited in order of estimated influence.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from einops import einsum
from jaxtyping import Float, Int
from torch import Tensor

from lmsci_mi.circuits.graphs.prune import (
    GraphPruning,
    GraphScores,
    NodeLayout,
    cumulative_share,
    graph_scores,
    node_influence,
    partial_influences,
    prune_graph,
)
from lmsci_mi.circuits.graphs.replacement import (
    ReplacementRun,
    ReplacementTrace,
    check_replacement,
    prompt_tokens,
    replacement_gradients,
    replacement_run,
)
from lmsci_mi.config import Config, config, paper
from lmsci_mi.errors import UserInputError
from lmsci_mi.readout import final_norm_module, unembedding_vectors
from lmsci_mi.results import Result, result_type

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel
    from lmsci_mi.transcoders.model import TranscoderSet
    from lmsci_mi.viz.circuit_viewer import CircuitViewer, ViewerConfig

__all__ = [
    "AttributionGraph",
    "GraphConfig",
    "GraphNodes",
    "LogitTargets",
    "attribution_graph",
    "logit_targets",
]

logger = logging.getLogger(__name__)

_SOURCE = "circuit-tracer v0.5.0 (decoderesearch/circuit-tracer @4bb8c0e), attribute_transformerlens.py attribute("


@config
class GraphConfig(Config):
    """How an attribution graph is computed; the defaults are circuit-tracer's ``attribute``."""

    desired_logit_prob: float = field(
        default=0.95,
        metadata={"help": "logit targets: the top logits until their cumulative probability reaches this",
                  "gt": 0.0, "le": 1.0, **paper(0.95, _SOURCE + "desired_logit_prob)")},
    )
    max_n_logits: int = field(
        default=10,
        metadata={"help": "at most this many logit targets", "ge": 1,
                  **paper(10, _SOURCE + "max_n_logits)")},
    )
    batch_size: int = field(
        default=512,
        metadata={"help": "targets per backward pass; the retained forward pass holds this many "
                          "copies of the prompt (memory grows with batch size × prompt length)",
                  "ge": 1, **paper(512, _SOURCE + "batch_size); its CLI uses 256")},
    )
    update_interval: int = field(
        default=4,
        metadata={"help": "batches between re-rankings of the features by estimated influence",
                  "ge": 1, **paper(4, _SOURCE + "update_interval)")},
    )
    max_feature_nodes: int | None = field(
        default=None,
        metadata={"help": "at most this many feature nodes, the most influential first (None: all)",
                  "ge": 1, **paper(None, _SOURCE + "max_feature_nodes); its CLI uses 7500")},
    )
    max_tokens: int = field(
        default=256,
        metadata={"help": "the longest prompt accepted, sink included (the memory budget)", "ge": 2},
    )


@dataclass(frozen=True)
class LogitTargets:
    """The logits a graph explains.

    Attributes:
        token_ids: ``[k]``; probabilities: their softmax probabilities ``[k]`` (the logit
            nodes' weights); vectors: the demeaned unembedding columns ``[k, d_model]``, read at
            the final norm's output (so ``x · v`` is the logit minus the mean logit, before any
            soft cap).
    """

    token_ids: Int[Tensor, " k"]
    probabilities: Float[Tensor, " k"]
    vectors: Float[Tensor, "k d_model"]


def logit_targets(
    lm: LensModel,
    logits: Float[Tensor, " vocab"],
    config: GraphConfig,
    token_ids: Sequence[int] | None = None,
) -> LogitTargets:
    """circuit-tracer's salient logits: the most probable tokens until their cumulative
    probability reaches ``desired_logit_prob``, at most ``max_n_logits`` (or ``token_ids``).

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> t = logit_targets(lm, torch.tensor([3.0, 2.0] + [0.0] * 49150), GraphConfig(), [0, 1])
    >>> t.token_ids.tolist(), tuple(t.vectors.shape)
    ([0, 1], (2, 64))
    """
    probs = torch.softmax(logits.float(), dim=-1)
    if token_ids is None:
        top_p, top_ids = torch.topk(probs, min(config.max_n_logits, probs.numel()))
        cutoff = int(torch.searchsorted(torch.cumsum(top_p, 0), config.desired_logit_prob)) + 1
        ids = top_ids[:cutoff]
    else:
        ids = torch.as_tensor(list(token_ids), dtype=torch.long, device=probs.device)
        if ids.numel() == 0:
            raise UserInputError("give at least one logit target token id (or None for the salient ones)")
        lm.check_tokens(ids)
    every = unembedding_vectors(lm, space="normalized")  # [vocab, d_model], the gain applied
    vectors = every[ids.to(every.device)] - every.mean(dim=0, keepdim=True)
    return LogitTargets(ids.cpu(), probs[ids].cpu(), vectors)


class _Rows:
    """Attribution rows for a batch of targets: one backward pass over the retained forward.

    The contraction with each source runs in backward hooks on the autograd graph's tensors
    (the replaced MLP outputs), into a ``[row, batch]`` buffer laid out as circuit-tracer's
    ``[active features | errors (layer × position) | tokens]``.
    """

    def __init__(self, run: ReplacementRun, trace: ReplacementTrace, n_layers: int) -> None:
        self.run, self.trace, self.n_layers = run, trace, n_layers
        self.n_active = int(run.features.shape[0])
        self.row_size = self.n_active + (n_layers + 1) * run.n_pos
        self.buffer: Tensor | None = None
        self.handles = [trace.outputs[layer].register_hook(self._source_hook(layer))
                        for layer in range(n_layers)]

    def _source_hook(self, layer: int) -> Any:
        run, n_pos = self.run, self.run.n_pos
        on_layer = (run.features[:, 0] == layer).nonzero()[:, 0].to(run.errors.device)
        positions = run.features[on_layer.cpu(), 1].to(run.errors.device)
        decoders = run.decoder_vectors[on_layer]
        error_start = self.n_active + layer * n_pos

        def contract(grad: Tensor) -> None:
            assert self.buffer is not None
            grad = grad.to(run.errors.dtype)
            self.buffer[error_start : error_start + n_pos] += einsum(
                grad, run.errors[layer], "batch pos d, pos d -> pos batch")
            # Chunked, so that the gathered gradients stay small on long prompts.
            step = max(1, (1 << 24) // max(1, grad.shape[0] * grad.shape[2]))
            for lo in range(0, len(on_layer), step):
                picked = grad[:, positions[lo : lo + step]]
                self.buffer.index_add_(0, on_layer[lo : lo + step], einsum(
                    picked, decoders[lo : lo + step], "batch n d, n d -> n batch"))

        return contract

    def compute(self, layers: Tensor, positions: Tensor, vectors: Tensor) -> Tensor:
        """``[k, row_size]``: the rows of the targets injected at (``layers``, ``positions``)
        with ``vectors``; a layer of ``n_layers`` means the final norm's output (logits)."""
        trace, run = self.trace, self.run
        assert trace.embed is not None and trace.final is not None
        batch = trace.embed.shape[0]
        self.buffer = torch.zeros(self.row_size, batch, device=run.errors.device)
        rows = torch.arange(len(layers))
        roots, grads = [], []
        for layer in layers.unique().tolist():
            at = trace.final if layer == self.n_layers else trace.inputs[layer]
            chosen = layers == layer
            grad = torch.zeros_like(at)
            picked = vectors[chosen.to(vectors.device)].to(grad)
            grad[rows[chosen].to(grad.device), positions[chosen].to(grad.device)] = picked
            roots.append(at)
            grads.append(grad)
        (embed_grad,) = torch.autograd.grad(roots, [trace.embed], grads, retain_graph=True)
        token_start = self.n_active + self.n_layers * run.n_pos
        self.buffer[token_start:] += einsum(
            embed_grad.to(run.token_vectors), run.token_vectors, "batch pos d, pos d -> pos batch")
        buffer, self.buffer = self.buffer, None
        return buffer.T[: len(layers)].cpu()

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()


def attribution_graph(
    lm: LensModel,
    transcoders: TranscoderSet,
    prompt: str | Sequence[int] | Tensor,
    config: GraphConfig | None = None,
    *,
    targets: Sequence[int] | None = None,
) -> AttributionGraph:
    """The attribution graph of ``prompt``'s next-token prediction (circuit-tracer's algorithm).

    Reads the model only: hooks leave on exit (also on error), weights, ``.grad`` and
    ``requires_grad`` are as before.

    Args:
        lm: the model.
        transcoders: one transcoder per layer (:class:`~lmsci_mi.transcoders.TranscoderSet`).
        prompt: text (the tokenisation policy adds the sink) or token ids.
        config: a :class:`GraphConfig` (circuit-tracer's defaults).
        targets: logit target token ids (None: the salient logits).

    Returns:
        An :class:`AttributionGraph`; ``values[target, source]`` is the direct effect.

    Raises:
        UserInputError: a prompt over ``config.max_tokens``, a layer without a transcoder,
            transcoders of another model.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.transcoders import TranscoderSet
    >>> lm = load_model("toy-2l")
    >>> graph = attribution_graph(lm, TranscoderSet.random(lm, 32), "The cat sat")
    >>> graph.values.shape[0] == graph.layout.n_nodes, len(lm.hooks.active())
    (True, 0)
    """
    config = config or GraphConfig()
    check_replacement(lm, transcoders)
    tokens = prompt_tokens(lm, prompt, config.max_tokens)
    run = replacement_run(lm, transcoders, tokens)
    logit = logit_targets(lm, run.logits, config, targets)
    n_active = int(run.features.shape[0])
    n_features = min(config.max_feature_nodes or n_active, n_active)
    batch = max(1, min(config.batch_size, max(n_features, len(logit.token_ids))))
    logger.info("%d active features, %d kept, %d logit targets", n_active, n_features,
                len(logit.token_ids))
    with replacement_gradients(lm, transcoders) as trace:
        resid = lm.model(tokens[None].expand(batch, -1), stop_at_layer=lm.cfg.n_layers)
        final = final_norm_module(lm)
        if final is not None:
            final(resid)
        else:
            trace.final = resid
        rows = _Rows(run, trace, lm.cfg.n_layers)
        try:
            edges, row_to_node, visited = _attribute(rows, logit, n_features, config)
        finally:
            rows.close()
    adjacency, selected = _square(edges, row_to_node, visited, n_features, len(logit.token_ids))
    graph = _graph(lm, transcoders, run, logit, adjacency, selected, config)
    if isinstance(prompt, str):  # the text as given, not the tokens' decoding
        graph = dataclasses.replace(graph, meta=dataclasses.replace(graph.meta, prompts=(prompt,)))
    return graph


def _attribute(
    rows: _Rows, logit: LogitTargets, n_features: int, config: GraphConfig
) -> tuple[Tensor, Tensor, Tensor]:
    """circuit-tracer's phases 3 and 4: the logit rows, then the feature rows in order of
    estimated influence (re-ranked every ``update_interval`` batches when capped)."""
    run, n_active, n_logits = rows.run, rows.n_active, len(logit.token_ids)
    offset = rows.row_size
    edges = torch.zeros(n_features + n_logits, offset + n_logits)
    row_to_node = torch.zeros(n_features + n_logits, dtype=torch.long)
    size = config.batch_size
    for lo in range(0, n_logits, size):
        vectors = logit.vectors[lo : lo + size]
        k = len(vectors)
        edges[lo : lo + k, :offset] = rows.compute(
            torch.full((k,), rows.n_layers), torch.full((k,), run.n_pos - 1), vectors)
        row_to_node[lo : lo + k] = torch.arange(lo, lo + k) + offset
    filled, visited = n_logits, torch.zeros(n_active, dtype=torch.bool)
    while int(visited.sum()) < n_features:
        if n_features == n_active:
            pending = torch.arange(n_active)
        else:
            estimate = partial_influences(edges[:filled], logit.probabilities, row_to_node[:filled])
            rank = torch.argsort(estimate[:n_active], descending=True)
            room = min(config.update_interval * size, n_features - int(visited.sum()))
            pending = rank[~visited[rank]][:room]
        for chunk in pending.split(size):
            layers, positions = run.features[chunk, 0], run.features[chunk, 1]
            vectors = run.encoder_vectors[chunk.to(run.encoder_vectors.device)]
            edges[filled : filled + len(chunk), :offset] = rows.compute(layers, positions, vectors)
            row_to_node[filled : filled + len(chunk)] = chunk
            visited[chunk] = True
            filled += len(chunk)
    return edges, row_to_node, visited


def _square(
    edges: Tensor, row_to_node: Tensor, visited: Tensor, n_features: int, n_logits: int
) -> tuple[Tensor, Tensor]:
    """circuit-tracer's phase 5: the square adjacency over the kept nodes, rows sorted by node."""
    n_active = len(visited)
    selected = torch.where(visited)[0]
    if n_features < n_active:
        edges = edges[:, torch.cat([selected, torch.arange(n_active, edges.shape[1])])]
    edges = edges[row_to_node.argsort()]
    n_nodes = edges.shape[1]
    adjacency = torch.zeros(n_nodes, n_nodes)
    adjacency[:n_features] = edges[:n_features]
    adjacency[n_nodes - n_logits :] = edges[n_features:]
    return adjacency, selected


def _graph(
    lm: LensModel,
    transcoders: TranscoderSet,
    run: ReplacementRun,
    logit: LogitTargets,
    adjacency: Tensor,
    selected: Tensor,
    config: GraphConfig,
) -> AttributionGraph:
    tokens = run.tokens.cpu()
    texts = _texts(lm, tokens.tolist())
    logit_texts = _texts(lm, logit.token_ids.tolist())
    features = run.features[selected]
    prompt = "".join(texts[1:] if lm.sink_token_id is not None else texts)
    params = {**config.params(), "transcoder_sites": f"{transcoders.input_site}->{transcoders.output_site}",
              "transcoder_model": transcoders.model_name, "n_active_features": int(run.features.shape[0])}
    fields: dict[str, Any] = dict(
        tokens=tokens, token_texts=texts, features=features,
        activations=run.activations[selected.to(run.activations.device)].cpu(),
        logit_tokens=logit.token_ids, logit_texts=logit_texts, logit_probs=logit.probabilities.float(),
        n_layers=lm.cfg.n_layers, n_active=int(run.features.shape[0]),
    )
    labels = _node_labels(**fields)
    return AttributionGraph(values=adjacency, axes=("target", "source"), labels=(labels, labels),
                            meta=lm.meta([prompt], params=params), **fields)


def _texts(lm: LensModel, ids: Sequence[int]) -> tuple[str, ...]:
    if lm.tokenizer is None:
        return tuple(f"<{i}>" for i in ids)
    return tuple(lm.tokenizer.decode([i]) for i in ids)


def _node_labels(**fields: Any) -> tuple[str, ...]:
    """One readable label per node, in node order."""
    features, n_layers, texts = fields["features"], fields["n_layers"], fields["token_texts"]
    labels = [f"L{layer}.P{pos}.F{index}" for layer, pos, index in features.tolist()]
    labels += [f"L{layer}.P{pos}.err" for layer in range(n_layers) for pos in range(len(texts))]
    labels += [f"P{pos}.tok {text!r}" for pos, text in enumerate(texts)]
    labels += [f"logit {text!r}" for text in fields["logit_texts"]]
    return tuple(labels)


@dataclass(frozen=True)
class GraphNodes:
    """The node table of an attribution graph, in node order.

    Attributes:
        kind: ``"feature"``, ``"error"``, ``"token"`` or ``"logit"`` per node.
        layer: ``[node]``; a token's is −1 (the embeddings), a logit's ``n_layers``.
        position: ``[node]``; a logit's is the last position.
        feature: ``[node]``: a feature's index in its transcoder, −1 for other nodes.
        activation: ``[node]``: a feature's activation, a logit's probability, NaN otherwise.
        token: the text of the token at the node's position (a logit's: its own token).
    """

    kind: tuple[str, ...]
    layer: Int[Tensor, " node"]
    position: Int[Tensor, " node"]
    feature: Int[Tensor, " node"]
    activation: Float[Tensor, " node"]
    token: tuple[str, ...]


@result_type
class AttributionGraph(Result):
    """The attribution graph of one prompt: ``values[target, source]`` is the direct effect of
    the source on the target in the frozen replacement model.

    Nodes are ordered as circuit-tracer orders them: ``[features | errors (layer × position) |
    tokens | logits]``; a feature target's row is the change of its pre-activation, a logit's the
    change of its logit minus the mean logit. Error and token rows and logit columns are zero.

    Attributes:
        tokens: the prompt's ids ``[pos]`` (the sink first); token_texts: their text.
        features: the feature nodes ``[n, 3]``: layer, position, feature index.
        activations: their activations ``[n]``.
        logit_tokens: the logit targets' ids ``[k]``; logit_texts: their text; logit_probs:
            their probabilities (the logit nodes' weights).
        n_layers: the model's layers; n_active: the active features before ``max_feature_nodes``.
    """

    tokens: Tensor
    token_texts: tuple[str, ...]
    features: Tensor
    activations: Tensor
    logit_tokens: Tensor
    logit_texts: tuple[str, ...]
    logit_probs: Tensor
    n_layers: int
    n_active: int

    @property
    def layout(self) -> NodeLayout:
        """Where each kind of node starts (:class:`~.prune.NodeLayout`)."""
        return NodeLayout(len(self.features), self.n_layers, len(self.tokens), len(self.logit_tokens))

    @property
    def nodes(self) -> GraphNodes:
        """The node table (:class:`GraphNodes`)."""
        lay, n_pos = self.layout, len(self.tokens)
        grid_layer = torch.arange(self.n_layers).repeat_interleave(n_pos)
        grid_pos = torch.arange(n_pos).repeat(self.n_layers)
        n_logits, feats = lay.n_logits, self.features.long()
        layer = torch.cat([feats[:, 0], grid_layer, torch.full((n_pos,), -1),
                           torch.full((n_logits,), self.n_layers)])
        position = torch.cat([feats[:, 1], grid_pos, torch.arange(n_pos),
                              torch.full((n_logits,), n_pos - 1)])
        feature = torch.cat([feats[:, 2], torch.full((lay.n_nodes - lay.n_features,), -1)])
        activation = torch.cat([self.activations.float(), torch.full((lay.logit_start - lay.error_start,),
                                math.nan), self.logit_probs.float()])
        kind = (("feature",) * lay.n_features + ("error",) * (lay.token_start - lay.error_start)
                + ("token",) * n_pos + ("logit",) * n_logits)
        token = tuple(self.token_texts[p] for p in position[: lay.logit_start].tolist()) + self.logit_texts
        return GraphNodes(kind, layer, position, feature, activation, token)

    def logit_weights(self) -> Tensor:
        """``[node]``: the logit nodes' probabilities, zero elsewhere."""
        return self.layout.logit_weights(self.logit_probs)

    def node_influence(self) -> Tensor:
        """``[node]``: each node's influence on the logits through every path (circuit-tracer's
        ``compute_node_influence``)."""
        return node_influence(self.values, self.logit_weights())

    def prune(self, node_threshold: float = 0.8, edge_threshold: float = 0.98) -> GraphPruning:
        """The nodes and edges circuit-tracer's ``prune_graph`` keeps (its defaults)."""
        return prune_graph(self.values, self.layout, self.logit_probs, node_threshold, edge_threshold)

    def scores(self) -> GraphScores:
        """The replacement and completeness scores (circuit-tracer's ``compute_graph_scores``)."""
        return graph_scores(self.values, self.layout, self.logit_probs)

    def summary(self, rows: int = 10) -> str:
        """The prompt, the node counts, the logit targets and the two scores."""
        lay, scores = self.layout, self.scores()
        lines = [
            f"attribution graph of {self.meta.prompts[0] if self.meta.prompts else ''!r} ({self.meta.model}):",
            f"  {lay.n_features} feature nodes (of {self.n_active} active), "
            f"{lay.token_start - lay.error_start} error, {lay.n_pos} token, {lay.n_logits} logit nodes",
            f"  replacement score {scores.replacement:.3f}, completeness score {scores.completeness:.3f}",
        ]
        lines += [f"  logit {text!r}: p = {p:.3f}" for text, p in
                  zip(self.logit_texts[:rows], self.logit_probs.tolist(), strict=False)]
        return "\n".join(lines)

    def viewer(self, node_threshold: float = 0.8, edge_threshold: float = 0.98,
               config: ViewerConfig | None = None) -> CircuitViewer:
        """The graph in the interactive viewer, pruned first (circuit-tracer's thresholds): hover
        for a node's details, prune with the sliders, click to follow paths; shown in a notebook
        cell, ``.save("graph.html")`` writes an offline page."""
        from lmsci_mi.viz.circuit_viewer import circuit_viewer

        return circuit_viewer(self.to_viewer_json(node_threshold, edge_threshold), config)

    def interactive_html(self) -> str:
        """The viewer as an HTML fragment: what a report and a notebook cell show
        (:func:`lmsci_mi.viz.result_html.result_html`)."""
        return self.viewer().html()

    def to_viewer_json(
        self,
        node_threshold: float | None = 0.8,
        edge_threshold: float | None = 0.98,
        *,
        feature_details: Mapping[int, Mapping[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """The graph as the circuit viewer's plain dict: ``{"nodes", "edges", "meta"}``.

        Args:
            node_threshold, edge_threshold: prune first (:meth:`prune`; circuit-tracer's
                defaults); None for both keeps every node and every non-zero edge.
            feature_details: extra details per feature node index (top contexts, promoted
                tokens), merged into that node's ``details``.

        Returns:
            ``nodes``: ``{"id", "kind", "layer", "position", "label", "score", "details"}`` each,
            where ``score`` is the node's influence plus its logit weight (a logit's probability)
            and ``details`` holds the feature index, activation, token, influence and cumulative
            share; ``edges``: ``{"source", "target", "weight"}`` (the direct effect, signed);
            ``meta``: the prompt, tokens, model, layer convention, thresholds and scores.
        """
        if (node_threshold is None) != (edge_threshold is None):
            raise UserInputError("give both thresholds (prune) or neither (every node and edge)")
        influence = self.node_influence()
        if node_threshold is None:
            keep = torch.ones(self.layout.n_nodes, dtype=torch.bool)
            edges = self.values != 0
            cumulative = cumulative_share(influence)
        else:
            assert edge_threshold is not None
            pruning = self.prune(node_threshold, edge_threshold)
            keep, cumulative = pruning.node_mask, pruning.cumulative_scores
            edges = pruning.edge_mask & (self.values != 0)
        edges = edges & keep[:, None] & keep[None, :]
        ids = _node_ids(self)
        nodes = [_viewer_node(self, i, ids[i], float(influence[i]), float(cumulative[i]), feature_details)
                 for i in keep.nonzero()[:, 0].tolist()]
        targets, sources = edges.nonzero(as_tuple=True)
        weights = self.values[targets, sources].tolist()
        return {
            "nodes": nodes,
            "edges": [{"source": ids[s], "target": ids[t], "weight": w}
                      for t, s, w in zip(targets.tolist(), sources.tolist(), weights, strict=True)],
            "meta": _viewer_meta(self, node_threshold, edge_threshold),
        }


def _node_ids(graph: AttributionGraph) -> list[str]:
    """Unique node ids for the viewer: ``F:L1:P3:42``, ``E:L1:P3``, ``T:P3``, ``L:<token id>``."""
    ids = [f"F:L{layer}:P{pos}:{index}" for layer, pos, index in graph.features.tolist()]
    n_pos = len(graph.tokens)
    ids += [f"E:L{layer}:P{pos}" for layer in range(graph.n_layers) for pos in range(n_pos)]
    ids += [f"T:P{pos}" for pos in range(n_pos)]
    ids += [f"L:{token}" for token in graph.logit_tokens.tolist()]
    return ids


def _viewer_node(
    graph: AttributionGraph,
    i: int,
    node_id: str,
    influence: float,
    cumulative: float,
    feature_details: Mapping[int, Mapping[str, Any]] | None,
) -> dict[str, Any]:
    lay = graph.layout
    kind = ("feature" if i < lay.error_start else "error" if i < lay.token_start
            else "token" if i < lay.logit_start else "logit")
    if kind == "logit":
        j = i - lay.logit_start
        layer, position, token = graph.n_layers, lay.n_pos - 1, graph.logit_texts[j]
        weight = float(graph.logit_probs[j])
        details: dict[str, Any] = {"token": token, "token_id": int(graph.logit_tokens[j]),
                                   "probability": weight}
        label = f"logit {token!r} (p={weight:.2f})"
    elif kind == "token":
        layer, position, weight = -1, i - lay.token_start, 0.0
        token = graph.token_texts[position]
        details, label = {"token": token, "token_id": int(graph.tokens[position])}, repr(token)
    elif kind == "error":
        layer, position = divmod(i - lay.error_start, lay.n_pos)
        token, weight = graph.token_texts[position], 0.0
        details, label = {"token": token}, f"error L{layer} P{position}"
    else:
        layer, position, index = graph.features[i].tolist()
        token, weight = graph.token_texts[position], 0.0
        details = {"feature": index, "activation": float(graph.activations[i]), "token": token,
                   **(feature_details or {}).get(i, {})}
        label = f"L{layer} #{index}"
    details.update(influence=influence, cumulative=cumulative)
    return {"id": node_id, "kind": kind, "layer": layer, "position": position, "label": label,
            "score": influence + weight, "details": details}


def _viewer_meta(
    graph: AttributionGraph, node_threshold: float | None, edge_threshold: float | None
) -> dict[str, Any]:
    scores = graph.scores()
    return {
        "kind": "attribution_graph",
        "model": graph.meta.model,
        "prompt": graph.meta.prompts[0] if graph.meta.prompts else "",
        "tokens": list(graph.token_texts),
        "n_layers": graph.n_layers,
        "layers": {"token": -1, "logit": graph.n_layers},
        "node_threshold": node_threshold,
        "edge_threshold": edge_threshold,
        "replacement_score": scores.replacement,
        "completeness_score": scores.completeness,
        "n_active_features": graph.n_active,
        "version": graph.meta.version,
    }

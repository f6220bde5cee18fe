"""Influence, pruning and the replacement and completeness scores of an attribution graph.

Exactly circuit-tracer v0.5.0's ``graph.py`` (Ameisen et al. 2025): each target's incoming weights
are normalised to sum to one in absolute value; a node's influence is the logit-weighted sum of
all paths to the logits (``w · (Â + Â² + …)``); pruning keeps the nodes that reach a cumulative
share of it, then the edges, then iteratively drops features left without inputs or outputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from lmsci_mi.errors import UserInputError

__all__ = [
    "GraphPruning",
    "GraphScores",
    "NodeLayout",
    "cumulative_share",
    "edge_influence",
    "find_threshold",
    "graph_scores",
    "influence",
    "node_influence",
    "normalize_matrix",
    "partial_influences",
    "prune_graph",
]

MAX_ITERATIONS = 1000
"""circuit-tracer's cap on the power series (``compute_influence``): a graph is acyclic, so the
series ends after at most its depth in steps; a cycle would never end."""


def normalize_matrix(matrix: Float[Tensor, "target source"]) -> Float[Tensor, "target source"]:
    """``|A| / rowsum(|A|)``: each target's incoming weights, in absolute value, sum to one.

    >>> normalize_matrix(torch.tensor([[1.0, -3.0], [0.0, 0.0]])).tolist()
    [[0.25, 0.75], [0.0, 0.0]]
    """
    normalized = matrix.abs()
    return normalized / normalized.sum(dim=1, keepdim=True).clamp(min=1e-10)


def influence(
    normalized: Float[Tensor, "node node"], logit_weights: Float[Tensor, " node"]
) -> Float[Tensor, " node"]:
    """``w · (Â + Â² + …)``, summed until a term is exactly zero (the graph is acyclic).

    Raises:
        RuntimeError: the series has not ended after :data:`MAX_ITERATIONS` terms (a cycle).
    """
    current = logit_weights @ normalized
    total = current.clone()
    for _ in range(MAX_ITERATIONS):
        if not current.any():
            return total
        current = current @ normalized
        total += current
    raise RuntimeError(f"influence did not converge after {MAX_ITERATIONS} iterations (a cycle?)")


def node_influence(
    adjacency: Float[Tensor, "node node"], logit_weights: Float[Tensor, " node"]
) -> Float[Tensor, " node"]:
    """Each node's total influence on the logits, through every path."""
    return influence(normalize_matrix(adjacency), logit_weights)


def edge_influence(
    pruned: Float[Tensor, "node node"], logit_weights: Float[Tensor, " node"]
) -> Float[Tensor, "node node"]:
    """Each edge's score: its normalised weight times its target's influence plus logit weight."""
    normalized = normalize_matrix(pruned)
    reach = influence(normalized, logit_weights) + logit_weights
    return normalized * reach[:, None]


def find_threshold(scores: Float[Tensor, " n"], threshold: float) -> Tensor:
    """The score at which the largest scores first reach ``threshold`` of their total.

    >>> float(find_threshold(torch.tensor([5.0, 3.0, 2.0]), 0.8))
    3.0
    """
    ordered = torch.sort(scores, descending=True).values
    cumulative = torch.cumsum(ordered, dim=0) / torch.sum(ordered)
    index = int(torch.searchsorted(cumulative, threshold).item())
    return ordered[min(index, len(cumulative) - 1)]  # threshold 1.0 may round past the end


@dataclass(frozen=True)
class NodeLayout:
    """Where each kind of node sits in a graph's node order, circuit-tracer's
    ``[features | errors (layer × position) | tokens | logits]``."""

    n_features: int
    n_layers: int
    n_pos: int
    n_logits: int

    @property
    def error_start(self) -> int:
        return self.n_features

    @property
    def token_start(self) -> int:
        return self.n_features + self.n_layers * self.n_pos

    @property
    def logit_start(self) -> int:
        return self.token_start + self.n_pos

    @property
    def n_nodes(self) -> int:
        return self.logit_start + self.n_logits

    def logit_weights(self, probabilities: Tensor, device: torch.device | None = None) -> Tensor:
        """``[n_nodes]``: the logit nodes' probabilities, zero elsewhere."""
        weights = torch.zeros(self.n_nodes, device=device)
        weights[self.logit_start :] = probabilities.to(weights)
        return weights


@dataclass(frozen=True)
class GraphPruning:
    """Which nodes and edges a pruned graph keeps.

    Attributes:
        node_mask: ``[node]`` kept nodes (tokens and logits always).
        edge_mask: ``[target, source]`` kept edges.
        cumulative_scores: ``[node]`` each node's place in the cumulative share of influence
            (the most influential node has the smallest; a node is kept by the node threshold
            when its share is reached before the threshold).
    """

    node_mask: Bool[Tensor, " node"]
    edge_mask: Bool[Tensor, "target source"]
    cumulative_scores: Float[Tensor, " node"]


def prune_graph(
    adjacency: Float[Tensor, "node node"],
    layout: NodeLayout,
    logit_probabilities: Float[Tensor, " logit"],
    node_threshold: float = 0.8,
    edge_threshold: float = 0.98,
) -> GraphPruning:
    """circuit-tracer's ``prune_graph``: keep the nodes reaching ``node_threshold`` of the total
    influence, then the edges reaching ``edge_threshold`` of the edge scores, then drop, until
    nothing changes, features without incoming edges and features or errors without outgoing
    ones.

    Raises:
        UserInputError: a threshold outside [0, 1].
    """
    for name, value in (("node_threshold", node_threshold), ("edge_threshold", edge_threshold)):
        if not 0.0 <= value <= 1.0:
            raise UserInputError(f"{name} must lie in [0, 1], not {value}")
    weights = layout.logit_weights(logit_probabilities, adjacency.device)
    scores = node_influence(adjacency, weights)
    node_mask = scores >= find_threshold(scores, node_threshold)
    node_mask[layout.token_start :] = True
    pruned = adjacency.clone()
    pruned[~node_mask] = 0
    pruned[:, ~node_mask] = 0
    edge_scores = edge_influence(pruned, weights)
    edge_mask = edge_scores >= find_threshold(edge_scores.flatten(), edge_threshold)
    _drop_dangling(node_mask, edge_mask, layout)
    return GraphPruning(node_mask, edge_mask, cumulative_share(scores))


def cumulative_share(scores: Float[Tensor, " node"]) -> Float[Tensor, " node"]:
    """Each node's cumulative share of the total, counted from the largest score down.

    >>> cumulative_share(torch.tensor([1.0, 3.0])).tolist()
    [1.0, 0.75]
    """
    ordered, order = torch.sort(scores, descending=True)
    cumulative = torch.zeros_like(scores)
    cumulative[order] = torch.cumsum(ordered, dim=0) / torch.sum(ordered)
    return cumulative


def _drop_dangling(node_mask: Tensor, edge_mask: Tensor, layout: NodeLayout) -> None:
    """In place: drop features and errors without outgoing edges and features without incoming
    ones, repeatedly (each drop can strand another node; at most depth + 1 rounds)."""
    sources = layout.token_start  # features and errors
    before = node_mask.clone()
    node_mask[:sources] &= edge_mask[:, :sources].any(0)
    node_mask[: layout.n_features] &= edge_mask[: layout.n_features].any(1)
    while not torch.equal(node_mask, before):
        before.copy_(node_mask)
        edge_mask[~node_mask] = False
        edge_mask[:, ~node_mask] = False
        node_mask[:sources] &= edge_mask[:, :sources].any(0)
        node_mask[: layout.n_features] &= edge_mask[: layout.n_features].any(1)


@dataclass(frozen=True)
class GraphScores:
    """How much of the model's computation a graph's features explain (circuit-tracer's
    ``compute_graph_scores``).

    Attributes:
        replacement: ``token influence / (token influence + error influence)``: the share of
            end-to-end influence reaching the logits from tokens rather than from errors.
        completeness: each node's non-error share of its inputs, weighted by its influence plus
            logit weight.
    """

    replacement: float
    completeness: float


def graph_scores(
    adjacency: Float[Tensor, "node node"], layout: NodeLayout, logit_probabilities: Tensor
) -> GraphScores:
    """The replacement and completeness scores of a graph (see :class:`GraphScores`)."""
    weights = layout.logit_weights(logit_probabilities, adjacency.device)
    normalized = normalize_matrix(adjacency)
    scores = influence(normalized, weights)
    errors = slice(layout.error_start, layout.token_start)
    token_influence = scores[layout.token_start : layout.logit_start].sum()
    error_influence = scores[errors].sum()
    replacement = token_influence / (token_influence + error_influence)
    non_error = 1 - normalized[:, errors].sum(dim=-1)
    reach = scores + weights
    completeness = (non_error * reach).sum() / reach.sum()
    return GraphScores(float(replacement), float(completeness))


def partial_influences(
    edges: Float[Tensor, "row node"],
    logit_probabilities: Float[Tensor, " logit"],
    row_to_node: Int[Tensor, " row"],
    max_iterations: int = 128,
) -> Float[Tensor, " node"]:
    """Influence estimated from the rows computed so far (circuit-tracer's
    ``compute_partial_influences``): the order in which attribution visits features.

    Raises:
        RuntimeError: no convergence in ``max_iterations`` steps.
    """
    normalized = edges.abs()
    normalized /= normalized.sum(dim=1, keepdim=True).clamp(min=1e-8)
    total = torch.zeros(edges.shape[1], device=edges.device)
    product = torch.zeros(edges.shape[1], device=edges.device)
    product[-len(logit_probabilities) :] = logit_probabilities.to(product)
    for _ in range(max_iterations):
        product = product[row_to_node] @ normalized
        if not product.any():
            return total
        total += product
    raise RuntimeError("partial influences did not converge")

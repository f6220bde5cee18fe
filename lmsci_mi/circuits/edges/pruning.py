"""Pruning edge scores into circuits: top-n, threshold and greedy, then dead nodes removed.

A circuit is a boolean mask in the graph's dense ``[sender, receiver]`` layout. Top-n and threshold
follow EAP-IG's ``apply_topn``/``apply_threshold``; greedy follows its ``apply_greedy`` (Hanna et
al. 2024): start from the edges into the logits and grow by the best edge whose receiver's node is
already in the circuit. Each ends by dropping every edge that lies on no input → logits path, the
fixed point EAP-IG's one-pass ``prune`` missed (its issue #16 left childless nodes).
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from lmsci_mi.circuits.edges.graph import EdgeGraph
from lmsci_mi.errors import UnknownNameError, UserInputError
from lmsci_mi.sites import Head

__all__ = [
    "PRUNE_METHODS",
    "NodeMap",
    "check_fractions",
    "edge_budget",
    "greedy_order",
    "node_map",
    "prune_dead",
    "prune_greedy",
    "prune_threshold",
    "prune_to_fractions",
    "prune_topn",
]

PRUNE_METHODS = ("greedy", "topn")
"""How a score matrix becomes a circuit of a given size (``threshold`` takes a value instead)."""

PruneMethod = Literal["greedy", "topn"]


@dataclass(frozen=True)
class NodeMap:
    """Which node each sender and receiver of an edge graph belongs to.

    Nodes are numbered as the senders (``input``, then per layer its heads and its MLP), with the
    logits last. A head's q, k and v receivers belong to the head; under grouped GQA a
    key/value receiver belongs to every query head of its group, so it is an incidence matrix.

    Attributes:
        sender_node: ``[sender]`` node of each sender (the identity).
        receiver_nodes: ``[receiver, node]`` bool incidence.
        names / kinds / rows / columns: per node, its name, ``"input" | "head" | "mlp" |
            "logits"``, its drawing row (input 0, layer l's heads 2l+1, its MLP 2l+2, logits
            last) and column (a head's index; MLPs right of the heads; input and logits None).
        receiver_inputs: per receiver, ``"q" | "k" | "v" | "mlp" | "logits"``.
    """

    sender_node: Int[Tensor, " sender"]
    receiver_nodes: Bool[Tensor, "receiver node"]
    names: tuple[str, ...]
    kinds: tuple[str, ...]
    rows: tuple[int, ...]
    columns: tuple[float | None, ...]
    receiver_inputs: tuple[str, ...]

    @property
    def n_nodes(self) -> int:
        return len(self.names)

    @property
    def input_node(self) -> int:
        return 0

    @property
    def logits_node(self) -> int:
        return self.n_nodes - 1


@functools.lru_cache(maxsize=8)
def node_map(graph: EdgeGraph) -> NodeMap:
    """The node map of ``graph`` (cached: graphs are frozen values).

    >>> m = node_map(EdgeGraph(model="toy", n_layers=2, n_heads=4, n_kv_heads=2, grouped=True))
    >>> m.names[:3], m.receiver_nodes[4].nonzero().flatten().tolist()  # L0.KV0.k feeds H0, H1
    (('input', 'L0.H0', 'L0.H1'), [1, 2])
    """
    names, kinds, rows = ["input"], ["input"], [0]
    columns: list[float | None] = [None]
    for layer in range(graph.n_layers):
        names += [str(Head(layer, h)) for h in range(graph.n_heads)] + [f"MLP{layer}"]
        kinds += ["head"] * graph.n_heads + ["mlp"]
        rows += [2 * layer + 1] * graph.n_heads + [2 * layer + 2]
        columns += [float(h) for h in range(graph.n_heads)] + [graph.n_heads + 0.5]
    names.append("logits")
    kinds.append("logits")
    rows.append(2 * graph.n_layers + 1)
    columns.append(None)
    incidence = torch.zeros(graph.n_receivers, len(names), dtype=torch.bool)
    inputs = [""] * graph.n_receivers
    for layer in range(graph.n_layers):
        cols = graph.layer(layer)
        for h, col in enumerate(cols.q):
            incidence[col, graph.head_sender(layer, h)] = True
            inputs[col] = "q"
        for letter, span in (("k", cols.k), ("v", cols.v)):
            for g, col in enumerate(span):
                heads = [
                    h
                    for h in range(graph.n_heads)
                    if (graph.kv_group(h) if graph.grouped else h) == g
                ]
                for h in heads:
                    incidence[col, graph.head_sender(layer, h)] = True
                inputs[col] = letter
        if cols.mlp is not None:  # attention-only models have no MLP receiver
            incidence[cols.mlp, graph.mlp_sender(layer)] = True
            inputs[cols.mlp] = "mlp"
    incidence[graph.logits, len(names) - 1] = True
    inputs[graph.logits] = "logits"
    return NodeMap(
        torch.arange(graph.n_senders),
        incidence,
        tuple(names),
        tuple(kinds),
        tuple(rows),
        tuple(columns),
        tuple(inputs),
    )


def check_fractions(fractions: Sequence[float]) -> tuple[float, ...]:
    """The edge fractions (in percent) as a tuple, each checked to lie in (0, 100].

    >>> check_fractions([0.1, 100])
    (0.1, 100.0)
    >>> check_fractions([0])
    Traceback (most recent call last):
    lmsci_mi.errors.UserInputError: edge fraction 0.0 % is outside (0, 100]: give a percentage of the graph's edges, e.g. 5 for 5 %
    """
    out = tuple(float(f) for f in fractions)
    if not out:
        raise UserInputError("no edge fractions given: give at least one percentage in (0, 100]")
    for value in out:
        if not 0.0 < value <= 100.0:  # also refuses NaN
            raise UserInputError(
                f"edge fraction {value} % is outside (0, 100]: give a percentage of the graph's "
                "edges, e.g. 5 for 5 %"
            )
    return out


def edge_budget(graph: EdgeGraph, fraction: float) -> int:
    """How many edges ``fraction`` percent of the graph's real edges is (MIB: ``int(p · n)``).

    At least one edge, so a tiny fraction of a tiny graph still asks for a circuit.
    """
    (fraction,) = check_fractions([fraction])
    return max(1, int(fraction / 100.0 * graph.n_edges))


def _check_scores(graph: EdgeGraph, scores: Tensor) -> Tensor:
    if tuple(scores.shape) != tuple(graph.real.shape):
        raise UserInputError(
            f"scores have shape {tuple(scores.shape)} but the graph's edge layout is "
            f"{tuple(graph.real.shape)} ([sender, receiver]): score this graph's edges"
        )
    if bool(torch.isnan(scores[graph.real.to(scores.device)]).any()):
        raise UserInputError("edge scores contain NaN: rerun the attribution (a metric was NaN?)")
    return scores.detach().float().cpu()


def _ranking(graph: EdgeGraph, scores: Tensor, absolute: bool) -> Tensor:
    """Scores as ranking keys: real edges by (|s|) s, other cells at -inf so they never win."""
    keys = scores.abs() if absolute else scores.clone()
    keys[~graph.real.cpu()] = -torch.inf
    return keys


def prune_dead(
    graph: EdgeGraph, mask: Bool[Tensor, "sender receiver"]
) -> Bool[Tensor, "sender receiver"]:
    """Keep only the edges that lie on some input → logits path of ``mask``.

    A node is alive forward if the input reaches it through kept edges, and backward if it
    reaches the logits. An edge u → v survives iff u is alive forward and v backward; then every
    edge of the paths that witness it survives too, so one pass reaches the fixed point that
    repeated "drop childless nodes, drop dangling edges" converges to. Iterated anyway until the
    mask stops changing, so the fixed point is what is returned even for an odd graph.

    Args:
        graph: the computational graph the mask is laid out for.
        mask: kept edges, ``[sender, receiver]``.

    Returns:
        The pruned mask (a new tensor, on the mask's device).
    """
    device = mask.device
    nodes = node_map(graph)
    current = mask.cpu() & graph.real
    incidence = nodes.receiver_nodes.float()
    while True:
        # [node, node]: 1 where a kept edge runs from the first node into an input of the second
        # (the senders are the nodes, so the sender axis needs no mapping).
        adjacency = torch.zeros(nodes.n_nodes, nodes.n_nodes)
        adjacency[: graph.n_senders] = ((current.float() @ incidence) > 0).float()
        forward = _reach(adjacency, nodes.input_node)
        backward = _reach(adjacency.T, nodes.logits_node)
        receiver_alive = (incidence @ backward.float()) > 0
        alive = forward[: graph.n_senders][:, None] & receiver_alive[None, :]
        pruned = current & alive
        if torch.equal(pruned, current):
            return pruned.to(device)
        current = pruned


def _reach(adjacency: Tensor, start: int) -> Bool[Tensor, " node"]:
    """Nodes reachable from ``start`` along ``adjacency`` (a DAG: at most n_nodes rounds)."""
    reached = torch.zeros(adjacency.shape[0], dtype=torch.bool)
    reached[start] = True
    while True:
        grown = reached | ((reached.float() @ adjacency) > 0)
        if torch.equal(grown, reached):
            return reached
        reached = grown


def prune_topn(
    graph: EdgeGraph,
    scores: Float[Tensor, "sender receiver"],
    n: int,
    *,
    absolute: bool = True,
    prune: bool = True,
) -> Bool[Tensor, "sender receiver"]:
    """The ``n`` best edges by score (by ``|score|`` when ``absolute``), dead nodes removed.

    Args:
        graph: the graph the scores are laid out for.
        scores: edge scores, ``[sender, receiver]`` (e.g. ``EdgeScores.values``).
        n: edges to keep before pruning (1 … number of real edges).
        absolute: rank by ``|score|`` (EAP-IG's and MIB's default) or by the signed score.
        prune: drop edges on no input → logits path afterwards.

    Returns:
        The circuit mask, ``[sender, receiver]`` bool, on the CPU.
    """
    keys = _ranking(graph, _check_scores(graph, scores), absolute)
    _check_count(graph, n)
    mask = torch.zeros_like(keys, dtype=torch.bool).flatten()
    mask[keys.flatten().topk(n).indices] = True
    mask = mask.view_as(keys)
    return prune_dead(graph, mask) if prune else mask


def prune_threshold(
    graph: EdgeGraph,
    scores: Float[Tensor, "sender receiver"],
    threshold: float,
    *,
    absolute: bool = True,
    prune: bool = True,
) -> Bool[Tensor, "sender receiver"]:
    """The edges whose score (``|score|`` when ``absolute``) is at least ``threshold``.

    Args: as :func:`prune_topn`, with ``threshold`` in the scores' units.

    Returns:
        The circuit mask, ``[sender, receiver]`` bool, on the CPU.
    """
    keys = _ranking(graph, _check_scores(graph, scores), absolute)
    mask = keys >= threshold
    return prune_dead(graph, mask) if prune else mask


def _check_count(graph: EdgeGraph, n: int) -> None:
    if not 1 <= n <= graph.n_edges:
        raise UserInputError(
            f"asked for {n} edges of a graph with {graph.n_edges}: give 1 … {graph.n_edges}"
        )


def greedy_order(
    graph: EdgeGraph, scores: Float[Tensor, "sender receiver"], *, absolute: bool = True
) -> Int[Tensor, "step 2"]:
    """The order in which greedy growth from the logits adds edges, as ``(sender, receiver)`` rows.

    The frontier starts as the edges into the logits; each step takes the best frontier edge, and
    when its sender's node is new to the circuit, that node's incoming edges join the frontier.
    Every prefix is the greedy circuit of that size, so one order serves a whole curve. Edges
    never reachable from the logits (none in a connected graph) are not in the order.

    Returns:
        ``[steps, 2]`` long tensor of (sender index, receiver index).
    """
    keys = _ranking(graph, _check_scores(graph, scores), absolute)
    real = graph.real
    nodes = node_map(graph)
    # The receivers that feed each node (a head's q, k and v inputs; an MLP's input); a grouped
    # k/v receiver opens with the first head of its group that joins.
    receivers_of: dict[int, list[int]] = {}
    for receiver, node in nodes.receiver_nodes.nonzero().tolist():
        receivers_of.setdefault(node, []).append(receiver)
    frontier: list[tuple[float, int, int]] = []
    opened: set[int] = set()
    in_circuit: set[int] = set()

    def open_node(node: int) -> None:
        in_circuit.add(node)
        for receiver in receivers_of.get(node, ()):
            if receiver in opened:
                continue
            opened.add(receiver)
            column = keys[:, receiver].tolist()
            for sender in real[:, receiver].nonzero().flatten().tolist():
                # heapq is a min-heap: negate; ties broken by position for a stable order.
                heapq.heappush(frontier, (-column[sender], sender, receiver))

    open_node(nodes.logits_node)
    order: list[tuple[int, int]] = []
    while frontier:
        _, sender, receiver = heapq.heappop(frontier)
        order.append((sender, receiver))
        if sender not in in_circuit:  # sender index == node index
            open_node(sender)
    return torch.tensor(order, dtype=torch.long).view(-1, 2)


def prune_greedy(
    graph: EdgeGraph,
    scores: Float[Tensor, "sender receiver"],
    n: int,
    *,
    absolute: bool = True,
    prune: bool = True,
    order: Tensor | None = None,
) -> Bool[Tensor, "sender receiver"]:
    """Greedy circuit of ``n`` edges grown from the logits (EAP-IG ``apply_greedy``).

    Args: as :func:`prune_topn`; ``order`` reuses a :func:`greedy_order` already computed.

    Returns:
        The circuit mask, ``[sender, receiver]`` bool, on the CPU.
    """
    _check_count(graph, n)
    if order is None:
        order = greedy_order(graph, scores, absolute=absolute)
    mask = torch.zeros(graph.real.shape, dtype=torch.bool)
    taken = order[:n]
    mask[taken[:, 0], taken[:, 1]] = True
    return prune_dead(graph, mask) if prune else mask


def prune_to_fractions(
    graph: EdgeGraph,
    scores: Float[Tensor, "sender receiver"],
    fractions: Sequence[float],
    *,
    method: PruneMethod = "greedy",
    absolute: bool = True,
) -> Bool[Tensor, "point sender receiver"]:
    """One pruned circuit per edge fraction (percent of the graph's real edges).

    Args:
        graph / scores / absolute: as :func:`prune_topn`.
        fractions: percentages in (0, 100], e.g. MIB's (0.1, 0.2, …, 100).
        method: ``"greedy"`` (connected growth from the logits) or ``"topn"``.

    Returns:
        ``[point, sender, receiver]`` bool masks, one per fraction, dead nodes removed.
    """
    checked = check_fractions(fractions)
    if method not in PRUNE_METHODS:
        raise UnknownNameError(f"pruning method {method!r} is not one of {PRUNE_METHODS}")
    order = greedy_order(graph, scores, absolute=absolute) if method == "greedy" else None
    masks = []
    for fraction in checked:
        n = edge_budget(graph, fraction)
        if order is not None:
            masks.append(prune_greedy(graph, scores, n, absolute=absolute, order=order))
        else:
            masks.append(prune_topn(graph, scores, n, absolute=absolute))
    return torch.stack(masks)

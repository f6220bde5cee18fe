"""Pruning, faithfulness curves and CPR/CMD: fixed-point pruning, greedy connectivity, MIB's areas
on a hand-made curve, and the curve's endpoints by exact edge patching on a tiny model."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import Tensor

from lmsci_mi.circuits.faithfulness import CurveConfig, area_under_curve
from lmsci_mi.circuits.pruning import (
    check_fractions,
    greedy_order,
    prune_dead,
    prune_greedy,
    prune_threshold,
    prune_topn,
    prune_to_fractions,
)


@dataclass(frozen=True)
class Toy:
    """A hand-made graph: input(0) → a(1) → m(2) → b(3) → logits(4); b has q and k inputs."""

    real_edge_mask: Tensor
    sender_node: Tensor
    receiver_node: Tensor
    n_nodes: int = 5
    input_node: int = 0
    logits_node: int = 4

    @property
    def n_edges(self) -> int:
        return int(self.real_edge_mask.sum())


def _toy() -> Toy:
    sender_node = torch.tensor([0, 1, 2, 3])
    receiver_node = torch.tensor([1, 2, 3, 3, 4])  # a.q, m, b.q, b.k, logits
    real = sender_node[:, None] < receiver_node[None, :]
    return Toy(real, sender_node, receiver_node)


def _alive_nodes(graph: Toy, mask: Tensor) -> tuple[set[int], set[int]]:
    senders, receivers = mask.nonzero(as_tuple=True)
    out_nodes = {int(graph.sender_node[s]) for s in senders}
    in_nodes = {int(graph.receiver_node[r]) for r in receivers}
    return out_nodes, in_nodes


def _no_dead_nodes(graph: Toy, mask: Tensor) -> bool:
    """Every node a kept edge touches has a kept in-edge (or is the input) and a kept out-edge
    (or is the logits)."""
    out_nodes, in_nodes = _alive_nodes(graph, mask)
    touched = out_nodes | in_nodes
    return all((n == graph.input_node or n in in_nodes) and (n == graph.logits_node or n in out_nodes)
               for n in touched)


def test_prune_dead_reaches_the_fixed_point() -> None:
    graph = _toy()
    mask = torch.zeros_like(graph.real_edge_mask)
    mask[0, 0] = True  # input → a.q, but a feeds nothing: a dangling chain
    mask[1, 1] = True  # a → m, and m feeds nothing either: two rounds of a one-pass prune
    mask[0, 4] = True  # input → logits survives
    mask[3, 4] = True  # b → logits, but nothing reaches b: dead
    pruned = prune_dead(graph, mask)
    assert pruned.nonzero().tolist() == [[0, 4]]
    assert _no_dead_nodes(graph, pruned)
    assert torch.equal(prune_dead(graph, pruned), pruned)


def test_random_masks_prune_to_no_dead_nodes() -> None:
    graph = _toy()
    generator = torch.Generator().manual_seed(1)
    for _ in range(50):
        mask = (torch.rand(graph.real_edge_mask.shape, generator=generator) < 0.4) & graph.real_edge_mask
        pruned = prune_dead(graph, mask)
        assert _no_dead_nodes(graph, pruned)
        assert not (pruned & ~mask).any()  # pruning only removes


def test_greedy_stays_connected_to_the_logits() -> None:
    graph = _toy()
    scores = torch.zeros(graph.real_edge_mask.shape)
    scores[0, 0] = 10.0  # the best edge overall, but a is not in the circuit until a → … joins
    scores[2, 4] = 1.0
    scores[1, 1] = 0.5
    order = greedy_order(graph, scores)
    assert tuple(order[0].tolist()) == (2, 4)  # only edges into the logits are open at first
    # a joins only through a → m, so the best edge overall (into a) comes third
    assert [tuple(r) for r in order[:3].tolist()] == [(2, 4), (1, 1), (0, 0)]
    # each added edge's receiver node was already in the circuit when it was added
    in_circuit = {graph.logits_node}
    for sender, receiver in order.tolist():
        assert int(graph.receiver_node[receiver]) in in_circuit
        in_circuit.add(int(graph.sender_node[sender]))
    assert len(order) == graph.n_edges
    mask = prune_greedy(graph, scores, 3, prune=False)
    assert int(mask.sum()) == 3
    # top-n takes the best edge anywhere, even one that then dies in pruning
    top = prune_topn(graph, scores, 1, prune=False)
    assert top[0, 0] and not prune_topn(graph, scores, 1).any()


def test_threshold_and_fractions() -> None:
    graph = _toy()
    scores = torch.arange(20, dtype=torch.float32).view(4, 5) * graph.real_edge_mask
    kept = prune_threshold(graph, scores, 10.0, prune=False)
    assert torch.equal(kept, (scores >= 10) & graph.real_edge_mask)
    masks = prune_to_fractions(graph, scores, [10, 50, 100], method="topn")
    assert masks.shape == (3, 4, 5)
    assert torch.equal(masks[-1], graph.real_edge_mask)  # 100 % keeps every edge
    assert (masks.sum((1, 2)).diff() >= 0).all()


@pytest.mark.parametrize("bad", [0, -1, 100.5, float("nan")])
def test_fraction_outside_range_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match=r"outside \(0, 100\]"):
        check_fractions([bad])
    with pytest.raises(ValueError):
        CurveConfig(fractions=(bad, 100.0))


def test_scores_of_another_layout_are_refused() -> None:
    with pytest.raises(ValueError, match="edge layout"):
        prune_topn(_toy(), torch.zeros(3, 3), 1)


def test_cpr_cmd_on_a_hand_made_curve() -> None:
    fractions = [0.1, 1.0, 10.0, 100.0]
    faithfulness = [0.0, 0.5, 1.5, 1.0]
    # trapezoids over the proportion axis (0.001, 0.01, 0.1, 1), as MIB computes them
    cpr = 0.009 * 0.25 + 0.09 * 1.0 + 0.9 * 1.25
    cmd = 0.009 * 0.75 + 0.09 * 0.5 + 0.9 * 0.25
    got = area_under_curve(fractions, faithfulness)
    assert got == pytest.approx((cpr, cmd))
    # on a log axis every step of a decade has width ln 10
    log_cpr, _ = area_under_curve(fractions, faithfulness, log_scale=True)
    assert log_cpr == pytest.approx(2.302585 * (0.25 + 1.0 + 1.25), rel=1e-6)
    # a perfect curve: CPR is the axis length, CMD zero
    assert area_under_curve(fractions, [1.0] * 4) == pytest.approx((0.999, 0.0))

"""Influence, pruning, the replacement and completeness scores (circuit-tracer's graph.py) on
hand-built graphs whose values are worked out by hand, and the viewer's JSON of a toy's graph."""

from __future__ import annotations

import json

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.circuits.graphs import (
    GraphConfig,
    NodeLayout,
    attribution_graph,
    graph_scores,
    prune_graph,
)
from lmsci_mi.circuits.graphs.prune import node_influence, partial_influences
from lmsci_mi.errors import UserInputError
from lmsci_mi.transcoders import TranscoderSet

# One feature, one layer, one position: nodes [F, E, T, L].
CHAIN = NodeLayout(n_features=1, n_layers=1, n_pos=1, n_logits=1)


def _chain() -> torch.Tensor:
    """T → F (weight 1); F → L (3) and E → L (−1): the logit's inputs are 3/4 feature, 1/4 error."""
    a = torch.zeros(4, 4)
    a[0, 2] = 1.0
    a[3, 0], a[3, 1] = 3.0, -1.0
    return a


def test_influence_and_scores_by_hand() -> None:
    weights = CHAIN.logit_weights(torch.tensor([1.0]))
    # L reads 3/4 from F and 1/4 from E; F reads everything from T: T inherits F's 3/4.
    assert node_influence(_chain(), weights).tolist() == [0.75, 0.25, 0.75, 0.0]
    scores = graph_scores(_chain(), CHAIN, torch.tensor([1.0]))
    assert scores.replacement == pytest.approx(0.75 / (0.75 + 0.25))
    # Non-error input shares 1, 1, 1, 3/4 weighted by influence + logit weight (.75, .25, .75, 1).
    assert scores.completeness == pytest.approx((0.75 + 0.25 + 0.75 + 0.75) / 2.75)


def test_partial_influences_equal_full_ones_when_every_row_is_known() -> None:
    a = _chain()
    rows = torch.tensor([3, 0])  # the logit's row first, then the feature's, as attribution fills them
    partial = partial_influences(a[rows], torch.tensor([1.0]), rows)
    torch.testing.assert_close(partial, node_influence(a, CHAIN.logit_weights(torch.tensor([1.0]))))


def test_pruning_drops_weak_and_dangling_nodes() -> None:
    # Nodes [F0, F1, F2, E, T, L]: F0 carries the signal T → F0 → L; F1 is weak (L ← F1, 1 %);
    # F2 feeds nothing (no outgoing edge) though it reads T.
    layout = NodeLayout(n_features=3, n_layers=1, n_pos=1, n_logits=1)
    a = torch.zeros(6, 6)
    a[0, 4] = 2.0
    a[2, 4] = 5.0
    a[5, 0], a[5, 1], a[5, 3] = 9.0, 0.1, 0.9
    pruned = prune_graph(a, layout, torch.tensor([1.0]), node_threshold=0.8, edge_threshold=0.98)
    assert pruned.node_mask.tolist() == [True, False, False, False, True, True]
    assert pruned.edge_mask[5, 0] and pruned.edge_mask[0, 4] and not pruned.edge_mask[5, 1]
    assert not pruned.edge_mask[:, ~pruned.node_mask].any()
    assert pruned.cumulative_scores[0] < pruned.cumulative_scores[3]  # F0 ranks above E
    with pytest.raises(UserInputError, match="node_threshold"):
        prune_graph(a, layout, torch.tensor([1.0]), node_threshold=1.5)


def test_viewer_json(tiny: LensModel) -> None:
    tcs = TranscoderSet.random(tiny, 128, k=4)
    graph = attribution_graph(tiny, tcs, "The cat sat", GraphConfig(batch_size=64))
    full = graph.to_viewer_json(None, None, feature_details={0: {"top_tokens": ["a"]}})
    json.dumps(full, allow_nan=False)  # plain, strict JSON
    assert len(full["nodes"]) == graph.layout.n_nodes
    assert len(full["edges"]) == int((graph.values != 0).sum())
    assert {n["kind"] for n in full["nodes"]} == {"feature", "error", "token", "logit"}
    assert full["nodes"][0]["details"]["top_tokens"] == ["a"]
    ids = {n["id"] for n in full["nodes"]}
    assert len(ids) == len(full["nodes"])
    pruned = graph.to_viewer_json()
    kept = {n["id"] for n in pruned["nodes"]}
    assert kept < ids and all(e["source"] in kept and e["target"] in kept for e in pruned["edges"])
    assert {n["layer"] for n in pruned["nodes"] if n["kind"] == "token"} == {-1}
    logit = next(n for n in pruned["nodes"] if n["kind"] == "logit")
    assert logit["score"] == pytest.approx(logit["details"]["probability"] + logit["details"]["influence"])
    assert pruned["meta"]["replacement_score"] == pytest.approx(graph.scores().replacement)
    with pytest.raises(UserInputError, match="both thresholds"):
        graph.to_viewer_json(0.8, None)

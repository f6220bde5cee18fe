"""benchmarks/graphs_cfg.py's pieces: the AUROC with tied ranks equals the pairwise definition;
the comparison counts each graph feature once and leaves out features silent on the labels."""

from __future__ import annotations

import numpy as np
import pytest

from tests.fixtures import benchmark_script


@pytest.fixture(scope="module")
def bench():
    return benchmark_script("graphs_cfg")


def _pairwise(scores: np.ndarray, positive: np.ndarray) -> float:
    pos, neg = scores[positive], scores[~positive]
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(wins / (len(pos) * len(neg)))


def test_auroc_with_ties_equals_the_pairwise_definition(bench) -> None:
    rng = np.random.default_rng(0)
    acts = np.maximum(rng.normal(size=(60, 5)), 0)  # many tied zeros, as sparse features have
    labels = {"a": rng.random(60) < 0.3, "b": acts[:, 2] > 0.5}
    got = bench.aurocs(acts, labels)
    for j, positive in enumerate(labels.values()):
        for f in range(5):
            assert got[f, j] == pytest.approx(_pairwise(acts[:, f], positive))
    assert got[2, 1] == 1.0


def test_graph_features_are_counted_once_and_silent_ones_left_out(bench) -> None:
    aligned = {"targets": ["t0", "t1"],
               "layers": {"0": {"live": [3, 5], "auroc": [[0.95, 0.5], [0.6, 0.7]],
                                "purity": [[1.0, 0.0], [0.5, 0.95]], "support": [30, 10]},
                          "1": {"live": [2], "auroc": [[0.5, 0.92]], "purity": [[0.2, 0.8]], "support": [40]}},
               "token_identity": {"t0": 0.5, "t1": 0.6}}
    graphs = [{"kept": [[0, 3], [1, 2]]}, {"kept": [[0, 3], [1, 9]]}]  # (1, 9) never fired
    out = bench.compare(aligned, graphs, 0.9)
    assert (out["graph_features"]["selective"], out["graph_features"]["n"]) == (2, 2)
    assert (out["live_features"]["selective"], out["live_features"]["n"]) == (2, 3)
    assert [t["best_graph_feature"] for t in out["per_target"]] == [0.95, 0.92]
    # pure: (0, 3) at 1.0 on 30 tokens; (0, 5) is 0.95 pure but fires on 10 tokens only
    assert (out["graph_features_pure"]["selective"], out["live_features_pure"]["selective"]) == (1, 1)


def test_purity_is_the_share_of_firing_tokens_on_the_target(bench) -> None:
    acts = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0], [1.0, 0.0]])
    purity, support = bench.purities(acts, {"t": np.array([True, True, False, False])})
    assert support.tolist() == [3, 1] and purity[:, 0].tolist() == [2 / 3, 0.0]

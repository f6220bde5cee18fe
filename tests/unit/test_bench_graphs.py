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


@pytest.fixture(scope="module")
def claims():
    return benchmark_script("graphs_smollm2")


def test_mlp_influence_adds_each_layers_features_and_error(claims) -> None:
    """benchmarks/graphs_smollm2.py: a layer's MLP influence at a position is its feature nodes'
    plus its error node's, so the grid holds every feature and error node's influence once."""
    import torch

    from lmsci_mi import load_model
    from lmsci_mi.circuits.graphs import attribution_graph
    from lmsci_mi.transcoders import TranscoderSet

    lm = load_model("toy-2l")
    torch.set_grad_enabled(True)
    graph = attribution_graph(lm, TranscoderSet.random(lm, 32), "The cat sat on the", targets=[5])
    grid, lay = claims.mlp_influence(graph), graph.layout
    influence = graph.node_influence().double()
    assert grid.shape == (lay.n_layers, lay.n_pos)
    assert grid.sum() == pytest.approx(float(influence[: lay.token_start].sum()), rel=1e-9)
    layer, position = graph.features[0, :2].long().tolist()
    mine = (graph.features[:, 0] == layer) & (graph.features[:, 1] == position)
    error = influence[lay.error_start + layer * lay.n_pos + position]
    assert grid[layer, position] == pytest.approx(float(influence[: lay.n_features][mine].sum() + error))


def test_fact_claims_read_the_right_positions(claims) -> None:
    n_layers = 4
    graph = np.zeros((n_layers, 5))
    graph[2, 1], graph[1, 4] = 3.0, 1.0  # subject's last token at 1, the last at 4
    trace = np.zeros((n_layers, 5))
    trace[2, 1], trace[3, 4] = 0.6, 0.2
    item = {"graph_mlp": graph.tolist(), "trace_mlp": trace.tolist(),
            "positions": {"subject_last": 1, "last": 4}, "kn_layers": [1],
            "kn_mass": {"0": 0.0, "1": 2.0, "2": 0.0, "3": 0.0}}
    got = claims.fact_claims(item)
    assert got["graph_subject_share"] == pytest.approx(0.75)
    assert got["trace_subject_share"] == pytest.approx(0.75)
    assert (got["graph_peak_layer"], got["trace_peak_layer"]) == (2.0, 2.0)
    assert got["kn_layer_share"] == 1.0 and got["kn_layer_baseline"] == 0.25


def test_the_smollm2_table_names_a_subset_of_the_facts(claims) -> None:
    """docs/graphs.md's SmolLM2 table: a run on the relation's first N facts (--n-facts) says so."""
    from doc_tables import RENDERERS  # on the path once the script's module is (the fixture)

    claim = {"estimate": 0.5, "low": 0.4, "high": 0.6}
    scores = {"replacement": claim, "completeness": claim, "n_features": {"estimate": 900.0}}
    facts = {key: claim for key in ("graph_subject_share", "trace_subject_share", "graph_peak_layer",
                                     "trace_peak_layer", "layer_spearman_trace", "kn_layer_share",
                                     "kn_layer_baseline", "layer_spearman_kn")}
    ioi = {key: claim for key in ("circuit_mlp_share", "circuit_mlp_baseline", "layer_spearman_eap_ig",
                                  "io_over_subject")}
    doc = {"relation": "landmark_city", "facts": [{}] * 12, "ioi_prompts": [{}] * 16, "fact_claims": facts,
           "ioi_claims": ioi, "fact_scores": scores, "ioi_scores": scores, "n_facts_of_relation": 26,
           "eap_ig": {"edges": 40, "faithfulness": 0.8, "mlp_layers": [0, 3]}}
    render = RENDERERS["graphs_smollm2"]
    assert "| 12 landmark_city facts, the first 12 of 26 in the shipped order | 0.500 [0.400, 0.600] |" in render(doc)
    assert "the first" not in render({**doc, "n_facts_of_relation": 12})
    assert "| 16 IOI prompts |" in render(doc)
    assert "| 16 IOI prompts, graphs on the first 16 of the 24 that EAP-IG scores |" in render({**doc, "n_ioi_pairs": 24})


def test_the_peer_table_names_options_off_circuit_tracers_defaults(claims) -> None:
    import json
    from pathlib import Path

    from doc_tables import RENDERERS

    data = json.loads((Path(__file__).parents[2] / "docs/data/graphs_vs_circuit_tracer.json").read_text())
    render = RENDERERS["graphs_vs_circuit_tracer"]
    assert "feature nodes;" not in render(data) and "; batch" not in render(data)
    data["models"]["ct-llama"]["options"].update(max_feature_nodes=1024, batch_size=64)
    assert "(2, 32; at most 1,024 feature nodes, batch 64)" in render(data)


def test_the_transcoder_findings_name_the_layers_worse_than_ablation(claims) -> None:
    import copy
    import json
    from pathlib import Path

    from doc_tables import RENDERERS

    cfg = json.loads((Path(__file__).parents[2] / "docs/data/transcoders_cfg-gpt.json").read_text())
    worse = copy.deepcopy(cfg)
    worse["rows"][2]["loss_recovered"]["estimate"] = -0.5
    worse["layers_meeting_target"] = [0, 1, 3]
    line = RENDERERS["transcoder_findings"]({"transcoders_cfg-gpt": worse, "transcoders_smollm2-135m": None})
    assert "3 of 4 layers meet the target (0, 1, 3)" in line and "worse than removing the MLP: 2." in line
    assert line.count("\n") == 0  # a model without a file adds no line

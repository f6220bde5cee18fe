"""Our attribution graphs against circuit-tracer's (benchmarks/graphs_vs_circuit_tracer.py).

The node alignment is checked here on made-up graphs (fast); the comparison itself runs the
benchmark on circuit-tracer's own test model when its venv (scripts/install_circuit_tracer.sh) is
there, and is skipped otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.fixtures import benchmark_script

ROOT = Path(__file__).resolve().parents[2]


def _graph(features: list[list[int]], n_layers: int = 2, n_pos: int = 3, seed: int = 0) -> dict:
    n = len(features) + n_layers * n_pos + n_pos + 2
    g = torch.Generator().manual_seed(seed)
    return {"adjacency": torch.randn(n, n, generator=g), "features": torch.tensor(features),
            "tokens": torch.arange(n_pos), "logit_tokens": torch.tensor([5, 9]), "n_active": len(features),
            "logit_probs": torch.tensor([0.6, 0.3]), "clean_logits": torch.zeros(10)}


def _permuted(graph: dict, order: list[int]) -> dict:
    """The same graph with its feature nodes in another order (as influence order may give)."""
    n_features = len(graph["features"])
    perm = torch.tensor(order + list(range(n_features, graph["adjacency"].shape[0])))
    return {**graph, "features": graph["features"][order], "adjacency": graph["adjacency"][perm][:, perm]}


def test_nodes_are_aligned_by_key_and_a_changed_entry_shows() -> None:
    bench = benchmark_script("graphs_vs_circuit_tracer")
    ours = _graph([[0, 1, 4], [0, 2, 7], [1, 1, 3]])
    peer = _permuted(ours, [2, 0, 1])
    agree = bench.agreement(ours, peer, n_layers=2)
    assert agree["within_tolerance"] and agree["max_abs_diff"] == 0.0
    assert agree["nodes_compared"] == agree["nodes_ours"] == 3 + 6 + 3 + 2
    peer["adjacency"][0, 1] += 0.1  # the edge from (0, 1, 4) into (1, 1, 3)
    agree = bench.agreement(ours, peer, n_layers=2)
    assert not agree["within_tolerance"] and agree["max_abs_diff"] == pytest.approx(0.1, rel=1e-4)
    unaligned = bench.agreement(ours, {**peer, "features": ours["features"]}, n_layers=2)
    assert unaligned["max_abs_diff"] > 1e-2  # without the keys, rows would be compared to others


def test_a_node_on_one_side_only_is_not_within_tolerance() -> None:
    bench = benchmark_script("graphs_vs_circuit_tracer")
    ours = _graph([[0, 1, 4], [1, 1, 3]])
    peer = _graph([[0, 1, 4], [1, 2, 3]])
    peer["adjacency"] = ours["adjacency"].clone()
    agree = bench.agreement(ours, peer, n_layers=2)
    assert agree["nodes_compared"] == agree["nodes_ours"] - 1 and not agree["within_tolerance"]


VENV = Path(os.environ.get("CT_VENV", "/work/main/.venv-ct"))


@pytest.mark.slow
@pytest.mark.skipif(not (VENV / "bin" / "python").exists(),
                    reason=f"no circuit-tracer venv at {VENV}: run scripts/install_circuit_tracer.sh")
def test_our_adjacency_equals_circuit_tracers_on_its_test_model(tmp_path: Path) -> None:
    """circuit-tracer's tests/test_attributions_llama.py model and tokens, random TopK-4 skip
    transcoders: every edge within its own tolerances (atol 1e-5, rtol 1e-3)."""
    out = tmp_path / "graphs.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "CT_VENV": str(VENV)}
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "graphs_vs_circuit_tracer.py"), "--quick",
                    "--model", "ct-llama", "--rounds", "1", "--out", str(out)],
                   check=True, env=env, cwd=ROOT, timeout=600)
    agree = json.loads(out.read_text())["models"]["ct-llama"]["agreement"]
    assert agree["within_tolerance"], agree
    assert agree["nodes_compared"] == agree["nodes_ours"] == agree["nodes_peer"]
    assert agree["features_ours"] == agree["active_ours"] > 0
    assert agree["logit_tokens_ours"] == agree["logit_tokens_peer"]
    assert agree["clean_logits_max_abs_diff"] < 1e-5

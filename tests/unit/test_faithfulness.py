"""Pruning, faithfulness curves and CPR/CMD: fixed-point pruning, greedy connectivity, MIB's areas
on a hand-made curve, and the curve's endpoints by exact edge patching on a tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import Tensor

from lmsci_mi import LensModel
from lmsci_mi.circuits.edges.eap import EAPConfig, edge_attribution
from lmsci_mi.circuits.edges.faithfulness import CurveConfig, area_under_curve, faithfulness_curve
from lmsci_mi.circuits.edges.graph import EdgeGraph, edge_graph
from lmsci_mi.circuits.edges.pruning import (
    check_fractions,
    greedy_order,
    node_map,
    prune_dead,
    prune_greedy,
    prune_threshold,
    prune_to_fractions,
    prune_topn,
)
from lmsci_mi.circuits.metrics import LogitDiff
from lmsci_mi.results import Result

CLEAN = "When Mary and John went, John gave it to"
CORRUPTED = "When Mary and John went, Mary gave it to"


def _metric(lm: LensModel) -> LogitDiff:
    return LogitDiff(lm.token_id(" Mary"), lm.token_id(" John"))


def _toy(grouped: bool = False) -> EdgeGraph:
    """Two layers of four heads (two key/value heads): 90 edges ungrouped, 66 grouped."""
    return EdgeGraph(model="toy", n_layers=2, n_heads=4, n_kv_heads=2, grouped=grouped)


def _on_a_path(graph: EdgeGraph, mask: Tensor) -> Tensor:
    """Brute force: which kept edges lie on some input → logits path of kept edges."""
    nodes = node_map(graph)
    edges = [(s, r) for s, r in mask.nonzero().tolist()]
    into = {
        n: [(s, r) for s, r in edges if nodes.receiver_nodes[r, n]] for n in range(nodes.n_nodes)
    }

    def from_input(node: int, seen: frozenset[int] = frozenset()) -> bool:
        return node == 0 or any(
            from_input(s, seen | {node}) for s, _ in into[node] if s not in seen
        )

    def to_logits(node: int) -> bool:
        return node == nodes.logits_node or any(
            to_logits(n)
            for s, r in edges
            if s == node
            for n in nodes.receiver_nodes[r].nonzero().flatten().tolist()
        )

    out = torch.zeros_like(mask)
    for s, r in edges:
        targets = nodes.receiver_nodes[r].nonzero().flatten().tolist()
        out[s, r] = from_input(s) and any(to_logits(n) for n in targets)
    return out


def test_prune_dead_reaches_the_fixed_point() -> None:
    graph = _toy()
    mask = graph.mask(
        [
            "input->L0.H0.q",  # H0 feeds nothing ...
            "L0.H0->MLP0",  # ... but MLP0 feeds nothing either: two rounds of a one-pass prune
            "input->logits",  # survives
            "L1.H2->logits",  # nothing reaches L1.H2: dead
        ]
    )
    pruned = prune_dead(graph, mask)
    assert graph.edge_names(pruned) == ["input->logits"]
    assert torch.equal(prune_dead(graph, pruned), pruned)


@pytest.mark.parametrize("grouped", [False, True])
def test_random_masks_prune_to_the_path_edges(grouped: bool) -> None:
    graph = _toy(grouped)
    generator = torch.Generator().manual_seed(1)
    for density in (0.05, 0.15, 0.4):
        for _ in range(10):
            mask = (torch.rand(graph.real.shape, generator=generator) < density) & graph.real
            # exactly the edges on an input → logits path survive: none dead, none lost
            assert torch.equal(prune_dead(graph, mask), _on_a_path(graph, mask))


def test_greedy_stays_connected_to_the_logits() -> None:
    graph = _toy()
    scores = torch.zeros(graph.real.shape)
    scores[graph.edge_index("input->L0.H0.q")] = 10.0  # best overall, but H0 is not in yet
    scores[graph.edge_index("MLP0->logits")] = 1.0
    scores[graph.edge_index("L0.H0->MLP0")] = 0.5
    order = [graph.edge_name(s, r) for s, r in greedy_order(graph, scores).tolist()]
    # only edges into the logits are open at first; H0 joins through H0 → MLP0, so the best edge
    # overall (into H0) comes third
    assert order[:3] == ["MLP0->logits", "L0.H0->MLP0", "input->L0.H0.q"]
    assert sorted(order) == sorted(graph.edge_names(graph.real))  # every edge, once
    nodes = node_map(graph)
    in_circuit = {nodes.logits_node}
    for s, r in greedy_order(graph, scores).tolist():
        assert nodes.receiver_nodes[r, sorted(in_circuit)].any()  # receiver already in
        in_circuit.add(s)
    mask = prune_greedy(graph, scores, 3)
    assert graph.edge_names(mask) == ["input->L0.H0.q", "L0.H0->MLP0", "MLP0->logits"]
    # top-n takes the best edge anywhere, even one that pruning then removes
    assert graph.edge_names(prune_topn(graph, scores, 1, prune=False)) == ["input->L0.H0.q"]
    assert not prune_topn(graph, scores, 1).any()


def test_threshold_and_fractions() -> None:
    graph = _toy()
    scores = torch.randn(graph.real.shape, generator=torch.Generator().manual_seed(0))
    kept = prune_threshold(graph, scores, 1.0, prune=False)
    assert torch.equal(kept, (scores.abs() >= 1.0) & graph.real)
    for method in ("topn", "greedy"):
        masks = prune_to_fractions(graph, scores, [10, 50, 100], method=method)
        assert masks.shape == (3, *graph.real.shape)
        assert torch.equal(masks[-1], graph.real)  # 100 % keeps every edge
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


def test_curve_endpoints_by_exact_patching(tiny: LensModel) -> None:
    graph = edge_graph(tiny)
    scores = torch.zeros(graph.real.shape)
    # the single best edge feeds an MLP that nothing downstream reads in the circuit: pruned
    # away, so the 1 % circuit is empty and must score the corrupted run exactly
    scores[graph.edge_index("L0.H0->MLP0")] = 1.0
    config = CurveConfig(fractions=(1.0, 100.0), prune="topn", n_bootstrap=50)
    curve = faithfulness_curve(tiny, graph, scores, CLEAN, CORRUPTED, _metric(tiny), config)
    assert curve.kept == (0, graph.n_edges)
    assert curve.at(1.0) == pytest.approx(0.0, abs=1e-4)
    assert curve.at(100.0) == pytest.approx(1.0, abs=1e-4)
    assert curve.interval is None  # one prompt: nothing to resample
    assert "CPR" in curve.summary()
    circuit = curve.circuit(100.0)
    assert circuit.n_edges == graph.n_edges and len(circuit.heads()) == 2 * tiny.cfg.n_heads


def test_curve_refuses_bad_input(tiny: LensModel) -> None:
    graph = edge_graph(tiny)
    with pytest.raises(ValueError, match="sender, receiver"):
        faithfulness_curve(tiny, graph, torch.zeros(3, 3), CLEAN, CORRUPTED, _metric(tiny))
    with pytest.raises(ValueError, match="empty"):
        faithfulness_curve(tiny, graph, torch.zeros(graph.real.shape), [], [], _metric(tiny))
    with pytest.raises(ValueError, match="same token length"):
        faithfulness_curve(
            tiny, graph, torch.zeros(graph.real.shape), CLEAN, CORRUPTED + " and", _metric(tiny)
        )
    assert not tiny.model.hook_dict["blocks.0.hook_resid_pre"].fwd_hooks  # nothing attached


def test_circuit_roundtrip_and_drawing(tiny: LensModel, tmp_path: Path) -> None:
    graph = edge_graph(tiny)
    scores = torch.randn(graph.real.shape, generator=torch.Generator().manual_seed(0))
    config = CurveConfig(fractions=(10.0, 100.0), n_bootstrap=0)
    curve = faithfulness_curve(tiny, graph, scores, CLEAN, CORRUPTED, _metric(tiny), config)
    assert Result.load(curve.save(tmp_path / "curve.json")) == curve
    circuit = curve.circuit(10.0)
    assert Result.load(circuit.save(tmp_path / "circuit.json")) == circuit
    assert circuit.edge_list()[0][0] in graph.sender_names
    circuit.plot(tmp_path / "circuit.png")
    assert (tmp_path / "circuit.png").stat().st_size > 1000
    assert circuit.to_svg().startswith("<svg")


AUTO_CIRCUIT = Path(__file__).resolve().parents[1] / "data" / "auto_circuit_eap.json"


@pytest.mark.skipif(not AUTO_CIRCUIT.exists(), reason="run benchmarks/peers_auto_circuit.py")
def test_eap_equals_auto_circuits_scores(tiny_gpt2: LensModel) -> None:
    """auto-circuit's mask-gradient EAP on the same toy and tokens (written by the peers script
    in its own venv) is minus our EAP score: d(−mean logit diff)/d(mask) vs Δa · ∂(mean LD)/∂in."""
    record = json.loads(AUTO_CIRCUIT.read_text())
    assert record["model"] == tiny_gpt2.name
    clean, corrupted = torch.tensor(record["clean"]), torch.tensor(record["corrupted"])
    metric = LogitDiff(record["answers"], record["wrongs"])
    ours = edge_attribution(tiny_gpt2, clean, corrupted, metric, EAPConfig(method="EAP"))
    peer = record["scores"]
    assert len(peer) == ours.graph.n_edges  # the graphs match edge for edge
    got = torch.tensor([ours.score(name) for name in peer])
    want = -torch.tensor(list(peer.values()))
    assert torch.allclose(got, want, atol=1e-5 * float(want.abs().max()) + 1e-7)


def test_cli_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from lmsci_mi.cli import main

    toy = ["--model", "toy-2l", "--device", "cpu", "--n-prompts", "2"]
    with pytest.raises(SystemExit) as exit_info:  # argparse checks the declared bound
        main(["circuit", "curve", *toy, "--fractions", "0", "100"])
    assert exit_info.value.code == 2
    assert main(["circuit", "evaluate", *toy, "--edges", "L0.H0->L9.H0.q"]) == 2
    assert "not an edge" in capsys.readouterr().err
    (tmp_path / "c.txt").write_text("When Mary and John went, John gave it to\n")
    (tmp_path / "x.txt").write_text("a\nb\n")
    files = [
        "--clean",
        str(tmp_path / "c.txt"),
        "--corrupted",
        str(tmp_path / "x.txt"),
        "--answer",
        " Mary",
        "--wrong",
        " John",
    ]
    assert main(["circuit", "evaluate", *toy, *files, "--edges", "MLP1->logits"]) == 2
    assert "one corrupted prompt per clean prompt" in capsys.readouterr().err
    assert main(["circuit", "evaluate", *toy, "--edges", "MLP1->logits"]) == 0
    assert "normalised faithfulness" in capsys.readouterr().out

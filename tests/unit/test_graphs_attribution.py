"""Attribution graphs, verified as circuit-tracer's tests verify them (tests/test_attributions_*.py):
perturb each source under the freeze and check that feature pre-activations and demeaned logits
move by exactly the graph's edge weights; on a Llama-shaped and a Gemma-3-shaped toy with random
TopK-4 skip transcoders (every parameter uniform(−1, 1), as there)."""

from __future__ import annotations

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.circuits.graphs import (
    AttributionGraph,
    GraphConfig,
    attribution_graph,
    feature_interventions,
    frozen_forward,
    replacement_gradients,
    replacement_run,
)
from lmsci_mi.circuits.graphs import attribution as attribution_module
from lmsci_mi.circuits.graphs.replacement import last_logits
from lmsci_mi.errors import UserInputError
from lmsci_mi.transcoders import TranscoderSet

PROMPT = "The cat sat on"
ACT_TOL = dict(atol=1e-3, rtol=1e-3)  # circuit-tracer's verify_token_and_error_edges
LOGIT_TOL = dict(atol=1e-5, rtol=1e-3)


def _transcoders(lm: LensModel) -> TranscoderSet:
    return TranscoderSet.random(lm, 4 * lm.cfg.d_model, activation="topk", k=4, skip=True)


def _measure(lm: LensModel, tcs: TranscoderSet, graph: AttributionGraph, tokens: torch.Tensor,
             adds: dict[str, torch.Tensor]) -> torch.Tensor:
    """``[row, target]``: each graph feature's pre-activation and each logit target's demeaned
    logit, one row per batch row of ``adds`` (``{hook: [row, pos, d_model]}``, added there) under
    the freeze."""
    rows = next(iter(adds.values())).shape[0]
    inputs = [tcs.hook_names(layer)[0] for layer in range(lm.cfg.n_layers)]

    def add(act: torch.Tensor, hook) -> torch.Tensor:
        return act + adds[hook.name]

    with torch.no_grad(), frozen_forward(lm, tcs, tokens), \
            lm.hooks.hooks(fwd=[(list(adds), add)]), lm.hooks.capture(inputs) as cap:
        resid = lm.model(tokens[None].expand(rows, -1), stop_at_layer=lm.cfg.n_layers)
        normed = lm.model.ln_final(resid)[:, -1]
    pre_acts = [tcs[layer].pre_acts(cap[name]) for layer, name in enumerate(inputs)]
    layer, pos, index = graph.features.T
    pre = torch.stack([pre_acts[int(l_)][:, p, i] for l_, p, i in zip(layer, pos, index, strict=True)], 1)
    # Each target's logit minus the mean logit over the vocabulary, from W_U and b_U directly.
    w_u, b_u = lm.model.W_U, lm.model.b_U
    ids = graph.logit_tokens
    demeaned = normed @ (w_u[:, ids] - w_u.mean(1, keepdim=True)) + (b_u[ids] - b_u.mean())
    return torch.cat([pre, demeaned], dim=1).cpu()


def _verify_all_sources(lm: LensModel, tcs: TranscoderSet, graph: AttributionGraph) -> int:
    """Every source (features, errors, tokens) perturbed in one batched frozen pass, row 0 the
    unperturbed run; returns the number of sources checked."""
    tokens = graph.tokens.to(lm.device)
    run = replacement_run(lm, tcs, tokens)
    lay, n_pos, d = graph.layout, len(graph.tokens), lm.cfg.d_model
    n_sources = lay.logit_start
    outputs = [tcs.hook_names(layer)[1] for layer in range(lm.cfg.n_layers)]
    adds = {name: torch.zeros(n_sources + 1, n_pos, d, device=lm.device)
            for name in [*outputs, "hook_embed"]}
    assert torch.equal(run.features, graph.features)  # the clean run's features, all kept
    for s, (layer, pos, _) in enumerate(graph.features.tolist()):
        adds[outputs[layer]][s + 1, pos] = run.decoder_vectors[s]  # = setting it to twice a
    for layer in range(lm.cfg.n_layers):
        for pos in range(n_pos):
            adds[outputs[layer]][1 + lay.error_start + layer * n_pos + pos, pos] = run.errors[layer, pos]
    for pos in range(n_pos):
        adds["hook_embed"][1 + lay.token_start + pos, pos] = run.token_vectors[pos]
    measured = _measure(lm, tcs, graph, tokens, adds)
    targets = torch.cat([torch.arange(lay.n_features), torch.arange(lay.logit_start, lay.n_nodes)])
    expected = measured[:1] + graph.values[targets][:, :n_sources].T  # [source, target]
    n_feat = lay.n_features
    torch.testing.assert_close(measured[1:, :n_feat], expected[:, :n_feat], **ACT_TOL)
    torch.testing.assert_close(measured[1:, n_feat:], expected[:, n_feat:], **LOGIT_TOL)
    return n_sources


@pytest.mark.parametrize(("toy", "skip"), [("tiny", True), ("tiny_gemma3", True), ("tiny_gpt2", False)])
def test_edges_are_exact_direct_effects(toy: str, skip: bool, request: pytest.FixtureRequest) -> None:
    """Llama-shaped and Gemma-3-shaped (pre- and post-norms, a sliding window, q/k norms) with
    skip transcoders; GPT-2-shaped (LayerNorm, learned positions) without a skip."""
    lm: LensModel = request.getfixturevalue(toy)
    tcs = TranscoderSet.random(lm, 4 * lm.cfg.d_model, activation="topk", k=4, skip=skip)
    graph = attribution_graph(lm, tcs, PROMPT, GraphConfig(batch_size=16))
    lay = graph.layout
    assert lay.n_features > 10 and lay.n_pos == 5 and lay.n_logits >= 1
    assert graph.values[lay.error_start : lay.logit_start].abs().sum() == 0  # no row but targets'
    assert graph.values[:, lay.logit_start :].abs().sum() == 0
    assert graph.values[:lay.n_features, : lay.n_features].abs().sum() > 0
    assert _verify_all_sources(lm, tcs, graph) == lay.logit_start


def test_feature_edges_through_interventions(tiny: LensModel) -> None:
    """circuit-tracer's verify_feature_edges: set a feature to twice its activation with every
    layer frozen; targets move by its column."""
    tcs = _transcoders(tiny)
    graph = attribution_graph(tiny, tcs, PROMPT)
    tokens = graph.tokens.to(tiny.device)
    nothing = {"hook_embed": torch.zeros(1, len(tokens), 64, device=tiny.device)}
    base = _measure(tiny, tcs, graph, tokens, nothing)
    chosen = torch.randperm(len(graph.features))[:3].tolist()
    for s in chosen:
        layer, pos, index = graph.features[s].tolist()
        value = 2 * float(graph.activations[s])
        with feature_interventions(tiny, tcs, [(layer, pos, index, value)], tokens, freeze="all"):
            moved = _measure(tiny, tcs, graph, tokens, nothing)
        rows = torch.cat([torch.arange(graph.layout.n_features),
                          torch.arange(graph.layout.logit_start, graph.layout.n_nodes)])
        expected = base[0] + graph.values[rows, s]
        n = graph.layout.n_features
        torch.testing.assert_close(moved[0, :n], expected[:n], atol=5e-4, rtol=1e-5)
        torch.testing.assert_close(moved[0, n:], expected[n:], **LOGIT_TOL)


def test_replacement_forward_is_the_model(tiny: LensModel) -> None:
    """The replacement changes gradients only: inside it the forward values are the model's."""
    tcs = _transcoders(tiny)
    tokens = tiny.to_tokens(PROMPT)
    plain = last_logits(tiny, tokens)
    with replacement_gradients(tiny, tcs) as trace:
        inside = last_logits(tiny, tokens)
        assert trace.embed is not None and trace.embed.requires_grad
        assert not any(p.requires_grad for p in tiny.model.parameters())
    torch.testing.assert_close(inside, plain, atol=1e-5, rtol=1e-5)


def test_capped_graph_keeps_the_most_influential_rows(tiny: LensModel) -> None:
    """max_feature_nodes visits features by estimated influence; a kept feature's row is its
    row in the full graph (direct effects do not depend on which other nodes are kept)."""
    tcs = _transcoders(tiny)
    full = attribution_graph(tiny, tcs, PROMPT)
    capped = attribution_graph(tiny, tcs, PROMPT,
                               GraphConfig(max_feature_nodes=10, batch_size=4, update_interval=1))
    assert len(capped.features) == 10 and capped.n_active == full.n_active
    index = {tuple(f): i for i, f in enumerate(full.features.tolist())}
    kept = torch.tensor([index[tuple(f)] for f in capped.features.tolist()])
    columns = torch.cat([kept, torch.arange(full.layout.error_start, full.layout.n_nodes)])
    rows = torch.cat([kept, torch.arange(full.layout.logit_start, full.layout.n_nodes)])
    capped_rows = torch.cat([torch.arange(10),
                             torch.arange(capped.layout.logit_start, capped.layout.n_nodes)])
    torch.testing.assert_close(capped.values[capped_rows], full.values[rows][:, columns],
                               atol=1e-5, rtol=1e-4)
    influence = full.node_influence()[: full.layout.n_features]
    assert influence[kept].mean() > influence.mean()  # the influential ones, not the first ten


def test_graph_reads_the_model_only(tiny: LensModel) -> None:
    tcs = _transcoders(tiny)
    before = {n: p.detach().clone() for n, p in tiny.model.named_parameters()}
    attribution_graph(tiny, tcs, PROMPT, GraphConfig(batch_size=8))
    assert tiny.hooks.attached_count() == 0
    for name, param in tiny.model.named_parameters():
        assert param.requires_grad and param.grad is None and torch.equal(param, before[name])
    assert all(p.requires_grad and p.grad is None for tc in tcs.layers.values() for p in tc.parameters())


def test_nothing_left_attached_on_error(tiny: LensModel, monkeypatch: pytest.MonkeyPatch) -> None:
    tcs = _transcoders(tiny)

    def broken(self, *args, **kwargs):
        raise RuntimeError("mid-run failure")

    monkeypatch.setattr(attribution_module._Rows, "compute", broken)
    with pytest.raises(RuntimeError, match="mid-run"):
        attribution_graph(tiny, tcs, PROMPT)
    assert tiny.hooks.attached_count() == 0
    assert all(p.requires_grad for p in tiny.model.parameters())


def test_bad_input_is_refused_before_any_hook(tiny: LensModel) -> None:
    tcs = _transcoders(tiny)
    with pytest.raises(UserInputError, match="over the budget of 4"):
        attribution_graph(tiny, tcs, PROMPT, GraphConfig(max_tokens=4))
    partial = TranscoderSet({0: tcs[0]}, model_name=tiny.name)
    with pytest.raises(UserInputError, match="no transcoder for layer 1"):
        attribution_graph(tiny, partial, PROMPT)
    other = TranscoderSet.random(tiny, 32, input_site="resid_mid", output_site="mlp_out")
    assert attribution_graph(tiny, other, "Hi there").layout.n_pos == 3  # another input site works
    with pytest.raises(UserInputError, match="one row"):
        attribution_graph(tiny, tcs, torch.zeros(2, 3, dtype=torch.long))
    assert tiny.hooks.attached_count() == 0


def test_logit_targets_and_save(tiny: LensModel, tmp_path) -> None:
    tcs = _transcoders(tiny)
    graph = attribution_graph(tiny, tcs, PROMPT, targets=[5, 7])
    assert graph.logit_tokens.tolist() == [5, 7]
    probs = torch.softmax(last_logits(tiny, graph.tokens[None])[0], -1).cpu()
    torch.testing.assert_close(graph.logit_probs, probs[[5, 7]])
    salient = attribution_graph(tiny, tcs, PROMPT, GraphConfig(desired_logit_prob=0.0001))
    assert len(salient.logit_tokens) == 1  # the top logit alone reaches a tiny threshold
    loaded = AttributionGraph.load(graph.save(tmp_path / "graph.json"))
    assert loaded == graph and loaded.nodes.kind[-1] == "logit"

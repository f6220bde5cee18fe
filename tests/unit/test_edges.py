"""Edge graph, EAP / EAP-IG scores and exact edge patching, on tiny random models (Llama-, GPT-2-,
Gemma-3- and Pythia-shaped: the last runs attention and MLP in parallel)."""

from __future__ import annotations

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.circuits.edges.eap import EDGE_METHODS, EAPConfig, eap_inputs, edge_attribution
from lmsci_mi.circuits.edges.graph import EdgeGraph, edge_graph
from lmsci_mi.circuits.edges.patching import (
    CircuitValues,
    evaluate_circuit,
    evaluate_circuits,
    first_cut_layers,
)
from lmsci_mi.circuits.metrics import LogitDiff
from lmsci_mi.errors import UnknownNameError
from lmsci_mi.sites import hook_name

CLEAN = ["Mary and John: John gave it to", "The cat sat on", "one two three four five"]
CORRUPTED = ["Mary and John: Mary gave it to", "The dog sat on", "one two three four six"]
METRIC = LogitDiff([5, 7, 9], [6, 8, 10])


def test_edge_counts_match_the_published_graphs() -> None:
    # GPT-2 small's 32,491 is the x-axis of the EAP-IG paper; SmolLM2's from discovery.md.
    assert EdgeGraph("gpt2", 12, 12, 12, grouped=False).n_edges == 32_491
    assert EdgeGraph("smollm2", 30, 9, 3, grouped=False).n_edges == 123_211
    assert EdgeGraph("smollm2", 30, 9, 3, grouped=True).n_edges == 70_651
    # A parallel block's MLP reads the block's input: its own heads do not feed it, one edge
    # fewer per head (Pythia-70m: 6 layers of 8 heads).
    sequential = EdgeGraph("pythia-70m", 6, 8, 8, grouped=False)
    parallel = EdgeGraph("pythia-70m", 6, 8, 8, grouped=False, parallel=True)
    assert parallel.n_edges == sequential.n_edges - 6 * 8
    assert (parallel.real <= sequential.real).all()


def test_edge_names_round_trip_and_unknown_edges_name_close_ones(tiny: LensModel) -> None:
    g = edge_graph(tiny)
    names = g.edge_names(g.real)
    assert len(names) == g.n_edges == len(set(names))
    assert all(g.edge_name(*g.edge_index(n)) == n for n in names)
    with pytest.raises(ValueError, match=r"L0\.H1->L1\.H3\.k"):
        g.edge_index("L0.H1->L1.H9.k")
    with pytest.raises(ValueError, match="does not come before"):
        g.mask(["L1.H0->L0.H0.q"])
    grouped = edge_graph(tiny, grouped=True)
    assert grouped.grouped and "L1.KV1.v" in grouped.receiver_names
    assert grouped.n_receivers < g.n_receivers


def _values(lm: LensModel, graph: EdgeGraph, masks: torch.Tensor, **kw):
    return evaluate_circuits(lm, graph, masks, CLEAN, CORRUPTED, METRIC, **kw)


TOYS = ["tiny", "tiny_gpt2", "tiny_post_norm", "tiny_parallel"]


@pytest.mark.parametrize("model", TOYS)
def test_all_edges_give_clean_and_none_corrupted(
    model: str, request: pytest.FixtureRequest
) -> None:
    lm: LensModel = request.getfixturevalue(model)
    g = edge_graph(lm)
    res = _values(lm, g, torch.stack([g.full_mask(), torch.zeros_like(g.real)]), batch_size=2)
    batch = lm.encode_batch(CLEAN)
    with torch.no_grad():
        final = lm.model(batch.tokens, stop_at_layer=lm.cfg.n_layers)
        plain = METRIC(lm.unembed(final[torch.arange(3), batch.lengths - 1])).cpu()
    torch.testing.assert_close(res.clean_per_prompt, plain, atol=1e-5, rtol=0)
    assert res.clean_value != pytest.approx(res.corrupted_value, abs=1e-3)
    torch.testing.assert_close(res.per_prompt[0], res.clean_per_prompt, atol=1e-5, rtol=0)
    torch.testing.assert_close(res.per_prompt[1], res.corrupted_per_prompt, atol=1e-4, rtol=0)
    assert lm.hooks.attached_count() == 0
    assert not lm.cfg.use_hook_mlp_in and not lm.cfg.ungroup_grouped_query_attention


@pytest.mark.parametrize("model", ["tiny", "tiny_post_norm", "tiny_parallel"])
def test_reusing_the_clean_prefix_and_lower_layers_changes_no_value(
    model: str, request: pytest.FixtureRequest
) -> None:
    """Starting each pass after the shared prompt prefix and at the first cut layer (circuits
    grouped by it, several per pass) gives what whole-model passes give."""
    lm: LensModel = request.getfixturevalue(model)
    g = edge_graph(lm)
    gen = torch.Generator().manual_seed(0)
    random = (torch.rand(3, *g.real.shape, generator=gen) < 0.5) & g.real
    single = g.full_mask().repeat(3, 1, 1)
    single[0, g.head_sender(0, 1), g.layer(1).k.start] = False  # cuts only layer 1
    single[1, g.mlp_sender(1), g.logits] = False  # cuts only the logits
    single[2, 0, g.layer(0).mlp] = False  # cuts layer 0
    masks = torch.cat([random, single, g.full_mask()[None]])
    assert first_cut_layers(g, single).tolist() == [1, g.n_layers, 0]
    reused = _values(lm, g, masks, batch_size=2, circuits_per_pass=3)
    whole = _values(lm, g, masks, batch_size=2, circuits_per_pass=1, reuse=False)
    torch.testing.assert_close(reused.per_prompt, whole.per_prompt, atol=1e-4, rtol=0)
    torch.testing.assert_close(reused.per_prompt[-1], whole.clean_per_prompt, atol=1e-5, rtol=0)


def _hand_patch(
    lm: LensModel, sender: tuple[int, int], receiver: str, layer: int, head: int
) -> float:
    """One edge by hand: the sender head's output difference added to one receiver's input only
    (two unpatched passes, then a clean pass with that single input changed). ``receiver``: "k"
    (head ``head``'s key input at ``layer``), "mlp" (MLP ``layer``'s input) or "logits"."""
    s_layer, s_head = sender
    tokens = {n: lm.encode_batch(p).tokens for n, p in (("clean", CLEAN), ("corrupted", CORRUPTED))}
    outs = {}
    for name, toks in tokens.items():
        with torch.no_grad(), lm.hooks.capture(hook_name("z", s_layer)) as cap:
            lm.model(toks)
        outs[name] = (
            cap[hook_name("z", s_layer)][:, :, s_head] @ lm.model.blocks[s_layer].attn.W_O[s_head]
        )
    delta = outs["corrupted"] - outs["clean"]
    block = lm.model.blocks[layer]
    store: dict[str, torch.Tensor] = {}

    def keep(act, hook):
        store["pre"] = act

    def k_input(act, hook):
        k = act.clone()
        k[:, :, head] = (
            block.ln1(store["pre"] + delta) @ block.attn.W_K[head] + block.attn.b_K[head]
        )
        return k

    def final(act, hook):
        return act + delta

    if receiver == "k":
        fwd = [(hook_name("resid_pre", layer), keep), (hook_name("k", layer), k_input)]
    elif receiver == "mlp":
        fwd = [(hook_name("mlp_in", layer), final)]
    else:
        fwd = [(hook_name("resid_post", lm.cfg.n_layers - 1), final)]
    lm.model.set_use_hook_mlp_in(receiver == "mlp")
    try:
        with torch.no_grad(), lm.hooks.hooks(fwd=fwd):
            logits = lm.unembed(lm.model(tokens["clean"], stop_at_layer=lm.cfg.n_layers))
    finally:
        lm.model.set_use_hook_mlp_in(False)
    lengths = lm.encode_batch(CLEAN).lengths
    return float(METRIC(logits[torch.arange(3), lengths - 1]).mean())


def _each_edge_cut(lm: LensModel, graph: EdgeGraph, edges: tuple[str, ...]) -> CircuitValues:
    """Exact patching of the whole model less one edge, for each of ``edges`` (one pair a batch:
    the hand patch needs no padding)."""
    masks = graph.full_mask().repeat(len(edges), 1, 1)
    for i, edge in enumerate(edges):
        masks[i][graph.edge_index(edge)] = False
    return evaluate_circuits(lm, graph, masks, CLEAN, CORRUPTED, METRIC, batch_size=1)


def test_single_edge_equals_a_hand_written_two_pass_patch(tiny_gpt2: LensModel) -> None:
    lm = tiny_gpt2
    res = _each_edge_cut(lm, edge_graph(lm), ("L0.H1->L1.H2.k", "L0.H3->logits"))
    assert float(res.values[0]) == pytest.approx(_hand_patch(lm, (0, 1), "k", 1, 2), abs=1e-5)
    assert float(res.values[1]) == pytest.approx(_hand_patch(lm, (0, 3), "logits", 0, 0), abs=1e-5)
    assert abs(float(res.values[0]) - res.clean_value) > 1e-4  # the edge does something


def test_a_parallel_blocks_mlp_reads_the_blocks_input(tiny_parallel: LensModel) -> None:
    """GPT-NeoX/GPT-J blocks: MLP l reads the block's input, so the edges into it come from the
    layers below only, and patching one of them is the hand-written patch of hook_mlp_in."""
    lm = tiny_parallel
    g = edge_graph(lm)
    assert g.parallel and "parallel" in g.describe()
    assert g.n_edges == EdgeGraph("sequential", 2, 4, 4, grouped=False).n_edges - 2 * 4
    with pytest.raises(UnknownNameError, match="reads its block's input"):
        g.mask(["L1.H0->MLP1"])
    res = _each_edge_cut(lm, g, ("L0.H1->MLP1", "L0.H1->L1.H2.k"))
    assert float(res.values[0]) == pytest.approx(_hand_patch(lm, (0, 1), "mlp", 1, 0), abs=1e-5)
    assert float(res.values[1]) == pytest.approx(_hand_patch(lm, (0, 1), "k", 1, 2), abs=1e-5)
    assert abs(float(res.values[0]) - res.clean_value) > 1e-4  # the edge does something
    assert lm.hooks.attached_count() == 0


@pytest.mark.parametrize("model", TOYS)
def test_eap_is_the_gradient_of_exact_edge_patching(
    model: str, request: pytest.FixtureRequest
) -> None:
    lm: LensModel = request.getfixturevalue(model)
    scores = edge_attribution(lm, CLEAN, CORRUPTED, METRIC, EAPConfig(method="EAP", batch_size=2))
    g = scores.graph
    edges = [name for name, _ in scores.top(3)] + ["input->L1.H0.q", "L0.H2->MLP1"]
    eps = 1e-2
    masks = [g.full_mask().double()]
    for edge in edges:
        for step in (1, 2):
            soft = g.full_mask().double()
            soft[g.edge_index(edge)] = 1 - step * eps
            masks.append(soft)
    values = _values(lm, g, torch.stack(masks), circuits_per_pass=3).values.double()
    for i, edge in enumerate(edges):
        f1, f2 = values[1 + 2 * i], values[2 + 2 * i]
        derivative = (-3 * values[0] + 4 * f1 - f2) / (2 * eps)  # second-order one-sided
        assert scores.score(edge) == pytest.approx(float(derivative), abs=2e-3, rel=2e-2), edge


def _reference_ig(lm: LensModel, edges: list[str], steps: int) -> list[float]:
    """EAP-IG written out with TransformerLens's split-input flags: per-receiver gradients at
    e' + (k/m)(e − e') for k = 1..m, averaged, dotted with the sender differences."""
    lm.model.set_use_attn_result(True)
    lm.model.set_use_split_qkv_input(True)
    lm.model.set_use_hook_mlp_in(True)
    n = lm.cfg.n_layers
    embeds = [s for s in ("hook_embed", "hook_pos_embed") if s in lm.model.hook_dict]  # rotary: one
    out_sites = embeds + [
        f"blocks.{layer}.{s}" for layer in range(n) for s in ("attn.hook_result", "hook_mlp_out")
    ]
    in_sites = [
        f"blocks.{layer}.{s}"
        for layer in range(n)
        for s in ("hook_q_input", "hook_k_input", "hook_v_input", "hook_mlp_in")
    ]
    in_sites.append(f"blocks.{n - 1}.hook_resid_post")
    tokens = {
        n_: lm.encode_batch(p).tokens for n_, p in (("clean", CLEAN), ("corrupted", CORRUPTED))
    }
    acts = {}
    for name, toks in tokens.items():
        with torch.no_grad(), lm.hooks.capture(out_sites) as cap:
            lm.model(toks)
        acts[name] = {s: cap[s] for s in out_sites}
    grads = {s: torch.zeros(0) for s in in_sites}
    for k in range(1, steps + 1):
        e_clean, e_corr = acts["clean"]["hook_embed"], acts["corrupted"]["hook_embed"]
        leaf = (e_corr + k / steps * (e_clean - e_corr)).requires_grad_(True)
        with (
            torch.enable_grad(),
            lm.hooks.hooks(fwd=[("hook_embed", lambda activation, hook, leaf=leaf: leaf)]),
            lm.hooks.capture(in_sites, detach=False) as cap,
        ):
            resid = lm.model(tokens["clean"], stop_at_layer=n)
            answers = lm.encode_batch(CLEAN).lengths - 1
            loss = METRIC(lm.unembed(resid[torch.arange(len(CLEAN)), answers])).mean()
            got = torch.autograd.grad(loss, [cap[s] for s in in_sites])
        for s, g_ in zip(in_sites, got, strict=True):
            grads[s] = grads[s] + g_ / steps if grads[s].numel() else g_ / steps

    def out(name: str, run: str) -> torch.Tensor:
        a = acts[run]
        if name == "input":
            return sum(a[s] for s in embeds)
        if name.startswith("MLP"):
            return a[f"blocks.{name[3:]}.hook_mlp_out"]
        layer, head = (int(x[1:]) for x in name.split("."))
        return a[f"blocks.{layer}.attn.hook_result"][:, :, head]

    def grad_in(name: str) -> torch.Tensor:
        if name == "logits":
            return grads[f"blocks.{n - 1}.hook_resid_post"]
        if name.startswith("MLP"):
            return grads[f"blocks.{name[3:]}.hook_mlp_in"]
        layer, head, letter = name.split(".")
        return grads[f"blocks.{layer[1:]}.hook_{letter}_input"][:, :, int(head[1:])]

    values = []
    for edge in edges:
        sender, receiver = edge.split("->")
        diff = out(sender, "corrupted") - out(sender, "clean")
        # The loss above is already the mean over prompts, so this sum is the per-prompt mean.
        values.append(float((diff * grad_in(receiver)).sum()))
    return values


@pytest.mark.parametrize("model", ["tiny_gpt2", "tiny_parallel"])
def test_eap_ig_equals_a_riemann_sum(model: str, request: pytest.FixtureRequest) -> None:
    lm: LensModel = request.getfixturevalue(model)
    steps = 3
    scores = edge_attribution(lm, CLEAN, CORRUPTED, METRIC, EAPConfig(steps=steps, batch_size=2))
    edges = [
        "input->L0.H1.v",
        "L0.H2->L1.H3.k",
        "input->MLP0",
        "L0.H0->MLP1",
        "MLP0->L1.H1.q",
        "L1.H3->logits",
        "input->logits",
    ]
    if not scores.graph.parallel:
        edges.append("L0.H0->MLP0")
    reference = _reference_ig(lm, edges, steps)
    ours = [scores.score(e) for e in edges]
    assert ours == pytest.approx(reference, abs=1e-5, rel=1e-4)
    assert scores.steps == steps


def test_scores_do_not_depend_on_batching_or_padding(tiny: LensModel) -> None:
    one = edge_attribution(tiny, CLEAN, CORRUPTED, METRIC, EAPConfig(steps=2, batch_size=1))
    all_ = edge_attribution(tiny, CLEAN, CORRUPTED, METRIC, EAPConfig(steps=2, batch_size=3))
    torch.testing.assert_close(one.values, all_.values, atol=1e-5, rtol=1e-4)
    assert one.clean_value == pytest.approx(all_.clean_value, abs=1e-5)
    assert tiny.hooks.attached_count() == 0


def test_grouped_and_ungrouped_graphs_agree_for_the_same_kept_heads(tiny: LensModel) -> None:
    kept_heads = {(0, 1), (1, 2), (1, 3)}
    values = []
    for grouped in (False, True):
        g = edge_graph(tiny, grouped=grouped)
        senders = {"input"} | {f"L{l_}.H{h}" for l_, h in kept_heads} | {"MLP0", "MLP1"}
        receivers = {"logits", "MLP0", "MLP1"}
        for layer, head in kept_heads:
            receivers.add(f"L{layer}.H{head}.q")
            kv = f"KV{g.kv_group(head)}" if grouped else f"H{head}"
            receivers |= {f"L{layer}.{kv}.k", f"L{layer}.{kv}.v"}
        edges = [
            e
            for e in g.edge_names(g.real)
            if e.split("->")[0] in senders and e.split("->")[1] in receivers
        ]
        values.append(evaluate_circuit(tiny, g, g.mask(edges), CLEAN, CORRUPTED, METRIC))
    assert float(values[0].values[0]) == pytest.approx(float(values[1].values[0]), abs=1e-5)
    assert values[0].values[0] != pytest.approx(values[0].clean_value, abs=1e-3)


def test_edge_methods_dispatch_through_the_registry(
    tiny: LensModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert EDGE_METHODS.names() == ("EAP", "EAP-IG")
    assert all(method.config_type is EAPConfig for method in EDGE_METHODS)
    with pytest.raises(UnknownNameError, match=r"unknown edge-scoring method 'EAP-GI' \(did you mean 'EAP-IG'"):
        EAPConfig(method="EAP-GI")
    with pytest.raises(ValueError, match="already registered"):
        EDGE_METHODS.register("EAP", EAPConfig)(eap_inputs)
    # A new method is one registration (into a copy of the registry, restored after the test):
    # the clean input twice averages EAP's gradient with itself, so it gives EAP's scores.
    monkeypatch.setattr(EDGE_METHODS, "_methods", dict(EDGE_METHODS._methods))
    EDGE_METHODS.register("EAP-twice", EAPConfig, "EAP, its input twice")(
        lambda clean, corrupted, config: torch.cat([clean, clean])
    )
    twice = edge_attribution(tiny, CLEAN, CORRUPTED, METRIC, EAPConfig(method="EAP-twice"))
    once = edge_attribution(tiny, CLEAN, CORRUPTED, METRIC, EAPConfig(method="EAP"))
    torch.testing.assert_close(twice.values, once.values, atol=1e-6, rtol=1e-5)
    assert (twice.method, twice.steps, once.steps) == ("EAP-twice", 2, 1)
    assert twice.meta.params["method_detail"] == "EAP, its input twice"
    assert once.values.abs().max() > 1e-3


def test_bad_input_raises_before_running(tiny: LensModel) -> None:
    g = edge_graph(tiny)
    with pytest.raises(ValueError, match="same token length"):
        edge_attribution(tiny, ["The cat sat on the mat"], ["The dog"], METRIC)
    with pytest.raises(ValueError, match="empty"):
        edge_attribution(tiny, [], [], METRIC)
    with pytest.raises(ValueError, match="not an edge"):
        evaluate_circuit(tiny, g, g.mask(["L1.H0->L1.H1.q"]), CLEAN, CORRUPTED, METRIC)
    with pytest.raises(ValueError, match="boolean"):
        evaluate_circuit(tiny, g, g.real.long(), CLEAN, CORRUPTED, METRIC)
    stray = g.full_mask()
    stray[-1, 0] = True  # MLP1 -> L0.H0.q runs backwards
    with pytest.raises(ValueError, match="not edges"):
        evaluate_circuit(tiny, g, stray, CLEAN, CORRUPTED, METRIC)
    assert tiny.hooks.attached_count() == 0

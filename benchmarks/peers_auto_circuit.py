"""Peer check: lmsci-mi's EAP and exact edge patching against auto-circuit's, same TransformerLens model.

Run in the peers virtualenv (auto-circuit is never a dependency of lmsci-mi), with this checkout first
on the path:

    PYTHONPATH=. .venv-peers/bin/python benchmarks/peers_auto_circuit.py
    PYTHONPATH=. .venv-peers/bin/python benchmarks/peers_auto_circuit.py --quick   # a check (4 x 8 tokens)

auto-circuit 1.0.1 needs two fixes to import beside our pins (TransformerLens 3.9): it imports
``HookedTransformerKeyValueCache`` from ``transformer_lens`` and ``transformer_lens.past_key_value_caching``,
which TL 3.x moved to ``transformer_lens.cache.key_value_cache.TransformerLensKeyValueCache`` (aliased
here before the import; only its KV-cache prefix feature uses it, which we leave off), and it imports
``attr`` without declaring ``attrs`` (``pip install attrs`` in the peers venv; or ``--extra-path``).

  (a) scores: on ``toy-gpt2-2l`` (no GQA, so the graphs match edge for edge) our EAP equals
      auto-circuit's ``mask_gradient_prune_scores(mask_val=0)``, which is the gradient of
      ``-mean(logit diff)`` w.r.t. each edge mask, i.e. minus our score; writes
      tests/data/auto_circuit_eap.json, which tests/unit/test_faithfulness.py checks ours against;
  (b) timing on a GPT-2-small-sized random model (12 layers, d_model 768, 12 heads, 32,491 edges):
      EAP over all edges, and 10 circuits evaluated by exact edge patching (auto-circuit's
      ``run_circuits``, TREE_PATCH, vs our ``evaluate_circuits``); writes docs/data/edges_peers.json.
"""

from __future__ import annotations

import argparse
import sys
import time
import types
from pathlib import Path

import harness
from doc_tables.schemas.circuits import EdgesPeersData, PeerScores, PeerTiming

FIXTURE = harness.ROOT / "tests" / "data" / "auto_circuit_eap.json"


def _import_auto_circuit(extra: str | None) -> None:
    if extra:
        sys.path.insert(0, extra)
    import transformer_lens
    from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

    shim = types.ModuleType("transformer_lens.past_key_value_caching")
    shim.HookedTransformerKeyValueCache = TransformerLensKeyValueCache  # type: ignore[attr-defined]
    sys.modules.setdefault("transformer_lens.past_key_value_caching", shim)
    transformer_lens.HookedTransformerKeyValueCache = TransformerLensKeyValueCache  # type: ignore[attr-defined]


def _name_map(name: str) -> str:
    """auto-circuit's node names (``A1.2``, ``A1.2.Q``, ``MLP 0``, ``Resid Start/End``) as ours."""
    if name == "Resid Start":
        return "input"
    if name == "Resid End":
        return "logits"
    if name.startswith("MLP "):
        return f"MLP{name[4:]}"
    parts = name[1:].split(".")
    head = f"L{parts[0]}.H{parts[1]}"
    return head if len(parts) == 2 else f"{head}.{parts[2].lower()}"


def _prompts(n: int, width: int, vocab: int, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(100, vocab, (n, width), generator=g)
    corrupt = clean.clone()
    corrupt[:, width // 2] = torch.randint(100, vocab, (n,), generator=g)  # one token swapped
    answers = torch.randint(100, vocab, (n,), generator=g)
    wrongs = torch.randint(100, vocab, (n,), generator=g)
    return clean, corrupt, answers, wrongs


def _auto_circuit(model, clean, corrupt, answers, wrongs):
    import torch
    from auto_circuit.data import PromptDataLoader, PromptDataset
    from auto_circuit.utils.graph_utils import patchable_model

    model.cfg.use_attn_result = True
    model.cfg.use_split_qkv_input = True
    model.cfg.use_hook_mlp_in = True
    dataset = PromptDataset(
        clean, corrupt, [a.view(1) for a in answers], [w.view(1) for w in wrongs]
    )
    loader = PromptDataLoader(dataset, seq_len=None, diverge_idx=0, batch_size=len(clean))
    patchable = patchable_model(
        model,
        factorized=True,
        slice_output="last_seq",
        separate_qkv=True,
        device=torch.device("cpu"),
    )
    return patchable, loader


def _ac_eap(patchable, loader) -> tuple[dict[str, float], float, object]:
    from auto_circuit.prune_algos.mask_gradient import mask_gradient_prune_scores

    start = time.perf_counter()
    scores = mask_gradient_prune_scores(
        patchable, loader, None, grad_function="logit", answer_function="avg_diff", mask_val=0.0
    )
    seconds = time.perf_counter() - start
    named = {
        f"{_name_map(e.src.name)}->{_name_map(e.dest.name)}": float(e.prune_score(scores))
        for e in patchable.edges
    }
    return named, seconds, scores


def _ours(lm, clean, corrupt, answers, wrongs, method: str = "EAP"):
    from lmsci_mi.circuits.edges.eap import EAPConfig, edge_attribution
    from lmsci_mi.circuits.metrics import LogitDiff
    from lmsci_mi.data.pairs import as_pairs

    start = time.perf_counter()
    scores = edge_attribution(
        lm,
        as_pairs(clean, corrupt),
        LogitDiff(answers, wrongs),
        EAPConfig(method=method, batch_size=len(clean)),
    )  # type: ignore[arg-type]
    return scores, time.perf_counter() - start


def score_file(out: Path) -> PeerScores:
    """(a): our EAP vs auto-circuit's on toy-gpt2-2l; writes ``out`` (tests/data/auto_circuit_eap.json,
    which tests/unit/test_faithfulness.py checks ours against)."""
    from lmsci_mi import load_model

    ours_lm = load_model("toy-gpt2-2l", device="cpu")
    peer_lm = load_model("toy-gpt2-2l", device="cpu")  # auto-circuit rewires its model in place
    clean, corrupt, answers, wrongs = _prompts(8, 10, 5000, seed=0)
    patchable, loader = _auto_circuit(peer_lm.model, clean, corrupt, answers, wrongs)
    peer, _, _ = _ac_eap(patchable, loader)
    scores, _ = _ours(ours_lm, clean, corrupt, answers, wrongs)
    ours = {name: scores.score(name) for name in peer}
    worst = max(abs(ours[n] + peer[n]) for n in peer)  # auto-circuit's score is minus ours
    scale = max(abs(v) for v in peer.values())
    record = {
        "model": "toy-gpt2-2l",
        "auto_circuit": "1.0.1",
        "call": "mask_gradient_prune_scores(grad_function='logit', answer_function='avg_diff', mask_val=0.0)",
        "convention": "auto-circuit score = d(-mean logit diff)/d(edge mask) = -(lmsci-mi EAP score)",
        "clean": clean.tolist(),
        "corrupted": corrupt.tolist(),
        "answers": answers.tolist(),
        "wrongs": wrongs.tolist(),
        "scores": peer,
        "max_abs_diff_vs_ours": worst,
        "max_abs_score": scale,
    }
    harness.write_json(out, record)
    print(f"(a) {len(peer)} edges: max |ours - (-auto-circuit)| = {worst:.3g} (largest |score| "
          f"{scale:.3g}); wrote {out}")
    return PeerScores(edges=len(peer), max_abs_diff=worst, max_abs_score=scale)


GPT2_SMALL = dict(n_layers=12, d_model=768, n_heads=12, d_head=64, d_mlp=3072, n_ctx=128,
                  d_vocab=50257, act_fn="gelu_new", normalization_type="LN", seed=0)
BUDGETS = (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100)
"""MIB's edge budgets (% of edges): the 10 circuits both sides evaluate."""


def gpt2_small_pair():
    """A GPT-2-small-sized random model for us, and the same weights in a second copy that
    auto-circuit may rewire in place."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    from lmsci_mi.model import LensModel

    config = HookedTransformerConfig(**GPT2_SMALL)  # type: ignore[arg-type]
    lm = LensModel(HookedTransformer(config).eval(), name="gpt2-small-random", source="random",
                   tokenizer=None, sink_token_id=None)
    peer = HookedTransformer(config).eval()
    peer.load_state_dict(lm.model.state_dict())
    return lm, peer


def seconds_of(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def our_circuits(lm, scores, counts: list[int], clean, corrupt, answers, wrongs) -> None:
    """The same circuits as auto-circuit's ``run_circuits``: top-n by |score|, not pruned."""
    import torch

    from lmsci_mi.circuits.edges.patching import evaluate_circuits
    from lmsci_mi.circuits.edges.pruning import prune_topn
    from lmsci_mi.circuits.metrics import LogitDiff

    graph = scores.graph
    masks = torch.stack([prune_topn(graph, scores.values, n, prune=False) for n in counts])
    evaluate_circuits(lm, graph, masks, clean, corrupt, LogitDiff(answers, wrongs),
                      batch_size=len(clean), circuits_per_pass=5)


def timing(n_prompts: int, width: int) -> PeerTiming:
    """(b): EAP and 10-circuit exact patching on a GPT-2-small-sized random model."""
    from auto_circuit.prune import run_circuits
    from auto_circuit.types import PatchType

    lm, peer_model = gpt2_small_pair()
    clean, corrupt, answers, wrongs = _prompts(n_prompts, width, GPT2_SMALL["d_vocab"], seed=1)
    patchable, loader = _auto_circuit(peer_model, clean, corrupt, answers, wrongs)
    _, t_peer_eap, peer_scores = _ac_eap(patchable, loader)
    scores, t_ours_eap = _ours(lm, clean, corrupt, answers, wrongs)
    counts = [max(1, int(f / 100 * scores.graph.n_edges)) for f in BUDGETS]
    t_peer_patch = seconds_of(lambda: run_circuits(patchable, loader, counts, peer_scores,
                                                   patch_type=PatchType.TREE_PATCH))
    t_ours_patch = seconds_of(lambda: our_circuits(lm, scores, counts, clean, corrupt, answers, wrongs))
    row = PeerTiming(
        model="GPT-2-small-sized, random weights (12 x 12 heads, d_model 768)",
        edges=scores.graph.n_edges, prompts=n_prompts, tokens=width,
        eap_s={"lmsci_mi": t_ours_eap, "auto_circuit": t_peer_eap, "ratio": t_peer_eap / t_ours_eap},
        patch_10_circuits_s={"lmsci_mi": t_ours_patch, "auto_circuit": t_peer_patch,
                             "ratio": t_peer_patch / t_ours_patch},
    )
    print(
        f"(b) {row['edges']} edges, {n_prompts} prompts x {width} tokens: EAP ours "
        f"{t_ours_eap:.2f} s vs auto-circuit {t_peer_eap:.2f} s ({t_peer_eap / t_ours_eap:.2f}x); "
        f"10 circuits exact: ours {t_ours_patch:.2f} s vs auto-circuit {t_peer_patch:.2f} s "
        f"({t_peer_patch / t_ours_patch:.2f}x)"
    )
    return row


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--extra-path", default=None, help="a folder holding attrs, if the venv lacks it")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--skip-timing", action="store_true")


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags, out=harness.DATA / "edges_peers.json")
    args = run.args
    _import_auto_circuit(args.extra_path)
    import torch

    torch.set_grad_enabled(True)
    record = EdgesPeersData(scores=score_file(FIXTURE if run.out.parent == harness.DATA else
                                              run.out.with_name("auto_circuit_eap.json")))
    if not args.skip_timing:
        record["timing"] = timing(4 if run.quick else args.prompts, 8 if run.quick else args.tokens)
    run.write(record)


if __name__ == "__main__":
    main()

"""Peer check: lmsci-mi's EAP and exact edge patching against auto-circuit's, same TransformerLens model.

Run in the peers virtualenv (auto-circuit is never a dependency of lmsci-mi), with this checkout first
on the path:

    PYTHONPATH=. .venv-peers/bin/python benchmarks/peers_auto_circuit.py --prompts 4 --quiet
    PYTHONPATH=. .venv-peers/bin/python benchmarks/peers_auto_circuit.py --quick   # a check (4 x 8 tokens)

auto-circuit 1.0.1 needs two fixes to import beside our pins (TransformerLens 3.9): it imports
``HookedTransformerKeyValueCache`` from ``transformer_lens`` and ``transformer_lens.past_key_value_caching``,
which TL 3.x moved to ``transformer_lens.cache.key_value_cache.TransformerLensKeyValueCache`` (aliased
here before the import; its prefix option, which the timing uses, caches the prefix in it), and it
imports ``attr`` without declaring ``attrs`` (``pip install attrs`` in the peers venv; or ``--extra-path``).

  (a) scores: on ``toy-gpt2-2l`` (no GQA, so the graphs match edge for edge) our EAP equals
      auto-circuit's ``mask_gradient_prune_scores(mask_val=0)``, which is the gradient of
      ``-mean(logit diff)`` w.r.t. each edge mask, i.e. minus our score; writes
      tests/data/auto_circuit_eap.json, which tests/unit/test_faithfulness.py checks ours against;
  (b) timing on a GPT-2-small-sized random model (12 layers, d_model 768, 12 heads, 32,491 edges):
      EAP over all edges, and 10 circuits evaluated by exact edge patching (auto-circuit's
      ``run_circuits``, TREE_PATCH, vs our ``evaluate_circuits``), under benchmarks/timing.py's
      protocol (warm-ups, ``--rounds`` alternated rounds, medians and a bootstrap interval), on
      two kinds of pair: one token swapped half-way (``shared_prefix``: auto-circuit's prefix
      option on, ``diverge_idx`` = the shared length) and at position 0 (``first_token``);
      ``--quiet`` marks a run made with nothing else running; writes docs/data/edges_peers.json.
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import harness
import timing
from doc_tables.schemas.circuits import AutoCircuitPair, EdgesPeersData, PeerScores, PeerTiming
from doc_tables.schemas.timing import PeerComparison

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


def _prompts(n: int, width: int, vocab: int, seed: int, swap_at: int | None = None):
    """Random clean prompts and corrupted copies with one token swapped at ``swap_at`` (default
    half-way: the pair shares its first half; 0: the prompts differ from the first token)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(100, vocab, (n, width), generator=g)
    corrupt = clean.clone()
    corrupt[:, width // 2 if swap_at is None else swap_at] = torch.randint(100, vocab, (n,), generator=g)
    answers = torch.randint(100, vocab, (n,), generator=g)
    wrongs = torch.randint(100, vocab, (n,), generator=g)
    return clean, corrupt, answers, wrongs


def _prefix_cache(model, clean, diverge_idx: int):
    """auto-circuit's prefix option, as its ``load_datasets_from_json(tail_divergence=True)``
    builds it: the shared prefix run once into a frozen KV cache; the prompts keep their tails."""
    import torch
    from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

    if model.tokenizer is None:
        # A random model has no tokenizer, but TransformerLens builds a cached run's attention mask
        # from one: a stand-in whose pad id no token has attends to every position.
        model.tokenizer = types.SimpleNamespace(padding_side="right", pad_token_id=-1, bos_token_id=-2)
    cache = TransformerLensKeyValueCache.init_cache(model.cfg, torch.device("cpu"), len(clean))
    with torch.inference_mode():
        model(clean[:, :diverge_idx], past_kv_cache=cache)
    cache.freeze()
    return cache


def _auto_circuit(model, clean, corrupt, answers, wrongs, diverge_idx: int = 0):
    """auto-circuit's patchable model and data loader; ``diverge_idx > 0`` turns its prefix
    option on (the tokens before it come from a frozen KV cache, computed here, once)."""
    import torch
    from auto_circuit.data import PromptDataLoader, PromptDataset
    from auto_circuit.utils.graph_utils import patchable_model

    model.cfg.use_attn_result = True
    model.cfg.use_split_qkv_input = True
    model.cfg.use_hook_mlp_in = True
    cache = _prefix_cache(model, clean, diverge_idx) if diverge_idx > 0 else None
    dataset = PromptDataset(
        clean[:, diverge_idx:], corrupt[:, diverge_idx:], [a.view(1) for a in answers], [w.view(1) for w in wrongs]
    )
    loader = PromptDataLoader(dataset, seq_len=None, diverge_idx=diverge_idx, kv_cache=cache,
                              batch_size=len(clean))
    patchable = patchable_model(
        model,
        factorized=True,
        slice_output="last_seq",
        separate_qkv=True,
        kv_caches=(cache,),
        device=torch.device("cpu"),
    )
    return patchable, loader


def _ac_scores(patchable, loader):
    from auto_circuit.prune_algos.mask_gradient import mask_gradient_prune_scores

    return mask_gradient_prune_scores(
        patchable, loader, None, grad_function="logit", answer_function="avg_diff", mask_val=0.0
    )


def _ac_eap(patchable, loader) -> tuple[dict[str, float], object]:
    """auto-circuit's EAP scores by our edge names, and its own scores object."""
    scores = _ac_scores(patchable, loader)
    named = {
        f"{_name_map(e.src.name)}->{_name_map(e.dest.name)}": float(e.prune_score(scores))
        for e in patchable.edges
    }
    return named, scores


def _ours(lm, clean, corrupt, answers, wrongs, method: str = "EAP"):
    from lmsci_mi.circuits.edges.eap import EAPConfig, edge_attribution
    from lmsci_mi.circuits.metrics import LogitDiff
    from lmsci_mi.data.pairs import as_pairs

    return edge_attribution(
        lm,
        as_pairs(clean, corrupt),
        LogitDiff(answers, wrongs),
        EAPConfig(method=method, batch_size=len(clean)),
    )  # type: ignore[arg-type]


def score_file(out: Path) -> PeerScores:
    """(a): our EAP vs auto-circuit's on toy-gpt2-2l; writes ``out`` (tests/data/auto_circuit_eap.json,
    which tests/unit/test_faithfulness.py checks ours against)."""
    from lmsci_mi import load_model

    ours_lm = load_model("toy-gpt2-2l", device="cpu")
    peer_lm = load_model("toy-gpt2-2l", device="cpu")  # auto-circuit rewires its model in place
    clean, corrupt, answers, wrongs = _prompts(8, 10, 5000, seed=0)
    patchable, loader = _auto_circuit(peer_lm.model, clean, corrupt, answers, wrongs)
    peer, _ = _ac_eap(patchable, loader)
    scores = _ours(ours_lm, clean, corrupt, answers, wrongs)
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


def gpt2_small(lm=None):
    """A GPT-2-small-sized random model wrapped for us; with ``lm``, a second copy of its weights
    that auto-circuit may rewire in place (one per pair kind: a patchable model stays patchable)."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    from lmsci_mi.model import LensModel

    config = HookedTransformerConfig(**GPT2_SMALL)  # type: ignore[arg-type]
    model = HookedTransformer(config).eval()
    if lm is not None:
        model.load_state_dict(lm.model.state_dict())
        return model
    return LensModel(model, name="gpt2-small-random", source="random", tokenizer=None, sink_token_id=None)


def our_circuits(lm, scores, counts: list[int], clean, corrupt, answers, wrongs) -> None:
    """The same circuits as auto-circuit's ``run_circuits``: top-n by |score|, not pruned."""
    import torch

    from lmsci_mi.circuits.edges.patching import evaluate_circuits
    from lmsci_mi.circuits.edges.pruning import prune_topn
    from lmsci_mi.circuits.metrics import LogitDiff
    from lmsci_mi.data.pairs import as_pairs

    graph = scores.graph
    masks = torch.stack([prune_topn(graph, scores.values, n, prune=False) for n in counts])
    evaluate_circuits(lm, graph, masks, as_pairs(clean, corrupt), LogitDiff(answers, wrongs),
                      batch_size=len(clean), circuits_per_pass=5)


PAIRS = {"shared_prefix": None, "first_token": 0}
"""The two prompt-pair kinds, by where the corrupted token sits (None: half-way)."""


def pair_timing(lm, kind: str, n_prompts: int, width: int, rounds: int, quiet: bool) -> AutoCircuitPair:
    """EAP and 10-circuit exact patching on one kind of pair, both sides under the protocol;
    auto-circuit with its prefix option on whenever the pair shares a prefix."""
    from auto_circuit.prune import run_circuits
    from auto_circuit.types import PatchType

    clean, corrupt, answers, wrongs = _prompts(n_prompts, width, GPT2_SMALL["d_vocab"], seed=1,
                                               swap_at=PAIRS[kind])
    diverge = int((clean != corrupt).int().argmax(dim=1).min())
    patchable, loader = _auto_circuit(gpt2_small(lm), clean, corrupt, answers, wrongs, diverge_idx=diverge)
    note = (f"auto-circuit's prefix cache ({diverge} tokens) is built once before timing, as its "
            "loader does at load time; lmsci-mi computes its prefix inside every timed call")
    eap = timing.compare({"lmsci_mi": lambda: _ours(lm, clean, corrupt, answers, wrongs),
                          "auto_circuit": lambda: _ac_scores(patchable, loader)},
                         rounds=rounds, quiet=quiet, note=note if diverge else "")
    scores, peer_scores = eap.outputs["lmsci_mi"], eap.outputs["auto_circuit"]
    agree = max(abs(scores.score(f"{_name_map(e.src.name)}->{_name_map(e.dest.name)}") + float(e.prune_score(peer_scores)))
                for e in patchable.edges)
    counts = [max(1, int(f / 100 * scores.graph.n_edges)) for f in BUDGETS]
    def ours(counts: list[int]):
        return lambda: our_circuits(lm, scores, counts, clean, corrupt, answers, wrongs)

    def peer(counts: list[int]):
        return lambda: run_circuits(patchable, loader, counts, peer_scores, patch_type=PatchType.TREE_PATCH)

    # Warmed up on the smallest circuit alone: the same code path at a tenth of the cost.
    patch = timing.compare({"lmsci_mi": ours(counts), "auto_circuit": peer(counts)},
                           warm={"lmsci_mi": ours(counts[:1]), "auto_circuit": peer(counts[:1])},
                           rounds=rounds, quiet=quiet,
                           note="warm-up: the smallest circuit alone" + (f"; {note}" if diverge else ""))
    row = AutoCircuitPair(
        pair=kind, shared_prefix=diverge, agree_eap=agree,
        peer_options=f"diverge_idx={diverge}" + (" and its frozen prefix KV cache" if diverge else ", no prefix to cache"),
        eap=PeerComparison(timing=eap.record, ratio=timing.ratio(eap.record, "auto_circuit", "lmsci_mi")),
        patch_10_circuits=PeerComparison(timing=patch.record,
                                         ratio=timing.ratio(patch.record, "auto_circuit", "lmsci_mi")))
    for what in ("eap", "patch_10_circuits"):
        sides, r = row[what]["timing"]["sides"], row[what]["ratio"]  # type: ignore[literal-required]
        print(f"(b) {kind} (shares {diverge} tokens), {what}: ours {sides['lmsci_mi']['median']:.2f} s, "
              f"auto-circuit {sides['auto_circuit']['median']:.2f} s (medians of {rounds}): "
              f"{r['estimate']:.2f}x [{r['low']:.2f}, {r['high']:.2f}]")
    return row


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--extra-path", default=None, help="a folder holding attrs, if the venv lacks it")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--pairs", default="shared_prefix,first_token",
                        help=f"pair kinds to time (of {', '.join(PAIRS)})")
    parser.add_argument("--rounds", type=int, default=timing.MIN_ROUNDS, help="timed rounds per side")
    parser.add_argument("--quiet", action="store_true", help="say that nothing else ran on the machine")
    parser.add_argument("--skip-timing", action="store_true")


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags, out=harness.DATA / "edges_peers.json")
    args = run.args
    _import_auto_circuit(args.extra_path)
    from importlib.metadata import version

    import torch

    torch.set_grad_enabled(True)
    record = EdgesPeersData(scores=score_file(FIXTURE if run.out.parent == harness.DATA else
                                              run.out.with_name("auto_circuit_eap.json")))
    if not args.skip_timing:
        from lmsci_mi.circuits.edges import edge_graph

        lm = gpt2_small()
        n, width = (4, 8) if run.quick else (args.prompts, args.tokens)
        record["timing"] = PeerTiming(
            model="GPT-2-small-sized, random weights (12 x 12 heads, d_model 768)",
            edges=edge_graph(lm).n_edges, prompts=n, tokens=width, auto_circuit_version=version("auto-circuit"),
            pairs=[pair_timing(lm, kind, n, width, args.rounds, args.quiet) for kind in args.pairs.split(",")])
    run.write(record)


if __name__ == "__main__":
    main()

"""Peer check: our attribution graphs (lmsci_mi.circuits.graphs) against circuit-tracer 0.5's, same
model, same transcoder files, same tokens; adjacency compared elementwise, time and peak memory side
by side.

circuit-tracer pins transformers <= 4.57.3, so it runs in its own venv (scripts/install_circuit_tracer.sh,
default /work/main/.venv-ct; --venv or CT_VENV elsewhere). The model is exported once (a
HookedTransformerConfig's fields and its parameters in safetensors) with the transcoders in
circuit-tracer's file format (lmsci_mi.transcoders.files.save_circuit_tracer); each side then runs in
its own worker process (benchmarks/circuit_tracer_side.py), which loads them, builds its graph and
writes the adjacency and node keys. Nodes are aligned by key: (layer, position, feature) for
features, (layer, position) for errors, the position for tokens, the token id for logits; then every
entry must agree within circuit-tracer's own test tolerances (atol 1e-5, rtol 1e-3, float32).

    PYTHONPATH=. .venv/bin/python benchmarks/graphs_vs_circuit_tracer.py --threads 1   # (a): both toys
    PYTHONPATH=. .venv/bin/python benchmarks/graphs_vs_circuit_tracer.py --quick       # a check
    OMP_NUM_THREADS=1 flock /work/model.lock env PYTHONPATH=. .venv/bin/python \\
        benchmarks/graphs_vs_circuit_tracer.py --model smollm2-135m --transcoders PATH --threads 1
    ... --agreement-only          # the comparison alone, cached; a later --quiet run only times

  (a) ``ct-llama``: circuit-tracer's own tests/test_attributions_llama.py model (2 layers, d_model 8,
      2 heads of 4, gated SiLU d_mlp 16, vocabulary 16, RMSPre, rotary), every parameter uniform(−1, 1)
      (seeded), transcoders of width 32, TopK 4, with skip, uniform(−1, 1), its tokens
      [0, 3, 4, 3, 2, 5, 3, 8]; and ``toy-2l`` (our Llama-shaped toy: RMS norms with their weights,
      grouped-query attention 4q/2kv, SmolLM2's tokenizer) with random transcoders of width 256;
  (b) ``smollm2-135m`` with transcoders given by --transcoders (a circuit-tracer-format folder or our
      compact form); --quick runs this path on toy-2l instead.

Time and memory follow benchmarks/timing.py's protocol (a warm-up per side, then --rounds rounds
alternating the order); both sides run the same attribution options, circuit-tracer's defaults
(batch size 512, every active feature, logits to p 0.95 / at most 10) unless flags change them; each
worker reports the attribution's seconds and its process's peak resident memory. The timed call
includes a JSON line to and from the worker (well under a millisecond).

Pitfalls met (documented where they are handled): the registry's circuit-tracer 0.5.0 is the
Caerii fork's build of the tag's code and cannot load TopK files (the worker builds its transcoders);
SingleLayerTranscoder defaults to bfloat16 (the worker asks for float32); circuit-tracer prepends a BOS
unless the first token is a special token (both prompts start with id 0, a special token of
SmolLM2's tokenizer, and the worker checks the tokens came back unchanged); ``from_config`` loads
the tokenizer by name from the hub, so the export names none and the worker passes the tokenizer
object; our cached tokenizer folders name the class ``TokenizersBackend`` (transformers 5), which
transformers 4.57 lacks, and TransformerLens's ``set_tokenizer`` reloads the tokenizer by its path, so
the peer reads a copy that names ``PreTrainedTokenizerFast``; its MLP and unembedding wrappers rename
the weights (``mlp.old_mlp.*``); HookedTransformerConfig fields of TransformerLens 3.9 that its 3.2.1
lacks are left out there (listed in the data file; the clean logits agree to 2e-6).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness
import timing
from doc_tables.schemas.graphs_peer import (
    GraphsPeerData,
    GraphsPeerModel,
    PeerAgreement,
    SideMemory,
)

ATOL, RTOL = 1e-5, 1e-3
"""circuit-tracer's own test tolerances for logit edges (tests/test_attributions_gemma.py)."""
CT_LLAMA_TOKENS = [0, 3, 4, 3, 2, 5, 3, 8]
"""The input of circuit-tracer's tests/test_attributions_llama.py."""
PROMPT = "When Mary and John went to the store, John gave a drink to"
DEFAULT_VENV = Path(os.environ.get("CT_VENV", "/work/main/.venv-ct"))
SIDE = Path(__file__).with_name("circuit_tracer_side.py")


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", action="append", choices=("ct-llama", "toy-2l", "smollm2-135m"),
                        help="model(s) to compare (default: ct-llama and toy-2l)")
    parser.add_argument("--transcoders", type=Path, help="smollm2-135m's transcoders: a circuit-tracer-"
                        "format folder (config.yaml) or our compact form")
    parser.add_argument("--prompt", default=PROMPT, help="the prompt of the toy-2l and SmolLM2 graphs")
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="circuit-tracer's venv")
    parser.add_argument("--peer-source", type=Path, help="a circuit-tracer source folder put first on the "
                        "peer's path (e.g. a checkout of decoderesearch/circuit-tracer at v0.5.0, 4bb8c0e)")
    parser.add_argument("--rounds", type=int, default=timing.MIN_ROUNDS, help="timed rounds")
    parser.add_argument("--batch-size", type=int, default=512, help="targets per backward pass (both sides)")
    parser.add_argument("--max-feature-nodes", type=int, default=None, help="feature nodes (default all)")
    parser.add_argument("--quiet", action="store_true", help="nothing else ran on the machine")
    parser.add_argument("--agreement-only", action="store_true", help="compare the graphs and cache the "
                        "result, no timing (on a loaded machine; a later --quiet run times from the cache)")


def export(lm: Any, transcoders: Any, folder: Path) -> tuple[Path, Path]:
    """The model (config fields and parameters) and the transcoders in circuit-tracer's format."""
    from safetensors.torch import save_file

    from lmsci_mi.transcoders.files import save_circuit_tracer

    model_dir = folder / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    cfg = {k: _plain(v) for k, v in lm.cfg.to_dict().items() if k not in ("device", "n_params")}
    cfg["dtype"] = str(lm.cfg.dtype).removeprefix("torch.")
    tokenizer = getattr(lm.tokenizer, "name_or_path", None) if lm.tokenizer is not None else None
    (model_dir / "config.json").write_text(json.dumps(
        {"name": lm.name, "tokenizer": tokenizer or None, "cfg": cfg}, indent=1), encoding="utf-8")
    params = {name: p.detach().float().cpu().contiguous() for name, p in lm.model.named_parameters()}
    save_file(params, str(model_dir / "model.safetensors"))
    return model_dir, save_circuit_tracer(transcoders, folder / "transcoders")


def _plain(value: Any) -> Any:
    """A config value as JSON: numpy scalars as numbers, torch dtypes as names."""
    if hasattr(value, "item") and not isinstance(value, (list, dict)):
        return value.item()
    if isinstance(value, (str, int, float, bool, type(None), list, dict)):
        return value
    return str(value)


class Worker:
    """One side's worker process (benchmarks/circuit_tracer_side.py) and its JSON-line protocol."""

    def __init__(self, side: str, python: str, env: dict[str, str], files: tuple[Path, Path],
                 tokens: list[int], options: dict[str, Any], threads: int) -> None:
        command = [python, str(SIDE), "--side", side, "--model", str(files[0]),
                   "--transcoders", str(files[1]), "--tokens", ",".join(map(str, tokens)),
                   "--options", json.dumps(options), "--threads", str(threads)]
        self.side = side
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, env=env)
        self.ready = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.side} worker exited ({self.process.wait()}); see its stderr above")
        return json.loads(line)

    def request(self, **fields: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(fields) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(OSError):  # it died mid-request: its stderr says why
                self.request_quit()
        self.process.wait(timeout=60)

    def request_quit(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": "quit"}) + "\n")
        self.process.stdin.close()


def node_keys(graph: dict[str, Any], n_layers: int) -> list[tuple]:
    """Each node's key in the graph's order: features by (layer, position, feature), errors by
    (layer, position), tokens by position, logits by token id."""
    n_pos = len(graph["tokens"])
    keys: list[tuple] = [("feature", *map(int, f)) for f in graph["features"].tolist()]
    keys += [("error", layer, pos) for layer in range(n_layers) for pos in range(n_pos)]
    keys += [("token", pos) for pos in range(n_pos)]
    keys += [("logit", int(t)) for t in graph["logit_tokens"].tolist()]
    return keys


def agreement(ours: dict[str, Any], peer: dict[str, Any], n_layers: int) -> PeerAgreement:
    """Both adjacency matrices on the nodes both graphs have, aligned by key."""
    import torch

    our_keys, peer_keys = node_keys(ours, n_layers), node_keys(peer, n_layers)
    peer_index = {key: i for i, key in enumerate(peer_keys)}
    common = [(i, peer_index[key]) for i, key in enumerate(our_keys) if key in peer_index]
    mine = torch.tensor([i for i, _ in common])
    theirs = torch.tensor([j for _, j in common])
    a = ours["adjacency"][mine][:, mine].double()
    b = peer["adjacency"][theirs][:, theirs].double()
    diff = (a - b).abs()
    big = b.abs() > ATOL
    rel = (diff[big] / b.abs()[big]).max().item() if bool(big.any()) else 0.0
    logits = (ours["clean_logits"].double() - peer["clean_logits"].double()).abs().max().item()
    return PeerAgreement(
        nodes_ours=len(our_keys), nodes_peer=len(peer_keys), nodes_compared=len(common),
        features_ours=len(ours["features"]), features_peer=len(peer["features"]),
        active_ours=int(ours["n_active"]), active_peer=int(peer["n_active"]),
        logit_tokens_ours=ours["logit_tokens"].tolist(), logit_tokens_peer=peer["logit_tokens"].tolist(),
        entries=int(a.numel()), nonzero_entries=int((b != 0).sum()),
        max_abs_value=float(b.abs().max()), max_abs_diff=float(diff.max()),
        max_rel_diff=float(rel), max_rel_diff_over="entries with |circuit-tracer's| > atol",
        within_tolerance=bool(torch.allclose(a, b, atol=ATOL, rtol=RTOL)) and len(common) == len(our_keys)
        == len(peer_keys), atol=ATOL, rtol=RTOL,
        logit_probs_max_abs_diff=float((ours["logit_probs"] - peer["logit_probs"]).abs().max())
        if ours["logit_tokens"].tolist() == peer["logit_tokens"].tolist() else None,
        clean_logits_max_abs_diff=logits)


def memory(replies: list[dict[str, Any]]) -> SideMemory:
    """One side's memory: the warm-up call's (the first attribution in the process, which grows
    its heap) and the timed calls' (the allocator may keep what the warm-up freed, so their
    growth can be 0)."""
    import statistics

    def extra(r: dict[str, Any]) -> float | None:
        return None if r.get("peak_mb") is None else r["peak_mb"] - r["rss_mb"]

    timed = [r for r in replies[1:] if r.get("peak_mb") is not None]
    return SideMemory(peak_mb=[r["peak_mb"] for r in timed],
                      median_peak_mb=statistics.median(r["peak_mb"] for r in timed) if timed else None,
                      median_extra_mb=statistics.median(extra(r) for r in timed) if timed else None,
                      first_peak_mb=replies[0].get("peak_mb"), first_extra_mb=extra(replies[0]),
                      what="the worker process's peak resident memory during one attribution "
                           "(VmHWM, reset before it); extra = peak minus resident memory before it; "
                           "first = the warm-up call, the first attribution in the process")


def subject(name: str, args: argparse.Namespace) -> tuple[Any, Any, list[int]]:
    """The model, its transcoders and the prompt's tokens."""
    from lmsci_mi import load_model
    from lmsci_mi.transcoders import TranscoderSet

    if name == "ct-llama":
        lm = ct_llama()
        return lm, TranscoderSet.random(lm, 4 * lm.cfg.d_model, k=4, skip=True), CT_LLAMA_TOKENS
    if name == "toy-2l" or args.quick:
        lm = load_model("toy-2l")
        transcoders = TranscoderSet.random(lm, 4 * lm.cfg.d_model, k=4, skip=True)
    else:
        lm = load_model(name)
        transcoders = load_transcoders(args.transcoders, lm.name)
    return lm, transcoders, lm.encode(args.prompt)


def load_transcoders(path: Path | None, model_name: str) -> Any:
    from lmsci_mi.errors import UserInputError
    from lmsci_mi.transcoders.files import expand_transcoders, load_circuit_tracer

    if path is None:
        raise UserInputError("--model smollm2-135m needs --transcoders PATH (trained transcoders)")
    if (path / "config.yaml").is_file():
        return load_circuit_tracer(path, model_name=model_name)
    return expand_transcoders(path)


def ct_llama() -> Any:
    """circuit-tracer's tests/test_attributions_llama.py model, every parameter uniform(−1, 1)."""
    import torch
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    from lmsci_mi import LensModel, load_model

    cfg = HookedTransformerConfig(
        n_layers=2, d_model=8, n_ctx=2048, d_head=4, n_heads=2, d_mlp=16, act_fn="silu", d_vocab=16,
        eps=1e-5, use_attn_scale=True, attn_scale=8.0, original_architecture="LlamaForCausalLM",
        normalization_type="RMSPre", positional_embedding_type="rotary", final_rms=True, d_vocab_out=16,
        rotary_dim=4, gated_mlp=True, n_key_value_heads=2, rotary_base=500000.0, init_weights=False,
        rotary_adjacent_pairs=False, use_NTK_by_parts_rope=True, NTK_by_parts_low_freq_factor=1.0,
        NTK_by_parts_high_freq_factor=4.0, NTK_by_parts_factor=32.0, model_name="Llama-3.2-1B",
        device="cpu", seed=None)
    tokenizer = load_model("toy-2l").tokenizer  # only token 0's being special matters (no BOS added)
    model = HookedTransformer(cfg, tokenizer=tokenizer)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.rand(param.shape, generator=generator) * 2 - 1)
    return LensModel(model, name="ct-llama", source="circuit-tracer's test config, uniform(-1, 1)",
                     tokenizer=tokenizer, sink_token_id=0)


def agreement_cache(run: harness.Run, name: str, args: argparse.Namespace, options: dict[str, Any],
                    tokens: list[int]) -> harness.ItemCache:
    """Where a model's comparison is kept: by model, options, tokens and the transcoder files
    (their paths, sizes and modification times)."""
    files = sorted(args.transcoders.rglob("*")) if args.transcoders and args.transcoders.is_dir() else (
        [args.transcoders] if args.transcoders else [])
    stamp = [[str(f), f.stat().st_size, f.stat().st_mtime] for f in files if f.is_file()]
    return run.cache({"model": name, "options": options, "tokens": list(map(int, tokens)),
                      "transcoders": stamp, "quick": args.quick})


def compare_graphs(workers: dict[str, Worker], folder: Path, n_layers: int) -> PeerAgreement:
    """Each side builds the graph once; their adjacency matrices compared."""
    import torch

    graphs = {}
    for side, worker in workers.items():
        worker.request(op="graph", out=str(folder / f"{side}.pt"))
        graphs[side] = torch.load(folder / f"{side}.pt")
    return agreement(graphs["lmsci_mi"], graphs["circuit_tracer"], n_layers)


def compare_model(name: str, args: argparse.Namespace, run: harness.Run) -> GraphsPeerModel | None:
    """Export, start both workers, compare their graphs (cached), time them (None with
    --agreement-only)."""
    lm, transcoders, tokens = subject(name, args)
    options = {"batch_size": args.batch_size, "max_feature_nodes": args.max_feature_nodes,
               "desired_logit_prob": 0.95, "max_n_logits": 10}
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    base.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS=str(args.threads))
    ours_env = {**base, "PYTHONPATH": str(harness.ROOT)}
    peer_env = {**base, **({"PYTHONPATH": str(args.peer_source)} if args.peer_source else {})}
    with tempfile.TemporaryDirectory(prefix="graphs_vs_ct_") as tmp:
        folder = Path(tmp)
        with run.timed(f"{name}: export"):
            files = export(lm, transcoders, folder)
        workers = {"lmsci_mi": Worker("lmsci-mi", sys.executable, ours_env, files, tokens, options, args.threads),
                   "circuit_tracer": Worker("circuit-tracer", str(args.venv / "bin" / "python"), peer_env,
                                            files, tokens, options, args.threads)}
        try:
            agree = agreement_cache(run, name, args, options, tokens).get(
                "agreement", lambda: compare_graphs(workers, folder, lm.cfg.n_layers))
            if args.agreement_only:
                return None
            replies: dict[str, list[dict[str, Any]]] = {side: [] for side in workers}
            sides = {side: _timed_call(worker, replies[side]) for side, worker in workers.items()}
            comparison = timing.compare(sides, rounds=args.rounds, quiet=args.quiet, note=(
                "one attribution graph per call, tokens given, in each side's warm worker process"))
        finally:
            for worker in workers.values():
                worker.close()
    first = transcoders[0]
    return GraphsPeerModel(
        model=name, layers=lm.cfg.n_layers, d_model=lm.cfg.d_model, d_transcoder=first.d_transcoder,
        activation=first.activation, k=first.k, skip=first.W_skip is not None,
        transcoder_sites=f"{transcoders.input_site}->{transcoders.output_site}", tokens=list(map(int, tokens)),
        options=options, agreement=agree,
        timing=comparison.record, ratio=timing.ratio(comparison.record, "circuit_tracer", "lmsci_mi"),
        memory={side: memory(replies[side]) for side in workers},
        load_seconds={side: w.ready["load"]["seconds"] for side, w in workers.items()},
        versions={side: w.ready["versions"] for side, w in workers.items()},
        config_fields_not_in_peer=workers["circuit_tracer"].ready["dropped_config"])


def _timed_call(worker: Worker, replies: list[dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    def call() -> dict[str, Any]:
        replies.append(worker.request(op="time"))
        return replies[-1]

    return call


def main() -> None:
    run = harness.start(__doc__, __file__, threads=1, flags=add_flags)
    args = run.args
    if not (args.venv / "bin" / "python").exists():
        sys.exit(f"no circuit-tracer venv at {args.venv}: run scripts/install_circuit_tracer.sh first")
    if args.quick:
        args.rounds = min(args.rounds, 2)
    names = args.model or ["ct-llama", "toy-2l"]
    existing = harness.read_json(run.out, {}).get("models", {})
    models = {**existing}
    for name in names:
        entry = compare_model(name, args, run)
        if entry is None:
            print(f"{name}: the agreement is cached; run again without --agreement-only to time it")
            continue
        models[f"{name} (quick: toy-2l)" if args.quick and name == "smollm2-135m" else name] = entry
        agree = entry["agreement"]
        print(f"{name}: {agree['nodes_compared']} nodes, max |diff| {agree['max_abs_diff']:.3g}, max rel "
              f"{agree['max_rel_diff']:.3g}, within atol {ATOL:g} / rtol {RTOL:g}: {agree['within_tolerance']}; "
              f"median s ours {entry['timing']['sides']['lmsci_mi']['median']:.3f}, circuit-tracer "
              f"{entry['timing']['sides']['circuit_tracer']['median']:.3f}")
    if args.agreement_only:
        return
    run.write(GraphsPeerData(models=models, tolerance={"atol": ATOL, "rtol": RTOL},
                             peer="circuit-tracer (the registry's 0.5.0 unless versions say another source), "
                                  "TransformerLens backend, in scripts/install_circuit_tracer.sh's venv"))


if __name__ == "__main__":
    main()

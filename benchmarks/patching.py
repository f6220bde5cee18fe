"""Benchmark: lmsci-mi's batched patching and tracing against TransformerLens and a naive loop.

On SmolLM2-135M, in one run and on the same inputs:
  (a) residual sweep over (layer, position) vs ``transformer_lens.patching.get_act_patch_resid_pre``;
  (b) head-output sweep over (layer, head), all positions, vs ``get_act_patch_attn_head_out_all_pos``;
  (c) batched causal tracing vs a naive loop of one forward pass per restoration (same noise);
  (d) attribution patching over all heads: cost in forward-pass equivalents, rank correlation.
It prints seconds, speed-ups, the max abs difference, and the compute floor: the FLOPs the batched
sweep must do divided by this machine's float32 matmul throughput, measured in the same run.

    .venv/bin/python benchmarks/patching.py                 # everything timed in full
    .venv/bin/python benchmarks/patching.py --tl-layers 4   # peers timed on 4 layers, labelled
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pandas as pd
import torch
from transformer_lens import patching as tl_patching

from lmsci_mi import load_model
from lmsci_mi.circuits import LogitDiff, attribution_patch, causal_trace, patch_activations
from lmsci_mi.circuits.tracing import naive_causal_trace

IOI_CLEAN = "When Mary and John went to the store, John gave a drink to"
IOI_CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"
EIFFEL = "The Eiffel Tower is located in the city of"


def matmul_gflops(size: int = 2048, repeats: int = 10) -> float:
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size**3 * repeats / (time.perf_counter() - start) / 1e9


def layer_flops_per_token(cfg) -> float:
    """Matmul FLOPs of one block per token (attention projections and the gated MLP)."""
    n_kv = getattr(cfg, "n_key_value_heads", None) or cfg.n_heads
    attn = 2 * cfg.d_model * cfg.n_heads * cfg.d_head + 2 * cfg.d_model * n_kv * cfg.d_head
    mlp = (
        (3 if cfg.act_fn in ("silu", "gelu_pytorch_tanh") or cfg.gated_mlp else 2)
        * cfg.d_model
        * cfg.d_mlp
    )
    return 2.0 * (attn + mlp)


def sweep_flops(cfg, n_pos: int, rows_per_layer: int, layers: list[int]) -> float:
    """FLOPs of a sweep where a row patched at layer l runs blocks l.. and one unembedding."""
    per_layer = layer_flops_per_token(cfg) * n_pos
    unembed = 2.0 * cfg.d_model * cfg.d_vocab
    return sum(rows_per_layer * ((cfg.n_layers - layer) * per_layer + unembed) for layer in layers)


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def tl_subset(model, corrupted, cache, metric, setter, name, axes, ranges) -> torch.Tensor:
    """TransformerLens's own generic patcher on a subset of its index grid."""
    index = pd.MultiIndex.from_product(ranges, names=axes).to_frame(index=False)
    return tl_patching.generic_activation_patch(
        model, corrupted, cache, metric, setter, name, index_df=index
    ).reshape(*[len(r) for r in ranges])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tl-layers",
        type=int,
        default=None,
        help="time TransformerLens and the naive trace on this many evenly spaced "
        "layers only (default: all)",
    )
    parser.add_argument("--samples", type=int, default=10, help="noise samples for the trace")
    parser.add_argument(
        "--kinds",
        nargs="+",
        default=["resid", "mlp", "attn"],
        help="trace kinds (default all three)",
    )
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--no-trace", action="store_true", help="skip (c), whose naive loop takes the longest"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    lm = load_model("smollm2-135m", device="cpu")
    cfg = lm.cfg
    model = lm.model
    gflops = matmul_gflops()
    metric = LogitDiff(lm.token_id(" Mary"), lm.token_id(" John"))
    clean, corrupted = lm.to_tokens(IOI_CLEAN), lm.to_tokens(IOI_CORRUPTED)
    n_pos = clean.shape[1]
    all_layers = list(range(cfg.n_layers))
    if args.tl_layers:
        step = max(1, cfg.n_layers // args.tl_layers)
        peer_layers = all_layers[::step][: args.tl_layers]
    else:
        peer_layers = all_layers
    full = peer_layers == all_layers
    with torch.no_grad():
        model(clean)  # warm-up
        _, cache = model.run_with_cache(clean)
        _, t_forward = timed(lambda: model(corrupted))
    tl_metric = lambda logits: metric(logits[:, -1]).mean()  # noqa: E731

    rows = []

    # (a) residual stream before each layer, each position.
    ours_a, t_ours_a = timed(
        lambda: patch_activations(lm, clean, corrupted, metric, site="resid_pre")
    )
    with torch.no_grad():
        if full:
            tl_a, t_tl_a = timed(
                lambda: tl_patching.get_act_patch_resid_pre(model, corrupted, cache, tl_metric)
            )
        else:
            tl_a, t_tl_a = timed(
                lambda: tl_subset(
                    model,
                    corrupted,
                    cache,
                    tl_metric,
                    tl_patching.layer_pos_patch_setter,
                    "resid_pre",
                    ["layer", "pos"],
                    [peer_layers, list(range(n_pos))],
                )
            )
    passes_a = len(peer_layers) * n_pos
    rows.append(
        (
            "(a) resid_pre (layer×pos)",
            ours_a.values[peer_layers],
            tl_a.cpu(),
            t_ours_a,
            t_tl_a,
            passes_a,
            cfg.n_layers * n_pos,
            sweep_flops(cfg, n_pos, n_pos, all_layers),
        )
    )

    # (b) every head's output (hook_z), all positions at once.
    ours_b, t_ours_b = timed(
        lambda: patch_activations(lm, clean, corrupted, metric, site="z", positions="all")
    )
    with torch.no_grad():
        if full:
            tl_b, t_tl_b = timed(
                lambda: tl_patching.get_act_patch_attn_head_out_all_pos(
                    model, corrupted, cache, tl_metric
                )
            )
        else:
            tl_b, t_tl_b = timed(
                lambda: tl_subset(
                    model,
                    corrupted,
                    cache,
                    tl_metric,
                    tl_patching.layer_head_vector_patch_setter,
                    "z",
                    ["layer", "head"],
                    [peer_layers, list(range(cfg.n_heads))],
                )
            )
    passes_b = len(peer_layers) * cfg.n_heads
    rows.append(
        (
            "(b) head z, all pos (layer×head)",
            ours_b.values[peer_layers],
            tl_b.cpu(),
            t_ours_b,
            t_tl_b,
            passes_b,
            cfg.n_layers * cfg.n_heads,
            sweep_flops(cfg, n_pos, cfg.n_heads, all_layers),
        )
    )

    # (c) causal tracing, batched vs one forward pass (all noise samples) per restoration.
    n_trace_pos = 0
    if not args.no_trace:
        trace, t_trace = timed(
            lambda: causal_trace(
                lm, EIFFEL, "Eiffel Tower", target=" Paris", n_samples=args.samples, kinds=args.kinds
            )
        )
        n_trace_pos = trace.values.shape[-1]
        naive, t_naive = timed(lambda: naive_causal_trace(lm, trace, layers=peer_layers))
        passes_c = len(trace.kinds) * len(peer_layers) * n_trace_pos
        first = trace.subject_positions[0]
        trace_rows = (n_trace_pos - first) * args.samples
        trace_flops = 0.0
        for kind in trace.kinds:
            for layer in all_layers:
                start = layer + 1 if kind == "resid" else max(0, layer - trace.window // 2)
                trace_flops += trace_rows * (
                    (cfg.n_layers - start) * layer_flops_per_token(cfg) * n_trace_pos
                    + 2.0 * cfg.d_model * cfg.d_vocab
                )
        rows.append(
            (
                "(c) causal trace (kind×layer×pos)",
                trace.values[:, peer_layers],
                naive,
                t_trace,
                t_naive,
                passes_c,
                len(trace.kinds) * cfg.n_layers * n_trace_pos,
                trace_flops,
            )
        )


    # (d) attribution patching over all heads, with its rank correlation to (b).
    attr, t_attr = timed(lambda: attribution_patch(lm, clean, corrupted, metric, site="z"))
    rho = attr.compare(ours_b)

    trace_setup = (
        "trace skipped"
        if args.no_trace
        else f"trace prompt of {n_trace_pos} tokens, {args.samples} noise samples, "
        f"window {trace.window}"
    )
    print(
        f"\nSmolLM2-135M on CPU ({torch.get_num_threads()} threads); IOI pair of {n_pos} tokens; "
        f"{trace_setup}."
    )
    print(
        f"float32 2048² matmul: {gflops:.0f} GFLOP/s; one forward pass of the corrupted prompt: "
        f"{t_forward * 1000:.0f} ms."
    )
    scope = "all layers" if full else f"layers {peer_layers} only"
    print(
        f"Peer timed on {scope}{'' if full else '; full-sweep peer time = per-pass cost × passes (extrapolated)'}.\n"
    )
    header = (
        f"{'sweep':36s} {'lmsci-mi s':>10s} {'peer s':>9s} {'peer passes':>11s} "
        f"{'peer full s':>11s} {'speed-up':>9s} {'max |diff|':>10s} {'floor s':>8s} {'floor %':>7s}"
    )
    print(header)
    print("-" * len(header))
    for name, ours, peer, t_ours, t_peer, passes, full_passes, flops in rows:
        peer_full = t_peer if full else t_peer / passes * full_passes
        diff = float((ours.float() - peer.float()).abs().max())
        floor = flops / (gflops * 1e9)
        tag = "" if full else "*"
        print(
            f"{name:36s} {t_ours:10.2f} {t_peer:9.2f} {passes:11d} {peer_full:10.1f}{tag} "
            f"{peer_full / t_ours:8.1f}× {diff:10.2e} {floor:8.2f} {100 * floor / t_ours:6.0f}%"
        )
    if not full:
        print("* extrapolated from the timed layers (per-pass cost × all passes)")
    print(
        f"\n(d) attribution patching over all {cfg.n_layers}×{cfg.n_heads} heads: {t_attr:.2f} s = "
        f"{t_attr / t_forward:.1f} forward-pass equivalents (one forward: {t_forward * 1000:.0f} ms); "
        f"Spearman vs exact head patching (b): {rho:.3f}"
    )


if __name__ == "__main__":
    main()

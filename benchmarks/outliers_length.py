"""Why a model fails beyond its training length, and LM-Infinite's Λ-mask (issue 40; Han et al.,
NAACL 2024, arXiv:2308.16137): per layer, the running maximum attention logit by query-key distance
and the attention entropy by position; the first tokens' separation in feature space; the per-token
NLL by position with and without the Λ-mask, to --max-length (default twice the trained length),
with the length at which the NLL starts to rise (the first window whose mean exceeds the in-context
mean by 2 standard errors over texts, ``lmsci_mi.outliers.nll_rise``).

    PYTHONPATH=. OMP_NUM_THREADS=1 python benchmarks/outliers_length.py --model smollm2-135m --threads 1 --n-texts 1
    PYTHONPATH=. OMP_NUM_THREADS=1 python benchmarks/outliers_length.py --model smollm2-135m --threads 1   # then 4 texts
    PYTHONPATH=. python benchmarks/outliers_length.py --quick       # toy-2l to 512 tokens, seconds (out/quick/)

Writes docs/data/outliers_length_<model>.json and docs/img/outliers_{nll,attention}_<model>.png.
The text is the standard library's prose (``lmsci_mi.outliers.long_text``: docstrings and pydoc
topics, documents joined by the end-of-text token, the sink first), rows of --max-length tokens;
the trained length and its source come from ``lmsci_mi.outliers.TRAINED_CONTEXT`` (a model not in
it, a toy, stands in with its loaded ``n_ctx``, so stated). --model takes any registered name
(``load_model``'s) or ``short-context-lm``: the byte-level model trained here at 256 tokens
(``lmsci_mi.outliers.short_context_lm``; train it first with benchmarks/short_context_lm.py), where
twice and eight times the trained length cost seconds:

    PYTHONPATH=. OMP_NUM_THREADS=1 python benchmarks/outliers_length.py --model short-context-lm --threads 1 --max-length 2048 --n-texts 16

Long inputs run through the query-chunked attention path (``--chunk-size`` queries at a time), so
memory stays near the model's and the activations of one block of queries. Time does not: at twice
SmolLM2's 8,192 tokens a pass is about 19 TFLOP of attention (30 layers x 9 heads x 64 dims x
16,384² x 4) plus 3.4 TFLOP for the rest; the curves' pass took 2,480 s at one thread beside another
job (2026-11-29), and each text takes three passes (curves, NLL, NLL under the mask). Every pass is
cached per text as soon as it is done, so a killed run resumes, and the cache does not depend on
--n-texts: run one text, read the printed estimate, then raise --n-texts (the rise's standard error
needs at least two; one text's NLL curves are written with the rule not tested; 0 writes the
attention curves and the separation alone). Gemma 3's 32,768 trained tokens make twice that far
slower; give it a --max-length (the data file records the one used).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness
import torch
from doc_tables.schemas.outliers import (
    CurveSet,
    NLLSection,
    OutliersLengthData,
    RiseRecord,
    SeparationSection,
)
from outliers_anatomy import finite, settings, shown

from lmsci_mi import LensModel, load_model
from lmsci_mi.outliers import (
    AttentionCurvesConfig,
    LambdaMaskConfig,
    LengthCurve,
    LongText,
    NLLByPositionConfig,
    NLLRise,
    SeparationConfig,
    attention_length_curves,
    first_token_separation,
    lambda_mask,
    load_short_context_lm,
    long_text,
    nll_rise,
    token_nll,
    trained_context,
    window_excess,
)

QUICK = {"model": "toy-2l", "n_texts": 2, "curve_texts": 2, "separation_texts": 2, "separation_length": 64,
         "window": 32, "in_context_start": 16, "n_global": 4}
"""--quick: the toy (n_ctx 256 stands in for a trained length), to 512 tokens, small windows."""
PASSES = ("curves", "nll", "nll-lambda")
SHORT_LM = "short-context-lm"
"""--model's name for the byte-level model trained here at a short context."""


def load(name: str) -> LensModel:
    """``load_model(name)``, or the short-context LM from its cache (it is not trained here)."""
    if name != SHORT_LM:
        return load_model(name)
    try:
        return load_short_context_lm(train=False)[0]
    except FileNotFoundError:
        raise SystemExit("the short-context LM is not trained yet: run "
                         "`PYTHONPATH=. python benchmarks/short_context_lm.py --threads 1` first") from None


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2-135m",
                        help=f"a registered model name (load_model's) or {SHORT_LM!r} (trained here)")
    parser.add_argument("--img-dir", type=Path, default=Path("docs/img"), help="where the figures go")
    parser.add_argument("--max-length", type=int, default=None, help="tokens per text (default: 2x the trained length)")
    parser.add_argument("--n-texts", type=int, default=4,
                        help="texts of the NLL curves (>= 2 for the rise; 0: no NLL curve)")
    parser.add_argument("--curve-texts", type=int, default=2, help="texts of the attention curves")
    parser.add_argument("--separation-texts", type=int, default=8, help="texts of the first tokens' separation")
    parser.add_argument("--separation-length", type=int, default=1024, help="tokens per separation text")
    parser.add_argument("--first-k", type=int, default=4, help="first positions (the sink counts) of the separation")
    parser.add_argument("--chunk-size", type=int, default=512, help="queries per attention block")
    parser.add_argument("--window", type=int, default=256, help="tokens per window of the NLL's windowed mean")
    parser.add_argument("--in-context-start", type=int, default=64, help="first position of the in-context range")
    parser.add_argument("--n-se", type=float, default=2.0, help="standard errors of the rise rule")
    parser.add_argument("--n-global", type=int, default=100, help="the Λ-mask's first tokens (the paper's 100)")
    parser.add_argument("--local-window", type=int, default=None, help="the Λ-mask's window (default: trained length)")
    parser.add_argument("--distance-cap", type=int, default=None, help="the Λ-mask's cap (default: its window)")
    parser.add_argument("--grid", type=int, default=48, help="lengths at which the data file keeps the curves")


def data_file(args: argparse.Namespace) -> Path:
    return harness.DATA / f"outliers_length_{QUICK['model'] if args.quick else args.model}.json"


# ----------------------------------------------------------------------------- per-text cache


class PassClock:
    """Times the passes actually computed, keeps the times in the cache (so a run killed after a
    pass still reports it when resumed), and prints what the rest will take."""

    def __init__(self, remaining: int, cache: harness.ItemCache) -> None:
        self.remaining, self.cache = remaining, cache
        self.seconds: dict[str, float] = cache.load("seconds", {})

    def run(self, name: str, compute: Callable[[], Any]) -> Any:
        began = time.perf_counter()
        value = compute()
        took = time.perf_counter() - began
        self.seconds.setdefault(name.rsplit("-", 1)[0], round(took, 1))
        self.cache.save("seconds", self.seconds)
        self.remaining -= 1
        print(f"{name}: {took:.0f} s; about {self.remaining * took / 60:.0f} min for the {self.remaining} "
              "passes left, if they take as long")
        return value


def cached_tensor(cache: harness.ItemCache, item: str, clock: PassClock, compute: Callable[[], torch.Tensor]) -> torch.Tensor:
    """A tensor item of the cache (safetensors, written atomically), else ``compute()``'s."""
    from safetensors.torch import load_file, save_file

    path = cache.path(item, ".safetensors")
    if path.is_file():
        return load_file(path)["value"]
    value = clock.run(item, compute).contiguous()
    partial = path.with_name(f".{path.name}.partial")
    save_file({"value": value}, partial)
    os.replace(partial, path)
    return value


def text_curves(lm: LensModel, text: LongText, i: int, args: argparse.Namespace, cache: harness.ItemCache,
                clock: PassClock) -> tuple[LengthCurve, LengthCurve]:
    """Text ``i``'s max-logit and entropy curves, cached as two results."""
    names = (f"curves-max-{i}", f"curves-entropy-{i}")
    if all(cache.path(n).is_file() for n in names):
        return LengthCurve.load(cache.path(names[0])), LengthCurve.load(cache.path(names[1]))
    one = LongText(text.tokens[i : i + 1], text.source)
    curves = clock.run(f"curves-{i}", lambda: attention_length_curves(lm, one, AttentionCurvesConfig(chunk_size=args.chunk_size)))
    curves.max_logit.save(cache.path(names[0]))
    curves.entropy.save(cache.path(names[1]))
    return curves.max_logit, curves.entropy


# ----------------------------------------------------------------------------- summaries


def grid(length: int, n: int, marks: tuple[int, ...]) -> list[int]:
    """About ``n`` geometric points in ``[1, length)``, and ``marks``."""
    points = {round(math.exp(math.log(length - 1) * k / (n - 1))) for k in range(n)}
    return sorted({p for p in points | set(marks) if 1 <= p < length})


def window_means(x: torch.Tensor, window: int, stride: int | None = None) -> tuple[list[int], torch.Tensor]:
    """Means of ``x`` ``[..., pos]`` over ``[end - window, end)`` for ends window, window +
    stride, … (default stride: the window; position 0, NaN for the NLL, left out)."""
    x = torch.nan_to_num(x.double(), nan=0.0)
    x[..., 0] = 0.0
    sums = torch.cat([torch.zeros(*x.shape[:-1], 1, dtype=x.dtype), x.cumsum(-1)], -1)
    ends = list(range(window, x.shape[-1] + 1, stride or window))
    starts = [max(end - window, 1) for end in ends]
    means = torch.stack([(sums[..., e] - sums[..., s]) / (e - s) for s, e in zip(starts, ends, strict=True)], -1)
    return ends, means


def curve_set(per_text: list[LengthCurve], xs: list[int], window: int | None) -> CurveSet:
    """The texts' curves as a :class:`CurveSet`: at ``xs`` (``window`` None) or as window means."""
    stacked = torch.stack([c.values for c in per_text])  # [text, layer, x]
    if window is not None:
        xs, stacked = window_means(stacked, window)
    else:
        stacked = stacked[..., xs].double()
    std = stacked.std(0) if len(per_text) > 1 else torch.full_like(stacked[0], math.nan)
    return CurveSet(statistic=per_text[0].statistic + (f"; means over windows of {window}" if window else ""),
                    x=list(xs), layers=per_text[0].axis_labels(0), mean=stacked.mean(0).tolist(),
                    std=std.tolist(), n_texts=len(per_text))


def rise_record(per_text: torch.Tensor, window: int, in_context: tuple[int, int], n_se: float,
                rise: NLLRise | None) -> RiseRecord:
    """The windows' mean NLL and excess over the in-context mean (mean over texts), with where the
    rule finds the rise (``rise``; None: one text, the rule not applied, ``length`` None)."""
    ends, reference, difference = window_excess(per_text, window=window, in_context=in_context)
    return RiseRecord(length=None if rise is None else rise.length, in_context=list(in_context),
                      in_context_mean=float(reference.mean()), window=window, stride=window, n_se=n_se,
                      window_ends=ends.tolist(), window_mean=(difference + reference[:, None]).mean(0).tolist(),
                      excess=difference.mean(0).tolist(), se=[] if rise is None else rise.se.tolist(),
                      applied=rise is not None)


# ----------------------------------------------------------------------------- figures


def draw_nll(path: Path, model: str, curves: dict[str, torch.Tensor], records: dict[str, RiseRecord],
             trained: int) -> Path:
    """NLL by position (a running window mean over the texts' mean), without and with the Λ-mask,
    the trained length and each curve's rise marked (none where the rule was not applied)."""
    from matplotlib.figure import Figure

    from lmsci_mi.viz.plots import save_figure

    fig = Figure(figsize=(7.5, 4.2), layout="tight")
    ax = fig.subplots()
    some = records["without the mask"]
    window = some["window"]
    for (label, per_text), color in zip(curves.items(), ("tab:red", "tab:blue"), strict=False):
        ends, means = window_means(per_text.nanmean(0), window, max(1, window // 8))
        rise = records[label]
        where = f"{rise['length']:,}" if rise["length"] is not None else "none"
        ax.plot(ends, means.numpy(), color=color, label=f"{label}: rises at {where}" if rise["applied"]
                else f"{label} (the rise rule needs two texts)")
        if rise["length"] is not None:
            ax.axvline(rise["length"], color=color, linestyle=":", linewidth=1)
    ax.axvspan(*some["in_context"], color="grey", alpha=0.08, label="in-context range")
    ax.axhline(some["in_context_mean"], color="grey", linewidth=0.8, label="in-context mean (without the mask)")
    ax.axvline(trained, color="black", linestyle="--", linewidth=1, label=f"trained length {trained:,}")
    n = next(iter(curves.values())).shape[0]
    ax.set_xlabel("position (tokens; window end)")
    ax.set_ylabel(f"NLL, mean over {window}-token windows and {n} text{'s' if n > 1 else ''}")
    ax.set_title(f"{model}: NLL by position, without and with the Λ-mask", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def draw_attention(path: Path, model: str, max_logit: torch.Tensor, entropy: torch.Tensor,
                   separation: SeparationSection, trained: int, window: int) -> Path:
    """Per layer (colour), the running max attention logit by distance and the attention entropy
    by position, both on a log length axis with the trained length marked; the first tokens'
    separation by layer."""
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    from lmsci_mi.viz.plots import save_figure

    n_layers = max_logit.shape[0]
    fig = Figure(figsize=(13, 4), layout="constrained")
    axes = fig.subplots(1, 3, width_ratios=(1, 1, 0.8))
    colour = colormaps["viridis"]
    ends, entropy_means = window_means(entropy, max(1, window // 4))
    for layer in range(n_layers):
        c = colour(layer / max(n_layers - 1, 1))
        axes[0].plot(range(1, max_logit.shape[1]), max_logit[layer, 1:].numpy(), color=c, linewidth=1)
        axes[1].plot(ends, entropy_means[layer].numpy(), color=c, linewidth=1)
    for ax, label in zip(axes[:2], ("max attention logit (running max, max over heads)",
                                    "attention entropy, nats (mean over heads)"), strict=True):
        ax.set_xscale("log")
        ax.axvline(trained, color="black", linestyle="--", linewidth=1, label=f"trained length {trained:,}")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_xlabel("query-key distance")
    axes[1].set_xlabel("query position")
    bar = fig.colorbar(ScalarMappable(Normalize(0, n_layers - 1), colour), ax=axes[:2], label="layer", shrink=0.8)
    bar.locator = MaxNLocator(integer=True)
    bar.update_ticks()
    layers = [int(x) for x in separation["layers"]]
    axes[2].bar(layers, separation["mean"], yerr=[0 if math.isnan(s) else s for s in separation["std"]],
                color="tab:grey")
    axes[2].set_xlabel("layer")
    axes[2].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[2].set_ylabel(f"first {separation['first_k']} positions' distance from the rest (spreads)")
    axes[2].grid(alpha=0.3, axis="y")
    fig.suptitle(f"{model}: LM-Infinite's diagnostics ({separation['n_texts']} texts for the separation)", fontsize=10)
    return save_figure(fig, path)


# ----------------------------------------------------------------------------- main


def nll_curves(lm: LensModel, text: LongText, args: argparse.Namespace, cache: harness.ItemCache,
               clock: PassClock) -> tuple[dict[str, torch.Tensor], dict]:
    """Per-text NLL without and with the Λ-mask, and the mask as resolved."""
    cfg = NLLByPositionConfig(window=args.window, in_context_start=args.in_context_start, n_se=args.n_se,
                              chunk_size=args.chunk_size)
    mask = LambdaMaskConfig(local_window=args.local_window, n_global=args.n_global, distance_cap=args.distance_cap)

    def one(i: int, masked: bool) -> torch.Tensor:
        row = LongText(text.tokens[i : i + 1], text.source)
        if not masked:
            return token_nll(lm, row, cfg)
        with lambda_mask(lm, mask):
            return token_nll(lm, row, cfg)

    curves = {
        "without the mask": torch.cat([cached_tensor(cache, f"nll-{i}", clock, lambda i=i: one(i, False))
                                       for i in range(args.n_texts)]),
        "with the Λ-mask": torch.cat([cached_tensor(cache, f"nll-lambda-{i}", clock, lambda i=i: one(i, True))
                                      for i in range(args.n_texts)]),
    }
    with lambda_mask(lm, mask) as plan:  # resolved for the record; no pass runs
        resolved = {"layers": list(plan.layers), "local_window": plan.local_window, "n_global": plan.n_global,
                    "distance_cap": plan.distance_cap}
    return curves, {"config": cfg.params(), "mask_config": mask.params(), "mask": resolved}


def nll_section(lm: LensModel, curves: dict[str, torch.Tensor], record: dict, args: argparse.Namespace,
                trained: int, stem: Path) -> tuple[NLLSection, Path]:
    """The NLL curves' section and figure: where each starts to rise, by the rule where there are
    two texts or more; one text's windows are kept with the rule not applied."""
    in_context = (args.in_context_start, min(trained, args.max_length))
    if args.n_texts < 2:
        print("one text: the NLL's rise rule needs its standard error over two texts or more (raise --n-texts); "
              "the curves are kept without it")
    records = {k: rise_record(v, args.window, in_context, args.n_se, None if args.n_texts < 2 else
                              nll_rise(v, window=args.window, in_context=in_context, n_se=args.n_se))
               for k, v in curves.items()}
    section = NLLSection(**record, n_texts=args.n_texts, max_length=args.max_length,
                         without=records["without the mask"], with_mask=records["with the Λ-mask"])
    return section, draw_nll(stem / f"outliers_nll_{lm.name}.png", lm.name, curves, records, trained)


def main() -> None:
    run = harness.start(__doc__, __file__, threads=1, flags=add_flags, out=data_file)
    args = settings(run.args, QUICK)
    lm = load(args.model)
    context = trained_context(lm)
    trained = context.trained_length
    length = args.max_length or 2 * trained
    args.max_length = length
    cache = run.cache(exclude=["n_texts", "curve_texts", "img_dir", "grid"])
    text = long_text(lm, max(args.n_texts, args.curve_texts), length)
    clock = PassClock(args.curve_texts + 2 * args.n_texts, cache)
    with run.timed("curves"):
        per_text = [text_curves(lm, text, i, args, cache, clock) for i in range(args.curve_texts)]
    separation_config = SeparationConfig(first_k=args.first_k, chunk_size=args.chunk_size)
    sep = cache.result("separation", lambda: first_token_separation(
        lm, long_text(lm, args.separation_texts, args.separation_length), separation_config))
    separation = SeparationSection(first_k=sep.first_k, length=args.separation_length, n_texts=sep.n_texts,
                                   layers=sep.axis_labels(0), mean=sep.values.tolist(), std=sep.std.tolist())
    marks = tuple(m for m in (trained, length - 1) if m < length)
    stem = harness.QUICK if run.quick else args.img_dir
    max_logit = torch.stack([c.values for c, _ in per_text]).mean(0)
    entropy = torch.stack([e.values for _, e in per_text]).mean(0)
    figures = {"attention": draw_attention(stem / f"outliers_attention_{lm.name}.png", lm.name, max_logit, entropy,
                                           separation, trained, args.window)}
    data = OutliersLengthData(
        model=lm.name, sink=lm.meta().sink, text_source=text.source,
        trained_context={k: v for k, v in vars(context).items() if k != "model"}, max_length=length,
        curves={"max_logit": curve_set([c for c, _ in per_text], grid(length, args.grid, marks), None),
                "entropy": curve_set([e for _, e in per_text], [], args.window)},
        separation=separation)
    if args.n_texts > 0:
        with run.timed("nll"):
            curves, record = nll_curves(lm, text, args, cache, clock)
        data["nll"], figures["nll"] = nll_section(lm, curves, record, args, trained, stem)
    else:
        print("--n-texts 0: the attention curves and the separation only, no NLL curve")
    data["seconds_per_pass"] = clock.seconds
    data["figures"] = {k: shown(v) for k, v in figures.items()}
    run.write(finite(data), ensure_ascii=False)


if __name__ == "__main__":
    main()

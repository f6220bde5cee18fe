"""`lmsci-mi trace` and `lmsci-mi patch`: causal tracing and activation patching from the shell.

Also the circuits steps of `lmsci-mi tour`: a causal trace of the Eiffel Tower fact and a quick
head-patching sweep (exact and attribution) on the IOI prompt pair.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from lmsci_mi.cli.common import add_model_args, add_output_args, load_from_args, write_outputs
from lmsci_mi.model import LensModel

EIFFEL_PROMPT = "The Eiffel Tower is located in the city of"
IOI_CLEAN = "When Mary and John went to the store, John gave a drink to"
IOI_CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"


def register(commands: Any) -> None:
    """Add this feature's subcommands to the parser."""
    from lmsci_mi.circuits.patching import SITES
    from lmsci_mi.circuits.tracing import TRACE_KINDS

    trace = commands.add_parser(
        "trace", help="causal tracing of a fact (Meng et al. 2022): which states carry it"
    )
    add_model_args(trace)
    trace.add_argument(
        "--prompt", required=True, help="e.g. 'The Eiffel Tower is located in the city of'"
    )
    trace.add_argument("--subject", required=True, help="the subject as written in the prompt")
    trace.add_argument(
        "--target", default=None, help="answer token (default: the top-1 prediction)"
    )
    trace.add_argument("--noise", type=float, default=3.0, help="noise std in embedding stds (3)")
    trace.add_argument("--samples", type=int, default=10, help="noise samples (10)")
    trace.add_argument(
        "--window", type=int, default=10, help="layers restored together for mlp/attn"
    )
    trace.add_argument("--seed", type=int, default=0)
    trace.add_argument("--kinds", nargs="+", default=list(TRACE_KINDS), choices=TRACE_KINDS)
    add_output_args(trace)
    trace.set_defaults(run=_run_trace)

    patch = commands.add_parser(
        "patch", help="activation patching of clean activations into a corrupted run"
    )
    add_model_args(patch)
    patch.add_argument("--clean", required=True, help="clean prompt")
    patch.add_argument("--corrupted", required=True, help="corrupted prompt (same token length)")
    patch.add_argument("--answer", required=True, help="correct answer token, e.g. ' Mary'")
    patch.add_argument("--wrong", required=True, help="competing token, e.g. ' John'")
    patch.add_argument("--site", default="resid_pre", choices=sorted(SITES))
    patch.add_argument("--positions", default="each", choices=["each", "all"])
    patch.add_argument("--normalise", action="store_true", help="0 = corrupted, 1 = clean")
    patch.add_argument(
        "--attribution", action="store_true", help="attribution patching instead (3 passes)"
    )
    add_output_args(patch)
    patch.set_defaults(run=_run_patch)


def _run_trace(args: argparse.Namespace) -> int:
    from lmsci_mi.circuits.tracing import causal_trace

    lm = load_from_args(args)
    trace = causal_trace(
        lm,
        args.prompt,
        args.subject,
        target=args.target,
        noise=args.noise,
        n_samples=args.samples,
        window=args.window,
        seed=args.seed,
        kinds=args.kinds,
    )
    print(_trace_report(trace))
    write_outputs(trace, args)
    return 0


def _trace_report(trace: Any) -> str:
    lines = [
        f"p({trace.target!r}): clean {trace.clean_prob:.3f}, corrupted {trace.corrupted_prob:.3f} "
        f"(noise std {trace.noise_scale:.3g}, {trace.values.shape[-1]} tokens, subject at "
        f"{list(trace.subject_positions)})"
    ]
    subject = list(trace.subject_positions)
    tokens = trace.axis_labels(2)
    for kind in trace.kinds:
        values = trace.kind_values(kind)
        # The fact need not sit on the last subject token (on SmolLM2 it is " E|iffel"), so
        # report the best subject token as well as the last token.
        sub = values[:, subject]
        flat = int(sub.argmax())
        layer, pos = flat // sub.shape[1], subject[flat % sub.shape[1]]
        end_peak = int(values[:, -1].argmax())
        lines.append(
            f"  {kind:5s}: subject peak {tokens[pos]!r} layer {layer} (p={float(values[layer, pos]):.3f}); "
            f"last token peak layer {end_peak} (p={float(values[end_peak, -1]):.3f})"
        )
    return "\n".join(lines)


def _run_patch(args: argparse.Namespace) -> int:
    from lmsci_mi.circuits.attribution import attribution_patch
    from lmsci_mi.circuits.metrics import LogitDiff
    from lmsci_mi.circuits.patching import patch_activations

    lm = load_from_args(args)
    metric = LogitDiff(lm.token_id(args.answer), lm.token_id(args.wrong))
    fn = attribution_patch if args.attribution else patch_activations
    result = fn(
        lm,
        args.clean,
        args.corrupted,
        metric,
        site=args.site,
        positions=args.positions,
        normalise=args.normalise,
    )
    unit = "normalised logit diff" if args.normalise else "logit diff"
    print(
        f"{type(result).__name__} of {args.site} ({args.positions} positions), {unit}: clean "
        f"{result.clean_value:.3f}, corrupted {result.corrupted_value:.3f}"
    )
    for label, value in result.top(8):
        print(f"  {label:24s} {value:+.3f}")
    write_outputs(result, args)
    return 0


def tour_steps() -> list[Any]:
    """Steps this feature adds to `lmsci-mi tour` (see lmsci_mi.cli.core)."""
    return [_step_causal_trace, _step_patching]


def _step_causal_trace(lm: LensModel, out_dir: Path) -> str:
    """Causal trace: where does SmolLM2 keep 'the Eiffel Tower is in Paris'?"""
    from lmsci_mi.circuits.tracing import causal_trace

    start = time.perf_counter()
    # Fewer noise samples than the paper's 10 keep this step under a minute on two CPU cores.
    trace = causal_trace(lm, EIFFEL_PROMPT, "Eiffel Tower", target=" Paris", n_samples=3)
    seconds = time.perf_counter() - start
    trace.save(out_dir / "causal_trace_eiffel.json")
    trace.plot(out_dir / "causal_trace_eiffel.png")
    return (
        f"{_trace_report(trace)}\n  {seconds:.1f} s; heatmaps in "
        f"{out_dir / 'causal_trace_eiffel.png'}"
    )


def _step_patching(lm: LensModel, out_dir: Path) -> str:
    """Activation vs attribution patching of every head's output on the IOI pair."""
    from lmsci_mi.circuits.attribution import attribution_patch
    from lmsci_mi.circuits.metrics import LogitDiff

    metric = LogitDiff(lm.token_id(" Mary"), lm.token_id(" John"))
    start = time.perf_counter()
    attribution = attribution_patch(
        lm, IOI_CLEAN, IOI_CORRUPTED, metric, site="z", normalise=True, compare_exact=True
    )
    seconds = time.perf_counter() - start
    attribution.save(out_dir / "ioi_head_attribution.json")
    attribution.plot(out_dir / "ioi_head_attribution.png")
    exact_top = sorted(
        (
            (float(v), f"L{i // attribution.exact.shape[1]}.H{i % attribution.exact.shape[1]}")
            for i, v in enumerate(attribution.exact.flatten())
        ),
        reverse=True,
    )[:5]
    return "\n".join(
        [
            f"logit diff Mary−John: clean {attribution.clean_value:.2f}, corrupted "
            f"{attribution.corrupted_value:.2f} ({seconds:.1f} s for both methods)",
            "  top heads, exact patching (normalised): "
            + ", ".join(f"{name} {value:+.2f}" for value, name in exact_top),
            "  top heads, attribution patching: "
            + ", ".join(f"{name} {value:+.2f}" for name, value in attribution.top(5)),
            f"  Spearman rank correlation attribution vs exact: {attribution.rank_correlation:.2f}",
        ]
    )

"""`lmsci-mi trace` and `lmsci-mi patch`: causal tracing (one fact, or the average indirect effect
over a fact set) and activation patching from the shell.

Also the circuits steps of `lmsci-mi tour`: a causal trace of the Eiffel Tower fact and a quick
head-patching sweep (exact and attribution) on the IOI prompt pair.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from lmsci_mi.cli.common import (
    add_cluster_args,
    add_config_args,
    add_model_args,
    add_output_args,
    cluster_from_args,
    config_from_args,
    load_from_args,
    write_outputs,
)
from lmsci_mi.cli.tour import StepOutput, TourStep
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel

EIFFEL_PROMPT = "The Eiffel Tower is located in the city of"
IOI_CLEAN = "When Mary and John went to the store, John gave a drink to"
IOI_CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"
TOUR_TRACE_SAMPLES = 3
"""Noise samples of the tour's causal trace (the docs' figure uses 10)."""


def register(commands: Any) -> None:
    """Add this feature's subcommands to the parser; their flags come from the configs."""
    from lmsci_mi.circuits.aie import AIEConfig
    from lmsci_mi.circuits.attribution import AttributionConfig
    from lmsci_mi.circuits.tracing import TraceConfig

    trace = commands.add_parser(
        "trace",
        help="causal tracing (Meng et al. 2022): one fact (--prompt/--subject), or the average "
        "indirect effect over a fact set (--facts)",
    )
    add_model_args(trace)
    trace.add_argument("--prompt", help="e.g. 'The Eiffel Tower is located in the city of'")
    trace.add_argument("--subject", help="the subject as written in the prompt")
    trace.add_argument(
        "--facts",
        metavar="FILE|shipped",
        help="trace a fact set instead: a JSON file of CounterFact-style records, or a shipped "
        "set: 'shipped' (the small set, also 'facts') or 'edit_facts'",
    )
    add_config_args(trace, TraceConfig)
    add_config_args(trace, AIEConfig)
    add_cluster_args(trace)
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
    # AttributionConfig is PatchingConfig plus compare_exact; the patching defaults apply.
    add_config_args(patch, AttributionConfig)
    patch.set_defaults(site="resid_pre", positions="each")
    patch.add_argument(
        "--attribution", action="store_true", help="attribution patching instead (3 passes)"
    )
    add_output_args(patch)
    patch.set_defaults(run=_run_patch)


def _run_trace(args: argparse.Namespace) -> int:
    from lmsci_mi.circuits.aie import AIEConfig, average_indirect_effect
    from lmsci_mi.circuits.tracing import TraceConfig, causal_trace
    from lmsci_mi.data.facts import load_facts

    config = config_from_args(TraceConfig, args)
    cluster = cluster_from_args(args)
    prompt, subject, facts = args.prompt, args.subject, args.facts
    if (facts is None) == (prompt is None and subject is None) or (
        facts is None and not (prompt and subject)
    ):
        raise UserInputError("give either --prompt and --subject (one fact) or --facts FILE|shipped")
    if cluster is not None and facts is None:
        raise UserInputError("--ray shards a fact set over a cluster: give --facts FILE|shipped")
    if facts is not None:
        aie_config = config_from_args(AIEConfig, args, trace=config)
        fact_set = load_facts(facts)  # checked before the model loads
        result: Any = average_indirect_effect(
            load_from_args(args), fact_set, aie_config, cluster=cluster
        )
    else:
        assert prompt is not None and subject is not None
        result = causal_trace(load_from_args(args), prompt, subject, config)
    print(result.summary())
    write_outputs(result, args)
    return 0


def _trace_report(trace: Any) -> str:
    """The tour's account of a trace: the peak state at the subject and at the last token."""
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
    from lmsci_mi.circuits.attribution import AttributionConfig, attribution_patch
    from lmsci_mi.circuits.patching import PatchingConfig, patch_activations
    from lmsci_mi.data.pairs import PromptPairs

    if args.attribution:
        config: PatchingConfig = config_from_args(AttributionConfig, args)
        analysis: Any = attribution_patch
    else:
        if args.compare_exact:
            raise UserInputError("--compare-exact goes with --attribution")
        config = config_from_args(PatchingConfig, args)
        analysis = patch_activations
    lm = load_from_args(args)
    pairs = PromptPairs(args.clean, args.corrupted, lm.token_id(args.answer), lm.token_id(args.wrong))
    result = analysis(lm, pairs, config=config)  # scored by the pair's logit difference
    print(result.summary())
    write_outputs(result, args)
    return 0


def tour_steps() -> list[TourStep]:
    """Steps this feature adds to `lmsci-mi tour` (see lmsci_mi.cli.tour)."""
    return [
        TourStep(
            "causal_trace",
            "Causal trace: where does the model keep 'the Eiffel Tower is in Paris'?",
            _step_causal_trace,
            "from lmsci_mi.circuits.tracing import TraceConfig, causal_trace; causal_trace(lm, "
            f'"{EIFFEL_PROMPT}", "Eiffel Tower", TraceConfig(target=" Paris", n_samples={TOUR_TRACE_SAMPLES}))',
            seconds=25,
            quick=True,
        ),
        TourStep(
            "patching",
            "Activation patching vs attribution patching of every head on the IOI pair",
            _step_patching,
            "from lmsci_mi.circuits.attribution import AttributionConfig, attribution_patch; "
            "from lmsci_mi.data.pairs import PromptPairs; attribution_patch(lm, PromptPairs("
            f'"{IOI_CLEAN}", "{IOI_CORRUPTED}", lm.token_id(" Mary"), lm.token_id(" John")), '
            'config=AttributionConfig(site="z", normalise=True, compare_exact=True))',
            seconds=5,
            quick=True,
        ),
    ]


def _step_causal_trace(lm: LensModel, out_dir: Path) -> StepOutput:
    """Causal trace: where does SmolLM2 keep 'the Eiffel Tower is in Paris'?"""
    from lmsci_mi.circuits.tracing import TraceConfig, causal_trace

    # Fewer noise samples than the paper's 10 keep this step under a minute on two CPU cores.
    trace = causal_trace(
        lm, EIFFEL_PROMPT, "Eiffel Tower", TraceConfig(target=" Paris", n_samples=TOUR_TRACE_SAMPLES)
    )
    report = _trace_report(trace)
    values = trace.kind_values(trace.kinds[0])
    subject = list(trace.subject_positions)
    sub = values[:, subject]
    flat = int(sub.argmax())
    layer, pos = flat // sub.shape[1], subject[flat % sub.shape[1]]
    summary = (
        f"p(' Paris') clean {trace.clean_prob:.3f}, corrupted {trace.corrupted_prob:.3f}; restoring "
        f"the {trace.kinds[0]} at {trace.axis_labels(2)[pos]!r} layer {layer} brings it back to "
        f"{float(values[layer, pos]):.3f} (one prompt, {TOUR_TRACE_SAMPLES} noise samples; "
        "`lmsci-mi trace --facts shipped` averages over a fact set)"
    )
    return StepOutput(summary, {"causal_trace_eiffel": trace}, text=report)


def _step_patching(lm: LensModel, out_dir: Path) -> StepOutput:
    """Activation vs attribution patching of every head's output on the IOI pair."""
    from lmsci_mi.circuits.attribution import AttributionConfig, attribution_patch
    from lmsci_mi.data.pairs import PromptPairs

    pairs = PromptPairs(IOI_CLEAN, IOI_CORRUPTED, lm.token_id(" Mary"), lm.token_id(" John"))
    config = AttributionConfig(site="z", normalise=True, compare_exact=True)
    attribution = attribution_patch(lm, pairs, config=config)
    if attribution.exact is None or attribution.rank_correlation is None:
        raise RuntimeError("attribution_patch(compare_exact=True) returned no exact comparison")
    exact_top = [(value, name) for name, value in attribution.exact.top(5)]
    text = "\n".join(
        [
            f"logit diff Mary−John: clean {attribution.clean_value:.2f}, corrupted "
            f"{attribution.corrupted_value:.2f}",
            "top heads, exact patching (normalised): "
            + ", ".join(f"{name} {value:+.2f}" for value, name in exact_top),
            "top heads, attribution patching: "
            + ", ".join(f"{name} {value:+.2f}" for name, value in attribution.top(5)),
            f"Spearman rank correlation attribution vs exact: {attribution.rank_correlation:.2f}",
        ]
    )
    summary = (
        f"logit diff Mary−John clean {attribution.clean_value:.2f}, corrupted "
        f"{attribution.corrupted_value:.2f}; top head {exact_top[0][1]} ({exact_top[0][0]:+.2f}); "
        f"attribution vs exact rank correlation {attribution.rank_correlation:.2f}"
    )
    results = {"ioi_head_patching": attribution.exact, "ioi_head_attribution": attribution}
    return StepOutput(summary, results, text=text)

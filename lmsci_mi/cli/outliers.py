"""`lmsci-mi outliers massive|super-weights|sinks|mask|ablate|length`: the outliers of the forward
pass (issue 40). Massive activations (Sun et al. 2024), super weights (Yu et al. 2024), sink heads
with and without the prepended sink token (Xiao et al. 2024) and the cost of masking them, the
ablations against random controls, and the NLL by position past the trained length with and
without LM-Infinite's Λ-mask (Han et al. 2024); each takes its flags from its configs. The tour
step reads the massive activations, the first super-weight candidate and the sink heads.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lmsci_mi.cli.common import (
    add_config_args,
    add_model_args,
    add_output_args,
    config_from_args,
    head_list,
    load_from_args,
    write_outputs,
)
from lmsci_mi.cli.tour import StepOutput, TourStep
from lmsci_mi.config import Config
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.outliers import (
    FirstTokenMaskConfig,
    LambdaMaskConfig,
    MassiveActivationAblation,
    MassiveActivations,
    MassiveConfig,
    MassiveCoordinate,
    NLLByPosition,
    NLLByPositionConfig,
    OutlierAblationConfig,
    OutlierPositions,
    SinkHeads,
    SinkScoreConfig,
    SuperWeightCandidates,
    SuperWeightConfig,
    SuperWeightCoordinate,
    SuperWeightRestoreActivation,
    SuperWeightScaling,
    find_massive_activations,
    find_super_weights,
    first_token_mask_effect,
    lambda_mask,
    long_text,
    nll_by_position,
    outlier_ablations,
    sink_heads,
    sink_scores,
    trained_context,
)
from lmsci_mi.results import Result

__all__ = [
    "TOUR_MASSIVE",
    "TOUR_SINKS",
    "TOUR_SUPER_WEIGHTS",
    "TOUR_TEXTS",
    "ablation_plan",
    "first_appearances",
    "nll_lines",
    "register",
    "tour_steps",
]

TOUR_TEXTS = (8, 64)
"""The tour's text: 8 rows of 64 tokens of the standard library's prose (the sink first)."""
TOUR_MASSIVE = MassiveConfig()
"""The paper's rule (|a| > 100 and >= 1,000 x the median) at every layer's output."""
TOUR_SUPER_WEIGHTS = SuperWeightConfig(max_candidates=1)
"""Yu et al.'s one-pass search on their prompt, stopped after the first candidate (two passes)."""
TOUR_SINKS = SinkScoreConfig(n_texts=8)
"""Sink scores on 8 rows of 64 tokens, with and without the sink token."""


def register(commands: Any) -> None:
    """Add `outliers` and its analyses to the parser; flags come from the configs."""
    outliers = commands.add_parser(
        "outliers", help="massive activations, super weights, attention sinks, their ablations, "
        "and the NLL past the trained length with and without LM-Infinite's Λ-mask")
    kinds = outliers.add_subparsers(dest="outliers_kind", required=True, metavar="KIND")
    _register_massive(kinds)
    _register_super_weights(kinds)
    _register_sinks(kinds)
    _register_mask(kinds)
    _register_ablate(kinds)
    _register_length(kinds)


def _register_massive(kinds: Any) -> None:
    massive = kinds.add_parser(
        "massive",
        help="massive activations (Sun et al. 2024): per layer the entries above the paper's rule, "
        "with their positions, tokens and dimensions",
        description="Reads every layer's residual stream on rows of the standard library's prose "
        "(or the texts of --text) and lists the activations above Sun et al.'s rule (|a| > 100 and "
        ">= 1,000 x the median |a| of the hidden state), the roles of the positions that carry them "
        "(sink, first token, first newline, first '.') and the dimensions that recur. --out writes "
        "the result (`lmsci-mi outliers ablate --massive-from` reads it).",
    )
    add_model_args(massive)
    _add_text_args(massive, n_texts=10, seq_len=128, paper="Sun et al. read 10 sequences")
    massive.add_argument("--text", action="append", default=None, metavar="TEXT",
                         help="a text to read instead of the prose (repeat the flag for several)")
    add_output_args(massive)
    add_config_args(massive.add_argument_group("the rule (MassiveConfig)"), MassiveConfig)
    massive.set_defaults(run=_run_massive)


def _register_super_weights(kinds: Any) -> None:
    _register_simple(
        kinds, "super-weights", SuperWeightConfig, find_super_weights, "the search",
        help="super-weight candidates (Yu et al. 2024) from one forward pass, removed and searched "
        "again up to --max-candidates",
        description="Yu et al.'s search: each layer's MLP down-projection read at its input and its "
        "raw output on one prompt; a layer whose largest |input| and |output| both spike points at "
        "the weight W_down[row, col]; it is zeroed and the pass repeated. The weights are restored "
        "bit for bit before the command prints. --out writes the result (`lmsci-mi outliers ablate "
        "--super-weights-from` reads it).",
    )


def _register_sinks(kinds: Any) -> None:
    _register_simple(
        kinds, "sinks", SinkScoreConfig, sink_heads, "the score",
        help="sink heads (Xiao et al. 2024): each head's attention on the first tokens, with and "
        "without the prepended sink token",
        description="Each head's mean attention mass on the first k positions, on rows of the "
        "standard library's prose with the model's sink token first, and on the same rows with the "
        "sink removed; the difference with its standard error over texts. `lmsci-mi heads --kind "
        "sink` gives the scores with the sink alone.",
    )


def _register_simple(
    kinds: Any,
    name: str,
    config_type: type[Config],
    analysis: Callable[[LensModel, Any], Result],
    group: str,
    **text: str,
) -> None:
    """A command that runs ``analysis(lm, config)`` with the config of its flags, prints the
    result's summary and writes its outputs."""
    parser = kinds.add_parser(name, **text)
    add_model_args(parser)
    add_output_args(parser)
    add_config_args(parser.add_argument_group(f"{group} ({config_type.__name__})"), config_type)

    def run(args: argparse.Namespace) -> int:
        config = config_from_args(config_type, args)
        lm = load_from_args(args)
        result = analysis(lm, config)
        print(result.summary())
        write_outputs(result, args)
        return 0

    parser.set_defaults(run=run)


def _register_mask(kinds: Any) -> None:
    mask = kinds.add_parser(
        "mask",
        help="the held-out NLL cost of masking attention to the first tokens: per head, the heads "
        "together against as many random heads, and every head",
        description="Masks attention to the first k positions for the heads of --heads, or the "
        "--top heads by sink score (scored on rows 0..skip_texts-1, measured on the rows after "
        "them), each alone, together, as many random other heads, and every head of the model; "
        "NLL changes with 95 % paired bootstrap intervals over texts.",
    )
    add_model_args(mask)
    chosen = mask.add_mutually_exclusive_group()
    chosen.add_argument("--heads", type=head_list, default=None, metavar="L1.H2,...",
                        help="the heads to mask (default: the --top heads by sink score)")
    chosen.add_argument("--top", type=int, default=3,
                        help="mask the TOP heads of highest sink score (default 3)")
    add_output_args(mask)
    add_config_args(mask.add_argument_group("the mask (FirstTokenMaskConfig)"), FirstTokenMaskConfig)
    mask.set_defaults(run=_run_mask)


def _register_ablate(kinds: Any) -> None:
    ablate = kinds.add_parser(
        "ablate",
        help="zero massive activations and super weights (and restore the super activation) "
        "against random controls: perplexity, fact and IOI accuracy",
        description="Each intervention beside as many random coordinates of the same layers "
        "(massive activations) or random weights of equal magnitude in the same matrix (super "
        "weights), on held-out chunks of the standard library's prose (perplexity ratio with a 95 % "
        "paired bootstrap interval) and on the fact and IOI sets (Wilson intervals). The coordinates "
        "come from --massive/--super-weights, from saved results (--massive-from/--super-weights-from), "
        "or, with none of these, from both searches run here with their defaults (massive "
        "activations on the chunks before the held-out ones). Weights and hooks are restored after "
        "every batch.",
    )
    add_model_args(ablate)
    given = ablate.add_argument_group("what to ablate")
    given.add_argument("--massive", type=_massive_list, default=None, metavar="L:D,...",
                       help="massive activations as layer:dim (the block output's dimension)")
    given.add_argument("--massive-from", type=Path, default=None, metavar="RESULT.json",
                       help="a saved `outliers massive` result: each recurring dimension at the "
                       "first layer its entries appear, at the positions and tokens that carry them")
    given.add_argument("--rule", choices=("paper", "ratio"), default="paper",
                       help="whose entries --massive-from takes: the paper's rule, or every entry "
                       "meeting the ratio (default paper)")
    given.add_argument("--super-weights", type=_weight_list, default=None, metavar="L:R:C,...",
                       help="super weights as layer:row:col of down_proj.weight (row: d_model, col: d_mlp)")
    given.add_argument("--super-weights-from", type=Path, default=None, metavar="RESULT.json",
                       help="a saved `outliers super-weights` result: its candidates")
    given.add_argument("--restore", action=argparse.BooleanOptionalAction, default=True,
                       help="also zero each super weight with its super activation restored "
                       "(Yu et al.'s removeSW_restoreSA; default: yes)")
    add_output_args(ablate)
    # Positions default to the found ones (else 0): None tells the command none were given.
    add_config_args(ablate.add_argument_group("where (OutlierPositions; default: the found positions, else 0)"),
                    OutlierPositions, defaults={"positions": None})
    add_config_args(ablate.add_argument_group("the measurement (OutlierAblationConfig)"), OutlierAblationConfig)
    ablate.set_defaults(run=_run_ablate)


def _register_length(kinds: Any) -> None:
    length = kinds.add_parser(
        "length",
        help="per-token NLL by position past the trained length, and where it starts to rise, "
        "with and without LM-Infinite's Λ-mask",
        description="Per-token NLL by position on long rows of the standard library's prose "
        "(default: twice the model's trained length) through the query-chunked attention path, the "
        "in-context mean and each later window's excess over it with its standard error over "
        "texts; the NLL starts to rise at the first window whose mean exceeds the in-context mean "
        "by n_se standard errors. With --lambda-mask the same is measured under the mask and "
        "printed beside it; --out, --plot, --export and --html then write the masked curve.",
    )
    add_model_args(length)
    length.add_argument("--n-texts", type=int, default=4, help="rows of text (at least 2; default 4)")
    length.add_argument("--length", type=int, default=None,
                        help="tokens per row, the sink included (default: twice the trained length)")
    length.add_argument("--lambda-mask", action="store_true",
                        help="also measure under LM-Infinite's Λ-shaped mask (its flags below)")
    add_output_args(length)
    add_config_args(length.add_argument_group("the curve (NLLByPositionConfig)"), NLLByPositionConfig)
    add_config_args(length.add_argument_group("the Λ-mask, with --lambda-mask (LambdaMaskConfig)"),
                    LambdaMaskConfig)
    length.set_defaults(run=_run_length)


# ------------------------------------------------------------------------------ argument types


def _parts(text: str, n: int, what: str, example: str) -> list[tuple[int, ...]]:
    try:
        items = [tuple(int(x) for x in part.split(":")) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give {what} as integers, e.g. {example}") from None
    if not items or any(len(item) != n for item in items):
        raise argparse.ArgumentTypeError(f"{text!r}: give {what}, e.g. {example}")
    return items


def _massive_list(text: str) -> list[MassiveCoordinate]:
    return [MassiveCoordinate(*item) for item in _parts(text, 2, "layer:dim pairs", "1:5,2:5")]


def _weight_list(text: str) -> list[SuperWeightCoordinate]:
    return [SuperWeightCoordinate(*item) for item in _parts(text, 3, "layer:row:col triples", "1:7:30")]


def _add_text_args(parser: argparse.ArgumentParser, *, n_texts: int, seq_len: int, paper: str) -> None:
    parser.add_argument("--n-texts", type=int, default=n_texts,
                        help=f"rows of the standard library's prose ({paper}; default {n_texts})")
    parser.add_argument("--seq-len", type=int, default=seq_len,
                        help=f"tokens per row, the sink included (default {seq_len})")


def _check_counts(**counts: tuple[int | None, int]) -> None:
    """Each ``--flag``'s value at least its minimum, checked before a model loads."""
    for flag, (value, least) in counts.items():
        if value is not None and value < least:
            raise UserInputError(f"--{flag.replace('_', '-')} {value}: give {least} or more")


# ------------------------------------------------------------------------------ massive, super weights, sinks


def _run_massive(args: argparse.Namespace) -> int:
    config = config_from_args(MassiveConfig, args)
    _check_counts(n_texts=(args.n_texts, 1), seq_len=(args.seq_len, 2))
    lm = load_from_args(args)
    if args.text:
        inputs: Any = list(args.text)
        source = f"{len(inputs)} given texts"
    else:
        text = long_text(lm, args.n_texts, args.seq_len)
        inputs, source = text.tokens, text.source
    found = find_massive_activations(lm, inputs, config)
    print(f"text: {source}")
    print(found.summary())
    write_outputs(found, args)
    return 0


def _run_mask(args: argparse.Namespace) -> int:
    config = config_from_args(FirstTokenMaskConfig, args)
    if args.heads is None:
        _check_counts(top=(args.top, 1))
        if config.skip_texts < 1:
            raise UserInputError("--top chooses heads by their sink score on the rows before the "
                                 "measured ones: give --skip-texts 1 or more, or name --heads")
    lm = load_from_args(args)
    heads = args.heads
    if heads is None:
        scores = sink_scores(lm, config=SinkScoreConfig(
            k=config.k, n_texts=config.skip_texts, seq_len=config.seq_len, batch_size=config.batch_size))
        heads = [head for head, _ in scores.top(args.top)]
        print(f"the {len(heads)} heads of highest sink score on rows 0..{config.skip_texts - 1}: "
              + ", ".join(f"{head} ({score:.3f})" for head, score in scores.top(args.top)))
    effect = first_token_mask_effect(lm, heads, config)
    print(effect.summary())
    write_outputs(effect, args)
    return 0


# ------------------------------------------------------------------------------ ablate


def first_appearances(found: MassiveActivations, rule: str = "paper") -> tuple[MassiveCoordinate, ...]:
    """Each dimension that carries entries of ``rule``, at the first layer where it does (Sun et
    al. set the massive activations of LLaMA2-7B at layer 2's output, where they first appear)."""
    first: dict[int, int] = {}
    for entry in found.selected(rule):  # type: ignore[arg-type]
        first[entry.dim] = min(entry.layer, first.get(entry.dim, entry.layer))
    return tuple(sorted(MassiveCoordinate(layer, dim) for dim, layer in first.items()))


def ablation_plan(
    massive: Sequence[MassiveCoordinate],
    weights: Sequence[SuperWeightCoordinate],
    positions: OutlierPositions,
    *,
    restore: bool = True,
) -> dict[str, Any]:
    """The named interventions of `outliers ablate`: the massive activations zeroed together,
    each super weight zeroed, and (``restore``) each zeroed with its super activation restored.

    >>> plan = ablation_plan([MassiveCoordinate(1, 5)], [SuperWeightCoordinate(1, 7, 30)], OutlierPositions())
    >>> list(plan)
    ['zero massive L1.d5', 'zero L1.W_out[col 30, row 7]', 'zero L1.W_out[col 30, row 7], restore its activation']
    """
    plan: dict[str, Any] = {}
    if massive:  # the coordinates are in the condition's description; the name stays short
        name = f"zero massive {massive[0]}" if len(massive) == 1 else f"zero {len(massive)} massive"
        plan[name] = MassiveActivationAblation(tuple(massive), positions)
    for weight in weights:
        plan[f"zero {weight}"] = SuperWeightScaling((weight,), 0.0)
        if restore:
            plan[f"zero {weight}, restore its activation"] = SuperWeightRestoreActivation(weight, positions)
    return plan


def _loaded(path: Path, kind: type[Result], flag: str, command: str) -> Any:
    result = Result.load(path)
    if not isinstance(result, kind):
        raise UserInputError(f"{flag} {path}: a {type(result).__name__}, not the result of "
                             f"`lmsci-mi outliers {command} --out`")
    return result


def _found_outliers(
    lm: LensModel, args: argparse.Namespace, config: OutlierAblationConfig
) -> tuple[list[MassiveCoordinate], list[SuperWeightCoordinate], OutlierPositions | None]:
    """The coordinates to ablate and the positions the massive ones were found at (None: given)."""
    massive, weights = list(args.massive or []), list(args.super_weights or [])
    found_at = None
    search = not (args.massive or args.super_weights or args.massive_from or args.super_weights_from)
    if args.massive_from is not None or search:
        if args.massive_from is not None:
            found = _loaded(args.massive_from, MassiveActivations, "--massive-from", "massive")
        else:  # the chunks before the held-out ones, the rows set_mean reads too
            found = find_massive_activations(lm, long_text(lm, config.n_reference_texts, config.seq_len).tokens)
        massive += first_appearances(found, args.rule)
        if found.selected(args.rule):  # type: ignore[arg-type]
            found_at = OutlierPositions.from_exclude(found.exclude(args.rule))  # type: ignore[arg-type]
        print(f"massive activations ({args.rule} rule, {found.n_texts} texts): "
              + (", ".join(str(c) for c in first_appearances(found, args.rule)) or "none"))
    if args.super_weights_from is not None or search:
        if args.super_weights_from is not None:
            candidates = _loaded(args.super_weights_from, SuperWeightCandidates, "--super-weights-from",
                                 "super-weights")
        else:
            candidates = find_super_weights(lm)
        weights += [SuperWeightCoordinate(*c) for c in candidates.coordinates()]
        print(f"super-weight candidates: {', '.join(map(str, candidates.coordinates())) or 'none'}")
    if not massive and not weights:
        raise UserInputError("no massive activation and no super weight to ablate: give --massive "
                             "L:D or --super-weights L:R:C, or find them with --rule ratio or a lower "
                             "threshold (`outliers massive --out`, then --massive-from)")
    return list(dict.fromkeys(massive)), list(dict.fromkeys(weights)), found_at


def _run_ablate(args: argparse.Namespace) -> int:
    config = config_from_args(OutlierAblationConfig, args)
    given_positions = args.positions is not None or bool(args.token_ids)
    positions = OutlierPositions(positions=args.positions or (), token_ids=args.token_ids) if given_positions else None
    lm = load_from_args(args)
    massive, weights, found_at = _found_outliers(lm, args, config)
    where = positions or found_at or OutlierPositions()
    print(f"acting at {where.describe()} (position 0 is {'the sink token' if lm.sink_token_id is not None else 'the first token'})")
    result = outlier_ablations(lm, ablation_plan(massive, weights, where, restore=args.restore), config)
    print(result.summary())
    write_outputs(result, args)
    return 0


# ------------------------------------------------------------------------------ length


def nll_lines(curves: dict[str, NLLByPosition]) -> list[str]:
    """The in-context mean NLL and every later window's excess over it ± s.e., one column per
    curve (the same texts and windows), and where each starts to rise."""
    first = next(iter(curves.values()))
    rise = first.rise
    start, stop = rise.in_context
    lines = [f"in-context range: positions {start}..{stop - 1}; windows of {rise.window} tokens; "
             f"excess of the window's mean NLL over the in-context mean (nats) ± s.e. over {first.per_text.shape[0]} texts"]
    lines.append(f"  {'window ends at':>16}" + "".join(f"  {name:>22}" for name in curves))
    lines.append(f"  {'in-context mean':>16}" + "".join(f"  {c.rise.in_context_mean:>22.4f}" for c in curves.values()))
    for i, end in enumerate(rise.window_ends.tolist()):
        cells = [f"{float(c.rise.excess[i]):+.4f} ± {float(c.rise.se[i]):.4f}" for c in curves.values()]
        lines.append(f"  {end:>16}" + "".join(f"  {cell:>22}" for cell in cells))
    for name, curve in curves.items():
        at = curve.rise.length
        lines.append(f"{name}: " + (f"the NLL starts to rise at {at} tokens" if at is not None else
                     f"the NLL does not rise by {curve.rise.n_se:g} s.e. within {curve.values.shape[0]} tokens"))
    return lines


def _run_length(args: argparse.Namespace) -> int:
    config = config_from_args(NLLByPositionConfig, args)
    mask = config_from_args(LambdaMaskConfig, args)
    _check_counts(n_texts=(args.n_texts, 2), length=(args.length, 3))
    lm = load_from_args(args)
    context = trained_context(lm)
    n_pos = args.length or 2 * context.trained_length
    text = long_text(lm, args.n_texts, n_pos)
    print(f"{lm.name}: trained length {context.trained_length} ({context.source})")
    print(f"text: {args.n_texts} rows, {text.source}; position 0 is "
          + ("the sink token" if lm.sink_token_id is not None else "the first text token"))
    masked = None
    if args.lambda_mask:  # first: a mask the model cannot take fails before the long passes
        with lambda_mask(lm, mask) as plan:
            masked = nll_by_position(lm, text, config)
        print(f"Λ-mask: layers {list(plan.layers)}, window {plan.local_window}, first {plan.n_global} "
              f"tokens, distance cap {plan.distance_cap}")
    curves = {"no mask": nll_by_position(lm, text, config)}
    if masked is not None:
        curves["Λ-mask"] = masked
    print("\n".join(nll_lines(curves)))
    write_outputs(curves["Λ-mask" if args.lambda_mask else "no mask"], args)
    return 0


# ------------------------------------------------------------------------------ the tour


def tour_steps() -> list[TourStep]:
    """Steps this feature adds to `lmsci-mi tour` (see lmsci_mi.cli.tour)."""
    return [
        TourStep(
            "outliers",
            "Outliers: massive activations, a super-weight candidate and sink heads",
            _step_outliers,
            "from lmsci_mi.outliers import SinkScoreConfig, SuperWeightConfig, "
            "find_massive_activations, find_super_weights, long_text, sink_heads; "
            "find_massive_activations(lm, long_text(lm, 8, 64).tokens); "
            "find_super_weights(lm, SuperWeightConfig(max_candidates=1)); "
            "sink_heads(lm, SinkScoreConfig(n_texts=8))",
            # 8 x 64 tokens for the massive activations, 2 x 8 x 64 for the sink heads and two
            # passes of 10 tokens (some 0.3 TFLOP on SmolLM2): an estimate, not yet timed;
            # benchmarks/tour.py measures it.
            seconds=8,
        ),
    ]


def _step_outliers(lm: LensModel, out_dir: Path) -> StepOutput:
    """Massive activations on a few rows of prose, the first super-weight candidate, sink heads."""
    massive = find_massive_activations(lm, long_text(lm, *TOUR_TEXTS).tokens, TOUR_MASSIVE)
    weights = find_super_weights(lm, TOUR_SUPER_WEIGHTS)
    sinks = sink_heads(lm, TOUR_SINKS)
    summary = "; ".join([_massive_line(massive), _weights_line(weights), _sinks_line(sinks)])
    text = "\n\n".join([massive.summary(rows=5), weights.summary(rows=0), sinks.summary(rows=5)])
    results = {"outliers_massive": massive, "outliers_super_weights": weights, "outliers_sinks": sinks}
    return StepOutput(summary, results, text=text)


def _massive_line(found: MassiveActivations) -> str:
    entries = found.selected("paper")
    if not entries:
        return f"no activation meets the paper's rule in {found.n_texts} texts"
    top = max(entries, key=lambda e: e.ratio)
    return (f"{len(entries)} massive activations in {found.n_texts} texts, the largest layer {top.layer} "
            f"dim {top.dim} on {top.token!r} ({top.role}, {top.ratio:.3g} x median)")


def _weights_line(found: SuperWeightCandidates) -> str:
    if not found.candidates:
        return "no super-weight candidate"
    c = found.candidates[0]
    return f"super-weight candidate (layer {c.layer}, row {c.row}, col {c.col}), W = {c.weight:.3g}"


def _sinks_line(heads: SinkHeads) -> str:
    (head, score), = heads.top(1)
    without = float(heads.values[1, head.layer, head.head])
    return f"top sink head {head}: {score:.2f} of its attention on the sink, {without:.2f} on the first token without it"

"""`lmsci-mi steer`: train LM-Steers, generate with them, probe them (SVD), highlight keywords,
evaluate the control curve and transfer a steer to another model."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from lmsci_mi.cli.common import add_model_args
from lmsci_mi.cli.tour import StepOutput, TourStep
from lmsci_mi.loading import load_model
from lmsci_mi.model import LensModel


def register(commands: Any) -> None:
    """Add `steer` and its subcommands to the parser."""
    steer = commands.add_parser(
        "steer",
        help="LM-Steer: train, generate, svd, highlight, eval, transfer",
        description="LM-Steer (Han et al. 2024) through the hook registry: a steer changes the final "
        "normalised state h to h + ε Σ s_i (h P1_i) P2_iᵀ. Subcommands: train, generate, svd, "
        "highlight, eval, transfer.",
    )
    sub = steer.add_subparsers(dest="steer_command", required=True, metavar="SUBCOMMAND")

    _add_train(sub)
    _add_generate(sub)
    _add_analyses(sub)


def _add_train(sub: Any) -> None:
    from lmsci_mi.data.steering_texts import STEERING_ATTRIBUTES
    from lmsci_mi.steering import LMSteerConfig, SteerTrainConfig

    train = sub.add_parser(
        "train", help="train a steer on the bundled texts (cached: a rerun is instant)"
    )
    add_model_args(train)
    train.add_argument(
        "--attribute",
        type=_attributes,
        default=("sentiment",),
        help=f"attribute(s), comma-separated, one steer each: {', '.join(STEERING_ATTRIBUTES)}",
    )
    train.add_argument(
        "--out", type=Path, default=None, help="also write the steer here (safetensors)"
    )
    train.add_argument("--plot", type=Path, default=None, help="write the loss curve as PNG")
    LMSteerConfig.add_arguments(train.add_argument_group("steer shape (LMSteerConfig)"))
    SteerTrainConfig.add_arguments(train.add_argument_group("training (SteerTrainConfig)"))
    train.set_defaults(run=_run_train)


def _add_generate(sub: Any) -> None:
    generate = sub.add_parser("generate", help="continue a prompt under a steer")
    _steer_args(generate)
    generate.add_argument("--value", type=float, default=5.0, help="value of steer 0 (default 5)")
    generate.add_argument(
        "--value2", type=float, default=None, help="value of steer 1 (composition)"
    )
    generate.add_argument("--prompt", default="The movie was", help="the prompt")
    generate.add_argument("--tokens", type=int, default=20, help="tokens to generate")
    generate.add_argument("--samples", type=int, default=1, help="continuations to sample")
    generate.add_argument("--temperature", type=float, default=1.0, help="0: greedy")
    generate.add_argument("--seed", type=int, default=0, help="sampling seed")
    generate.set_defaults(run=_run_generate)


def _add_analyses(sub: Any) -> None:
    """svd, highlight, eval and transfer: each reads a saved steer."""
    from lmsci_mi.steering.evaluate import SteerEvalConfig
    from lmsci_mi.steering.highlight import HighlightConfig
    from lmsci_mi.steering.svd import SVDConfig
    from lmsci_mi.steering.transfer import TransferConfig

    svd = sub.add_parser("svd", help="words at both ends of W's top singular directions")
    _steer_args(svd)
    svd.add_argument(
        "--export", type=Path, default=None, help="write the word table (.csv, .parquet or .json)"
    )
    svd.add_argument("--out", type=Path, default=None, help="save the result (JSON + safetensors)")
    SVDConfig.add_arguments(svd)
    svd.set_defaults(run=_run_svd)

    highlight = sub.add_parser(
        "highlight", help="the spans of a text that carry the steered attribute"
    )
    _steer_args(highlight)
    highlight.add_argument("--text", required=True, help="the text to highlight")
    highlight.add_argument(
        "--html", type=Path, default=None, help="write an offline HTML view here"
    )
    HighlightConfig.add_arguments(highlight)
    highlight.set_defaults(run=_run_highlight)

    evaluate = sub.add_parser(
        "eval", help="the control curve: sentiment, topic, perplexity, distinct-n"
    )
    _steer_args(evaluate)
    evaluate.add_argument("--plot", type=Path, default=None, help="write the curve as PNG")
    evaluate.add_argument(
        "--out", type=Path, default=None, help="save the result (JSON + safetensors)"
    )
    SteerEvalConfig.add_arguments(evaluate)
    evaluate.set_defaults(run=_run_eval)

    transfer = sub.add_parser(
        "transfer", help="map a steer onto another model through the unembeddings"
    )
    _steer_args(transfer)
    transfer.add_argument("--to", required=True, help="the target model, e.g. gemma3-270m")
    transfer.add_argument("--out", type=Path, default=None, help="write the transferred steer here")
    TransferConfig.add_arguments(transfer)
    transfer.set_defaults(run=_run_transfer)


def _attributes(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names:
        raise argparse.ArgumentTypeError("give an attribute, e.g. sentiment or sentiment,topic")
    return names


def _steer_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steer", type=Path, required=True, help="a steer file from `steer train`")
    add_model_args(parser, default=None, default_help="the steer's model")


def _load(args: argparse.Namespace) -> tuple[Any, LensModel]:
    """The steer (read first: a bad file fails before a model loads) and its model."""
    from lmsci_mi.steering import LMSteer

    steer = LMSteer.load(args.steer)
    lm = load_model(args.model or steer.model_name, device=args.device, sink=args.sink)
    steer.check_model(lm)
    return steer.to(lm.device), lm


def _run_train(args: argparse.Namespace) -> int:
    from lmsci_mi.data.steering_texts import steering_texts
    from lmsci_mi.steering import LMSteerConfig, SteerTrainConfig, train_steer

    texts = steering_texts(args.attribute)
    steer_config = LMSteerConfig.from_args(args)
    train_config = SteerTrainConfig.from_args(args)
    if args.out is not None and args.out.is_dir():
        raise IsADirectoryError(
            f"--out {args.out} is a folder; give a file name, e.g. steer.safetensors"
        )
    lm = load_model(args.model, device=args.device, sink=args.sink)
    steer, run = train_steer(lm, texts, steer_config, train_config)
    print(
        f"{steer}\n  {run.n_texts} texts, {run.n_tokens} target tokens; loss {run.unsteered_loss:.3f} "
        f"(unsteered) -> {run.final_loss:.3f}; collect {run.collect_seconds:.1f} s, "
        f"train {run.train_seconds:.1f} s (0 s when cached)"
    )
    if args.out is not None:
        print(f"saved steer to {steer.save(args.out)}")
    if args.plot is not None:
        run.plot(args.plot)
        print(f"saved loss curve to {args.plot}")
    return 0


def _run_generate(args: argparse.Namespace) -> int:
    from lmsci_mi.steering.evaluate import generate_steered

    if args.tokens < 1 or args.samples < 1:
        raise ValueError("--tokens and --samples must be at least 1")
    if not args.temperature >= 0:
        raise ValueError(f"--temperature must be non-negative, not {args.temperature}")
    if not args.prompt.strip():
        raise ValueError("give a non-empty --prompt")
    steer, lm = _load(args)
    values = [args.value] if args.value2 is None else [args.value, args.value2]
    steer.value_vector(values)  # an index out of range fails before generating
    prompts = [args.prompt] * args.samples
    kwargs = {"max_new_tokens": args.tokens, "temperature": args.temperature, "seed": args.seed}
    steered = generate_steered(lm, prompts, steer, values, **kwargs)
    plain = generate_steered(lm, prompts, None, None, **kwargs)
    setting = ", ".join(f"{n}={v:+g}" for n, v in zip(steer.attributes, values, strict=False))
    for ids, base in zip(steered, plain, strict=True):
        print(f"[{setting}] {args.prompt}{lm.tokenizer.decode(ids, skip_special_tokens=True)!r}")
        print(f"[unsteered] {args.prompt}{lm.tokenizer.decode(base, skip_special_tokens=True)!r}")
    return 0


def _run_svd(args: argparse.Namespace) -> int:
    from lmsci_mi.steering.svd import SVDConfig, steer_svd

    config = SVDConfig.from_args(args)
    steer, lm = _load(args)
    probe = steer_svd(lm, steer, config)
    for j, s in enumerate(probe.values.tolist()):
        print(f"direction {j} (singular value {s:.3g})")
        print(f"  raised:  {' '.join(probe.top_words[j])}")
        print(f"  lowered: {' '.join(probe.bottom_words[j])}")
    print(
        f"mean |VADER valence|: direction 0's end words {probe.end_valence:.3f}, "
        f"{len(probe.random_words)} random words {probe.random_valence:.3f}"
    )
    if args.export is not None:
        table = probe.to_dataframe()
        suffix = args.export.suffix.lower()
        if args.export.is_dir():
            raise IsADirectoryError(f"--export {args.export} is a folder; give a file name")
        args.export.parent.mkdir(parents=True, exist_ok=True)
        if suffix == ".parquet":
            table.to_parquet(args.export)
        elif suffix == ".json":
            table.to_json(args.export, orient="records", indent=1)
        else:
            table.to_csv(args.export, index=False)
        print(f"exported {len(table)} rows to {args.export}")
    if args.out is not None:
        print(f"saved result to {probe.save(args.out)}")
    return 0


def _run_highlight(args: argparse.Namespace) -> int:
    from lmsci_mi.steering.highlight import HighlightConfig, highlight_keywords

    config = HighlightConfig.from_args(args)
    if args.html is not None and args.html.is_dir():
        raise IsADirectoryError(f"--html {args.html} is a folder; give a file name, e.g. view.html")
    steer, lm = _load(args)
    result = highlight_keywords(lm, steer, args.text, config)
    print(f"spans (total evidence {result.total:.2f}): {result.span_texts()}")
    if args.html is not None:
        print(f"wrote {result.save_html(args.html)}")
    return 0


def _run_eval(args: argparse.Namespace) -> int:
    from lmsci_mi.steering.evaluate import SteerEvalConfig, evaluate_steer

    config = SteerEvalConfig.from_args(args)
    steer, lm = _load(args)
    curve = evaluate_steer(lm, steer, config)
    print(curve.summary())
    print(
        f"gap (last - first value): sentiment {curve.gap('sentiment'):+.3f}, topic {curve.gap('topic'):+.3f}; "
        f"sentiment monotone: {curve.is_monotone('sentiment')}"
    )
    if args.out is not None:
        print(f"saved result to {curve.save(args.out)}")
    if args.plot is not None:
        curve.plot(args.plot)
        print(f"saved plot to {args.plot}")
    return 0


def _run_transfer(args: argparse.Namespace) -> int:
    from lmsci_mi.steering.transfer import TransferConfig, transfer_steer

    config = TransferConfig.from_args(args)
    if args.out is not None and args.out.is_dir():
        raise IsADirectoryError(
            f"--out {args.out} is a folder; give a file name, e.g. steer.safetensors"
        )
    steer, source = _load(args)
    target = load_model(args.to, device=args.device, sink=args.sink)
    moved, fit = transfer_steer(steer, source, target, config)
    print(f"{moved}\n  map fitted on {fit.n_shared} shared token strings; held-out R² {fit.r2:.3f}")
    if args.out is not None:
        print(f"saved steer to {moved.save(args.out)}")
    return 0


TOUR_STEER_VALUES = (-1.0, 0.0, 1.0)
"""Sentiment values of the tour's control curve (docs/steering.md: ±1 moves VADER sentiment from
−0.44 to +0.70; larger values cost fluency)."""
TOUR_HIGHLIGHT = "The food was cold and the waiter was rude, but the dessert was wonderful."


def tour_steps() -> list[TourStep]:
    """Steps this feature adds to `lmsci-mi tour` (see lmsci_mi.cli.tour)."""
    return [
        TourStep(
            "steer",
            "LM-Steer: a sentiment control curve and the words that carry sentiment",
            _step_steer,
            "from lmsci_mi.steering import train_steer; from lmsci_mi.steering.evaluate import "
            "SteerEvalConfig, evaluate_steer; from lmsci_mi.data.steering_texts import "
            'steering_texts; evaluate_steer(lm, train_steer(lm, steering_texts("sentiment"))[0], '
            f"SteerEvalConfig(values={TOUR_STEER_VALUES}, n_prompts=20))",
            seconds=40,
            quick=True,
        ),
    ]


def _step_steer(lm: LensModel, out_dir: Path) -> StepOutput:
    """Load the default sentiment steer (shipped with lmsci-mi, copied into the cache on first use),
    draw a small control curve, highlight a text."""
    from lmsci_mi.data.steering_texts import steering_texts
    from lmsci_mi.steering import train_steer
    from lmsci_mi.steering.evaluate import SteerEvalConfig, evaluate_steer
    from lmsci_mi.steering.highlight import highlight_keywords
    from lmsci_mi.viz.report import CircuitsView

    steer, training = train_steer(lm, steering_texts("sentiment"))
    config = SteerEvalConfig(values=TOUR_STEER_VALUES, n_prompts=20, progress=False)
    curve = evaluate_steer(lm, steer, config)
    highlight = highlight_keywords(lm, steer, TOUR_HIGHLIGHT)
    view = CircuitsView.from_html(
        highlight.html(),
        caption="Per-token evidence log p(+s) − log p(−s) of the sentiment steer (green: positive)",
    )
    sentiment = curve.metric("sentiment").tolist()
    summary = (
        "VADER sentiment at s = "
        + ", ".join(f"{v:+g}: {m:+.2f}" for v, m in zip(TOUR_STEER_VALUES, sentiment, strict=True))
        + f" (20 prompts); keyword spans {highlight.span_texts()}"
    )
    text = f"{curve.summary()}\n\nhighlighted spans of {TOUR_HIGHLIGHT!r}: {highlight.span_texts()}"
    results = {
        "steer_training": training,
        "steer_control_curve": curve,
        "steer_highlight": highlight,
    }
    return StepOutput(summary, results, text=text, views=[view])

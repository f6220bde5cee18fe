"""`lmsci-mi steer`: train LM-Steers, generate with them, probe them (SVD), highlight keywords,
evaluate the control curve and transfer a steer to another model; `steer vector` builds an
activation-addition vector (difference of means) and generates with it over a position scope."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from lmsci_mi.cli.common import (
    add_config_args,
    add_generation_args,
    add_model_args,
    add_output_args,
    config_from_args,
    load_from_args,
    output_path,
    read_text_file,
    write_outputs,
)
from lmsci_mi.cli.tour import StepOutput, TourStep
from lmsci_mi.errors import UserInputError
from lmsci_mi.generation import GenerationConfig, generate
from lmsci_mi.loading import DEFAULT_MODEL
from lmsci_mi.model import LensModel


def register(commands: Any) -> None:
    """Add `steer` and its subcommands to the parser."""
    steer = commands.add_parser(
        "steer",
        help="LM-Steer (train, generate, svd, highlight, eval, transfer) and steering vectors",
        description="LM-Steer (Han et al. 2024) through the hook registry: a steer changes the final "
        "normalised state h to h + ε Σ s_i (h P1_i) P2_iᵀ. Subcommands: train, generate, svd, "
        "highlight, eval, transfer; `vector` is activation addition (mean difference, ActAdd-style).",
    )
    sub = steer.add_subparsers(dest="steer_command", required=True, metavar="SUBCOMMAND")

    _add_train(sub)
    _add_generate(sub)
    _add_analyses(sub)
    _add_vector(sub)


SCOPES = ("all", "prompt", "last_prompt", "generated", "from_last_prompt")
"""`steer vector --scope`: every position but the sink, the prompt (but the sink), its last
token, the generated tokens, or the last prompt token and every generated one."""


def _add_vector(sub: Any) -> None:
    from lmsci_mi.steering.vectors import MeanDifferenceConfig

    vector = sub.add_parser(
        "vector",
        help="a mean-difference (ActAdd-style) steering vector: build it, generate with it",
        description="Build a steering vector from two prompt sets (one prompt per line; default: "
        "the bundled positive/negative sentiment remarks), or read one (--vector), then continue "
        "--prompt with coefficient × vector added over --scope. The result (--out) is the vector.",
    )
    add_model_args(vector, default=None, default_help=f"{DEFAULT_MODEL}, or a saved vector's model")
    source = vector.add_mutually_exclusive_group()
    source.add_argument("--positive", type=Path, default=None, help="file of positive prompts")
    source.add_argument("--vector", type=Path, default=None, help="a saved steering vector (--out)")
    vector.add_argument("--negative", type=Path, default=None, help="file of negative prompts")
    vector.add_argument("--coef", type=float, default=4.0, help="coefficient (default 4)")
    vector.add_argument("--scope", choices=SCOPES, default="all", help="positions steered")
    vector.add_argument("--prompt", default="The movie was", help="the prompt")
    add_generation_args(vector)
    add_output_args(vector)
    add_config_args(vector.add_argument_group("the vector (MeanDifferenceConfig)"), MeanDifferenceConfig)
    vector.set_defaults(run=_run_vector)


def _scope(name: str, lm: LensModel) -> Any:
    from lmsci_mi.hooks import PositionScope
    from lmsci_mi.positions import resolve_exclude

    # The sink token, where the model puts one in front (a sink-free model's first word is steered).
    sink = resolve_exclude(None, sink_token=lm.sink_token_id is not None)
    return {
        "all": PositionScope.all(exclude=sink),
        "prompt": PositionScope.prompt(exclude=sink),
        "last_prompt": PositionScope.prompt(-1),
        "generated": PositionScope.generated(),
        "from_last_prompt": PositionScope.from_last_prompt(),
    }[name]


def _prompt_file(path: Path) -> list[str]:
    if not path.is_file():
        raise UserInputError(f"{path} is not a file: give a text file with one prompt per line")
    lines = [line.strip() for line in read_text_file(path, "prompt file").splitlines() if line.strip()]
    if not lines:
        raise UserInputError(f"{path} has no prompt: write one prompt per line")
    return lines


def _run_vector(args: argparse.Namespace) -> int:
    from lmsci_mi.data.contrasts import contrast_pairs
    from lmsci_mi.steering.vectors import (
        MeanDifferenceConfig,
        SteeringVector,
        mean_difference_vector,
    )

    if not args.prompt.strip():
        raise UserInputError("give a non-empty --prompt")
    if (args.positive is None) != (args.negative is None) and args.vector is None:
        raise UserInputError("give both --positive and --negative (or neither, for the bundled sentiment sets)")
    if args.vector is not None and args.negative is not None:
        raise UserInputError("--vector is a built vector: --negative does not apply")
    config = config_from_args(MeanDifferenceConfig, args)
    if args.vector is not None:
        built = SteeringVector.load(args.vector)
        lm = load_from_args(args, model=args.model or built.meta.model)
    else:
        if args.positive is not None and args.negative is not None:
            positive, negative = _prompt_file(args.positive), _prompt_file(args.negative)
        else:
            pairs = contrast_pairs("sentiment", template=False)
            positive, negative = list(pairs.positive), list(pairs.negative)
        lm = load_from_args(args, model=args.model or DEFAULT_MODEL)
        built = mean_difference_vector(lm, positive, negative, config)
    scope = _scope(args.scope, lm)
    generation = config_from_args(GenerationConfig, args)
    with built.apply(lm, args.coef, scope):  # a vector of another model fails here, unattached
        steered = generate(lm, [args.prompt], generation).texts[0]
    plain = generate(lm, [args.prompt], generation).texts[0]
    print(built.summary())
    print(f"[{args.coef:+g} × vector, scope {args.scope}] {args.prompt}{steered!r}")
    print(f"[unsteered] {args.prompt}{plain!r}")
    write_outputs(built, args)
    return 0


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
    _steer_out(
        train, "also write the trained steer here (the result, --out, is the training record)"
    )
    add_output_args(train)
    add_config_args(train.add_argument_group("steer shape (LMSteerConfig)"), LMSteerConfig)
    add_config_args(train.add_argument_group("training (SteerTrainConfig)"), SteerTrainConfig)
    train.set_defaults(run=_run_train)


def _add_generate(sub: Any) -> None:
    parser = sub.add_parser("generate", help="continue a prompt under a steer")
    _steer_args(parser)
    parser.add_argument("--value", type=float, default=5.0, help="value of steer 0 (default 5)")
    parser.add_argument("--value2", type=float, default=None, help="value of steer 1 (composition)")
    parser.add_argument("--prompt", default="The movie was", help="the prompt")
    parser.add_argument("--samples", type=int, default=1, help="continuations to sample")
    add_generation_args(parser)
    parser.set_defaults(run=_run_generate)


def _add_analyses(sub: Any) -> None:
    """svd, highlight, eval and transfer: each reads a saved steer."""
    from lmsci_mi.steering.evaluate import SteerEvalConfig
    from lmsci_mi.steering.highlight import HighlightConfig
    from lmsci_mi.steering.svd import SVDConfig
    from lmsci_mi.steering.transfer import TransferConfig

    svd = sub.add_parser("svd", help="words at both ends of W's top singular directions")
    _steer_args(svd)
    add_output_args(svd)
    add_config_args(svd, SVDConfig)
    svd.set_defaults(run=_run_svd)

    highlight = sub.add_parser(
        "highlight", help="the spans of a text that carry the steered attribute"
    )
    _steer_args(highlight)
    highlight.add_argument("--text", required=True, help="the text to highlight")
    add_output_args(highlight)
    add_config_args(highlight, HighlightConfig)
    highlight.set_defaults(run=_run_highlight)

    evaluate = sub.add_parser(
        "eval", help="the control curve: sentiment, topic, perplexity, distinct-n"
    )
    _steer_args(evaluate)
    add_output_args(evaluate)
    add_config_args(evaluate, SteerEvalConfig)
    evaluate.set_defaults(run=_run_eval)

    transfer = sub.add_parser(
        "transfer", help="map a steer onto another model through the unembeddings"
    )
    _steer_args(transfer)
    transfer.add_argument("--to", required=True, help="the target model, e.g. gemma3-270m")
    _steer_out(transfer, "write the transferred steer here (the result, --out, is the map's fit)")
    add_output_args(transfer)
    add_config_args(transfer, TransferConfig)
    transfer.set_defaults(run=_run_transfer)


def _attributes(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names:
        raise argparse.ArgumentTypeError("give an attribute, e.g. sentiment or sentiment,topic")
    return names


def _steer_out(parser: argparse.ArgumentParser, text: str) -> None:
    """``--steer-out``: the artefact flag of the commands that make a steer."""
    parser.add_argument(
        "--steer-out",
        type=output_path("--steer-out"),
        default=None,
        metavar="STEER.safetensors",
        help=text,
    )


def _steer_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steer", type=Path, required=True, help="a steer file from `steer train`")
    add_model_args(parser, default=None, default_help="the steer's model")


def _load(args: argparse.Namespace) -> tuple[Any, LensModel]:
    """The steer (read first: a bad file fails before a model loads) and its model."""
    from lmsci_mi.steering import LMSteer

    steer = LMSteer.load(args.steer)
    lm = load_from_args(args, model=args.model or steer.model_name)
    steer.check_model(lm)
    return steer.to(lm.device), lm


def _run_train(args: argparse.Namespace) -> int:
    from lmsci_mi.data.steering_texts import steering_texts
    from lmsci_mi.steering import LMSteerConfig, SteerTrainConfig, train_steer

    texts = steering_texts(args.attribute)
    steer_config = config_from_args(LMSteerConfig, args)
    train_config = config_from_args(SteerTrainConfig, args)
    lm = load_from_args(args)
    steer, run = train_steer(lm, texts, steer_config, train_config)
    print(f"{steer}\n{run.summary()}")
    if args.steer_out is not None:
        print(f"saved steer to {steer.save(args.steer_out)}")
    write_outputs(run, args)
    return 0


def _run_generate(args: argparse.Namespace) -> int:
    if args.samples < 1:
        raise UserInputError(f"--samples must be at least 1, not {args.samples}")
    if not args.prompt.strip():
        raise UserInputError("give a non-empty --prompt")
    steer, lm = _load(args)
    values = [args.value] if args.value2 is None else [args.value, args.value2]
    steer.value_vector(values)  # an index out of range fails before generating
    config = config_from_args(GenerationConfig, args)
    setting = ", ".join(f"{n}={v:+g}" for n, v in zip(steer.attributes, values, strict=False))
    for i in range(args.samples):
        # A row's stream depends on its seed alone, so sample i draws with seed + i (one seed
        # would give every sample the same text); steered and unsteered share it.
        sample = config if config.seed is None else config.replace(seed=config.seed + i)
        with steer.apply(lm, values):
            steered = generate(lm, [args.prompt], sample).texts[0]
        plain = generate(lm, [args.prompt], sample).texts[0]
        print(f"[{setting}] {args.prompt}{steered!r}")
        print(f"[unsteered] {args.prompt}{plain!r}")
    return 0


def _run_svd(args: argparse.Namespace) -> int:
    from lmsci_mi.steering.svd import SVDConfig, steer_svd

    config = config_from_args(SVDConfig, args)
    steer, lm = _load(args)
    probe = steer_svd(lm, steer, config)
    print(probe.summary())
    write_outputs(probe, args)
    return 0


def _run_highlight(args: argparse.Namespace) -> int:
    from lmsci_mi.steering.highlight import HighlightConfig, highlight_keywords

    config = config_from_args(HighlightConfig, args)
    steer, lm = _load(args)
    result = highlight_keywords(lm, steer, args.text, config)
    print(result.summary())
    write_outputs(result, args)
    return 0


def _run_eval(args: argparse.Namespace) -> int:
    from lmsci_mi.steering.evaluate import SteerEvalConfig, evaluate_steer

    config = config_from_args(SteerEvalConfig, args)
    steer, lm = _load(args)
    curve = evaluate_steer(lm, steer, config)
    print(curve.summary())
    write_outputs(curve, args)
    return 0


def _run_transfer(args: argparse.Namespace) -> int:
    from lmsci_mi.steering.transfer import TransferConfig, transfer_steer

    config = config_from_args(TransferConfig, args)
    steer, source = _load(args)
    target = load_from_args(args, model=args.to)
    moved, fit = transfer_steer(steer, source, target, config)
    print(f"{moved}\n{fit.summary()}")
    if args.steer_out is not None:
        print(f"saved steer to {moved.save(args.steer_out)}")
    write_outputs(fit, args)
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
            seconds=45,
            quick=True,
        ),
    ]


def _step_steer(lm: LensModel, out_dir: Path) -> StepOutput:
    """Load the default sentiment steer (shipped with lmsci-mi, copied into the cache on first use),
    draw a small control curve, highlight a text."""
    from lmsci_mi.cli.report import CircuitsView
    from lmsci_mi.data.steering_texts import steering_texts
    from lmsci_mi.steering import train_steer
    from lmsci_mi.steering.evaluate import SteerEvalConfig, evaluate_steer
    from lmsci_mi.steering.highlight import highlight_keywords

    steer, training = train_steer(lm, steering_texts("sentiment"))
    config = SteerEvalConfig(values=TOUR_STEER_VALUES, n_prompts=20, progress=False)
    curve = evaluate_steer(lm, steer, config)
    highlight = highlight_keywords(lm, steer, TOUR_HIGHLIGHT)
    view = CircuitsView.from_html(
        highlight.html(),
        caption="Per-token evidence log p(+s) − log p(−s) of the sentiment steer (green: positive)",
    )
    sentiment = curve.metric("sentiment").tolist()
    errors = curve.error("sentiment").tolist()
    summary = (
        "VADER sentiment at s = "
        + ", ".join(
            f"{v:+g}: {m:+.2f} ± {e:.2f}"
            for v, m, e in zip(TOUR_STEER_VALUES, sentiment, errors, strict=True)
        )
        + f" (± s.e. over {config.n_prompts} prompts); keyword spans {highlight.span_texts()}"
    )
    text = f"{curve.summary()}\n\nhighlighted spans of {TOUR_HIGHLIGHT!r}: {highlight.span_texts()}"
    results = {
        "steer_training": training,
        "steer_control_curve": curve,
        "steer_highlight": highlight,
    }
    return StepOutput(summary, results, text=text, views=[view])

"""`lmsci-mi sae`: train a sparse autoencoder offline with sae-lens (cached), print its statistics,
browse its features (offline HTML), and steer or clamp a feature while generating."""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

from lmsci_mi.cli.common import (
    add_config_args,
    add_generation_args,
    add_model_args,
    add_output_args,
    config_from_args,
    generate_from_args,
    load_from_args,
    write_outputs,
)
from lmsci_mi.cli.tour import StepOutput, TourStep
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel


def register(commands: Any) -> None:
    """Add `sae` and its subcommands to the parser."""
    from lmsci_mi.sae import FeatureConfig, SAEDataConfig, SAETrainConfig

    sae = commands.add_parser(
        "sae",
        help="sparse autoencoders: train, stats, features, steer, clamp",
        description="Sparse autoencoders (sae-lens) on a residual site: train one offline "
        "(cached), measure it, browse its features, steer or clamp a feature during generation.",
    )
    sub = sae.add_subparsers(dest="sae_command", required=True, metavar="SUBCOMMAND")

    train = sub.add_parser("train", help="train an SAE (cached: a rerun is instant)")
    add_model_args(train)
    train.add_argument(
        "--sae-dir",
        type=_folder,
        default=None,
        metavar="FOLDER",
        help="also write the SAE (and its stats.json) to this folder; the result, --out, is its statistics",
    )
    add_output_args(train)
    add_config_args(train.add_argument_group("SAE and training (SAETrainConfig)"), SAETrainConfig)
    add_config_args(train.add_argument_group("text (SAEDataConfig)"), SAEDataConfig)
    train.set_defaults(run=_run_train)

    stats = sub.add_parser("stats", help="explained variance, L0, dead features, loss increase")
    _sae_args(stats)
    add_output_args(stats)
    stats.set_defaults(run=_run_stats)

    features = sub.add_parser(
        "features", help="feature cards: top contexts, density, promoted tokens"
    )
    _sae_args(features)
    features.add_argument("--top", type=int, default=10, help="features to show (default 10)")
    features.add_argument(
        "--features",
        type=_indices,
        default=None,
        metavar="I,J,...",
        help="show these features (default: a seeded sample of live ones)",
    )
    features.add_argument(
        "--match",
        type=_words,
        default=None,
        metavar="WORD,...",
        help="show features whose top contexts or promoted tokens match a word",
    )
    features.add_argument(
        "--rows", type=int, default=400, help="corpus rows scanned for top contexts (default 400)"
    )
    add_output_args(features)
    add_config_args(features.add_argument_group("cards (FeatureConfig)"), FeatureConfig)
    features.set_defaults(run=_run_features)
    _add_intervention_commands(sub)


def _add_intervention_commands(sub: Any) -> None:
    """`sae steer` and `sae clamp`: generation with one feature pushed or held."""
    steer = sub.add_parser("steer", help="continue a prompt with a feature's direction added")
    _sae_args(steer)
    steer.add_argument("--feature", type=int, required=True, help="feature index")
    steer.add_argument(
        "--coef",
        type=float,
        default=4.0,
        help="coefficient, in units of the feature's typical max (default 4)",
    )
    _generation_args(steer)
    steer.set_defaults(run=_run_steer)

    clamp = sub.add_parser("clamp", help="continue a prompt with a feature clamped (error kept)")
    _sae_args(clamp)
    clamp.add_argument("--feature", type=int, required=True, help="feature index")
    clamp.add_argument(
        "--value",
        type=float,
        default=0.0,
        help="clamp value, in units of the feature's typical max (default 0)",
    )
    clamp.add_argument(
        "--mode",
        choices=["everywhere", "where_active"],
        default="everywhere",
        help="set it everywhere, or only where it fires",
    )
    _generation_args(clamp)
    clamp.set_defaults(run=_run_clamp)


def _sae_args(parser: argparse.ArgumentParser) -> None:
    add_model_args(parser)
    parser.add_argument(
        "--sae",
        type=Path,
        default=None,
        help="folder of a trained SAE (default: the one `sae train` caches)",
    )
    parser.add_argument(
        "--layer",
        type=int,
        default=None,
        help="layer of the cached default SAE (default 15); checked against --sae",
    )


def _generation_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompt", default="The weather today is", help="the prompt")
    # Greedy by default: with and without the feature, the texts differ by the feature alone.
    add_generation_args(parser, temperature=0.0)


def _folder(text: str) -> Path:
    """``--sae-dir``: a folder, or a path where one can be made (checked before training)."""
    path = Path(text)
    if not text.strip() or (path.exists() and not path.is_dir()):
        raise argparse.ArgumentTypeError(f"--sae-dir {text!r}: give a folder for the SAE")
    return path


def _indices(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of feature indices"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError("give at least one feature index")
    return values


def _words(text: str) -> tuple[str, ...]:
    words = tuple(w.strip() for w in text.split(",") if w.strip())
    if not words:
        raise argparse.ArgumentTypeError("give at least one word, e.g. --match food,bread")
    return words


def _positive(name: str, value: int) -> None:
    if value < 1:
        raise UserInputError(f"--{name} must be at least 1, not {value}")


def _run_train(args: argparse.Namespace) -> int:
    from lmsci_mi.sae import SAEDataConfig, SAETrainConfig, cached_sae_path, train_sae

    train_config = config_from_args(SAETrainConfig, args)
    data_config = config_from_args(SAEDataConfig, args)
    lm = load_from_args(args)
    sae, stats = train_sae(lm, data_config, train_config)
    print(stats.summary())
    print(f"SAE cached at {cached_sae_path(lm, data_config, train_config)}")
    if args.sae_dir is not None:
        print(f"saved SAE to {sae.save(args.sae_dir)}")
        stats.save(args.sae_dir / "stats.json")
    write_outputs(stats, args)
    return 0


def _load_sae(args: argparse.Namespace, lm: LensModel) -> Any:
    """The SAE of ``--sae``, or the cached default one at ``--layer``, checked against ``lm``."""
    from lmsci_mi.sae import LensSAE, SAEDataConfig, SAETrainConfig, load_trained_sae

    if args.layer is not None and args.layer < 0:
        raise UserInputError(f"--layer must be non-negative, not {args.layer}")
    layer = 15 if args.layer is None else args.layer
    if args.sae is not None:
        sae = LensSAE.load(args.sae, lm.device)
        expected = None if args.layer is None else SAETrainConfig(layer=layer).hook(lm)
        sae.check(lm, expected)
        return sae
    train_config = SAETrainConfig(
        layer=min(layer, lm.cfg.n_layers - 1) if args.layer is None else layer
    )
    try:
        return load_trained_sae(lm, SAEDataConfig(), train_config)
    except FileNotFoundError as error:
        raise FileNotFoundError(f"{error}; or give --sae FOLDER") from None


def _corpus(lm: LensModel, sae: Any) -> Any:
    """The text the SAE was trained on (its held-out rows come first), or the default text."""
    from lmsci_mi.sae import SAEDataConfig, sae_corpus

    recorded = sae.info.get("data")
    config = SAEDataConfig(**recorded) if isinstance(recorded, dict) else SAEDataConfig()
    return sae_corpus(lm, config, fingerprint=sae.model_fingerprint)


def _run_stats(args: argparse.Namespace) -> int:
    from lmsci_mi.sae import SAEStats, sae_stats

    lm = load_from_args(args)
    sae = _load_sae(args, lm)
    folder = Path(sae.source)
    if (folder / "stats.json").is_file():
        stats = SAEStats.load(folder / "stats.json")
    else:
        stats = sae_stats(lm, sae, _corpus(lm, sae).held_out)
    print(stats.summary())
    write_outputs(stats, args)
    return 0


def _run_features(args: argparse.Namespace) -> int:
    from lmsci_mi.sae import FeatureConfig, feature_cards, find_features

    _positive("top", args.top)
    _positive("rows", args.rows)
    config = config_from_args(FeatureConfig, args)
    lm = load_from_args(args)
    sae = _load_sae(args, lm)
    if args.features is not None:
        for i in args.features:
            sae.feature(i)
    corpus = _corpus(lm, sae)
    rows = (corpus.held_out + corpus.train)[: args.rows]
    wanted = list(args.features) if args.features is not None else None
    if wanted is None and args.match is None:
        alive = [i for i in range(sae.d_sae) if float(sae.feature_scale[i]) > 0]
        wanted = sorted(random.Random(0).sample(alive, min(args.top, len(alive))))
    cards = feature_cards(lm, sae, rows, wanted, config)
    shown = list(cards.features)
    if args.match is not None:
        shown = find_features(cards, args.match)[: args.top]
        if not shown:
            print(f"no feature matches {', '.join(args.match)}")
            return 0
        cards = feature_cards(lm, sae, rows, shown, config) if wanted is None else cards
    print(cards.summary())
    write_outputs(cards, args)
    return 0


def _generate(lm: LensModel, args: argparse.Namespace) -> str:
    """The prompt's continuation under the generation flags (a feature entered around it applies)."""
    return generate_from_args(lm, [args.prompt], args).texts[0]


def _run_steer(args: argparse.Namespace) -> int:
    from lmsci_mi.sae import steer_with_sae_feature

    lm = load_from_args(args)
    sae = _load_sae(args, lm)
    sae.feature(args.feature)
    print(f"unsteered: {args.prompt}{_generate(lm, args)}")
    with steer_with_sae_feature(lm, sae, args.feature, args.coef):
        print(f"feature {args.feature} ×{args.coef:g}: {args.prompt}{_generate(lm, args)}")
    return 0


def _run_clamp(args: argparse.Namespace) -> int:
    from lmsci_mi.sae import clamp_sae_feature

    lm = load_from_args(args)
    sae = _load_sae(args, lm)
    sae.feature(args.feature)
    print(f"unclamped: {args.prompt}{_generate(lm, args)}")
    with clamp_sae_feature(lm, sae, args.feature, args.value, mode=args.mode):
        print(
            f"feature {args.feature} = {args.value:g} ({args.mode}): {args.prompt}{_generate(lm, args)}"
        )
    return 0


# ------------------------------------------------------------------------------------ tour


def tour_steps() -> list[TourStep]:
    """Steps this feature adds to `lmsci-mi tour` (see lmsci_mi.cli.tour)."""
    from lmsci_mi.sae.overview import TOUR_FEATURE

    return [
        TourStep(
            "sae",
            "A sparse-autoencoder feature: its top contexts and a steered generation",
            _step_sae,
            "from lmsci_mi.sae import load_trained_sae, feature_overview; "
            f"look = feature_overview(lm, load_trained_sae(lm), {TOUR_FEATURE}); "
            f"print(look.cards.describe({TOUR_FEATURE})); print(look.frequency.summary())",
            seconds=45,
            quick=True,
            first_run="a few seconds more to expand the shipped SAE into the cache",
        ),
    ]


def _step_sae(lm: LensModel, out_dir: Path) -> StepOutput:
    """The shipped (or cached) SAE's feature 212 (lmsci_mi.sae.overview): its top contexts in a
    prose sample, and the share of its promoted tokens in generations steered with it (never
    trains an SAE)."""
    from lmsci_mi.cli.report import CircuitsView
    from lmsci_mi.data.steering_texts import neutral_prompts
    from lmsci_mi.sae import feature_overview, load_trained_sae
    from lmsci_mi.sae.overview import TOUR_FEATURE
    from lmsci_mi.viz.tokens import colored_tokens_html

    sae = load_trained_sae(lm)
    look = feature_overview(lm, sae, TOUR_FEATURE)
    feature, cards, frequency = look.feature, look.cards, look.frequency
    share = frequency.mean().tolist()
    contexts = cards.context_texts(feature)
    scale = float(cards.scale[0]) or 1.0
    views = [
        CircuitsView.from_html(
            colored_tokens_html(tokens, acts, max_value=scale),
            caption=f"Feature {feature}: top context {n + 1} (blue: its activation)",
        )
        for n, (tokens, acts) in enumerate(cards.contexts(feature)[:3])
    ]
    shipped = sae.info.get("shipped")
    origin = (
        f"the shipped SAE ({shipped['live_features']} live features of {sae.d_sae}, float16)"
        if shipped
        else f"the SAE cached at {sae.source}"
    )
    summary = (
        f"{origin}: feature {feature} fires on {float(cards.density[0]):.2%} of {cards.n_tokens} "
        f"prose tokens, top context {contexts[0] if contexts else '(none)'!r}; steered "
        f"×{frequency.coefficient:g}, {share[1]:.0%} of generated tokens are its promoted tokens "
        f"(unsteered {share[0]:.0%}, random feature {frequency.control} {share[2]:.0%})"
    )
    samples = "\n".join(
        f"  {label}: {text!r}"
        for label, text in zip(
            frequency.axis_labels(0), (s[0] for s in frequency.samples), strict=True
        )
    )
    text = (
        f"{cards.describe(feature, contexts=5)}\n\n{frequency.summary()}\n\n"
        f"{neutral_prompts()[0]!r} continued:\n{samples}"
    )
    results = {"sae_feature_card": cards, "sae_steering_frequency": frequency}
    return StepOutput(summary, results, text=text, views=views)

"""`lmsci-mi edit`: rewrite a fact with ROME or MEMIT and print completions before and after; the
tour step edits the Eiffel Tower into Rome and restores it."""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from typing import Any

import torch

from lmsci_mi.cli.common import (
    NOT_DONE,
    add_cluster_args,
    add_config_args,
    add_generation_args,
    add_model_args,
    add_output_args,
    cluster_from_args,
    generate_from_args,
    load_from_args,
    output_path,
    write_outputs,
)
from lmsci_mi.cli.tour import StepOutput, TourStep
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel

GENERATION_SKIP = ("seed", "batch_size")
"""Generation fields without a flag here: ROME and MEMIT have their own ``--seed`` and
``--batch-size``, and greedy completions (the default here) draw nothing."""


def register(commands: Any) -> None:
    """Add this feature's subcommands to the parser."""
    from lmsci_mi.editing import EDITING_METHODS, EvaluationConfig

    p = commands.add_parser(
        "edit",
        help="rewrite a fact with a registered editing method and show completions before and after",
        description=(
            "Edit a fact, e.g. --prompt '{} is located in the city of' --subject 'The Eiffel Tower' "
            "--target-new ' Rome'; or re-apply a saved edit with --apply delta.safetensors. Key "
            "statistics are computed on first use (a few minutes) and cached. Method settings come "
            "from each method's config; a setting several methods share shows the first one's "
            "default in --help and takes the chosen method's default when not given."
        ),
    )
    add_model_args(p)
    p.add_argument("--prompt", help="prompt with '{}' for the subject (or containing the subject)")
    p.add_argument("--subject", help="the subject whose fact is rewritten")
    p.add_argument("--target-new", help="the new answer, e.g. ' Rome'")
    p.add_argument("--target-true", help="the answer replaced, e.g. ' Paris' (default: the model's top-1)")
    p.add_argument("--method", choices=EDITING_METHODS.names(), default="rome")
    p.add_argument(
        "--delta-out",
        type=output_path("--delta-out", (".safetensors",)),
        default=None,
        metavar="DELTA.safetensors",
        help="save the edit's weight delta here (re-apply it with --apply)",
    )
    p.add_argument(
        "--apply", type=Path, default=None, help="apply a saved delta instead of editing"
    )
    p.add_argument(
        "--requests",
        type=Path,
        default=None,
        metavar="FACTS.json",
        help="edit these requests (a JSON list of EditRequest fields) instead of --prompt/--subject",
    )
    p.add_argument(
        "--session-batch",
        type=int,
        default=None,
        metavar="N",
        help="apply --requests as a sequential session, N per edit, and print its metrics",
    )
    p.add_argument(
        "--session-out",
        type=Path,
        default=None,
        metavar="DIR",
        help="save the session (every edit's delta, resumable) in this folder",
    )
    p.add_argument(
        "--evaluate",
        action="store_true",
        help="measure the edit of --requests with CounterFact's metrics against the unedited "
        "model (ROME one fact per edit, the others one batch); --ray shards it by fact",
    )
    p.add_argument(
        "--ge-tokens",
        type=int,
        default=None,
        metavar="N",
        help="tokens of each generation behind an evaluation's GE (default "
        f"{EvaluationConfig().generation_tokens}; 0 skips GE, the slowest part of an evaluation)",
    )
    add_cluster_args(p)
    add_output_args(p)
    p.add_argument(
        "--stats",
        type=Path,
        default=None,
        metavar="STATS.json",
        help="key statistics saved with KeyStatistics.save (default: computed and cached)",
    )
    # Greedy by default: the completions before and after then differ by the edit, not the draw.
    add_generation_args(p, skip=GENERATION_SKIP, temperature=0.0)
    _add_method_settings(p)
    p.set_defaults(run=run_edit)


def _add_method_settings(parser: argparse.ArgumentParser) -> None:
    """One flag per config field of every registered method (a shared field once). The flags
    default to None, so that an unset flag takes the chosen method's own default."""
    from lmsci_mi.editing import EDITING_METHODS

    seen: list[str] = []
    for method in EDITING_METHODS:
        group = parser.add_argument_group(f"{method.name} settings ({method.config_type.__name__})")
        add_config_args(group, method.config_type, skip=seen)
        seen += [f.name for f in dataclasses.fields(method.config_type) if f.name not in seen]
    parser.set_defaults(**{name: None for name in seen})


def method_config(args: argparse.Namespace) -> Any:
    """The chosen method's config from the flags that were given.

    Raises:
        ValueError: a flag of another method was given (e.g. --layers with --method rome).
    """
    from lmsci_mi.editing import EDITING_METHODS

    method = EDITING_METHODS.get(args.method)
    own = {f.name for f in dataclasses.fields(method.config_type)}
    every = {f.name for m in EDITING_METHODS for f in dataclasses.fields(m.config_type)}
    given = {name: getattr(args, name) for name in every if getattr(args, name, None) is not None}
    foreign = sorted(set(given) - own)
    if foreign:
        flags = ", ".join("--" + name.replace("_", "-") for name in foreign)
        raise UserInputError(f"{flags} is not a setting of --method {method.name}")
    return method.config_type.from_args(argparse.Namespace(**given))


def run_edit(args: argparse.Namespace) -> int:
    from lmsci_mi.editing import EditRequest, apply_delta

    many = args.requests is not None
    if args.apply is None and not many and not (args.prompt and args.subject and args.target_new is not None):
        raise UserInputError(
            "give --prompt, --subject and --target-new, or --requests facts.json (or --apply delta.safetensors)"
        )
    if (args.session_batch is not None or args.session_out is not None) and not many:
        raise UserInputError("--session-batch and --session-out apply --requests as a session: give --requests")
    if args.ge_tokens is not None and args.ge_tokens < 0:
        raise UserInputError(f"--ge-tokens must be 0 or more, not {args.ge_tokens}")
    session = args.session_batch is not None or args.session_out is not None
    if args.ge_tokens is not None and not session and not args.evaluate:
        raise UserInputError(
            "--ge-tokens sets an evaluation's GE: give --evaluate, --session-batch or --session-out"
        )
    if args.evaluate and (not many or session):
        raise UserInputError("--evaluate measures the edit of --requests in one run: give --requests, no session")
    cluster = cluster_from_args(args)
    if cluster is not None and not args.evaluate:
        raise UserInputError("--ray shards an evaluation over a fact set: give --evaluate --requests")
    if any(getattr(args, flag) is not None for flag in ("out", "plot", "export", "html")) and not args.evaluate:
        raise UserInputError("--out, --plot, --export and --html write an evaluation: give --evaluate")
    if args.session_batch is not None and args.session_batch < 1:
        raise UserInputError(f"--session-batch must be at least 1, not {args.session_batch}")
    if args.session_out is not None and args.session_out.exists() and not args.session_out.is_dir():
        raise UserInputError(f"--session-out {args.session_out} is a file: give a folder")
    if args.apply is not None:
        from lmsci_mi.weights import read_deltas

        # A file that is not a saved edit fails here, before loading a model.
        read_deltas(args.apply)
        lm = load_from_args(args)
        handle = apply_delta(lm, args.apply)
        prompt = args.prompt
        if prompt is None and handle.requests:
            prompt = handle.requests[0].rewrite_prompt
        print(f"applied {args.apply}: {handle}")
        if prompt is not None:
            with handle:
                after = _complete(lm, prompt, args)
            before = _complete(lm, prompt, args)
            print(f"prompt: {prompt}\n  before: {before!r}\n  after:  {after!r}")
        return 0

    config = method_config(args)
    requests = _read_requests(args.requests) if many else None  # bad files fail before the model loads
    stats = _read_stats(args.stats) if args.stats is not None else None
    lm = load_from_args(args)
    if requests is None:
        requests = [EditRequest(args.prompt, args.subject, args.target_new, target_true=args.target_true or "")]
    if args.session_batch is not None or args.session_out is not None:
        return _run_session(lm, requests, config, args, stats)
    if args.evaluate:
        return _run_evaluation(lm, requests, config, args, stats, cluster)
    return _edit_and_report(lm, requests, config, args, stats)


def _edit_and_report(lm: LensModel, requests: list[Any], config: Any, args: argparse.Namespace, stats: Any) -> int:
    """Edit, then print each request's completions and probabilities before and after; exit
    ``NOT_DONE`` (3) when an edit did not install (its new answer did not overtake the old one),
    saying why."""
    from lmsci_mi.editing import EDITING_METHODS
    from lmsci_mi.editing.installed import install_checks, target_probabilities, with_true_targets

    requests = with_true_targets(lm, requests)
    prompts = [r.rewrite_prompt for r in requests]
    before = [_complete(lm, prompt, args) for prompt in prompts]
    p_before = target_probabilities(lm, requests)
    start = time.perf_counter()
    handle = EDITING_METHODS.get(args.method).function(lm, requests, config, stats=stats)
    seconds = time.perf_counter() - start
    with handle:
        after = [_complete(lm, prompt, args) for prompt in prompts]
        checks = install_checks(requests, p_before, target_probabilities(lm, requests))
        print(f"{args.method.upper()} edit of {len(requests)} fact(s) at layer(s) {handle.layers} in {seconds:.1f} s")
        for prompt, old, new, check in zip(prompts, before, after, checks, strict=True):
            print(f"prompt: {prompt}\n  before: {old!r}\n  after:  {new!r}\n  {check.line()}")
            if not check.installed:
                print(f"  likely cause: {check.likely_cause()}")
        if args.delta_out is not None:
            print(f"saved delta to {handle.save(args.delta_out)}")
    failed = sum(not check.installed for check in checks)
    if failed:
        print(f"{failed} of {len(checks)} edit(s) did not install (p(new) did not exceed p(true))")
    return NOT_DONE if failed else 0


def _run_evaluation(
    lm: LensModel, requests: list[Any], config: Any, args: argparse.Namespace, stats: Any, cluster: Any
) -> int:
    from lmsci_mi.editing import EvaluationConfig, evaluate_edits

    evaluation = EvaluationConfig() if args.ge_tokens is None else EvaluationConfig(generation_tokens=args.ge_tokens)
    result = evaluate_edits(
        lm, requests, config, stats=stats, evaluation=evaluation, cluster=cluster
    )
    print(result.summary())
    write_outputs(result, args)
    return 0


def _read_requests(path: Path) -> list[Any]:
    """Edit requests from a JSON file: a list of fact records (Fact's fields), or {"facts": [...]}."""
    import json

    from lmsci_mi.data.facts import load_facts

    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserInputError(f"--requests {path}: not a readable JSON file ({error})") from None
    records = data.get("facts") if isinstance(data, dict) else data
    if not isinstance(records, list) or not records or not all(isinstance(r, dict) for r in records):
        raise UserInputError(
            f"--requests {path}: expected a non-empty JSON list of requests with the fields of "
            "EditRequest (prompt, subject, target_new, ...), or {\"facts\": [...]}"
        )
    try:
        return load_facts(records)
    except UserInputError as error:
        raise UserInputError(f"--requests {path}: {error} (each request needs prompt, subject, target_new)") from None


def _read_stats(path: Path) -> Any:
    from lmsci_mi.editing import KeyStatistics

    try:
        return KeyStatistics.load(path)
    except (OSError, TypeError, KeyError) as error:
        raise UserInputError(f"--stats {path}: not key statistics saved with KeyStatistics.save ({error})") from None


def _run_session(lm: LensModel, requests: list[Any], config: Any, args: argparse.Namespace, stats: Any) -> int:
    from lmsci_mi.editing import EditingSession, EvaluationConfig, SessionConfig

    evaluation = EvaluationConfig() if args.ge_tokens is None else EvaluationConfig(generation_tokens=args.ge_tokens)
    session_config = SessionConfig(batch_size=args.session_batch or 1, evaluation=evaluation)
    session = EditingSession(lm, config, session_config, stats=stats)
    result = session.run(requests)
    if args.session_out is not None:
        print(f"saved the session to {session.save(args.session_out)}")
    session.restore()
    print(result.summary())
    return 0


def _complete(lm: LensModel, prompt: str, args: argparse.Namespace) -> str:
    """The prompt's continuation under the generation flags (an edit entered around it applies)."""
    return generate_from_args(lm, [prompt], args, skip=GENERATION_SKIP).texts[0]


def tour_steps() -> list[TourStep]:
    """Steps this feature adds to `lmsci-mi tour` (see lmsci_mi.cli.tour)."""
    return [
        TourStep(
            "rome",
            "ROME: the Eiffel Tower moves to Rome, then back, bit for bit",
            _tour_rome,
            "from lmsci_mi.editing import EditRequest, ROMEConfig, default_rome_layer, rome_edit; "
            'rome_edit(lm, EditRequest("{} is located in the city of", "The Eiffel Tower", " Rome", '
            '" Paris"), ROMEConfig(layer=default_rome_layer(lm)))',
            seconds=20,
            quick=True,
            first_run="a few minutes more for the layer's key statistics (then cached)",
        ),
    ]


def _tour_rome(lm: LensModel, out_dir: Path) -> StepOutput:
    """ROME: edit "The Eiffel Tower is located in the city of" → Rome, then restore"""
    from lmsci_mi.editing import (
        EditRequest,
        ROMEConfig,
        default_rome_layer,
        rome_edit,
        target_nll,
    )

    request = EditRequest(
        "{} is located in the city of",
        "The Eiffel Tower",
        " Rome",
        " Paris",
        paraphrase_prompts=("The Eiffel Tower can be found in the city of",),
    )
    prompt = request.rewrite_prompt
    before = lm.generate(prompt, 12)
    layer = default_rome_layer(lm)
    original = lm.model.blocks[layer].mlp.W_out.detach().clone()
    start = time.perf_counter()
    # The first tour computes the layer's key statistics (ROMEConfig.stats_tokens of stdlib
    # text, a few minutes on two cores) and caches them; later tours read the cache.
    with rome_edit(lm, request, ROMEConfig(layer=layer)) as handle:
        seconds = time.perf_counter() - start
        after = lm.generate(prompt, 12)
        para = request.paraphrase_prompts[0]
        para_after = lm.generate(para, 8)
        nll = target_nll(lm, [prompt, prompt], [" Rome", " Paris"])
        path = handle.save(out_dir / "rome_eiffel_rome.safetensors")
    restored = lm.generate(prompt, 12)
    exact = (
        "bit-identical"
        if torch.equal(lm.model.blocks[layer].mlp.W_out, original)
        else "NOT identical"
    )
    p_rome, p_paris = (-nll[0]).exp(), (-nll[1]).exp()
    text = "\n".join(
        [
            f"ROME at layer {layer} ({seconds:.1f} s incl. statistics if uncached); delta saved to {path.name}",
            f"before:   {prompt}{before!r}",
            f"after:    {prompt}{after!r}  (p Rome {p_rome:.2f}, p Paris {p_paris:.2f})",
            f"paraphrase after: {para}{para_after!r}",
            f"restored: {prompt}{restored!r} (weights {exact})",
        ]
    )
    summary = (
        f"layer {layer}: after the edit p(Rome) {p_rome:.2f}, p(Paris) {p_paris:.2f}; "
        f"“{after.strip()[:40]}”; restored weights {exact}"
    )
    return StepOutput(summary, text=text, files=[path.name])

"""`lmsci-mi edit`: rewrite a fact with ROME or MEMIT and print completions before and after; the
tour step edits the Eiffel Tower into Rome and restores it."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch

from lmsci_mi.cli.common import add_model_args, load_from_args
from lmsci_mi.model import LensModel

DEFAULT_TOKENS = 20


def register(commands: Any) -> None:
    """Add this feature's subcommands to the parser."""
    p = commands.add_parser(
        "edit",
        help="rewrite a fact with ROME/MEMIT and show completions before and after",
        description=(
            "Edit a fact, e.g. --prompt '{} is located in the city of' --subject 'The Eiffel Tower' "
            "--target-new ' Rome'; or re-apply a saved edit with --apply delta.safetensors. Key "
            "statistics are computed on first use (a few minutes) and cached."
        ),
    )
    add_model_args(p)
    p.add_argument("--prompt", help="prompt with '{}' for the subject (or containing the subject)")
    p.add_argument("--subject", help="the subject whose fact is rewritten")
    p.add_argument("--target-new", help="the new answer, e.g. ' Rome'")
    p.add_argument("--method", choices=("rome", "memit"), default="rome")
    p.add_argument(
        "--layer", type=int, default=None, help="ROME layer (default: traced or the default layer)"
    )
    p.add_argument("--layers", type=int, nargs="+", default=None, help="MEMIT layers")
    p.add_argument(
        "--stats-tokens", type=int, default=None, help="text tokens for the key statistics"
    )
    p.add_argument("--save", type=Path, default=None, help="save the weight delta as safetensors")
    p.add_argument(
        "--apply", type=Path, default=None, help="apply a saved delta instead of editing"
    )
    p.add_argument("--tokens", type=int, default=DEFAULT_TOKENS, help="tokens to generate")
    p.set_defaults(run=run_edit)


def run_edit(args: argparse.Namespace) -> int:
    from lmsci_mi.editing import EditRequest, apply_delta, memit_edit, rome_edit
    from lmsci_mi.editing.stats import DEFAULT_STATS_TOKENS

    if args.apply is None and not (args.prompt and args.subject and args.target_new is not None):
        raise ValueError("give --prompt, --subject and --target-new (or --apply delta.safetensors)")
    lm = load_from_args(args)
    if args.apply is not None:
        prompt = args.prompt
        handle = apply_delta(lm, args.apply)
        if prompt is None and handle.requests:
            prompt = handle.requests[0].rewrite_prompt
        print(f"applied {args.apply}: {handle}")
        if prompt is not None:
            after = lm.generate(prompt, args.tokens)
            handle.restore()
            before = lm.generate(prompt, args.tokens)
            print(f"prompt: {prompt}\n  before: {before!r}\n  after:  {after!r}")
        return 0

    request = EditRequest(args.prompt, args.subject, args.target_new)
    request.validate(lm)
    prompt = request.rewrite_prompt
    before = lm.generate(prompt, args.tokens)
    tokens = args.stats_tokens or DEFAULT_STATS_TOKENS
    start = time.perf_counter()
    if args.method == "rome":
        handle = rome_edit(lm, request, layer=args.layer, stats_tokens=tokens)
    else:
        handle = memit_edit(lm, [request], layers=args.layers, stats_tokens=tokens)
    seconds = time.perf_counter() - start
    with handle:
        after = lm.generate(prompt, args.tokens)
        print(f"{args.method.upper()} edit at layer(s) {handle.layers} in {seconds:.1f} s")
        print(f"prompt: {prompt}\n  before: {before!r}\n  after:  {after!r}")
        if args.save is not None:
            print(f"saved delta to {handle.save(args.save)}")
    return 0


def _tour_rome(lm: LensModel, out_dir: Path) -> str:
    """ROME: edit "The Eiffel Tower is located in the city of" → Rome, then restore"""
    from lmsci_mi.editing import EditRequest, default_rome_layer, rome_edit, target_nll
    from lmsci_mi.editing.stats import DEFAULT_STATS_TOKENS

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
    # The first tour computes the layer's key statistics (DEFAULT_STATS_TOKENS of stdlib text,
    # a few minutes on two cores) and caches them; later tours read the cache.
    with rome_edit(lm, request, layer=layer, stats_tokens=DEFAULT_STATS_TOKENS) as handle:
        seconds = time.perf_counter() - start
        after = lm.generate(prompt, 12)
        para = request.paraphrase_prompts[0]
        para_after = lm.generate(para, 8)
        nll = target_nll(lm, [prompt, prompt], [" Rome", " Paris"])
        path = handle.save(out_dir / "rome_eiffel_rome.safetensors")
    restored = lm.generate(prompt, 12)
    exact = "bit-identical" if torch.equal(lm.model.blocks[layer].mlp.W_out, original) else "NOT identical"
    return "\n".join(
        [
            f"ROME at layer {layer} ({seconds:.1f} s incl. statistics if uncached); delta saved to {path.name}",
            f"  before:   {prompt}{before!r}",
            f"  after:    {prompt}{after!r}  (p Rome {(-nll[0]).exp():.2f}, p Paris {(-nll[1]).exp():.2f})",
            f"  paraphrase after: {para}{para_after!r}",
            f"  restored: {prompt}{restored!r} (weights {exact})",
        ]
    )


def tour_steps() -> list[Any]:
    """Steps this feature adds to `lmsci-mi tour` (see lmsci_mi.cli.core)."""
    return [_tour_rome]

"""`lmsci-mi heads`, `lmsci-mi ioi` and `lmsci-mi attention`: head detection, the IOI circuit and
offline circuitsvis attention views."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lmsci_mi.outliers.sinks  # noqa: F401  (registers the "sink" head score the --kind choices list)
from lmsci_mi.circuits.heads import HEAD_SCORES, HeadScoreConfig
from lmsci_mi.circuits.ioi import IOIConfig
from lmsci_mi.cli.common import (
    add_config_args,
    add_model_args,
    add_output_args,
    config_from_args,
    head_list,
    load_from_args,
    output_path,
    write_outputs,
)
from lmsci_mi.cli.tour import StepOutput, TourStep
from lmsci_mi.model import LensModel

if TYPE_CHECKING:
    from lmsci_mi.data.ioi import IOIDataset


def register(commands: Any) -> None:
    """Add this feature's subcommands to the parser."""
    heads = commands.add_parser("heads", help="score every head: induction, previous token, ...")
    add_model_args(heads)
    add_output_args(heads)
    heads.add_argument(
        "--kind",
        choices=HEAD_SCORES.names(),
        default="induction",
        help="what to score (default: induction)",
    )
    add_config_args(heads, HeadScoreConfig)
    heads.set_defaults(run=_run_heads)

    ioi = commands.add_parser("ioi", help="find the indirect-object-identification circuit")
    add_model_args(ioi)
    add_output_args(ioi)
    add_config_args(ioi, IOIConfig)
    ioi.set_defaults(run=_run_ioi)

    attention = commands.add_parser("attention", help="circuitsvis view of heads, offline HTML")
    add_model_args(attention)
    attention.add_argument("--prompt", required=True)
    attention.add_argument(
        "--heads", required=True, type=head_list, help="comma-separated heads, e.g. L5.H1,L6.H9"
    )
    # No result here: the page is the command's one output, so --html is required.
    attention.add_argument(
        "--html",
        type=output_path("--html", (".html", ".htm")),
        required=True,
        help="where to write the page",
    )
    attention.set_defaults(run=_run_attention)


def _run_heads(args: argparse.Namespace) -> int:
    method = HEAD_SCORES.get(args.kind)
    config = config_from_args(HeadScoreConfig, args)
    lm = load_from_args(args)
    result = method.function(lm, config=config)
    print(result.summary())
    write_outputs(result, args)
    return 0


def _run_ioi(args: argparse.Namespace) -> int:
    from lmsci_mi.circuits.ioi import find_ioi_circuit

    config = config_from_args(IOIConfig, args)
    lm = load_from_args(args)
    circuit = find_ioi_circuit(lm, config=config)
    print(circuit.summary())
    write_outputs(circuit, args)
    return 0


def _run_attention(args: argparse.Namespace) -> int:
    from lmsci_mi.circuits.attention import save_attention_html

    lm = load_from_args(args)
    path = save_attention_html(lm, args.prompt, [(h.layer, h.head) for h in args.heads], args.html)
    print(f"wrote {path} (self-contained, opens offline)")
    return 0


def tour_steps() -> list[TourStep]:
    """Steps this feature adds to `lmsci-mi tour` (see lmsci_mi.cli.tour)."""
    return [
        TourStep(
            "induction",
            "Induction heads, and what ablating them costs",
            _step_induction,
            "from lmsci_mi.circuits.heads import HeadScoreConfig, induction_scores; "
            "induction_scores(lm, config=HeadScoreConfig(n_sequences=8, half_length=15))",
            seconds=6,
            quick=True,
        ),
        TourStep(
            "ioi_circuit",
            "The IOI circuit: name movers, S-inhibition and their classes",
            _step_ioi,
            "from lmsci_mi.circuits.ioi import IOIConfig, find_ioi_circuit; from lmsci_mi.data.ioi "
            "import IOI_TEMPLATES, ioi_dataset; find_ioi_circuit(lm, ioi_dataset(lm, 8, "
            "templates=IOI_TEMPLATES[:1]), IOIConfig(n_sender_candidates=3))",
            seconds=5,
        ),
    ]


def _step_induction(lm: LensModel, out_dir: Path) -> StepOutput:
    """Induction heads: scores on repeated random tokens, and what ablating them costs."""
    from lmsci_mi.circuits.heads import (
        InductionAblationConfig,
        induction_ablation,
        induction_scores,
    )

    scores = induction_scores(lm, config=HeadScoreConfig(n_sequences=8, half_length=15))
    top = scores.top(6)
    heads = [head for head, score in top if score > 0.4] or [top[0][0]]
    check = induction_ablation(
        lm,
        heads,
        InductionAblationConfig(n_sequences=8, half_length=15, n_random_draws=2),
        exclude=scores.heads_above(0.1),
    )
    shown = ", ".join(f"{head} ({score:.2f})" for head, score in top)
    text = (
        f"Top induction heads (score = attention to the token after the earlier copy): {shown}\n"
        f"Mean-ablating {len(heads)} of them raises the second-half loss from "
        f"{check.loss_clean:.2f} to {check.loss_induction_ablated:.2f} nats "
        f"(as many random heads: {check.loss_random_ablated:.2f})."
    )
    summary = (
        f"top induction head {top[0][0]} ({top[0][1]:.2f}); ablating {len(heads)} heads: loss "
        f"{check.loss_clean:.2f} → {check.loss_induction_ablated:.2f} nats (random heads "
        f"{check.loss_random_ablated:.2f}; 8 sequences)"
    )
    return StepOutput(summary, {"induction_scores": scores, "induction_ablation": check}, text=text)


def tour_ioi_inputs(lm: LensModel) -> tuple[IOIDataset, IOIConfig]:
    """The tour's IOI draw (8 prompts of the first template) and settings; benchmarks/ioi.py
    --tour measures the same draw for the docs."""
    from lmsci_mi.data.ioi import IOI_TEMPLATES, ioi_dataset

    return ioi_dataset(lm, 8, templates=IOI_TEMPLATES[:1]), IOIConfig(n_sender_candidates=3)


def _step_ioi(lm: LensModel, out_dir: Path) -> StepOutput:
    """The IOI circuit on a small prompt set (name movers, S-inhibition, ...)."""
    from lmsci_mi.circuits.ioi import find_ioi_circuit

    circuit = find_ioi_circuit(lm, *tour_ioi_inputs(lm))
    text = circuit.summary()
    return StepOutput(text.strip().splitlines()[0], {"ioi_circuit": circuit}, text=text)

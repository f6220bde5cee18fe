"""`lmsci-mi circuit eap|evaluate|curve`: edge-level circuit discovery from the shell.

``eap`` scores every edge (EAP or EAP-IG), ``evaluate`` patches a named circuit exactly, ``curve``
prunes the scores at MIB's edge budgets and reports the faithfulness curve, CPR and CMD (Hanna et
al. 2024; Mueller et al. 2025, MIB). Prompts are IOI with STR corruption (S2 → another name) by
default, or a user's clean/corrupted prompt files.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lmsci_mi.cli.common import (
    add_cluster_args,
    add_config_args,
    add_model_args,
    add_output_args,
    cluster_from_args,
    config_from_args,
    load_from_args,
    output_path,
    read_text_file,
    write_outputs,
)
from lmsci_mi.cli.paths import add_path_command
from lmsci_mi.cli.tour import StepOutput, TourStep
from lmsci_mi.data.ioi import ioi_str_pairs
from lmsci_mi.data.pairs import PromptPairs
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel

if TYPE_CHECKING:
    from lmsci_mi.circuits.edges.eap import EAPConfig, EdgeScores
    from lmsci_mi.cluster import ClusterConfig

__all__ = ["register"]

SCORING = ("eap-ig", "eap")
"""Edge-scoring methods the commands offer (EAP-IG-inputs with m steps, or plain EAP)."""


def _read_lines(path: Path, flag: str) -> tuple[str, ...]:
    if not path.is_file():
        raise FileNotFoundError(f"{flag} {path}: no such file")
    lines = tuple(line.rstrip("\n") for line in read_text_file(path, flag).splitlines() if line.strip())
    if not lines:
        raise UserInputError(f"{flag} {path} holds no prompts: give one prompt per line")
    return lines


def prompt_pairs_from_args(lm: LensModel, args: argparse.Namespace) -> PromptPairs:
    """IOI/STR by default; ``--clean``/``--corrupted`` files (one prompt a line) with
    ``--answer``/``--wrong`` tokens otherwise."""
    files = (args.clean, args.corrupted)
    if files == (None, None):
        if args.answer or args.wrong:
            raise UserInputError("--answer/--wrong go with --clean/--corrupted prompt files")
        return ioi_str_pairs(lm, args.n_prompts, seed=args.seed)
    if None in files or not (args.answer and args.wrong):
        raise UserInputError(
            "give --clean and --corrupted prompt files together, with --answer and "
            "--wrong tokens (e.g. --answer ' Mary' --wrong ' John')"
        )
    clean, corrupted = (
        _read_lines(args.clean, "--clean"),
        _read_lines(args.corrupted, "--corrupted"),
    )
    if len(clean) != len(corrupted):
        raise UserInputError(
            f"--clean has {len(clean)} prompts but --corrupted {len(corrupted)}: "
            "give one corrupted prompt per clean prompt, line by line"
        )
    answer, wrong = lm.token_id(args.answer), lm.token_id(args.wrong)
    return PromptPairs(clean, corrupted, answer, wrong, f"{args.clean} / {args.corrupted}")


# ---------------------------------------------------------------------------------- parser


def register(commands: Any) -> None:
    """Add `circuit eap|evaluate|curve` (and the path command, where the lead wires it)."""
    from lmsci_mi.circuits.edges.faithfulness import CurveConfig

    circuit = commands.add_parser(
        "circuit", help="edge-level circuits: EAP/EAP-IG scores, exact evaluation, faithfulness"
    )
    sub = circuit.add_subparsers(dest="circuit_command", required=True, metavar="STEP")

    eap = sub.add_parser("eap", help="score every edge by EAP or EAP-IG (Hanna et al. 2024)")
    _common(eap)
    eap.add_argument("--top", type=int, default=20, help="edges to print (default 20)")
    add_cluster_args(eap)
    add_output_args(eap)
    eap.set_defaults(run=_run_eap)

    evaluate = sub.add_parser("evaluate", help="exact edge patching of a named circuit")
    _common(evaluate, scoring=False)
    evaluate.add_argument(
        "--edges",
        required=True,
        help="comma-separated edges, e.g. 'L9.H6->logits,MLP0->L9.H6.v', or "
        "@FILE with one edge a line",
    )
    evaluate.set_defaults(run=_run_evaluate)

    curve = sub.add_parser("curve", help="faithfulness at MIB's edge budgets, CPR and CMD")
    _common(curve)
    add_config_args(curve, CurveConfig)
    curve.add_argument(
        "--view",
        type=float,
        default=5.0,
        help="edge budget (percent, one of --fractions) of the circuit drawn by "
        "--circuit-plot (default 5)",
    )
    curve.add_argument(
        "--circuit-plot",
        type=output_path("--circuit-plot", (".png", ".svg")),
        default=None,
        metavar="CIRCUIT.png",
        help="draw the circuit at --view",
    )
    add_output_args(curve)
    curve.set_defaults(run=_run_curve)

    add_path_command(sub)


def _common(parser: argparse.ArgumentParser, *, scoring: bool = True) -> None:
    add_model_args(parser)
    parser.add_argument(
        "--n-prompts", type=int, default=32, help="IOI prompts when no files are given (default 32)"
    )
    parser.add_argument("--seed", type=int, default=0, help="IOI draw (default 0)")
    parser.add_argument("--clean", type=Path, default=None, help="file: one clean prompt a line")
    parser.add_argument(
        "--corrupted",
        type=Path,
        default=None,
        help="file: the corrupted prompts, line by line (same token lengths)",
    )
    parser.add_argument(
        "--answer", default=None, help="answer token for prompt files, e.g. ' Mary'"
    )
    parser.add_argument("--wrong", default=None, help="competing token for prompt files")
    parser.add_argument(
        "--grouped",
        action="store_true",
        help="GQA models: one k/v receiver per key/value head (default: per "
        "query head, as EAP-IG and MIB)",
    )
    if scoring:
        parser.add_argument(
            "--method",
            choices=SCORING,
            default="eap-ig",
            help="edge scores: EAP-IG-inputs (default) or EAP",
        )
        parser.add_argument("--ig-steps", type=int, default=5, help="EAP-IG steps m (default 5)")


def _setup(args: argparse.Namespace) -> tuple[LensModel, Any, PromptPairs]:
    from lmsci_mi.circuits.edges.graph import edge_graph

    if getattr(args, "n_prompts", 1) < 1:
        raise UserInputError("--n-prompts must be at least 1")
    lm = load_from_args(args)
    return lm, edge_graph(lm, grouped=args.grouped), prompt_pairs_from_args(lm, args)


def _eap_config(args: argparse.Namespace) -> EAPConfig:
    """The :class:`~lmsci_mi.circuits.edges.eap.EAPConfig` of ``--method``, ``--ig-steps`` and
    ``--grouped``."""
    from lmsci_mi.circuits.edges.eap import EAPConfig

    # --method is a registered name in lower case (EDGE_METHODS: "EAP", "EAP-IG")
    return EAPConfig(method=args.method.upper(), steps=args.ig_steps, grouped=args.grouped)


def _run_eap(args: argparse.Namespace) -> int:
    from lmsci_mi.circuits.edges.eap import score_edges

    cluster = cluster_from_args(args)  # checked before the model loads
    lm, _, pairs = _setup(args)
    scores = score_edges(lm, pairs, _eap_config(args), cluster=cluster)
    print(scores.summary(rows=args.top))
    write_outputs(scores, args)
    return 0


def _run_evaluate(args: argparse.Namespace) -> int:
    from lmsci_mi.circuits.edges.patching import evaluate_circuit

    lm, graph, pairs = _setup(args)
    text = args.edges
    if text.startswith("@"):
        names = list(_read_lines(Path(text[1:]), "--edges @"))
    else:
        names = [n for n in text.split(",") if n.strip()]
    if not names:
        raise UserInputError("--edges names no edge")
    mask = graph.mask(names)  # an unknown edge raises, naming the closest ones
    import torch

    with torch.no_grad():
        result = evaluate_circuit(lm, graph, mask, pairs)  # each pair's own logit difference
    faithfulness = float(result.normalised()[0])
    print(
        f"{graph.describe()}\n{pairs.source}\ncircuit of {int(mask.sum())} edges: metric "
        f"{float(result.values[0]):.4f} (clean {result.clean_value:.4f}, corrupted "
        f"{result.corrupted_value:.4f}); normalised faithfulness {faithfulness:.3f}"
    )
    return 0


def _run_curve(args: argparse.Namespace) -> int:
    from lmsci_mi.circuits.edges.eap import score_edges
    from lmsci_mi.circuits.edges.faithfulness import CurveConfig, faithfulness_curve

    config = config_from_args(CurveConfig, args)
    if args.circuit_plot is not None and not any(
        abs(f - args.view) < 1e-9 for f in config.fractions
    ):
        raise UserInputError(f"--view {args.view} is not one of --fractions {list(config.fractions)}")
    lm, graph, pairs = _setup(args)
    scores = score_edges(lm, pairs, _eap_config(args))
    label = "EAP" if args.method == "eap" else f"EAP-IG (m={args.ig_steps})"
    curve = faithfulness_curve(lm, graph, scores, pairs, config=config, label=label)
    print(curve.summary())
    if args.circuit_plot is not None:
        circuit = curve.circuit(args.view)
        if args.circuit_plot.suffix == ".svg":
            args.circuit_plot.write_text(circuit.to_svg())
        else:
            circuit.plot(args.circuit_plot)
        print(f"saved the {args.view:g} % circuit to {args.circuit_plot}")
    write_outputs(curve, args)
    return 0


def score_edges(
    lm: LensModel,
    graph: Any,
    pairs: PromptPairs,
    method: str,
    steps: int,
    *,
    cluster: ClusterConfig | None = None,
) -> EdgeScores:
    """Deprecated: :func:`lmsci_mi.circuits.edges.eap.score_edges` (``EAPConfig(method=..., steps=...,
    grouped=graph.grouped)``), the library function this command now calls."""
    from lmsci_mi.circuits.edges.eap import EAPConfig
    from lmsci_mi.circuits.edges.eap import score_edges as library_score_edges

    warnings.warn(
        "lmsci_mi.cli.edges.score_edges is deprecated: use lmsci_mi.circuits.edges.eap.score_edges("
        "lm, pairs, EAPConfig(method=..., steps=..., grouped=...))",
        DeprecationWarning,
        stacklevel=2,
    )
    config = EAPConfig(method=method.upper(), steps=steps, grouped=graph.grouped)
    return library_score_edges(lm, pairs, config, cluster=cluster)


def tour_steps() -> list[TourStep]:
    """Steps this feature adds to `lmsci-mi tour` (see lmsci_mi.cli.tour)."""
    return [
        TourStep(
            "edge_circuit",
            "Edge-level IOI circuit: EAP-IG scores, the faithfulness curve and the 0.1 % circuit",
            _step_edge_circuit,
            "from lmsci_mi.circuits.edges.eap import EAPConfig, score_edges; from "
            "lmsci_mi.circuits.edges.faithfulness import faithfulness_curve; from "
            "lmsci_mi.circuits.edges.graph import edge_graph; from lmsci_mi.data.ioi import "
            "ioi_str_pairs; graph = edge_graph(lm); pairs = ioi_str_pairs(lm, 16); "
            "faithfulness_curve(lm, graph, score_edges(lm, pairs, EAPConfig(steps=5)), pairs)",
            seconds=45,
        ),
    ]


def _step_edge_circuit(lm: LensModel, out_dir: Path) -> StepOutput:
    """EAP-IG on 16 IOI prompt pairs (STR), the faithfulness curve at MIB's budgets, the 5 % circuit."""
    from lmsci_mi.circuits.edges.eap import EAPConfig, score_edges
    from lmsci_mi.circuits.edges.faithfulness import CurveConfig, faithfulness_curve
    from lmsci_mi.circuits.edges.graph import edge_graph

    graph = edge_graph(lm)
    pairs = ioi_str_pairs(lm, 16)
    scores = score_edges(lm, pairs, EAPConfig(method="EAP-IG", steps=5))
    curve = faithfulness_curve(
        lm, graph, scores, pairs, config=CurveConfig(n_bootstrap=200), label="EAP-IG (m=5)"
    )
    # The 5 % circuit (~6,000 edges) draws as a hairball; the 0.1 % one (~120 edges) is readable.
    circuit = curve.circuit(0.1)
    five = curve.at(5.0)
    if curve.interval is not None:
        low, high = curve.interval[curve.fractions.index(5.0)].tolist()
        five_text = f"{five:.2f} [95% CI {low:.2f}, {high:.2f}]"
    else:
        five_text = f"{five:.2f}"
    summary = (
        f"{graph.describe()}; EAP-IG on {len(pairs.clean)} IOI pairs: normalised faithfulness "
        f"{five_text} at 5 % of edges, {curve.at(1.0):.2f} at 1 %; CPR {curve.cpr:.3f}, "
        f"CMD {curve.cmd:.3f}"
    )
    return StepOutput(
        summary,
        {"ioi_faithfulness_curve": curve, "ioi_circuit_0p1pct": circuit},
        text=curve.summary(),
    )

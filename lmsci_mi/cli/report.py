"""`lmsci-mi report`: one self-contained HTML report from saved results, so a researcher can share
their own analyses (the same kind of page as the tour's report). The page is the command's one
output, written where ``--html`` says, as every command writes its HTML view."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from lmsci_mi.cli.common import output_path

__all__ = ["register"]


def register(commands: Any) -> None:
    """Add `report` to the parser."""
    report = commands.add_parser(
        "report",
        help="an offline HTML report (plots, tables, meta) of saved results",
        description="Build one self-contained HTML page from results saved with --out (JSON + "
        "safetensors): each result's plot, a table of its numbers, its meta and the line that loads it. "
        "The page goes where --html says (the flag every command writes its HTML view with).",
    )
    report.add_argument(
        "results",
        nargs="+",
        type=Path,
        metavar="RESULT.json",
        help="saved results (the .json or the .safetensors file)",
    )
    report.add_argument(
        "--html",
        type=output_path("--html", (".html", ".htm")),
        default="report.html",
        metavar="REPORT.html",
        help="where to write the page (default report.html)",
    )
    report.add_argument("--title", default="lmsci-mi report", help="the page's title")
    report.set_defaults(run=_run_report)


def _run_report(args: argparse.Namespace) -> int:
    from lmsci_mi.viz.report import section_from_file, write_report

    out: Path = args.html
    # Every file is read before anything is written, so a bad file leaves no half report.
    sections = [section_from_file(path, relative_to=out.parent) for path in args.results]
    path = write_report(out, sections, title=args.title)
    print(
        f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB, {len(sections)} results; opens offline)"
    )
    return 0

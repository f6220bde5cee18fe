"""A self-contained HTML report of results, and `lmsci-mi report`, which builds one from saved
results so a researcher can share their own analyses (the same kind of page as the tour's report).

Each section shows a title, a one-line summary, every result's plot (PNG as a data URI), a table
of its numbers, its ``meta`` and the one line of Python that reproduces it; a circuit shows the
interactive viewer instead of a plot. circuitsvis views share ONE inlined copy of the offline bundle
(:mod:`lmsci_mi.viz.circuitsvis_inline`; circuitsvis's own ``local_src`` inlines it in every view),
and nothing is fetched from the network, so a report opens from disk on a machine with no network.
The page renders results, so it sits above them, with the command line; :mod:`lmsci_mi.viz` keeps
the drawing of one result (:mod:`lmsci_mi.viz.result_html`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lmsci_mi._version import __version__
from lmsci_mi.cli.arg_types import output_path
from lmsci_mi.errors import UserInputError
from lmsci_mi.results import Result
from lmsci_mi.viz.circuitsvis_inline import CircuitsView as CircuitsView
from lmsci_mi.viz.circuitsvis_inline import bundle_html
from lmsci_mi.viz.result_html import CSS as RESULT_CSS
from lmsci_mi.viz.result_html import TABLE_ROWS as TABLE_ROWS
from lmsci_mi.viz.result_html import esc, result_html
from lmsci_mi.viz.result_html import plot_png as plot_png

__all__ = [
    "MAX_REPORT_BYTES",
    "CircuitsView",
    "Section",
    "build_report",
    "plot_png",
    "register",
    "section_from_file",
    "write_report",
]

MAX_REPORT_BYTES = 10_000_000
"""A report larger than this is refused: it must stay small enough to mail and open anywhere."""


@dataclass(frozen=True)
class Section:
    """One part of a report: a tour step, or one saved result.

    Attributes:
        title: the heading.
        summary: one line saying what was measured.
        results: the results shown, by name (the name is the file stem they are saved under).
        views: circuitsvis views, shown before the results.
        text: a longer account, shown preformatted (generations, top heads).
        code: the one line of Python that reproduces the section.
        failed: why the section failed, or None; a failed section shows the reason in red.
        seconds: how long it took, when known.
        files: saved files of the section, relative to the report.
    """

    title: str
    summary: str = ""
    results: Mapping[str, Result] = field(default_factory=dict)
    views: Sequence[CircuitsView] = ()
    text: str = ""
    code: str = ""
    failed: str | None = None
    seconds: float | None = None
    files: Sequence[str] = ()


def section_from_file(path: str | Path, *, relative_to: Path | None = None) -> Section:
    """A section showing the result saved at ``path`` (loaded with :meth:`Result.load`).

    Args:
        path: either file of a saved result.
        relative_to: the report's folder: the section's links and ``Result.load`` line are
            relative to it (default: ``path`` as given).

    Raises:
        FileNotFoundError: no result at ``path``.
        ResultFileError: the file is not a readable lmsci-mi result.

    >>> import tempfile
    >>> from lmsci_mi import load_model
    >>> folder = Path(tempfile.mkdtemp())
    >>> saved = load_model("toy-2l").top_tokens("Hello", k=3).save(folder / "top.json")
    >>> section = section_from_file(saved, relative_to=folder)
    >>> section.title, section.code.endswith('Result.load("top.json")')
    ('TokenPredictions: top', True)
    """
    path = Path(path)
    result = Result.load(path)
    shown = Path(_relative(path.with_suffix(".json"), relative_to))
    kind = type(result).__name__
    return Section(
        title=f"{kind}: {path.stem}",
        summary=_default_summary(result),
        results={path.stem: result},
        code=f'from lmsci_mi.results import Result; result = Result.load("{shown.as_posix()}")',
        files=(shown.as_posix(), shown.with_suffix(".safetensors").as_posix()),
    )


def build_report(
    sections: Sequence[Section],
    *,
    title: str = "lmsci-mi report",
    intro: str = "",
    max_bytes: int = MAX_REPORT_BYTES,
) -> str:
    """The report as one self-contained HTML page.

    Plots are rendered here (``result.plot()``); a result that has no plot shows why instead.

    Args:
        sections: the report's sections, in order.
        title: the page title.
        intro: a paragraph under the title (plain text).
        max_bytes: the largest report accepted.

    Returns:
        The HTML source. It references nothing outside itself.

    Raises:
        ValueError: the page would exceed ``max_bytes``.

    >>> page = build_report([Section("A failed step", failed="RuntimeError: boom")])
    >>> "RuntimeError: boom" in page and "http://" not in page and "https://" not in page
    True
    """
    bodies = [_section_html(i, s) for i, s in enumerate(sections)]
    uses_views = any(s.views for s in sections)
    failed = sum(s.failed is not None for s in sections)
    contents = "".join(
        f'<li class="{"failed" if s.failed else "ok"}"><a href="#s{i}">{_esc(s.title)}</a>'
        f"{' — failed' if s.failed else ''}</li>"
        for i, s in enumerate(sections)
    )
    status = f"{len(sections)} sections, {failed} failed" if failed else f"{len(sections)} sections"
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    page = (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{_esc(title)}</title><style>{_CSS}</style>"
        + (bundle_html() if uses_views else "")
        + "</head><body>"
        f"<h1>{_esc(title)}</h1><p class='stamp'>lmsci-mi {_esc(__version__)}, {stamp}; {status}</p>"
        + (f"<p>{_esc(intro)}</p>" if intro else "")
        + f"<nav><ol>{contents}</ol></nav>"
        + "".join(bodies)
        + "</body></html>\n"
    )
    size = len(page.encode("utf-8"))
    if size > max_bytes:
        raise UserInputError(
            f"the report would be {size / 1e6:.1f} MB, over the {max_bytes / 1e6:.1f} MB limit; "
            "report fewer or smaller results"
        )
    return page


def write_report(path: str | Path, sections: Sequence[Section], **kwargs: Any) -> Path:
    """Write :func:`build_report` to ``path`` (folders are made) and return the path."""
    out = Path(path)
    page = build_report(sections, **kwargs)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out


# ---------------------------------------------------------------------- sections


def _section_html(index: int, section: Section) -> str:
    parts = [f'<section id="s{index}" class="{"failed" if section.failed else "ok"}">']
    took = (
        f" <span class='time'>({section.seconds:.1f} s)</span>"
        if section.seconds is not None
        else ""
    )
    parts.append(f"<h2>{_esc(section.title)}{took}</h2>")
    if section.failed is not None:
        parts.append(
            f"<p class='reason'><b>Failed:</b></p><pre class='reason'>{_esc(section.failed)}</pre>"
        )
    if section.summary:
        parts.append(f"<p class='summary'>{_esc(section.summary)}</p>")
    if section.code:
        parts.append(f"<p class='label'>Reproduce:</p><pre class='code'>{_esc(section.code)}</pre>")
    if section.text:
        parts.append(f"<pre class='text'>{_esc(section.text)}</pre>")
    for k, view in enumerate(section.views):
        parts.append(view.html(f"cv-{index}-{k}"))
    for name, result in section.results.items():
        parts.append(result_html(name, result))
    if section.files:
        links = ", ".join(f"<a href='{_esc(f)}'>{_esc(f)}</a>" for f in section.files)
        parts.append(f"<p class='files'>Saved: {links}</p>")
    parts.append("</section>")
    return "".join(parts)


# ---------------------------------------------------------------------- text helpers


def _default_summary(result: Result) -> str:
    """One line for a result with no summary of its own: its shape and its extreme values."""
    summary = getattr(result, "summary", None)
    if callable(summary):
        try:
            text = str(summary())
        except Exception:
            text = ""
        if text.strip():
            return text.strip().splitlines()[0]
    values = result.values.detach().float()
    shape = " × ".join(f"{n} {a}" for n, a in zip(values.shape, result.axes, strict=True))
    finite = values[values.isfinite()]
    if finite.numel() == 0:
        return f"{result.meta.model}: {shape}, no finite values"
    return (
        f"{result.meta.model}: {shape}; values from {float(finite.min()):.3g} to "
        f"{float(finite.max()):.3g}"
    )


def _relative(path: Path, base: Path | None) -> str:
    """``path`` as the report at ``base`` links it: relative (``../x.json``) when possible."""
    if base is None:
        return str(path)
    try:
        return os.path.relpath(path.resolve(), base.resolve())
    except ValueError:  # another drive (Windows): no relative path exists
        return str(path.resolve())


_esc = esc

_PAGE_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif;max-width:1250px;
margin:2em auto;padding:0 1em;color:#222;line-height:1.45}
h1{margin-bottom:.2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
.time,.stamp{color:#777;font-weight:normal;font-size:.9em}
nav ol{columns:2}li.failed a{color:#b00}section.failed h2{color:#b00}
pre.reason{background:#fee;color:#900}pre.code{background:#eef4ff}.summary{font-weight:600}
.label{margin:.4em 0 0;color:#555;font-size:.9em}
.view{border:1px solid #eee;padding:.4em;margin:.6em 0}.caption{color:#555;margin:0}
"""

_CSS = _PAGE_CSS + RESULT_CSS


# ---------------------------------------------------------------------- the command


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
    out: Path = args.html
    # Every file is read before anything is written, so a bad file leaves no half report.
    sections = [section_from_file(path, relative_to=out.parent) for path in args.results]
    path = write_report(out, sections, title=args.title)
    print(
        f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB, {len(sections)} results; opens offline)"
    )
    return 0

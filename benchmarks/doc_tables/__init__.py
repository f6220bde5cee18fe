"""The measured tables of README.md and docs/, each rendered from the JSON file a benchmark writes.

One module per group of pages (editing, circuits, knowledge, representations, probes, project)
and one function per table, ``NAME(data) -> str``, returns the markdown table (header, separator and
rows). ``data`` is the parsed data file; a block that names several files gets one dict keyed by
each file's stem, in the order the block lists them. ``scripts/doc_tables.py`` finds the blocks
in the pages and puts each table in place. Only the standard library is used, so the check that
the pages agree with their data runs in a fraction of a second.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

Renderer = Callable[[Any], str]
RENDERERS: dict[str, Renderer] = {}
"""Every table renderer by the name its blocks use."""

MODEL_NAMES = {"smollm2-135m": "SmolLM2-135M", "gemma3-270m": "Gemma 3 270M",
               "short-context-lm": "Short-context LM (bytes, trained here at 256 tokens)"}
MODEL_SHORT = {"smollm2-135m": "SmolLM2", "gemma3-270m": "Gemma 3"}
METHOD_NAMES = {"rome": "ROME", "memit": "MEMIT", "alphaedit": "AlphaEdit"}


def table(name: str, *, missing_ok: bool = False) -> Callable[[Renderer], Renderer]:
    """Register a renderer under ``name``; a second renderer of the same name is a mistake.

    ``missing_ok``: a data file of its blocks that does not exist yet reaches it as None, keyed by
    the file's stem even when the block names one file (it then renders "not yet: <command>"); for
    any other renderer a missing file is an error."""

    def register(fn: Renderer) -> Renderer:
        if name in RENDERERS:
            raise ValueError(f"two doc-table renderers named {name!r}")
        fn.missing_ok = missing_ok  # type: ignore[attr-defined]
        RENDERERS[name] = fn
        return fn

    return register


def markdown(header: Sequence[object], rows: Iterable[Sequence[object]]) -> str:
    """A markdown table; every row must have the header's number of cells."""
    def line(cells: Sequence[object]) -> str:
        # An empty cell is written "| |", as the hand-written tables have it.
        return "|" + "|".join(f" {c} " if str(c) else " " for c in cells) + "|"

    lines = [line(header), "|" + "---|" * len(header)]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"a row of {len(row)} cells under a header of {len(header)}: {row}")
        lines.append(line(row))
    return "\n".join(lines)


def num(x: float, digits: int) -> str:
    return f"{x:.{digits}f}"


def ci(x: float, low: float, high: float, digits: int) -> str:
    """``x [low, high]``."""
    return f"{x:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def pm(x: float, se: float, digits: int) -> str:
    """``x ± se``."""
    return f"{x:.{digits}f} ± {se:.{digits}f}"


def minus(text: str) -> str:
    """Typographic minus signs, as the pages that use them write numbers."""
    return text.replace("-", "−")


def sci(x: float) -> str:
    """Two significant digits in e-notation without the exponent's padding: 2.7e-5."""
    if x == 0:
        return "0"
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def strength(x: float) -> str:
    """A steering strength as the curves list it: 0, 0.25, 4."""
    return f"{x:g}"


def bold(text: str, on: bool = True) -> str:
    return f"**{text}**" if on else text


# The pages' renderers register themselves on import (after the helpers they use exist).
from . import (  # noqa: E402, F401
    circuits,
    cluster,
    defaults,
    editing,
    editing_sweeps,
    editing_wild,
    graphs,
    icl_data,
    icl_kernel,
    icl_regression,
    icl_vectors,
    knowledge,
    outliers,
    peers,
    probes,
    probes_cfg,
    project,
    readme,
    representations,
    steering,
)

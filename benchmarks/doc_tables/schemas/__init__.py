"""The data files' schemas: each docs/data/*.json declared once, as TypedDicts, and imported by both
its writer (the benchmark) and its renderer (benchmarks/doc_tables/).

One module per group of benchmarks (``circuits``, ``cluster``, ...). Only the standard library, as
the renderers use only it. Every file also carries the harness's ``provenance`` record (see
benchmarks/harness.py), which the schemas leave out; files written before the harness may hold keys
it now records (``date``, ``commit``, ``command``, ``torch_threads``), which no renderer reads.
TypedDicts are not checked at run time: they name the keys a renderer reads and the writer writes,
so a change to one shows in the other. (``total=False`` classes hold the optional keys: the
project still supports Python 3.10, which has no ``NotRequired``.)
"""

from __future__ import annotations

from typing import TypedDict


class MeanSD(TypedDict):
    """A figure's mean and sample standard deviation over ``n`` draws (``sd`` null below two)."""

    mean: float
    sd: float | None
    n: int


class Provenance(TypedDict, total=False):
    """The record of the run that wrote a file, as the renderers read it (a renderer that shows a
    run's date or thread count reads them here). The writer's declaration is
    ``benchmarks/harness.py``'s ``Provenance``, which the renderers cannot import (they load without
    benchmarks/ on the path); a test keeps the two alike."""

    command: str
    date: str
    commit: str | None
    version: str | None
    threads: int | None
    backfilled: bool


class ValueSE(TypedDict):
    """A figure and its standard error."""

    value: float
    se: float


class MeanSE(TypedDict):
    """A mean and its standard error over items (``lmsci_mi.stats.MeanSE.as_dict()`` less ``n``)."""

    mean: float
    se: float

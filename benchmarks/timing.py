"""Peer timing: the one protocol every ratio against a peer library is measured under.

A ratio against a peer comes from one run on the same inputs, each side with its own speed options
on: every side is warmed up, then timed in ``rounds`` rounds (at least 5), each round running every
side once, in alternating order (A B / B A / A B ...), so that a drift of the machine (turbo, cache,
another job) falls on both sides alike. Each side gets its median, min, max and interquartile range;
a ratio is the ratio of medians, with a percentile bootstrap interval over rounds (the rounds are
resampled, each keeping all its sides: the sides of one round ran back to back). The record notes
the machine, the torch threads, the load average before and after, and ``quiet``, which only the
caller can know (nothing else running: ``--quiet``).

    comparison = compare({"lmsci_mi": ours, "transformer_lens": theirs}, rounds=5, quiet=False)
    record = comparison.record                       # JSON: the data file's "timing" of this row
    ratio(record, "transformer_lens", "lmsci_mi")    # their median / ours, [low, high] over rounds
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from doc_tables.schemas.timing import Machine, RatioRecord, SideTiming, TimingRecord

MIN_ROUNDS = 5
"""The fewest timed rounds a published peer ratio may rest on."""


def machine() -> Machine:
    """This machine in words a reader can compare: CPU model, cores, torch threads, platform."""
    import torch

    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            model = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), model)
    except OSError:
        pass
    return Machine(cpu=model, cores=os.cpu_count() or 0, threads=torch.get_num_threads(),
                   platform=platform.platform(), python=platform.python_version(), torch=torch.__version__)


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # not on every platform
        return None


def _quantile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between order statistics (NumPy's default), without NumPy."""
    position = q * (len(sorted_values) - 1)
    low = int(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (position - low) * (sorted_values[high] - sorted_values[low])


def summary(seconds: list[float]) -> SideTiming:
    """One side's timed rounds: all of them, in round order, and their median, min, max and IQR."""
    ordered = sorted(seconds)
    return SideTiming(seconds=list(seconds), median=_quantile(ordered, 0.5), min=ordered[0],
                      max=ordered[-1], q1=_quantile(ordered, 0.25), q3=_quantile(ordered, 0.75))


@dataclass(frozen=True)
class Comparison:
    """What :func:`compare` measured: the JSON ``record`` and each side's last return value
    (for the agreement checks: the same inputs must give the same answer on every side)."""

    record: TimingRecord
    outputs: dict[str, Any]


def compare(
    sides: Mapping[str, Callable[[], Any]],
    *,
    rounds: int = MIN_ROUNDS,
    warmups: int = 1,
    warm: Mapping[str, Callable[[], Any]] | None = None,
    quiet: bool = False,
    note: str = "",
) -> Comparison:
    """Time ``sides`` under the protocol of the module docstring.

    Args:
        sides: name -> a call that does the whole measured work once (in the order given: the
            first round runs them so, the second reversed, and so on).
        rounds: timed rounds (every side once each); fewer than 5 is allowed for a check of the
            script, and the record then says so through ``rounds``.
        warmups: untimed runs of each side before the first round.
        warm: name -> a cheaper call that warms that side up instead of the timed call (a
            100-second peer warmed by the same code path on one layer); say so in ``note``.
        quiet: the caller's word that nothing else ran on the machine.
        note: anything a reader of the record needs (what the warm-up was).

    Returns:
        :class:`Comparison`.
    """
    if rounds < 1 or warmups < 0:
        raise ValueError(f"rounds must be >= 1 and warmups >= 0, not {rounds} and {warmups}")
    names = list(sides)
    warm = warm or {}
    load_before = _load()
    for _ in range(warmups):
        for name in names:
            warm.get(name, sides[name])()
    seconds: dict[str, list[float]] = {name: [] for name in names}
    outputs: dict[str, Any] = {}
    orders = []
    for round_ in range(rounds):
        order = names if round_ % 2 == 0 else names[::-1]
        orders.append(list(order))
        for name in order:
            start = time.perf_counter()
            outputs[name] = sides[name]()
            seconds[name].append(time.perf_counter() - start)
    record = TimingRecord(
        protocol=f"{warmups} warm-up(s) per side, then {rounds} rounds of every side once, order "
                 "alternating between rounds; per-side median, min, max, IQR",
        rounds=rounds, warmups=warmups, orders=orders, quiet=quiet, machine=machine(),
        load_before=load_before, load_after=_load(),
        sides={name: summary(values) for name, values in seconds.items()}, note=note)
    return Comparison(record=record, outputs=outputs)


def ratio(record: TimingRecord, numerator: str, denominator: str, *, level: float = 0.95,
          n_resamples: int = 2000, seed: int = 0) -> RatioRecord:
    """``median(numerator) / median(denominator)`` with a percentile bootstrap interval over the
    record's rounds (each resample draws whole rounds, both sides of a round together).

    >>> from doc_tables.schemas.timing import TimingRecord
    >>> rec = {"rounds": 5, "sides": {"peer": summary([2.0, 2.2, 1.8, 2.0, 2.1]),
    ...                               "ours": summary([1.0, 1.0, 1.1, 0.9, 1.0])}}
    >>> r = ratio(rec, "peer", "ours")  # type: ignore[arg-type]
    >>> r["estimate"], r["low"] <= 2.0 <= r["high"], r["rounds"]
    (2.0, True, 5)
    """
    import numpy as np

    from lmsci_mi.stats import bootstrap_interval

    top = np.asarray(record["sides"][numerator]["seconds"])
    bottom = np.asarray(record["sides"][denominator]["seconds"])

    def of_medians(a: Any, b: Any, axis: int = -1) -> Any:
        return np.median(a, axis=axis) / np.median(b, axis=axis)

    interval = bootstrap_interval((top, bottom), of_medians, n_resamples=n_resamples, level=level, seed=seed)
    return RatioRecord(of=f"{numerator} / {denominator}", estimate=float(interval.estimate),
                       low=float(interval.low), high=float(interval.high), level=level,
                       rounds=int(record["rounds"]), method="ratio of medians, percentile bootstrap over rounds")

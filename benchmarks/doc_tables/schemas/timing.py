"""The peer-timing record (benchmarks/timing.py) that every peer comparison's data file holds: the
protocol, each side's timed rounds and their spread, the machine, and whether it was quiet."""

from __future__ import annotations

from typing import TypedDict


class Machine(TypedDict):
    cpu: str
    cores: int
    threads: int
    """torch's intra-op threads during the run."""
    platform: str
    python: str
    torch: str


class SideTiming(TypedDict):
    """One side's timed rounds, in round order, and their summary (seconds)."""

    seconds: list[float]
    median: float
    min: float
    max: float
    q1: float
    q3: float


class TimingRecord(TypedDict):
    protocol: str
    rounds: int
    warmups: int
    orders: list[list[str]]
    """The order the sides ran in, per round (alternating)."""
    quiet: bool
    """The caller's word (``--quiet``) that nothing else ran on the machine."""
    machine: Machine
    load_before: float | None
    """The 1-minute load average before the warm-ups and after the last round."""
    load_after: float | None
    sides: dict[str, SideTiming]
    note: str


class RatioRecord(TypedDict):
    """``median(numerator side) / median(denominator side)`` and its bootstrap interval over rounds."""

    of: str
    estimate: float
    low: float
    high: float
    level: float
    rounds: int
    method: str


class PeerComparison(TypedDict):
    """One measurement timed on every side under the protocol, and the peer's ratio to ours."""

    timing: TimingRecord
    ratio: RatioRecord
    """The peer's median over lmsci-mi's (above 1: lmsci-mi is faster)."""


class PairKind(TypedDict):
    """Which kind of clean/corrupted prompt pair a peer comparison ran on."""

    pair: str
    """``shared_prefix`` (the prompts share a prefix, which lmsci-mi does not recompute) or
    ``first_token`` (they differ from the first token: nothing to reuse)."""
    shared_prefix: int
    """Tokens the clean and corrupted prompts share before they differ."""

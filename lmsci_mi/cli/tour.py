"""The machinery of `lmsci-mi tour`: steps, their progress bars, failures and the HTML report.

Each CLI feature module that defines ``tour_steps()`` adds its steps to the tour, in the order of
``lmsci_mi.cli._FEATURES``; a new package joins the tour by defining that function (see
:class:`TourStep`). A step that raises is recorded as failed with its reason, the tour goes on,
and the command exits 1 at the end. ``LMSCI_MI_TOUR_FAIL=name,...`` makes named steps fail (tests).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from tqdm.auto import tqdm

from lmsci_mi.artefacts import shipped_artefacts
from lmsci_mi.cli.report import CircuitsView, Section, write_report
from lmsci_mi.errors import UnknownNameError
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result

__all__ = [
    "FAIL_ENV",
    "StepOutput",
    "TourStep",
    "TourStepFailure",
    "collect_steps",
    "run_tour",
    "steps_to_fail",
]

FAIL_ENV = "LMSCI_MI_TOUR_FAIL"
"""Comma-separated step names that the tour makes fail on purpose (to test the failure path)."""


class TourStepFailure(RuntimeError):
    """A step made to fail through :data:`FAIL_ENV`."""


@dataclass(frozen=True)
class StepOutput:
    """What a step measured.

    Attributes:
        summary: one line with the measured result, printed and shown in the report.
        results: results by file stem; each is saved as ``<stem>.json`` + ``.safetensors``.
        text: a longer account for the report (generations, head lists).
        views: circuitsvis views for the report.
        files: other files the step wrote in the tour's folder (names relative to it).
    """

    summary: str
    results: Mapping[str, Result] = field(default_factory=dict)
    text: str = ""
    views: Sequence[CircuitsView] = ()
    files: Sequence[str] = ()


@dataclass(frozen=True)
class TourStep:
    """One step of the tour.

    Attributes:
        name: a short identifier (file stems, :data:`FAIL_ENV`), e.g. ``"causal_trace"``.
        title: the heading in the report.
        run: ``run(lm, out_dir) -> StepOutput``; it may write extra files in ``out_dir``.
        code: the one line of Python that reproduces it (``lm`` is the loaded model).
        seconds: the expected time on SmolLM2-135M, 2 CPU cores, caches warm.
        quick: part of ``--quick``.
        first_run: what the first run costs more, when it builds a cached artefact.
    """

    name: str
    title: str
    run: Callable[[LensModel, Path], StepOutput]
    code: str
    seconds: float
    quick: bool = False
    first_run: str = ""


def collect_steps(
    features: Sequence[ModuleType], *, quick: bool, only: Sequence[str] = ()
) -> list[TourStep]:
    """The tour's steps: every feature module's ``tour_steps()``, in order; those named in
    ``only`` when it is not empty, else the ``quick`` ones with ``quick``, else all.

    Raises:
        ValueError: two steps share a name, or ``only`` names no step of the tour.

    >>> from lmsci_mi import cli
    >>> [step.name for step in collect_steps(cli._FEATURES, quick=True)]
    ['predictions', 'attention_summary', 'causal_trace', 'patching', 'induction', 'rome', 'cfg_probes', 'steer', 'sae']
    >>> [step.name for step in collect_steps(cli._FEATURES, quick=True, only=["steer", "probe"])]
    ['probe', 'steer']
    """
    steps = [
        step
        for feature in features
        if (make := getattr(feature, "tour_steps", None)) is not None
        for step in make()
    ]
    names = [step.name for step in steps]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"tour steps {duplicates} are defined twice")
    unknown = sorted(set(only) - set(names))
    if unknown:
        raise UnknownNameError(f"--steps: no tour step {unknown}; the steps are {names}")
    if only:
        return [step for step in steps if step.name in only]
    return [step for step in steps if step.quick or not quick]


def steps_to_fail(steps: Sequence[TourStep]) -> set[str]:
    """The step names in :data:`FAIL_ENV`.

    Raises:
        ValueError: a name that is no step of this tour (a typo would otherwise test nothing).
    """
    names = {n.strip() for n in os.environ.get(FAIL_ENV, "").split(",") if n.strip()}
    known = {step.name for step in steps}
    unknown = sorted(names - known)
    if unknown:
        raise UnknownNameError(
            f"{FAIL_ENV}={os.environ[FAIL_ENV]!r}: no tour step {unknown}; steps: {sorted(known)}"
        )
    return names


def run_tour(
    lm: LensModel,
    steps: Sequence[TourStep],
    out_dir: Path,
    *,
    report: Path | None,
    verbose: bool = False,
) -> int:
    """Run ``steps`` on ``lm``, save their results in ``out_dir`` and write the report.

    Returns:
        0 when every step succeeded, else 1 (the failed steps are in the report and on stderr).
    """
    fail = steps_to_fail(steps)
    _print_plan(lm, steps)
    start = time.perf_counter()
    sections = []
    for number, step in enumerate(steps, 1):
        section = _run_step(lm, step, out_dir, f"[{number}/{len(steps)}]", step.name in fail)
        sections.append(section)
        if verbose and section.text:
            tqdm.write(_indent(section.text))
    failed = [s for s, sec in zip(steps, sections, strict=True) if sec.failed is not None]
    total = time.perf_counter() - start
    print(f"\nTour finished in {total:.0f} s; results are in {out_dir}/", flush=True)
    if report is not None:
        intro = (
            f"The lmsci-mi tour on {lm.name} (sink {lm.sink!r}), {total:.0f} s. Each line of code "
            f'assumes lm = load_model("{lm.name}") (from lmsci_mi import load_model). Every result is '
            f"saved in {out_dir} as JSON with its tensors and loads back with Result.load. "
            + _artefacts_line()
        )
        # The steps name their files inside out_dir; the page links them from where it lies.
        folder = Path(os.path.relpath(out_dir.resolve(), report.resolve().parent))
        linked = [
            dataclasses.replace(s, files=[(folder / f).as_posix() for f in s.files])
            for s in sections
        ]
        path = write_report(report, linked, title=f"lmsci-mi tour: {lm.name}", intro=intro)
        print(f"Report: {path} ({path.stat().st_size / 1e6:.1f} MB, opens offline)")
    if failed:
        print(
            f"{len(failed)} of {len(steps)} steps failed: {', '.join(s.name for s in failed)}",
            file=sys.stderr,
        )
        return 1
    return 0


def _artefacts_line() -> str:
    """Where the trained artefacts come from, for the report's intro: a reader must know which
    results rest on a model that was trained before the tour."""
    shipped = shipped_artefacts()
    if not shipped:
        return ""
    parts = [f"{a.description} (rebuild: {a.rebuild})" for a in shipped.values()]
    return (
        "No model is trained during the tour: the trained artefacts ship with lmsci-mi as "
        "package data, seeded, and a first run copies them into the cache (a cached artefact "
        "that you trained yourself with the same settings is used instead): "
        + "; ".join(parts)
        + "."
    )


def _print_plan(lm: LensModel, steps: Sequence[TourStep]) -> None:
    total = sum(step.seconds for step in steps)
    print(
        f"The tour runs {len(steps)} steps; about {_duration(total)} on SmolLM2-135M with 2 CPU "
        "cores once the caches are warm:"
    )
    for step in steps:
        extra = f"; first run: {step.first_run}" if step.first_run else ""
        print(f"  {step.name:<22} ~{_duration(step.seconds)}{extra}")
    print(flush=True)


def _run_step(lm: LensModel, step: TourStep, out_dir: Path, counter: str, fail: bool) -> Section:
    began = time.perf_counter()
    files: list[str] = []
    with _StepBar(f"{counter} {step.name}", step.seconds) as bar:
        try:
            if fail:
                raise TourStepFailure(f"made to fail on purpose ({FAIL_ENV} names {step.name!r})")
            output = step.run(lm, out_dir)
            for stem, result in output.results.items():
                saved = result.save(out_dir / f"{stem}.json")
                files += [saved.name, saved.with_suffix(".safetensors").name]
            files += list(output.files)
        except Exception as error:
            seconds = time.perf_counter() - began
            reason = f"{type(error).__name__}: {error}"
            bar.finish(ok=False)
            tqdm.write(f"✗ {step.title} — FAILED after {seconds:.1f} s: {reason}", file=sys.stderr)
            if not isinstance(error, TourStepFailure):
                tqdm.write(traceback.format_exc(), file=sys.stderr)
                reason += "\n\n" + traceback.format_exc()
            return Section(step.title, code=step.code, failed=reason, seconds=seconds)
        bar.finish(ok=True)
    seconds = time.perf_counter() - began
    summary = " ".join(output.summary.split())  # one line, whatever the step quoted
    tqdm.write(f"✓ {step.title} ({seconds:.1f} s): {summary}")
    return Section(
        title=step.title,
        summary=summary,
        results=output.results,
        views=output.views,
        text=output.text,
        code=step.code,
        seconds=seconds,
        files=files,
    )


class _StepBar:
    """A bar that fills with elapsed time against the step's estimate (the steps are single
    calls with no progress of their own to report), held short of full until the step ends.
    Shown on a terminal only: a log file gets the summary lines, not a bar redrawn every second."""

    def __init__(self, label: str, estimate: float) -> None:
        self._estimate = max(estimate, 1.0)
        self._bar = tqdm(
            total=self._estimate,
            desc=label,
            leave=False,
            bar_format="{desc}: {bar} {elapsed} of ~{total:.0f} s",
            file=sys.stderr,
            disable=None,  # tqdm: off when stderr is not a terminal
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, daemon=True)
        self._began = time.perf_counter()

    def __enter__(self) -> _StepBar:
        self._thread.start()
        return self

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            self._bar.n = min(time.perf_counter() - self._began, 0.97 * self._estimate)
            self._bar.refresh()

    def finish(self, *, ok: bool) -> None:
        self._stop.set()
        self._thread.join()
        if ok:
            self._bar.n = self._estimate
            self._bar.refresh()

    def __exit__(self, *exc: object) -> None:
        self.finish(ok=False)
        self._bar.close()


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())

"""The suite's entry: what must happen before anything is imported, and which plugins load where.

The suite's plumbing (toys built once, tokenizers read once, slow docstring examples marked;
tests/suite_toys.py) and its fixtures (tests/fixtures.py) import torch, TransformerLens and
lmsci_mi: some 10 s. Under pytest-xdist the controller process only hands tests to the workers
and runs none, so it skips that import; `scripts/test.sh`'s wall time drops by as much.
"""

from __future__ import annotations

import os

import pytest

# Before lmsci_mi is imported: its core entry points check their jaxtyping annotations at every
# call under the suite (lmsci_mi/typecheck.py), and nowhere else.
os.environ.setdefault("LMSCI_MI_SHAPE_CHECKS", "1")

SUITE_PLUGINS = ("tests.suite_toys", "tests.fixtures")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "fresh_toys: build toy models for real (the suite otherwise copies one build)"
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    # By now xdist has registered its `dsession` plugin in the controller (never in a worker, nor
    # without -n); the fixture manager exists and picks up the fixtures of a plugin registered here.
    if session.config.pluginmanager.has_plugin("dsession"):
        return
    for name in SUITE_PLUGINS:
        session.config.pluginmanager.import_plugin(name)

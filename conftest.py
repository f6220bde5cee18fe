"""Suite-wide test plumbing (tests/ and the docstring examples in lmsci_mi/): toys built once,
docstring examples that train marked slow. The fixtures live in tests/conftest.py."""

from __future__ import annotations

import os

# Before lmsci_mi is imported: its core entry points check their jaxtyping annotations at every
# call under the suite (lmsci_mi/typecheck.py), and nowhere else.
os.environ.setdefault("LMSCI_MI_SHAPE_CHECKS", "1")

import copy
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch

from lmsci_mi import LensModel, loading

SLOW_DOCTESTS = (
    "train_sae", "train_steer", "cfg_probe_table", "train_tuned_lens", "transfer_steer", "load_sae",
    "EditingSession",
)
"""Docstring examples that train or fit (2-10 s each; load_sae imports sae-lens, 3 s): the full
suite runs them, `-m "not slow"` not; unit tests cover each function in the fast part."""


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if isinstance(item, pytest.DoctestItem) and item.name.endswith(
            tuple(f".{name}" for name in SLOW_DOCTESTS)
        ):
            item.add_marker(pytest.mark.slow)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "fresh_toys: build toy models for real (the suite otherwise copies one build)"
    )


@dataclass(frozen=True)
class _Build:
    """A toy as `load_model` built it, and the random-number state the build left behind."""

    lm: LensModel
    rng: tuple[Any, Any, Any]


_BUILDS: dict[tuple[str, str, torch.dtype], _Build] = {}
_build_toy = loading._load_toy


def _copied_toy(name: str, device: torch.device, dtype: torch.dtype) -> LensModel:
    """What `loading._load_toy` returns, from a copy of its first build.

    A build (random init of a 49k-token vocabulary, the tokenizer from disk) takes 0.5-0.9 s, more
    than most unit tests, and ~200 tests and docstring examples load a toy; a deep copy takes
    0.03 s. Each call gets its own model object, so a test that edits weights or attaches hooks
    cannot leak into the next, and caches keyed by the model see a new one. The tokenizers are
    shared, not copied (copying one costs 0.25 s; neither the library nor a test changes one).
    A build seeds torch, numpy and `random` and draws from torch (the toy config has `seed=0`);
    restoring the state it left keeps every random draw after a load what it was.
    """
    key = (name, str(device), dtype)
    if key not in _BUILDS:
        lm = _build_toy(name, device, dtype)
        _BUILDS[key] = _Build(lm, (torch.get_rng_state(), np.random.get_state(), random.getstate()))
    build = _BUILDS[key]
    master = build.lm
    shared = {
        id(master.tokenizer): master.tokenizer,
        id(master.model.tokenizer): master.model.tokenizer,
    }
    lm = LensModel(
        copy.deepcopy(master.model, shared),
        name=master.name,
        source=master.source,
        tokenizer=master.tokenizer,
        sink_token_id=master.sink_token_id,
    )
    torch.set_rng_state(build.rng[0])
    np.random.set_state(build.rng[1])
    random.setstate(build.rng[2])
    return lm


@pytest.fixture(autouse=True)
def _toys_built_once(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.node.get_closest_marker("fresh_toys") is not None:
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loading, "_load_toy", _copied_toy)
        yield

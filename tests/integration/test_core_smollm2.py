"""The bundled real models load offline, from the cache after the first time, and know the facts
the docs quote. Their agreement with transformers on the same GGUF weights is tests/integration/
test_parity.py's (three prompts, the whole vocabulary)."""

from __future__ import annotations

import pytest
import torch

from lmsci_mi import LensModel, load_model
from lmsci_mi.cache import cache_root
from tests.pins import check_pins, measure

EIFFEL = "The Eiffel Tower is located in the city of"

pytestmark = pytest.mark.slow


def test_eiffel_tower_is_in_paris(clean_smollm2: LensModel) -> None:
    top = clean_smollm2.top_tokens(EIFFEL, k=3)
    assert top.labels[0][0] == " Paris"
    assert top.values[0] > 0.5


def test_ioi_prompt_prefers_the_indirect_object(clean_smollm2: LensModel) -> None:
    lm = clean_smollm2
    logits = lm(lm.to_tokens("When Mary and John went to the store, John gave a drink to"))[0, -1]
    assert logits[lm.token_id(" Mary")] - logits[lm.token_id(" John")] > 2.0


def test_the_sink_flips_a_hand_written_ioi_prompt(clean_smollm2: LensModel) -> None:
    """Issue 8: the sink is a choice that changes results. On this prompt SmolLM2 prefers the
    repeated name (S) with the default sink and the indirect object without any sink (measured
    -0.53 and +4.18; the README's sink section)."""
    prompt = "While Sarah and Peter were cooking dinner, Peter passed the salt to"
    bare = LensModel.wrap(clean_smollm2.model, "smollm2-135m", sink=None)
    diffs = {}
    for lm in (clean_smollm2, bare):
        tokens = lm.to_tokens(prompt)
        with torch.no_grad():
            logits = lm(tokens)[0, -1]
        diffs[lm.sink] = float(logits[lm.token_id(" Sarah")] - logits[lm.token_id(" Peter")])
    assert tokens.shape[1] == clean_smollm2.to_tokens(prompt).shape[1] - 1
    assert diffs["<|endoftext|>"] < 0 < diffs[None], diffs


def test_core_figures_match_their_pins(clean_smollm2: LensModel) -> None:
    """p(Paris) on the Eiffel prompt and the IOI logit difference above, pinned
    (tests/data/pins.json, benchmarks/pins.py): the thresholds above are the claims, the pin
    catches a drift that stays above them."""
    check_pins("core", measure("core", clean_smollm2), clean_smollm2.device)


def test_second_load_comes_from_the_cache(clean_smollm2: LensModel) -> None:
    assert any((cache_root() / "models").glob("smollm2-135m-*/processed-*.safetensors"))
    again = load_model("smollm2-135m")
    assert "cached" in again.source
    for (name, p), q in zip(clean_smollm2.model.named_parameters(), again.model.parameters(), strict=True):
        assert torch.equal(p, q), name


@pytest.mark.gemma
def test_gemma3_is_a_second_architecture(gemma3: LensModel) -> None:
    gemma = gemma3
    assert gemma.cfg.n_layers == 18 and gemma.sink == "<bos>"
    ids = gemma.encode("Paris")
    assert ids == gemma.tokenizer("Paris")["input_ids"]  # what its tokenizer adds itself: one <bos>
    assert ids.count(gemma.tokenizer.bos_token_id) == 1
    assert gemma.top_tokens(EIFFEL, k=1).labels[0][0] == " Paris"

"""SmolLM2 and Gemma 3 in lmsci-mi against the Hugging Face model that transformers builds from the
same GGUF: the same next-token log-probabilities in float32 on three prompts (benchmarks/parity.py
measures both models on 20 prompts, and bfloat16; README, "Numerical parity with Hugging Face")."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.loading import _gemma3_file, _smollm2_file

pytestmark = pytest.mark.slow

PROMPTS = (
    "The Eiffel Tower is located in the city of",
    "When Mary and John went to the store, John gave a drink to",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
)


def _assert_parity(lm: LensModel, path: Path, *, sink_is_ours: bool) -> None:
    """Every prompt's float32 log-probs within 1e-3 of Hugging Face's, the same top-1 everywhere and
    the same token ids for the text."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    for prompt in PROMPTS:
        tokens = lm.to_tokens(prompt)
        ours = lm(tokens).float().log_softmax(-1)
        theirs = hf(tokens.cpu()).logits.float().log_softmax(-1).to(ours.device)
        assert float((ours - theirs).abs().max()) < 1e-3, prompt
        assert bool((ours.argmax(-1) == theirs.argmax(-1)).all()), prompt
        if sink_is_ours:
            # The sink token is ours; the rest are Hugging Face's tokenizer's ids for the text.
            assert tokens[0, 1:].tolist() == lm.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        else:
            # The sink is the <bos> the tokenizer adds itself.
            assert tokens[0].tolist() == lm.tokenizer(prompt)["input_ids"]


@torch.no_grad()
def test_float32_log_probs_equal_hugging_face(clean_smollm2: LensModel) -> None:
    """Measured 2026-11-27 by benchmarks/parity.py on 20 prompts (273 positions): largest
    |Δ log p| 8.4e-5 over the whole vocabulary, every top-1 token the same. The bound 1e-3 leaves
    12x room for another BLAS's summation order; a wrong fold or a missing norm weight moves
    log-probs by far more."""
    _assert_parity(clean_smollm2, _smollm2_file(), sink_is_ours=True)


@pytest.mark.gemma
@torch.no_grad()
def test_gemma3_float32_log_probs_equal_hugging_face(gemma3: LensModel) -> None:
    """Measured 2026-11-27 by benchmarks/parity.py on 20 prompts (271 positions): largest
    |Δ log p| 5.9e-5, every top-1 the same; the same 1e-3 bound (17x room). Gemma 3 has parts
    SmolLM2 lacks (post-norms, the embedding scale), so it guards those."""
    _assert_parity(gemma3, _gemma3_file(), sink_is_ours=False)

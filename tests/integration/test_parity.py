"""SmolLM2 in lmsci-mi against the Hugging Face model that transformers builds from the same GGUF:
the same next-token log-probabilities in float32 (benchmarks/parity.py measures both models and
bfloat16; README, "Numerical parity with Hugging Face")."""

from __future__ import annotations

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.loading import _smollm2_file

pytestmark = pytest.mark.slow

PROMPTS = (
    "The Eiffel Tower is located in the city of",
    "When Mary and John went to the store, John gave a drink to",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
)


@torch.no_grad()
def test_float32_log_probs_equal_hugging_face(clean_smollm2: LensModel) -> None:
    """Measured 2026-11-27 on 20 prompts (273 positions): largest |Δ log p| 8.4e-5 over the whole
    vocabulary, every top-1 token the same. The bound 1e-3 leaves 12x room for another BLAS's
    summation order; a wrong fold or a missing norm weight moves log-probs by far more."""
    from transformers import AutoModelForCausalLM

    path = _smollm2_file()
    hf = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    lm = clean_smollm2
    for prompt in PROMPTS:
        tokens = lm.to_tokens(prompt)
        ours = lm(tokens).float().log_softmax(-1)
        theirs = hf(tokens.cpu()).logits.float().log_softmax(-1).to(ours.device)
        assert float((ours - theirs).abs().max()) < 1e-3, prompt
        assert bool((ours.argmax(-1) == theirs.argmax(-1)).all()), prompt
        # The sink token is ours; the rest are Hugging Face's tokenizer's ids for the text.
        assert tokens[0, 1:].tolist() == lm.tokenizer(prompt, add_special_tokens=False)["input_ids"]

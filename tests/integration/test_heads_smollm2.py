"""Induction heads on SmolLM2: they are found, ablating them hurts induction, and the batched
scores equal TransformerLens's detector on the same sequences."""

from __future__ import annotations

import pytest
import torch
from transformer_lens.head_detector import detect_head

from lmsci_mi import LensModel
from lmsci_mi.circuits.heads import (
    HeadScoreConfig,
    InductionAblationConfig,
    head_scores,
    induction_ablation,
    induction_scores,
)

pytestmark = pytest.mark.slow


def test_induction_heads_matter_for_repeated_tokens(clean_smollm2: LensModel) -> None:
    lm = clean_smollm2
    scores = induction_scores(lm, config=HeadScoreConfig(n_sequences=8, half_length=15))
    heads = scores.heads_above(0.4)
    assert 2 <= len(heads) <= 20
    # induction needs a previous-token head before it: never in the first layers
    assert min(head.layer for head in heads) >= 2
    check = induction_ablation(
        lm, heads, InductionAblationConfig(n_sequences=8, half_length=15, n_random_draws=3),
        exclude=scores.heads_above(0.1),
    )
    assert check.loss_clean < 3.0  # the model does induct on repeated random tokens
    # acceptance: ablating the induction heads costs >= 1 nat more than as many random heads
    assert check.excess >= 1.0, check


def test_scores_match_transformer_lens_on_smollm2(clean_smollm2: LensModel) -> None:
    lm = clean_smollm2
    tok = lm.tokenizer
    words = [tok.decode([t]) for t in range(2000, 2400)]
    words = [w for w in words if w.startswith(" ") and w[1:].isalpha() and tok.encode(w) == [tok.encode(w)[0]]]
    texts = ["".join(words[i * 8 : (i + 1) * 8] * 2) for i in range(3)]
    tokens = lm.model.to_tokens(texts)  # what detect_head will see
    assert tokens.shape == (3, 16)
    for exclude_bos in (False, True):
        config = HeadScoreConfig(rows="all", exclude_bos=exclude_bos)
        ours = head_scores(lm, tokens, "induction", config)
        theirs = detect_head(lm.model, texts, "induction_head", exclude_bos=exclude_bos)
        torch.testing.assert_close(ours.values, theirs.float(), atol=1e-4, rtol=1e-3)

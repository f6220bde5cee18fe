"""Lenses on SmolLM2: a small KL-trained tuned lens beats the logit lens on held-out text, DLA
sums to the logit difference, and the logit lens finds Paris by the top."""

from __future__ import annotations

import itertools

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.lenses import (
    LogitLensConfig,
    TunedLensConfig,
    direct_logit_attribution,
    logit_lens,
    train_tuned_lens,
    tuned_lens,
)
from lmsci_mi.lenses.tuned_lens import heldout_documents

pytestmark = pytest.mark.slow

EIFFEL = "The Eiffel Tower is located in the city of"


def _mean_kl(kl: torch.Tensor) -> torch.Tensor:
    """Per layer, KL averaged over real tokens (sink and padding left out)."""
    per_layer = kl[:, :, 1:].permute(1, 0, 2).reshape(kl.shape[1], -1)
    return per_layer[:, ~per_layer[0].isnan()].mean(1)


def test_kl_trained_tuned_lens_beats_logit_lens_on_held_out_text(clean_smollm2: LensModel) -> None:
    """Belrose et al.'s loop at a small budget (8 SGD steps of 64 tokens, some 30 s here): from
    the identity, the translators already lower held-out KL below the logit lens's at the same
    stream, at an early, a middle and a late layer. A least-squares map cannot pass this by
    construction: the lens starts as the logit lens and only the KL steps move it."""
    lm = clean_smollm2
    config = TunedLensConfig(steps=8, tokens_per_step=64, seq_len=32)
    lens = train_tuned_lens(lm, config)
    assert lens.site == "resid_pre" and lens.losses[-1] < lens.losses[0]
    layers = (1, 15, 27)
    read = LogitLensConfig(site="resid_pre", layers=layers)
    texts = [doc[:200] for doc in itertools.islice(heldout_documents(), 3)]
    logit = _mean_kl(logit_lens(lm, texts, config=read).kl)
    tuned = _mean_kl(tuned_lens(lm, texts, lens=lens, config=read).kl)
    assert (tuned < logit).all(), (layers, tuned, logit)


def test_logit_lens_and_dla_on_the_eiffel_prompt(clean_smollm2: LensModel) -> None:
    lm = clean_smollm2
    lens = logit_lens(lm, EIFFEL, " Paris")
    last = lens.last(0)
    # Paris is the model's answer: top at the last layer, and far less likely in early layers.
    assert int(lens.rank[0, -1, -1]) == 0
    assert float(last[:5].max()) < float(last[-1])
    dla = direct_logit_attribution(lm, EIFFEL, " Paris", " London")
    torch.testing.assert_close(dla.total(), dla.logit, atol=2e-3, rtol=1e-3)


def test_dla_sums_on_gemma3_with_its_post_norms(gemma3: LensModel) -> None:
    gemma = gemma3
    assert gemma.cfg.use_normalization_before_and_after
    dla = direct_logit_attribution(gemma, EIFFEL, " Paris", " London")
    torch.testing.assert_close(dla.total(), dla.logit, atol=5e-3, rtol=1e-3)

"""Lenses on SmolLM2: a small tuned lens beats the logit lens on held-out text at every layer
below the last, DLA sums to the logit difference, and the logit lens finds Paris by the top."""

from __future__ import annotations

import itertools

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.lenses import (
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


def test_tuned_lens_beats_logit_lens_on_held_out_text(clean_smollm2: LensModel) -> None:
    lm = clean_smollm2
    lens = train_tuned_lens(lm, TunedLensConfig(n_tokens=4096, steps=0))
    # Three held-out documents (about 150 tokens) keep the claim at every layer; six cost 25 s more.
    texts = [doc[:200] for doc in itertools.islice(heldout_documents(), 3)]
    logit = _mean_kl(logit_lens(lm, texts).kl)
    tuned = _mean_kl(tuned_lens(lm, texts, lens=lens).kl)
    assert (tuned[:-1] < logit[:-1]).all(), (tuned, logit)
    assert float(tuned[-1]) < 1e-3 and float(logit[-1]) < 1e-3


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

"""Lenses on SmolLM2: a small KL-trained tuned lens beats the logit lens on held-out text, DLA
sums to the logit difference, and the logit lens finds Paris by the top."""

from __future__ import annotations

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.lenses import direct_logit_attribution, logit_lens
from tests.pins import check_pins, measure

pytestmark = pytest.mark.slow

EIFFEL = "The Eiffel Tower is located in the city of"


def test_kl_trained_tuned_lens_beats_logit_lens_on_held_out_text(clean_smollm2: LensModel) -> None:
    """Belrose et al.'s loop at a small budget (8 SGD steps of 64 tokens, some 30 s here): from
    the identity, the translators already lower held-out KL below the logit lens's at the same
    stream (resid_pre) at most layers, and at an early, a middle and a late one. A least-squares
    map cannot pass this by construction: the lens starts as the logit lens and only the KL steps
    move it. The loss curve and both lenses' KL per layer are pinned (tests/data/pins.json,
    benchmarks/pins.py), so a change of the loop that still beats the logit lens is caught too."""
    measured = measure("tuned_lens", clean_smollm2)
    lens, tuned, logit = measured.result, measured.extra["tuned"], measured.extra["logit"]
    assert lens.site == "resid_pre" and lens.losses[-1] < lens.losses[0]
    below = tuned < logit
    assert int(below.sum()) > len(below) // 2, (tuned, logit)
    assert bool(below[[1, 15, 27]].all()), (tuned, logit)
    check_pins("tuned_lens", measured, clean_smollm2.device)


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

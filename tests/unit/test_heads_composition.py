"""Composition scores: equal to TransformerLens's `all_composition_scores` (GQA toy and GPT-2-style
toy), and computed without any tensor of size pairs × d_model × d_head."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.circuits.heads import composition_scores
from lmsci_mi.sites import Head


@pytest.mark.parametrize("mode", ["Q", "K", "V"])
@pytest.mark.parametrize("toy", ["tiny", "tiny_gpt2"])
@torch.no_grad()
def test_composition_scores_equal_transformer_lens(toy: str, mode: str, request) -> None:
    lm: LensModel = request.getfixturevalue(toy)  # tiny: GQA, 4 query heads on 2 key/value heads
    ours = composition_scores(lm, mode)  # type: ignore[arg-type]
    theirs = lm.model.all_composition_scores(mode).float()  # [L, H, L, H], W_K/W_V expanded
    n = lm.cfg.n_layers * lm.cfg.n_heads
    torch.testing.assert_close(ours.values, theirs.reshape(n, n).cpu(), atol=2e-6, rtol=1e-5)
    assert float(ours.values[lm.cfg.n_heads :, : lm.cfg.n_heads].abs().max()) == 0.0
    assert ours.labels[0][1] == "L0.H1"
    pair = float(theirs[0, 1, 1, 2])
    assert ours.score(Head(0, 1), Head(1, 2)) == ours.score("L0.H1", "L1.H2") == pytest.approx(pair, rel=1e-5)  # GPU sums differ


# Six layers of 12 heads with d_model 384: building every pair's d_model x d_head product would
# take 72^2 * 384 * 32 * 4 bytes = 255 MB; the scores themselves need a few MB.
_MEMORY_SCRIPT = textwrap.dedent(
    """
    import resource, torch
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from lmsci_mi import LensModel
    from lmsci_mi.circuits.heads import composition_scores

    torch.set_num_threads(1)

    def toy(n_layers, n_heads, d_model, d_head):
        cfg = HookedTransformerConfig(
            n_layers=n_layers, d_model=d_model, n_heads=n_heads, d_head=d_head, n_ctx=8,
            d_vocab=16, attn_only=True, normalization_type=None, seed=0, device="cpu",
        )
        return LensModel(HookedTransformer(cfg), name="toy", source="test", tokenizer=None,
                         sink_token_id=None)

    composition_scores(toy(2, 2, 32, 8), "K")  # load the linear-algebra kernels first
    big = toy(6, 12, 384, 32)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    composition_scores(big, "K")
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print((after - before) / 1024)
    """
)


@pytest.mark.slow  # a fresh interpreter: seconds of imports
def test_composition_scores_stay_small_in_memory() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _MEMORY_SCRIPT], capture_output=True, text=True, check=True,
        env={"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PATH": ""},
    )
    peak_mib = float(out.stdout.strip().splitlines()[-1])  # ru_maxrss is in KiB on Linux
    assert peak_mib < 64, f"composition_scores raised the peak RSS by {peak_mib:.0f} MiB"

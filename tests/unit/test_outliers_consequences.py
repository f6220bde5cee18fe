"""Massive activations' consequences for the other tools, on the toy: the lenses' KL leaves out
the positions an Exclude names (the default unchanged), and the SAE's explained variance and the
lens's KL come back over all positions and without the excluded ones, each estimate what the tool
itself computes, with paired intervals over texts; results round-trip; bad input errs clearly."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.collect import CollectConfig, collect_activations
from lmsci_mi.data.text_corpus import text_chunks
from lmsci_mi.errors import UserInputError
from lmsci_mi.lenses import logit_lens
from lmsci_mi.outliers import (
    ExclusionEffect,
    ExclusionEffectConfig,
    lens_kl_without,
    sae_explained_variance_without,
)
from lmsci_mi.outliers.consequences import heldout_texts
from lmsci_mi.positions import Exclude
from lmsci_mi.sae import LensSAE
from lmsci_mi.sae.stats import feature_summary
from lmsci_mi.sites import hook_name
from tests.fixtures import weights_fingerprint

CONFIG = ExclusionEffectConfig(n_texts=3, seq_len=12, n_resamples=50)
PROMPTS = ["The cat sat on the mat. The dog", "A dog ran.", "Hello there. Hello"]


class _ReluSAE:
    """A stand-in for sae-lens's SAE: ReLU encoder, linear decoder, fixed random weights."""

    dtype, device = torch.float32, torch.device("cpu")

    def __init__(self, d_model: int, d_sae: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.w_enc = torch.randn(d_model, d_sae, generator=generator) / d_model**0.5
        self.w_dec = torch.randn(d_sae, d_model, generator=generator) / d_sae**0.5
        self.cfg = SimpleNamespace(d_sae=d_sae)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ self.w_enc)

    def decode(self, f: torch.Tensor) -> torch.Tensor:
        return f @ self.w_dec


def test_the_lens_kl_leaves_out_what_an_exclude_names(tiny: LensModel) -> None:
    lens = logit_lens(tiny, PROMPTS)
    assert torch.equal(lens.mean_kl(), lens.kl.nanmean((0, 2)))  # the default is unchanged
    period = tiny.token_id(".")
    assert lens.token_ids is not None and lens.token_ids.shape == lens.kl[:, 0].shape
    exclude = Exclude(token_ids=(period,))
    keep = ~lens.kl[:, 0].isnan() & (lens.token_ids != period)
    keep[:, 0] = False  # the sink
    by_hand = torch.stack([lens.kl[:, layer][keep].mean() for layer in range(2)])
    assert torch.allclose(lens.mean_kl(exclude), by_hand)
    per_prompt = lens.kl_per_prompt(exclude)
    assert torch.allclose(per_prompt[1], torch.stack([lens.kl[1, layer][keep[1]].mean() for layer in range(2)]))
    assert not torch.allclose(lens.mean_kl(exclude), lens.mean_kl())
    # A result saved before it kept its token ids: positions work, tokens cannot.
    import dataclasses

    old = dataclasses.replace(lens, token_ids=None)
    assert torch.allclose(old.mean_kl(Exclude(positions=(2,))), lens.mean_kl(Exclude(positions=(2,))))
    with pytest.raises(UserInputError, match="token ids"):
        old.mean_kl(exclude)


def test_lens_kl_without_is_the_lens_own_figure_with_paired_intervals(tiny: LensModel, tmp_path: Path) -> None:
    exclude = Exclude(positions=(1, 2))
    effect = lens_kl_without(tiny, exclude, PROMPTS, config=CONFIG)
    lens = logit_lens(tiny, PROMPTS)
    assert effect.values.shape == (2, 2) and effect.labels[1] == ("0", "1")
    assert torch.allclose(effect.values[0], lens.kl_per_prompt().mean(0))
    assert torch.allclose(effect.values[1], lens.kl_per_prompt(exclude).mean(0))
    for layer in range(2):
        diff = effect.difference[layer]
        assert diff.estimate == pytest.approx(effect.kept[layer].estimate - effect.all[layer].estimate, abs=1e-6)
        assert diff.low <= diff.estimate <= diff.high and diff.n == 3
    n_real = sum(len(t) for t in lens.tokens)
    assert effect.n_positions == (n_real, n_real - 3 * 3)
    assert ExclusionEffect.load(effect.save(tmp_path / "kl.json")) == effect
    assert "without the sink, positions 1, 2" in effect.summary()
    # The default text: held-out stdlib prose, about seq_len tokens a text.
    texts = heldout_texts(tiny, CONFIG)
    assert len(texts) == 3 and all(8 <= len(tiny.encode(t)) <= 16 for t in texts)


def test_sae_explained_variance_without_is_the_sae_own_figure(tiny: LensModel, tmp_path: Path) -> None:
    hook = hook_name("resid_post", 1)
    sae = LensSAE(_ReluSAE(tiny.cfg.d_model, 16), hook, tiny.name, tiny.cfg.d_model, torch.ones(16))
    rows = text_chunks(tiny, 3 * 11, 12).tolist()
    exclude = Exclude(positions=(1,), token_ids=(rows[0][4],))
    before = weights_fingerprint(tiny)
    effect = sae_explained_variance_without(tiny, sae, rows, exclude, CONFIG)
    assert weights_fingerprint(tiny) == before and tiny.hooks.attached_count() == 0
    quiet = CollectConfig(progress=False)
    # What sae_stats measures: its default positions (the sink out), and with the exclusion added.
    every = collect_activations(tiny, rows, [hook], positions="all", config=quiet).acts[hook]
    kept = collect_activations(tiny, rows, [hook], positions="all", config=quiet,
                               exclude=Exclude().union(exclude)).acts[hook]
    assert effect.all[0].estimate == pytest.approx(feature_summary(sae, every)[0], rel=1e-5)
    assert effect.kept[0].estimate == pytest.approx(feature_summary(sae, kept)[0], rel=1e-5)
    assert effect.n_positions == (len(every), len(kept)) and len(kept) < len(every)
    diff = effect.difference[0]
    assert diff.estimate == pytest.approx(effect.kept[0].estimate - effect.all[0].estimate, abs=1e-6)
    assert diff.low <= diff.estimate <= diff.high
    assert ExclusionEffect.load(effect.save(tmp_path / "ev.json")) == effect
    with pytest.raises(UserInputError, match="at least two"):
        sae_explained_variance_without(tiny, sae, rows[:1], exclude, CONFIG)
    with pytest.raises(UserInputError, match="no position is left"):
        sae_explained_variance_without(tiny, sae, rows, Exclude(positions=tuple(range(12))), CONFIG)


def test_lens_kl_without_refuses_bad_input(tiny: LensModel) -> None:
    with pytest.raises(UserInputError, match="at least two"):
        lens_kl_without(tiny, Exclude(), ["one text"], config=CONFIG)
    with pytest.raises(UserInputError, match="no token left"):
        lens_kl_without(tiny, Exclude(positions=(1, 2, 3)), ["A dog", "The cat sat on"], config=CONFIG)

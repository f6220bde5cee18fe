"""A feature at a glance (the tour's SAE step): its card and steering frequency on a toy SAE, the
random control drawn among the features alive in the SAE's statistics."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from lmsci_mi import GenerationConfig, LensModel, load_model
from lmsci_mi.sae import (
    FeatureOverviewConfig,
    FrequencyConfig,
    LensSAE,
    SAEStats,
    SAETrainConfig,
    feature_overview,
)
from lmsci_mi.sae import train as train_module

HOOK = "blocks.1.hook_resid_post"
D_SAE = 32
LOOK = FeatureOverviewConfig(n_tokens=200, n_prompts=2, contexts=2)
STEER = FrequencyConfig(generation=GenerationConfig(max_new_tokens=3, top_p=0.9), coefficient=8.0)


@pytest.fixture(autouse=True)
def _short_prose(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three documents instead of the standard library's (walking it takes 1.5 s)."""
    from lmsci_mi.data import text_corpus

    prose = ["The cat sat on the mat, and then it slept in the warm afternoon sun. " * 6,
             "Return a new list containing all items from the iterable in ascending order. " * 6,
             "Once upon a time there was a small village by the sea where fishermen lived. " * 6]
    monkeypatch.setattr(text_corpus, "stdlib_documents", lambda: iter(prose))


@pytest.fixture
def toy() -> LensModel:
    return load_model("toy-2l", device="cpu")


@pytest.fixture
def sae(toy: LensModel) -> LensSAE:
    """An untrained toy SAE (random weights): enough for the overview's plumbing."""
    torch.manual_seed(0)
    raw = train_module._training_sae(toy, HOOK, SAETrainConfig(layer=1, d_sae=D_SAE, k=4))
    return LensSAE(raw, HOOK, toy.name, toy.cfg.d_model, torch.ones(D_SAE))


def _stats(alive: torch.Tensor, toy: LensModel) -> SAEStats:
    return SAEStats(
        values=alive.double(), axes=("feature",), labels=(tuple(map(str, range(D_SAE))),),
        meta=toy.meta(()), hook=HOOK, explained_variance=0.5, explained_variance_autocast=None,
        l0=4.0, dead_fraction=float((alive == 0).double().mean()), loss_clean=1.0, loss_sae=1.5,
        loss_zero=3.0, n_tokens=100, feature_scale=torch.ones(D_SAE), costs={},
    )


def test_the_overview_is_the_card_and_the_steering_table(
    toy: LensModel, sae: LensSAE, tmp_path: Path
) -> None:
    # One test (the text, the SAE and the generations cost seconds): first an SAE with no
    # statistics, whose control may be any feature; then one whose stats.json has 10 live ones.
    look = feature_overview(toy, sae, 5, LOOK, STEER)
    assert look.feature == 5 and look.control_pool is None
    assert look.cards.features == (5,) and look.cards.n_tokens >= LOOK.n_tokens
    assert len(look.cards.context_texts(5)) <= LOOK.contexts
    table = look.frequency
    assert table.feature == 5 and table.control != 5 and table.coefficient == 8.0
    assert tuple(table.values.shape) == (3, LOOK.n_prompts)  # unsteered, feature, control
    with pytest.raises(ValueError, match="out of range"):
        feature_overview(toy, sae, D_SAE, LOOK, STEER)

    alive = torch.zeros(D_SAE)
    alive[:10] = 1.0
    _stats(alive, toy).save(tmp_path / "stats.json")
    look = feature_overview(toy, dataclasses.replace(sae, source=str(tmp_path)), 20, LOOK, STEER)
    assert look.control_pool == 10
    assert look.frequency.control in range(10)

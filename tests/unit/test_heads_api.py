"""Head-score configs, the head-kind registry and the one mean-ablation function, on the tiny
models: configs validate and build CLI flags, every kind dispatches through the registry, and
mean ablation equals TransformerLens's own hooks writing the means."""

from __future__ import annotations

import argparse

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.circuits.ablation import all_heads, head_means, mean_ablated_logits
from lmsci_mi.circuits.heads import (
    HEAD_SCORES,
    HeadScoreConfig,
    InductionAblationConfig,
    induction_ablation,
    top_heads,
)
from lmsci_mi.sites import Head, hook_name


def test_config_validates_and_builds_flags() -> None:
    with pytest.raises(ValueError, match="rows"):
        HeadScoreConfig(rows="some")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n_sequences"):
        HeadScoreConfig(n_sequences=0)
    parser = argparse.ArgumentParser()
    HeadScoreConfig.add_arguments(parser)
    args = parser.parse_args(["--n-sequences", "3", "--exclude-bos", "--rows", "all"])
    config = HeadScoreConfig.from_args(args)
    assert config == HeadScoreConfig(n_sequences=3, exclude_bos=True, rows="all")
    assert HeadScoreConfig.from_args(parser.parse_args([])) == HeadScoreConfig()


def test_every_kind_dispatches_through_the_registry(tiny: LensModel) -> None:
    # Feature packages register more kinds (lmsci_mi.outliers: "sink"); these five are the core's.
    assert set(HEAD_SCORES.names()) >= {
        "induction", "previous_token", "duplicate_token", "prefix_matching", "copying"
    }
    config = HeadScoreConfig(n_sequences=2, half_length=4, seed=3)
    for method in HEAD_SCORES:
        result = method.function(tiny, config=config)
        assert result.head_kind == method.name
        assert result.values.shape == (tiny.cfg.n_layers, tiny.cfg.n_heads)
        if result.meta.data_source.startswith("repeated random tokens"):  # the seeded kinds
            assert result.meta.params["seed"] == 3 and result.meta.seed == 3
    induction = HEAD_SCORES.get("induction").function(tiny, config=config)
    prefix = HEAD_SCORES.get("prefix_matching").function(tiny, config=config)
    assert torch.equal(induction.values, prefix.values)  # same pattern on random repeats
    with pytest.raises(KeyError, match="registered"):
        HEAD_SCORES.get("nonsense")


def test_top_returns_heads_and_values_best_first() -> None:
    values = torch.tensor([[0.1, float("nan"), 0.3], [0.9, -1.0, 0.2]])
    assert top_heads(values, 3) == ((Head(1, 0), pytest.approx(0.9)), (Head(0, 2), pytest.approx(0.3)),
                                    (Head(1, 2), pytest.approx(0.2)))
    assert top_heads(values, 6)[-1][0] == Head(0, 1)  # NaN last


@torch.no_grad()
def test_mean_ablation_equals_writing_the_means_by_hand(tiny: LensModel) -> None:
    tokens = torch.randint(100, 1000, (3, 7))
    tokens[:, 0] = 0
    heads = [Head(0, 1), Head(1, 0), Head(1, 3)]
    means = head_means(tiny, tokens)
    ours = mean_ablated_logits(tiny, tokens, heads, means)

    # The same thing written directly with TransformerLens, from a cache of the clean run.
    _, cache = tiny.model.run_with_cache(tokens)

    def write_means(z: torch.Tensor, hook) -> torch.Tensor:
        z = z.clone()
        mean = cache[hook.name].mean(0, keepdim=True)
        for head in heads:
            if hook_name("z", head.layer) == hook.name:
                z[:, :, head.head] = mean[:, :, head.head]
        return z

    theirs = tiny.model.run_with_hooks(
        tokens, fwd_hooks=[(hook_name("z", layer), write_means) for layer in range(2)]
    )
    torch.testing.assert_close(ours, theirs)
    assert not torch.allclose(ours, tiny(tokens))
    assert tiny.hooks.attached_count() == 0


def test_induction_ablation_baseline_and_bad_requests(tiny: LensModel) -> None:
    config = InductionAblationConfig(n_sequences=3, half_length=5, n_random_draws=2)
    check = induction_ablation(tiny, [Head(1, 0)], config, exclude=[(0, 0)])
    assert check.heads == (Head(1, 0),)
    assert check.loss_random_ablated == pytest.approx(float(check.values.mean()))
    assert check.excess == pytest.approx(check.loss_induction_ablated - check.loss_random_ablated)
    assert check.meta.params["n_random_draws"] == 2
    with pytest.raises(ValueError, match="no heads"):
        induction_ablation(tiny, [], config)
    with pytest.raises(ValueError, match="not enough"):
        induction_ablation(tiny, list(all_heads(tiny))[:5], config, exclude=list(all_heads(tiny))[5:])
    assert tiny.hooks.attached_count() == 0

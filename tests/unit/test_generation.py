"""The one sampler (lmsci_mi.generation): KV cache vs recomputation under interventions, per-row
seeded streams, top-k / top-p, config errors, and hooks left clean."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest
import torch

from lmsci_mi import LensModel, load_model
from lmsci_mi.generation import GenerationConfig, _choose, _nucleus, generate
from lmsci_mi.steering import LMSteer, LMSteerConfig

PROMPTS = ["The cat sat", "A dog", "Once upon a time there was", "Hi"]
LOGIT_ATOL = 1e-4  # float32 logits, cached vs recomputed: the same sums in another order


@pytest.fixture(scope="module")
def toy() -> LensModel:
    """toy-2l: Llama-shaped (RMSNorm, rotary, gated SiLU, GQA), random weights."""
    return load_model("toy-2l", device="cpu")


def _interventions(lm: LensModel) -> dict[str, Callable[[], Any]]:
    steer = LMSteer.for_model(lm, ("sentiment",), LMSteerConfig(rank=8, init_std=0.2), seed=1)
    d = lm.cfg.d_model
    return {
        "none": contextlib.nullcontext,
        "lm_steer": lambda: steer.apply(lm, [3.0]),
        "add_vector": lambda: lm.hooks.add_vector(
            "blocks.0.hook_resid_post", torch.linspace(-2, 2, d), scale=3.0
        ),
        "ablate_heads": lambda: lm.hooks.ablate("blocks.1.attn.hook_z", heads=[0, 2]),
        "ablate_mlp": lambda: lm.hooks.ablate("blocks.0.hook_mlp_out"),
    }


@pytest.mark.parametrize("name", ["none", "lm_steer", "add_vector", "ablate_heads", "ablate_mlp"])
def test_greedy_tokens_and_logits_are_the_same_with_and_without_the_kv_cache(
    toy: LensModel, name: str
) -> None:
    config = GenerationConfig(max_new_tokens=8, temperature=0.0)
    runs = []
    for cache in (True, False):
        with _interventions(toy)[name]():
            runs.append(generate(toy, PROMPTS, config, use_kv_cache=cache, keep_logits=True))
    assert runs[0].tokens == runs[1].tokens
    assert runs[0].logits is not None and runs[1].logits is not None
    for cached, recomputed in zip(runs[0].logits, runs[1].logits, strict=True):
        assert cached.shape == (8, toy.cfg.d_vocab)
        torch.testing.assert_close(cached, recomputed, atol=LOGIT_ATOL, rtol=0)
    assert toy.hooks.attached_count() == 0


def test_interventions_act_at_every_step(toy: LensModel) -> None:
    config = GenerationConfig(max_new_tokens=8, temperature=0.0)
    plain = generate(toy, PROMPTS, config).tokens
    with _interventions(toy)["add_vector"]():
        pushed = generate(toy, PROMPTS, config).tokens
    assert pushed != plain


def test_a_row_samples_the_same_alone_and_in_a_mixed_batch(toy: LensModel) -> None:
    config = GenerationConfig(max_new_tokens=6, seed=3, top_k=20)
    together = generate(toy, PROMPTS, config)
    one_by_one = generate(toy, PROMPTS, config.replace(batch_size=1))
    assert together.tokens == one_by_one.tokens
    # Row 0 draws from the stream of (seed, 0) whatever shares its batch.
    assert generate(toy, PROMPTS[:1], config).tokens[0] == together.tokens[0]
    assert all(len(t) == 6 for t in together.tokens)


def test_a_prompt_keeps_its_named_stream_at_any_row(toy: LensModel) -> None:
    config = GenerationConfig(max_new_tokens=6, top_k=5, seed=3)
    alone = generate(toy, ["Paris is"], config, streams=[12345])
    later = generate(toy, ["Hello", "Paris is"], config, streams=[7, 12345])
    assert later.tokens[1] == alone.tokens[0]
    assert generate(toy, ["Paris is"], config).tokens[0] != alone.tokens[0]
    with pytest.raises(ValueError, match="one per prompt"):
        generate(toy, ["a", "b"], config, streams=[1])


def test_the_same_seed_gives_the_same_samples_and_leaves_the_global_rng(toy: LensModel) -> None:
    config = GenerationConfig(max_new_tokens=6, seed=7)
    state = torch.random.get_rng_state()
    first = generate(toy, PROMPTS, config).tokens
    assert torch.equal(state, torch.random.get_rng_state())
    torch.manual_seed(123)  # the global stream plays no part
    assert generate(toy, PROMPTS, config).tokens == first
    assert generate(toy, PROMPTS, config.replace(seed=8)).tokens != first
    # Two rows with the same prompt draw from different streams.
    same = generate(toy, ["The cat"] * 2, GenerationConfig(max_new_tokens=8, seed=0)).tokens
    assert same[0] != same[1]


def test_top_k_one_is_greedy(toy: LensModel) -> None:
    greedy = generate(toy, PROMPTS, GenerationConfig(max_new_tokens=6, temperature=0.0))
    top1 = generate(toy, PROMPTS, GenerationConfig(max_new_tokens=6, temperature=2.0, top_k=1))
    assert top1.tokens == greedy.tokens


def test_top_p_keeps_the_nucleus() -> None:
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    kept = _nucleus(probs.log(), 0.7).isfinite()
    assert kept.tolist() == [[True, True, False, False]]  # 0.5 < 0.7, 0.5 + 0.3 reaches it
    assert _nucleus(probs.log(), 0.5).isfinite().tolist() == [[True, False, False, False]]
    assert _nucleus(probs.log(), 1.0).isfinite().all()
    generators = [torch.Generator().manual_seed(i) for i in range(400)]
    logits = probs.log().expand(400, -1)
    drawn = _choose(
        logits, GenerationConfig(top_p=0.7), generators, torch.ones(400, dtype=torch.bool)
    )
    assert set(drawn.tolist()) == {0, 1}
    share = (drawn == 0).float().mean().item()
    assert abs(share - 0.5 / 0.8) < 0.1  # renormalised over the nucleus


def test_token_prompts_and_the_stop_token(toy: LensModel) -> None:
    config = GenerationConfig(max_new_tokens=12, temperature=0.0)
    ids = toy.encode("The cat sat")
    free = generate(toy, [ids], config)
    assert free.tokens == generate(toy, ["The cat sat"], config).tokens
    assert free.prompts == (tuple(ids),)
    stop = free.tokens[0][3]
    stopped = generate(toy, [ids], config, stop_at=stop).tokens[0]
    assert stopped[-1] == stop and stopped == free.tokens[0][: free.tokens[0].index(stop) + 1]


def test_lens_model_wrappers(toy: LensModel) -> None:
    text = toy.generate("The cat", 4)
    assert (
        text
        == generate(toy, ["The cat"], GenerationConfig(max_new_tokens=4, temperature=0)).texts[0]
    )
    assert toy.sample(["a", "b c"], 3, seed=2) == toy.sample(["a", "b c"], 3, seed=2)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"max_new_tokens": -1}, "max_new_tokens"),
        ({"temperature": -0.5}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"batch_size": 0}, "batch_size"),
    ],
)
def test_bad_config_values_raise(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GenerationConfig(**changes)


def test_an_empty_prompt_raises(toy: LensModel) -> None:
    with pytest.raises(ValueError, match="no tokens"):
        generate(toy, [[]], GenerationConfig(max_new_tokens=2))


def test_no_hooks_are_left_after_an_exception(toy: LensModel) -> None:
    bad = torch.ones(toy.cfg.d_model + 1)  # the wrong size: the hook raises mid-generation
    with (
        pytest.raises(ValueError, match="size"),
        toy.hooks.add_vector("blocks.0.hook_resid_post", bad),
    ):
        generate(toy, PROMPTS, GenerationConfig(max_new_tokens=3))
    assert toy.hooks.attached_count() == 0
    assert generate(toy, PROMPTS[:1], GenerationConfig(max_new_tokens=2)).tokens

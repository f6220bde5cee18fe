"""Activation collection: the rows equal a plain forward pass's activations, in bounded memory."""

import numpy as np
import pytest
import torch

from lmsci_mi import load_model
from lmsci_mi.collect import CollectConfig, collect_activations
from lmsci_mi.sites import hook_name

QUIET = CollectConfig(progress=False, token_budget=12)
TEXTS = ["The cat sat on the mat", "A dog", "Birds fly south in the winter months", "Hi"]


@pytest.fixture(scope="module")
def lm():
    return load_model("toy-2l")


def _reference(lm, hook):
    out = []
    for text in TEXTS:
        with lm.hooks.capture([hook]) as cap:
            lm.model(lm.to_tokens(text))
        out.append(cap[hook][0].cpu())
    return out


@pytest.mark.parametrize(
    "site,layer",
    [
        ("resid_post", 1),
        ("resid_pre", 0),
        ("z", 1),
        ("embed", None),
        ("ln_final", None),
        ("mlp_post", 0),
    ],
)
def test_all_positions_equal_a_plain_forward_pass(lm, site, layer):
    hook = hook_name(site, layer)
    acts = collect_activations(lm, TEXTS, [hook], positions="all", config=QUIET)
    reference = _reference(lm, hook)
    expected = torch.cat([r[1:] for r in reference])  # the sink is left out
    torch.testing.assert_close(acts.acts[hook], expected, rtol=1e-4, atol=1e-5)
    assert acts.example.tolist() == [i for i, r in enumerate(reference) for _ in range(len(r) - 1)]
    assert acts.position.tolist() == [p for r in reference for p in range(1, len(r))]
    assert acts.token.tolist() == [t for text in TEXTS for t in lm.encode(text)[1:]]


def test_last_and_named_positions(lm):
    hook = hook_name("resid_mid", 1)
    reference = _reference(lm, hook)
    last = collect_activations(lm, TEXTS, [hook, hook_name("resid_pre", 1)], config=QUIET)
    torch.testing.assert_close(
        last.acts[hook], torch.stack([r[-1] for r in reference]), rtol=1e-4, atol=1e-5
    )
    assert last.stack().shape == (2, len(TEXTS), lm.cfg.d_model)
    named = collect_activations(lm, TEXTS, [hook], positions=[[1, -1], [], [2], [0]], config=QUIET)
    assert named.example.tolist() == [0, 0, 2, 3]
    torch.testing.assert_close(named.acts[hook][0], reference[0][1], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(named.acts[hook][2], reference[2][2], rtol=1e-4, atol=1e-5)


def test_streams_to_disk_and_subsamples(lm, tmp_path):
    hook = hook_name("resid_post", 0)
    full = collect_activations(lm, TEXTS, [hook], positions="all", config=QUIET)
    disk = collect_activations(lm, TEXTS, [hook], positions="all", config=QUIET, out_dir=tmp_path)
    assert np.array_equal(np.load(tmp_path / f"{hook}.npy"), full.acts[hook].numpy())
    assert torch.equal(disk.acts[hook], full.acts[hook])
    some = collect_activations(
        lm, TEXTS, [hook], positions="all", config=QUIET.replace(max_items=5, seed=3)
    )
    assert len(some) == 5
    keys = {(e, p) for e, p in zip(full.example.tolist(), full.position.tolist(), strict=True)}
    assert {
        (e, p) for e, p in zip(some.example.tolist(), some.position.tolist(), strict=True)
    } <= keys
    half = collect_activations(
        lm, TEXTS, [hook], positions="all", config=QUIET.replace(dtype="float16")
    )
    assert half.acts[hook].dtype == torch.float16


def test_bad_input_is_named(lm):
    hook = hook_name("resid_post", 0)
    with pytest.raises(ValueError, match="resid_psot"):
        collect_activations(lm, TEXTS, ["blocks.0.hook_resid_psot"], config=QUIET)
    with pytest.raises(ValueError, match="query, key"):
        collect_activations(lm, TEXTS, [hook_name("pattern", 0)], config=QUIET)
    with pytest.raises(ValueError, match="outside text 1"):
        collect_activations(lm, TEXTS, [hook], positions=[[1], [9], [1], [1]], config=QUIET)
    with pytest.raises(ValueError, match="one per text"):
        collect_activations(lm, TEXTS, [hook], positions=[[1]], config=QUIET)
    with pytest.raises(ValueError, match="at least one text"):
        collect_activations(lm, [], [hook], config=QUIET)
    with pytest.raises(ValueError, match="dtype"):
        CollectConfig(dtype="int8")
    assert lm.hooks.attached_count() == 0


def test_autocast_collection_is_close_to_float32(lm):
    hook = hook_name("resid_post", 1)
    exact = collect_activations(lm, TEXTS, [hook], positions="all", config=QUIET)
    fast = collect_activations(lm, TEXTS, [hook], positions="all", config=QUIET.replace(autocast="bfloat16"))
    assert fast.acts[hook].dtype == torch.float32
    cosine = torch.nn.functional.cosine_similarity(exact.acts[hook], fast.acts[hook], dim=-1)
    assert cosine.min() > 0.99 and not torch.equal(exact.acts[hook], fast.acts[hook])


@pytest.mark.parametrize("name", ["toy-2l", "toy-gpt2-2l"])  # rotary and absolute positions
def test_shared_prefixes_are_computed_once_with_the_same_activations(name):
    model = load_model(name)
    texts = [f"Last summer we spent a week in {city}" for city in ("Paris", "Rome", "Kyoto", "Oslo")]
    texts += ["Last summer we", "Something else entirely"]
    hooks = [hook_name("resid_post", 0), hook_name("ln_final")]
    exact = collect_activations(model, texts, hooks, positions="all", config=QUIET.replace(reuse_prefix=False))
    shared = collect_activations(model, texts, hooks, positions="all",
                                 config=QUIET.replace(reuse_prefix=True, token_budget=64))
    for hook in hooks:
        torch.testing.assert_close(shared.acts[hook], exact.acts[hook], rtol=1e-4, atol=1e-5)
    assert model.hooks.attached_count() == 0

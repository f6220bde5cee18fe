"""Lenses and direct logit attribution against TransformerLens's own cache arithmetic, on toys."""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest
import torch
from safetensors.torch import save_file

from lmsci_mi import LensModel, load_model
from lmsci_mi.cache import weights_fingerprint
from lmsci_mi.cli import main
from lmsci_mi.data.text_corpus import text_chunks
from lmsci_mi.lenses import (
    LogitLens,
    LogitLensConfig,
    TunedLens,
    TunedLensConfig,
    direct_logit_attribution,
    fit_least_squares_lens,
    logit_lens,
    train_tuned_lens,
    tuned_lens,
    tuned_lens_for,
)
from lmsci_mi.lenses.tuned_lens import (
    Translators,
    _config_from,
    _documents,
    _kl_step,
    heldout_documents,
    starting_map,
    training_rows,
    tuned_lens_path,
)

PROMPTS = ["The Eiffel Tower is located in the city of", "The cat sat on the"]


def _tl_lens_logp(lm: LensModel, prompt: str) -> torch.Tensor:
    """TransformerLens's logit lens: accumulated_resid + apply_ln_to_stack(recompute_ln) + unembed,
    resid_post of every layer (``[layer, pos, vocab]`` log-probabilities)."""
    tokens = lm.to_tokens(prompt)
    _, cache = lm.model.run_with_cache(tokens)
    stack = cache.accumulated_resid(apply_ln=False)[1:]  # resid_post of layers 0..L-1
    normed = cache.apply_ln_to_stack(stack, recompute_ln=True)
    return lm.model.unembed(normed)[:, 0].log_softmax(-1)


@pytest.mark.parametrize("name", ["toy-2l", "toy-gpt2-2l"])
def test_logit_lens_equals_transformer_lens(name: str) -> None:
    lm = load_model(name, device="cpu")
    with torch.no_grad():
        lens = logit_lens(lm, PROMPTS, " Paris")
        for i, prompt in enumerate(PROMPTS):
            logp = _tl_lens_logp(lm, prompt)  # [layer, pos, vocab]
            n = logp.shape[1]
            final = lm(lm.to_tokens(prompt))[0].log_softmax(-1)
            answer = lm.token_id(" Paris")
            torch.testing.assert_close(
                lens.values[i, :, :n], logp[..., answer].exp(), atol=1e-5, rtol=1e-4
            )
            assert torch.equal(lens.top_tokens[i, :, :n], logp.argmax(-1))
            kl = (final.exp() * (final - logp)).sum(-1)
            torch.testing.assert_close(lens.kl[i, :, :n], kl, atol=1e-4, rtol=1e-3)
            rank = (logp > logp[..., answer : answer + 1]).sum(-1)
            assert torch.equal(lens.rank[i, :, :n], rank)
    # Padding of the shorter prompt is marked, and the last layer is the model's own output.
    assert lens.values[1, :, -1].isnan().all()
    assert float(lens.kl[:, -1].nan_to_num(0).max()) < 1e-4


def test_logit_lens_sites_and_layers(tiny: LensModel) -> None:
    pre = logit_lens(tiny, "The cat sat", config=LogitLensConfig(site="resid_pre", layers=(1,)))
    post = logit_lens(tiny, "The cat sat", config=LogitLensConfig(site="resid_post", layers=(0,)))
    # resid_pre of layer 1 is resid_post of layer 0.
    torch.testing.assert_close(pre.values, post.values)
    assert pre.axis_labels(1) == ["1"] and pre.site == "resid_pre"


def test_lens_inside_an_intervention_shows_the_intervened_stream(tiny: LensModel) -> None:
    site = "blocks.0.hook_resid_post"
    vector = torch.randn(tiny.cfg.d_model) * 5
    clean = logit_lens(tiny, "The cat sat", " mat")
    with tiny.hooks.add_vector(site, vector):
        steered = logit_lens(tiny, "The cat sat", " mat")
    assert not torch.allclose(clean.values[0, 0], steered.values[0, 0])
    # By hand: the clean layer-0 stream plus the vector, through the final norm and unembedding.
    tokens = tiny.to_tokens("The cat sat")
    with torch.no_grad(), tiny.hooks.capture(site) as cap:
        tiny(tokens)
    logp = tiny.unembed(cap[site][0] + vector.to(tiny.device)).log_softmax(-1).cpu()
    torch.testing.assert_close(
        steered.values[0, 0], logp[:, tiny.token_id(" mat")].exp(), atol=1e-5, rtol=1e-4
    )
    assert tiny.hooks.attached_count() == 0


@pytest.mark.parametrize("name", ["toy-2l", "toy-gpt2-2l"])
def test_dla_per_head_equals_stack_head_results(name: str) -> None:
    lm = load_model(name, device="cpu")
    prompt, answer, wrong = PROMPTS[0], " Paris", " London"
    dla = direct_logit_attribution(lm, prompt, answer, wrong)
    with torch.no_grad():
        _, cache = lm.model.run_with_cache(lm.to_tokens(prompt))
        stack = cache.stack_head_results(layer=-1, pos_slice=-1)  # [L*H, 1, d_model]
        stack = cache.apply_ln_to_stack(stack, layer=-1, pos_slice=-1)  # the cached (frozen) scale
        direction = lm.model.W_U[:, lm.token_id(answer)] - lm.model.W_U[:, lm.token_id(wrong)]
        expected = (stack[:, 0] @ direction).view(lm.cfg.n_layers, lm.cfg.n_heads)
    torch.testing.assert_close(dla.heads(), expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(dla.total(), dla.logit, atol=1e-4, rtol=1e-4)


def test_dla_sums_to_the_logit_difference_with_pre_and_post_norms(
    tiny: LensModel, tiny_post_norm: LensModel
) -> None:
    for lm in (tiny, tiny_post_norm):
        dla = direct_logit_attribution(lm, PROMPTS, " Paris", wrong=[" London", " dog"])
        assert dla.per_prompt.shape == (2, 2, lm.cfg.n_heads + 1)
        torch.testing.assert_close(dla.total(), dla.logit, atol=1e-4, rtol=1e-4)
        assert float(dla.per_prompt.abs().sum()) > 0
    # The post-norm weights matter: leaving out ln1_post would break the sum.
    assert lm.cfg.use_normalization_before_and_after


def test_dla_result_api(tiny: LensModel, tmp_path) -> None:
    dla = direct_logit_attribution(tiny, PROMPTS, " Paris")
    top = dla.top(3)
    assert len(top) == 3 and top[0][1] >= top[1][1] >= top[2][1]
    assert top[0][1] == pytest.approx(float(dla.heads().max()))
    assert dla.axis_labels(1)[-1] == "MLP"
    assert "direct logit attribution" in dla.summary()
    dla.plot()
    assert type(dla).load(dla.save(tmp_path / "dla.json")) == dla


def test_logit_lens_result_api(tiny: LensModel, tmp_path) -> None:
    lens = logit_lens(tiny, PROMPTS)  # no answer: the model's own top token
    assert lens.last(0).shape == (tiny.cfg.n_layers,)
    assert "lens" in lens.summary()
    lens.plot()
    assert type(lens).load(lens.save(tmp_path / "lens.json")) == lens


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (
            lambda lm: logit_lens(lm, "The cat", config=LogitLensConfig(layers=(7,))),
            "unknown layer",
        ),
        (lambda lm: logit_lens(lm, ""), "empty prompt"),
        (lambda lm: logit_lens(lm, []), "no prompts"),
        (lambda lm: logit_lens(lm, "The cat", answer=""), "empty answer"),
        (lambda lm: direct_logit_attribution(lm, "  ", " mat"), "empty prompt"),
        (lambda lm: direct_logit_attribution(lm, "The cat", ""), "empty answer"),
        (lambda lm: direct_logit_attribution(lm, "The cat", " mat", wrong=[" a", " b"]), "2 wrong"),
    ],
)
def test_bad_input_raises_before_any_hook(tiny: LensModel, call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call(tiny)
    assert tiny.hooks.attached_count() == 0


# --------------------------------------------------------------------------- tuned lens

TINY_TUNED = TunedLensConfig(init="identity", steps=2, seq_len=32, tokens_per_step=64,
                             pool_tokens=1024)  # the paper's start: these tests are of its loop
TINY_SHORTCUT = TunedLensConfig(method="least_squares", site="resid_post", n_tokens=256, seq_len=32)


def _mean_kl(kl: torch.Tensor) -> torch.Tensor:
    """Per layer, KL averaged over real tokens (the sink and padding left out)."""
    return kl[:, :, 1:].nanmean((0, 2))


def test_tuned_lens_cache_round_trip(tiny: LensModel, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path))
    lens = tuned_lens_for(tiny, TINY_TUNED)
    path = tuned_lens_path(tiny, TINY_TUNED)
    assert path.is_file() and path.is_relative_to(tmp_path)
    assert not list(path.parent.glob("*.checkpoint.*"))  # the checkpoint goes once the lens is in
    again = tuned_lens_for(tiny, TINY_TUNED)  # from the cache: the same tensors and provenance
    assert torch.equal(again.weight, lens.weight) and torch.equal(again.bias, lens.bias)
    assert again.config == TINY_TUNED and again.train_seconds == lens.train_seconds
    assert again.losses == lens.losses and len(lens.losses) == TINY_TUNED.steps
    assert again.layer_losses == lens.layer_losses and again.grad_norms == lens.grad_norms
    assert len(lens.grad_norms) == TINY_TUNED.steps and len(lens.grad_norms[0]) == 2
    torch.testing.assert_close(torch.tensor(lens.layer_losses).mean(1),
                               torch.tensor(lens.losses), rtol=1e-6, atol=0)
    result = tuned_lens(tiny, PROMPTS, " Paris", lens=again)  # read at the lens's site
    assert result.lens == "tuned" and result.site == "resid_pre" and result.kl.shape[1] == 2
    assert tiny.hooks.attached_count() == 0
    for param in tiny.model.parameters():
        assert param.grad is None  # the model got no gradient from training the translators


def test_least_squares_lens_is_din_et_al_shortcut_at_resid_post(tiny: LensModel) -> None:
    lens = fit_least_squares_lens(tiny, TINY_SHORTCUT)
    assert lens.config.method == "least_squares" and lens.site == "resid_post"
    # At resid_post the last layer's stream is the final one: its map is the identity, and the
    # lens ends at the model's output.
    assert torch.equal(lens.weight[-1], torch.eye(tiny.cfg.d_model))
    result = tuned_lens(tiny, PROMPTS, " Paris", lens=lens,
                        config=LogitLensConfig(site="resid_post"))
    assert float(result.kl[:, -1].nan_to_num(0).max()) < 1e-4
    # train_tuned_lens dispatches on the method; the pre-issue-37 lens is this config.
    assert torch.equal(train_tuned_lens(tiny, TINY_SHORTCUT).weight, lens.weight)


def test_kl_training_lowers_held_out_kl_below_the_logit_lens(tiny: LensModel) -> None:
    """Belrose et al.'s loop starts at the identity (the logit lens at resid_pre) and lowers the
    KL on documents it never saw, at every layer."""
    texts = [doc[:100] for doc in itertools.islice(heldout_documents(), 3)]
    logit = _mean_kl(logit_lens(tiny, texts, config=LogitLensConfig(site="resid_pre")).kl)
    start = TunedLens(torch.eye(64).expand(2, 64, 64).clone(), torch.zeros(2, 64), tiny.name,
                      weights_fingerprint(tiny), TINY_TUNED, 0.0)  # fmt: skip
    torch.testing.assert_close(_mean_kl(tuned_lens(tiny, texts, lens=start).kl), logit)
    lens = train_tuned_lens(tiny, dataclasses.replace(TINY_TUNED, steps=6))
    tuned = _mean_kl(tuned_lens(tiny, texts, lens=lens).kl)
    # A random toy's layer 1 is already close to its output (KL 0.20): 1 % there, 5 % at layer 0.
    assert (tuned < logit * torch.tensor([0.95, 0.99])).all(), (tuned, logit)
    assert lens.losses[-1] < lens.losses[0]


@pytest.mark.parametrize("clip", ["global", "per_layer"])
def test_gradient_clip_global_or_per_layer(tiny: LensModel, clip: str) -> None:
    """One step from the identity moves the translators by lr × (1 + momentum) × the clipped
    gradient (Nesterov's first step, no decay on zeros): under the paper's global clip the layers
    share one norm; per layer, each gets its own."""
    config = dataclasses.replace(TINY_TUNED, steps=1, grad_clip=1e-3, lr=0.1, clip=clip)
    norms: list[list[float]] = []
    lens = train_tuned_lens(tiny, config, on_step=lambda _, p: norms.append(p["grad_norms"]))
    assert len(norms[0]) == 2 and min(norms[0]) > 1e-2  # both raw norms well above the clip
    step = torch.cat([(lens.weight - torch.eye(64)).flatten(1), lens.bias], dim=1).norm(dim=1)
    expected = 0.1 * 1.9 * 1e-3
    if clip == "per_layer":
        torch.testing.assert_close(step, torch.full((2,), expected), rtol=1e-3, atol=0)
    else:
        torch.testing.assert_close(step.norm(), torch.tensor(expected), rtol=1e-3, atol=0)
        ratio = torch.tensor(norms[0][0] / norms[0][1])  # the direction of the raw gradient kept
        torch.testing.assert_close(step[0] / step[1], ratio, rtol=1e-3, atol=0)


def test_kl_training_resumes_bit_identically(tiny: LensModel, tmp_path) -> None:
    config = dataclasses.replace(TINY_TUNED, steps=3)
    whole = train_tuned_lens(tiny, config)

    def stop(step: int, progress: dict) -> None:
        if step == 0:
            raise KeyboardInterrupt

    checkpoint = tmp_path / "lens.checkpoint.safetensors"
    with pytest.raises(KeyboardInterrupt):
        train_tuned_lens(tiny, config, checkpoint=checkpoint, on_step=stop)
    torch.manual_seed(123)  # a resumed run restores the RNG state it saved
    resumed = train_tuned_lens(tiny, config, checkpoint=checkpoint)
    assert torch.equal(resumed.weight, whole.weight) and torch.equal(resumed.bias, whole.bias)
    assert resumed.losses == whole.losses and resumed.grad_norms == whole.grad_norms
    assert resumed.layer_losses == whole.layer_losses


def test_kl_step_rows_are_shuffled_across_documents(tiny: LensModel) -> None:
    """The paper's loader shuffles rows of many documents; in order, a step reads neighbours."""
    config = dataclasses.replace(TINY_TUNED, steps=4)
    rows = training_rows(tiny, config)
    ordered = training_rows(tiny, dataclasses.replace(config, shuffle=False))
    pool = text_chunks(tiny, config.pool_tokens, config.seq_len, documents=_documents(0))
    assert rows.shape == ordered.shape == (4, 2, 32)
    assert torch.equal(ordered.flatten(0, 1), pool[:8])  # in order: the pool's first rows
    drawn = [int((pool == row).all(1).nonzero()) for row in rows.flatten(0, 1)]
    assert len(set(drawn)) == 8 and max(drawn) > 8  # without replacement, from across the pool
    assert torch.equal(rows, training_rows(tiny, config))  # seeded: a resumed run reads the same


def test_micro_batches_accumulate_to_the_full_batch_gradient(tiny: LensModel) -> None:
    """Each micro-batch's loss divided by their number (the paper's accumulation): the step's
    gradient is the full batch's mean-loss gradient."""
    batch = training_rows(tiny, dataclasses.replace(TINY_TUNED, tokens_per_step=128))[0]
    grads = []
    for micro in (128, 32):
        translators = Translators(2, 64)
        config = dataclasses.replace(TINY_TUNED, tokens_per_step=128, micro_batch_tokens=micro)
        losses = _kl_step(tiny, translators, batch, config)
        grads.append((losses, translators.weight.grad.clone()))
    torch.testing.assert_close(torch.tensor(grads[1][0]), torch.tensor(grads[0][0]))
    torch.testing.assert_close(grads[1][1], grads[0][1], rtol=1e-4, atol=1e-7)


def test_kl_loop_can_start_at_the_least_squares_map(tiny: LensModel, tmp_path, monkeypatch) -> None:
    """init="least_squares": the translators start at Din et al.'s map of the config's own
    tokens and ridge (cached as that map), and the KL loop moves them from there."""
    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path))
    config = dataclasses.replace(TINY_TUNED, init="least_squares", n_tokens=256, steps=1)
    shortcut = fit_least_squares_lens(tiny, starting_map(config))
    assert shortcut.site == "resid_pre" and starting_map(config).n_tokens == 256
    start = Translators(2, 64).start_at(shortcut)
    stream = torch.randn(3, 64)
    torch.testing.assert_close(start(1, stream), shortcut.translate(1, stream))
    still = train_tuned_lens(tiny, dataclasses.replace(config, lr=1e-12))
    torch.testing.assert_close(still.weight, shortcut.weight, rtol=0, atol=1e-6)
    assert tuned_lens_path(tiny, starting_map(config)).is_file()  # the start is cached
    moved = train_tuned_lens(tiny, dataclasses.replace(config, steps=3))
    assert moved.losses[-1] < moved.losses[0] and not torch.equal(moved.weight, shortcut.weight)


def test_lenses_cached_before_shuffling_keep_their_key(tiny: LensModel) -> None:
    """A field added at the value that reproduces the earlier loop stays out of the cache key,
    and a file without it loads with that value."""
    earlier = dataclasses.replace(TINY_TUNED, shuffle=False, micro_batch_tokens=64,
                                  pool_tokens=TunedLensConfig().pool_tokens)
    assert {"shuffle", "pool_tokens", "micro_batch_tokens"}.isdisjoint(earlier.key_params())
    assert {"shuffle", "pool_tokens"} <= set(TINY_TUNED.key_params())
    # init: "identity" (the loop before the field) stays out of the key, and a file without it
    # is an identity start; the least-squares start is in it.
    assert "init" not in TINY_TUNED.key_params() and "init" in TunedLensConfig().key_params()
    assert _config_from(json.dumps(TINY_TUNED.key_params())).init == "identity"
    assert _config_from(json.dumps(earlier.key_params())) == earlier
    assert _config_from(json.dumps(TINY_TUNED.key_params())) == TINY_TUNED
    shortcut = TunedLensConfig(method="least_squares")  # the map reads no KL-loop field
    assert {"shuffle", "steps", "lr"}.isdisjoint(shortcut.key_params())
    assert shortcut.key_params() == dataclasses.replace(shortcut, steps=9).key_params()


def test_tuned_lens_of_another_model_is_refused(tiny: LensModel, tmp_path) -> None:
    lens = train_tuned_lens(tiny, TINY_TUNED)
    path = lens.save(tmp_path / "lens.safetensors")
    other = load_model("toy-3l", device="cpu")
    with pytest.raises(ValueError, match="train one for this model"):
        TunedLens.load(path, other)
    with pytest.raises(ValueError, match="train one for this model"):
        tuned_lens(other, "The cat", lens=lens)
    (tmp_path / "junk.safetensors").write_text("not a lens")
    with pytest.raises(ValueError, match="not a tuned-lens file"):
        TunedLens.load(tmp_path / "junk.safetensors", tiny)
    with pytest.raises(ValueError, match="resid_pre"):
        tuned_lens(tiny, "The cat", lens=lens, config=LogitLensConfig(site="resid_mid"))


def test_first_format_lens_file_loads_as_a_least_squares_map(tiny: LensModel, tmp_path) -> None:
    lens = fit_least_squares_lens(tiny, TINY_SHORTCUT)
    old = {"format": "lmsci-mi-tuned-lens/1", "model": tiny.name,
           "fingerprint": weights_fingerprint(tiny), "train_seconds": "1.5",
           "config": json.dumps({"config": "TunedLensConfig", "n_tokens": 256, "seq_len": 32,
                                 "ridge": 0.001, "steps": 0, "lr": 0.001, "batch_tokens": 128,
                                 "seed": 0})}  # fmt: skip
    save_file({"weight": lens.weight, "bias": lens.bias}, tmp_path / "old.safetensors", old)
    loaded = TunedLens.load(tmp_path / "old.safetensors", tiny)
    assert loaded.config == dataclasses.replace(TINY_SHORTCUT, n_tokens=256) and loaded.losses == ()


# --------------------------------------------------------------------------- CLI


def test_cli_lens_commands(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path / "cache"))
    toy = ["--model", "toy-2l", "--device", "cpu"]
    assert (
        main(["lens", "logit", *toy, "--answer", " Paris", "--out", str(tmp_path / "l.json")]) == 0
    )
    assert LogitLens.load(tmp_path / "l.json").lens == "logit"
    assert (
        main(
            [
                "lens",
                "dla",
                *toy,
                "--answer",
                " Paris",
                "--wrong",
                " London",
                "--export",
                str(tmp_path / "d.csv"),
            ]
        )
        == 0
    )
    assert (tmp_path / "d.csv").is_file()
    assert (
        main(["lens", "tuned", *toy, "--tokens-per-step", "64", "--seq-len", "32", "--steps", "1",
              "--pool-tokens", "256", "--n-tokens", "256"])
        == 0
    )
    assert main(["lens", "logit", *toy, "--layers", "9"]) == 2
    assert main(["lens", "dla", *toy, "--answer", ""]) == 2

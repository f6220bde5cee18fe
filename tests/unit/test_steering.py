"""LM-Steer on the toy models: the steer's algebra, cached generation, the span DP, files, bad input."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from lmsci_mi import LensModel, load_model
from lmsci_mi.cli import main
from lmsci_mi.data.steering_texts import (
    SteeringTexts,
    neutral_prompts,
    steering_texts,
    topic_lexicon,
)
from lmsci_mi.generation import GenerationConfig
from lmsci_mi.sites import hook_name
from lmsci_mi.steering import (
    LMSteer,
    LMSteerConfig,
    SteerEvalConfig,
    SteerTrainConfig,
    evaluate_settings,
    generate_steered,
    highlight_keywords,
    logits_from_normalized,
    max_spans,
    steer_svd,
    steered_logits,
    train_steer,
    transfer_steer,
)
from lmsci_mi.steering.evaluate import sentiment_scores


def _strong_steer(lm: LensModel, attributes: tuple[str, ...] = ("sentiment", "topic")) -> LMSteer:
    """A random steer large enough to change the toy's predictions."""
    return LMSteer.for_model(
        lm, attributes, LMSteerConfig(rank=8, epsilon=1.0, init_std=0.2), seed=1
    )


# ------------------------------------------------------------------ the algebra


@pytest.mark.parametrize("model", ["toy-2l", "toy-gpt2-2l"])
def test_steer_equals_the_explicit_embedding_transform(model: str) -> None:
    """h + ε Σ sᵢ (h P1ᵢ) P2ᵢᵀ then the unembedding equals logits with u' = (I + ε Σ sᵢ Wᵢ) u."""
    lm = load_model(model, device="cpu")
    steer = _strong_steer(lm)
    h = torch.randn(5, lm.cfg.d_model)
    values = {"sentiment": 2.5, "topic": -1.5}
    eps = steer.config.epsilon
    w = (
        2.5 * steer.matrix("sentiment")
        + -1.5 * steer.matrix("topic")
        + steer.p1[-1] @ steer.p2[-1].T
    )
    w_u = lm.model.unembed.W_U.detach()
    gain = getattr(lm.model.ln_final, "w", None)  # the toys keep their norm's gain (no fold_ln)
    if gain is not None:
        w_u = gain.detach()[:, None] * w_u  # the output embeddings as h sees them
    explicit = h @ (torch.eye(lm.cfg.d_model) + eps * w.detach()) @ w_u + lm.model.unembed.b_U
    ours = logits_from_normalized(lm, steer.steered(h, values))
    torch.testing.assert_close(ours, explicit, rtol=1e-4, atol=1e-4)
    # the training path (through the steer's rank) agrees, per-row values included
    vector = steer.value_vector(values)
    train_logits = steered_logits(lm, steer, h, vector.expand(5, -1))
    torch.testing.assert_close(train_logits, explicit, rtol=1e-4, atol=1e-4)
    # and so does the model itself with the hook attached
    tokens = torch.tensor([lm.encode("The cat sat on the mat")])
    with lm.hooks.capture([hook_name("ln_final")]) as captured:
        plain = lm(tokens)
    with steer.apply(lm, values):
        hooked = lm(tokens)
    expected = logits_from_normalized(lm, steer.steered(captured[hook_name("ln_final")], values))
    torch.testing.assert_close(hooked, expected, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(hooked, plain, atol=1e-3)
    assert lm.hooks.attached_count() == 0


def test_zero_values_and_dummy_off_leave_the_model_unchanged(tiny: LensModel) -> None:
    steer = _strong_steer(tiny)
    tokens = torch.tensor([tiny.encode("Hello there")])
    with steer.apply(tiny, {}, dummy=0.0):
        torch.testing.assert_close(tiny(tokens), tiny.model(tokens))


def test_composition_sums_the_steers(tiny: LensModel) -> None:
    steer = _strong_steer(tiny)
    h = torch.randn(3, tiny.cfg.d_model, device=tiny.device)
    both = steer.steered(h, [1.0, 2.0], dummy=0.0) - h
    one = steer.steered(h, [1.0, 0.0], dummy=0.0) - h
    two = steer.steered(h, [0.0, 2.0], dummy=0.0) - h
    torch.testing.assert_close(both, one + two)


# ------------------------------------------------------------------ generation


def test_steered_generation_is_the_same_with_and_without_the_kv_cache(tiny: LensModel) -> None:
    steer = _strong_steer(tiny)
    prompts = ["The cat sat", "A dog", "Once upon a time there"]
    greedy = GenerationConfig(max_new_tokens=8, temperature=0.0)
    cached = generate_steered(tiny, prompts, steer, [3.0, -2.0], greedy).tokens
    uncached = generate_steered(tiny, prompts, steer, [3.0, -2.0], greedy, use_kv_cache=False).tokens
    plain = generate_steered(tiny, prompts, None, None, greedy).tokens
    assert cached == uncached
    assert cached != plain  # the steer acts at every generated step
    sampling = GenerationConfig(max_new_tokens=6, seed=4, top_p=0.9)
    sampled = [
        generate_steered(tiny, prompts, steer, [3.0], sampling, use_kv_cache=c).tokens
        for c in (True, False)
    ]
    assert sampled[0] == sampled[1]
    assert tiny.hooks.attached_count() == 0


def test_batched_generation_equals_one_prompt_at_a_time(tiny: LensModel) -> None:
    steer = _strong_steer(tiny)
    prompts = ["The cat sat", "A dog ran", "Once upon a time there"]
    greedy = GenerationConfig(max_new_tokens=6, temperature=0.0)
    together = generate_steered(tiny, prompts, steer, [2.0], greedy).tokens
    alone = [generate_steered(tiny, [p], steer, [2.0], greedy).tokens[0] for p in prompts]
    assert list(together) == alone


# ------------------------------------------------------------------ the span DP


def _brute_force(values: list[float], n: int, length: int) -> float:
    t = len(values)
    spans = [(s, e) for s in range(t) for e in range(s + 1, min(s + length, t) + 1)]
    best = 0.0
    for k in range(1, n + 1):
        for chosen in itertools.combinations(spans, k):
            ordered = sorted(chosen)
            if all(a[1] <= b[0] for a, b in itertools.pairwise(ordered)):
                best = max(best, sum(sum(values[s:e]) for s, e in ordered))
    return best


def test_max_spans_matches_brute_force() -> None:
    rng = random.Random(0)
    for _ in range(150):
        t = rng.randint(0, 7)
        values = [round(rng.uniform(-3, 3), 2) for _ in range(t)]
        n, length = rng.randint(1, 3), rng.randint(1, 4)
        total, spans = max_spans(values, n, length)
        assert total == pytest.approx(_brute_force(values, n, length), abs=1e-9), (
            values,
            n,
            length,
        )
        assert len(spans) <= n
        assert all(0 < e - s <= length for s, e in spans)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
        assert sum(sum(values[s:e]) for s, e in spans) == pytest.approx(total, abs=1e-9)


def test_max_spans_edge_cases() -> None:
    assert max_spans([], 3, 2) == (0.0, [])
    assert max_spans([-1.0, -2.0], 2, 2) == (0.0, [])
    assert max_spans([2.0], 1, 5) == (2.0, [(0, 1)])  # the first item can start a span


# ------------------------------------------------------------------ files and bad input


def test_save_and_load_round_trip(tiny: LensModel, tmp_path: Path) -> None:
    steer = _strong_steer(tiny)
    path = steer.save(tmp_path / "s.safetensors")
    loaded = LMSteer.load(path, tiny)
    assert loaded.attributes == steer.attributes and loaded.config == steer.config
    assert loaded.model_name == tiny.name and loaded.d_model == tiny.cfg.d_model
    assert torch.equal(loaded.p1, steer.p1) and torch.equal(loaded.p2, steer.p2)


def test_a_steer_of_another_model_is_refused(
    tiny: LensModel, tiny_gpt2: LensModel, tmp_path: Path
) -> None:
    steer = _strong_steer(tiny)
    with pytest.raises(ValueError, match="belongs to toy-2l"), steer.apply(tiny_gpt2, [1.0]):
        pass
    path = steer.save(tmp_path / "s.safetensors")
    with pytest.raises(ValueError, match="belongs to toy-2l"):
        LMSteer.load(path, tiny_gpt2)
    assert tiny_gpt2.hooks.attached_count() == 0


def test_bad_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        LMSteer.load(tmp_path / "missing.safetensors")
    (tmp_path / "junk").write_text("junk")
    with pytest.raises(ValueError, match="not a readable LMSteer"):
        LMSteer.load(tmp_path / "junk")
    save_file({"x": torch.zeros(2)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="not an LMSteer file"):
        LMSteer.load(tmp_path / "other.safetensors")


def test_steer_index_out_of_range(tiny: LensModel) -> None:
    steer = _strong_steer(tiny)
    with pytest.raises(ValueError, match="out of range"):
        steer.value_vector({2: 1.0})  # index 2 is the dummy: not addressable
    with pytest.raises(ValueError, match="out of range"):
        steer.value_vector({-1: 1.0})
    with pytest.raises(ValueError, match="3 steer values for 2"):
        steer.value_vector([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="unknown steer 'toxicity'"):
        steer.value_vector({"toxicity": 1.0})
    with pytest.raises(ValueError, match="not finite"):
        steer.value_vector([float("nan")])


def test_an_empty_training_set_is_refused(tiny: LensModel) -> None:
    empty = SteeringTexts((), torch.zeros(0, 1), ("sentiment",), "none")
    with pytest.raises(ValueError, match="empty"):
        train_steer(tiny, empty, cache=False)
    blank = SteeringTexts(("",), torch.ones(1, 1), ("sentiment",), "none")
    with pytest.raises(ValueError, match="two tokens"):
        train_steer(tiny, blank, cache=False)


# ------------------------------------------------------------------ training


@pytest.mark.slow  # trains a steer (4 s); the fast suite's steers are built, not trained
def test_training_lowers_the_loss_never_touches_the_model_and_is_cached(
    tiny: LensModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path))
    weights = [p.detach().clone() for p in tiny.model.parameters()]
    full = steering_texts("sentiment")
    texts = SteeringTexts(
        full.texts[:3] + full.texts[-3:],
        full.labels[[0, 1, 2, -3, -2, -1]],
        full.attributes,
        full.source,
    )
    # every step sees all ~80 targets, so the loss is one function and must fall
    config = SteerTrainConfig(steps=20, batch_tokens=4096, lr=1e-2, progress=False)
    shape = LMSteerConfig(rank=4, epsilon=1.0)
    steer, run = train_steer(tiny, texts, shape, config)
    assert run.values.shape == (20,)
    assert run.final_loss < float(run.values[0]) - 0.1
    assert all(p.grad is None for p in tiny.model.parameters())
    assert all(torch.equal(p, w) for p, w in zip(tiny.model.parameters(), weights, strict=True))
    again, rerun = train_steer(tiny, texts, shape, config)
    assert rerun == run and torch.equal(again.p1, steer.p1)
    assert len(list((tmp_path / "steers").glob("*-training.json"))) == 1
    other, _ = train_steer(tiny, texts, shape, config.replace(seed=1))
    assert not torch.equal(other.p1, steer.p1)  # the seed is part of the cache key


# ------------------------------------------------------------------ analyses on the toy


def test_evaluate_settings_rows_and_unsteered(tiny: LensModel) -> None:
    steer = _strong_steer(tiny)
    config = SteerEvalConfig(
        n_prompts=4, generation=GenerationConfig(max_new_tokens=4, top_p=0.9), progress=False
    )
    curve = evaluate_settings(
        tiny, steer, [{"sentiment": -1.0}, {"sentiment": 1.0, "topic": 2.0}], config
    )
    assert curve.values.shape == (2, 6)
    assert curve.settings == ((-1.0, 0.0), (1.0, 2.0))
    assert len(curve.unsteered) == 6 and all(len(c) == 4 for c in curve.continuations)
    assert "unsteered" in curve.summary()


def test_highlight_html_is_offline(tiny: LensModel, tmp_path: Path) -> None:
    result = highlight_keywords(tiny, _strong_steer(tiny), "What a lovely day it was")
    path = result.save_html(tmp_path / "h.html")
    page = path.read_text()
    assert "unpkg.com/circuitsvis" not in page.split("<script")[0]
    assert 'from "https://' not in page and "from 'https://" not in page  # no CDN module import
    assert len(result.values) == len(tiny.encode("What a lovely day it was"))
    assert all(1 <= s < e <= len(result.values) for s, e in result.spans)


def test_svd_probe_on_a_toy(tiny: LensModel) -> None:
    probe = steer_svd(tiny, _strong_steer(tiny))
    assert probe.values.shape == (5,) and (probe.values[:-1] >= probe.values[1:]).all()
    assert set(probe.to_dataframe()["end"]) == {"top", "bottom"}


@pytest.mark.slow  # fits a map over 40,000 shared tokens (2.5 s)
def test_transfer_between_toys(tiny: LensModel, tiny_gpt2: LensModel) -> None:
    steer = _strong_steer(tiny)
    moved, fit = transfer_steer(steer, tiny, tiny_gpt2)
    assert moved.model_name == tiny_gpt2.name and fit.n_shared > 40_000
    with moved.apply(tiny_gpt2, [1.0]):
        pass
    with pytest.raises(ValueError, match="belongs to toy-2l"):
        transfer_steer(steer, tiny_gpt2, tiny)


# ------------------------------------------------------------------ data


def test_bundled_texts_agree_with_vader_and_prompts_are_neutral() -> None:
    data = steering_texts("sentiment")
    scores = torch.tensor(sentiment_scores(data.texts))
    labels = data.labels[:, 0]
    agree = ((scores > 0) == (labels > 0)).float()
    assert agree[labels > 0].mean() >= 0.9 and agree[labels < 0].mean() >= 0.9
    prompts = neutral_prompts()
    assert len(prompts) >= 50 and len(set(prompts)) == len(prompts)
    assert all(s == 0 for s in sentiment_scores(prompts))
    topic = steering_texts("topic")
    lexicon = topic_lexicon()
    assert set(lexicon) == {"food", "technology"} and not lexicon["food"] & lexicon["technology"]
    assert (
        abs(float(torch.tensor(sentiment_scores(topic.texts)).mean())) < 0.1
    )  # topic texts are neutral


# ------------------------------------------------------------------ command line


@pytest.mark.slow  # trains a steer through the CLI
def test_cli_steer_round_trip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "s.safetensors"
    train = ["steer", "train", "--model", "toy-2l", "--device", "cpu", "--steps", "2", "--rank", "2",
             "--steer-out", str(out)]
    assert main(train) == 0
    assert main(["steer", "generate", "--steer", str(out), "--value", "3", "--max-new-tokens", "3"]) == 0
    assert main(["steer", "generate", "--steer", str(out), "--value", "3", "--value2", "1"]) == 2
    assert "out of range" in capsys.readouterr().err
    assert main(["steer", "generate", "--steer", str(out), "--model", "toy-gpt2-2l"]) == 2
    assert "belongs to toy-2l" in capsys.readouterr().err
    assert main(["steer", "svd", "--steer", str(out), "--export", str(tmp_path / "t.csv")]) == 0
    assert (tmp_path / "t.csv").read_text().startswith("direction,")
    highlight = ["steer", "highlight", "--steer", str(out), "--text", "A good day", "--html", str(tmp_path / "h.html")]
    assert main(highlight) == 0
    evaluate = ["steer", "eval", "--steer", str(out), "--n-prompts", "2", "--max-new-tokens", "2", "--values=-1,1"]
    assert main(evaluate) == 0
    transfer = ["steer", "transfer", "--steer", str(out), "--to", "toy-gpt2-2l",
                "--steer-out", str(tmp_path / "t.safetensors")]
    assert main(transfer) == 0
    assert LMSteer.load(tmp_path / "t.safetensors").model_name == "toy-gpt2-2l"
    assert main(["steer", "svd", "--steer", str(tmp_path / "missing")]) == 2
    (tmp_path / "junk.json").write_text(json.dumps({}))
    assert main(["steer", "eval", "--steer", str(tmp_path / "junk.json")]) == 2
    assert main(["steer", "train", "--model", "toy-2l", "--attribute", "toxicity"]) == 2

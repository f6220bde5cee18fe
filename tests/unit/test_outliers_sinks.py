"""Sink heads and masking attention to the first tokens, on the Llama-shaped and the Gemma-shaped
toys: the sink score is the attention mass on the first k keys from the queries after them, with
and without the sink token on the same rows; the mask leaves exactly the chosen heads' attention
to the first tokens at zero (cached decoding too), restores the model on exit and on error, and
the NLL sweep pairs each condition with the clean run against seeded random heads."""

from __future__ import annotations

import pytest
import torch
from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

from lmsci_mi import LensModel, load_model
from lmsci_mi.circuits.heads import HEAD_SCORES, HeadScoreConfig, HeadScores
from lmsci_mi.errors import UserInputError
from lmsci_mi.outliers import (
    FirstTokenMaskConfig,
    SinkHeads,
    SinkScoreConfig,
    first_token_mask_effect,
    mask_first_tokens,
    sink_heads,
    sink_scores,
)
from lmsci_mi.outliers.sinks import _random_heads, _text_rows
from lmsci_mi.sites import Head, hook_name
from tests.fixtures import weights_fingerprint

SMALL = SinkScoreConfig(n_texts=3, seq_len=12)
MASK = FirstTokenMaskConfig(n_texts=3, seq_len=10, skip_texts=3, n_random_draws=2, every_head=False,
                            n_resamples=50)


def _patterns(lm: LensModel, tokens: torch.Tensor) -> list[torch.Tensor]:
    names = [hook_name("pattern", layer) for layer in range(lm.cfg.n_layers)]
    with lm.hooks.capture(names) as cap:
        lm(tokens)
    return [cap[name] for name in names]


def test_the_registry_lists_and_dispatches_the_sink_score(tiny: LensModel) -> None:
    assert "sink" in HEAD_SCORES.names() and {"induction", "copying"} <= set(HEAD_SCORES.names())
    method = HEAD_SCORES.get("sink")
    assert method.config_type is SinkScoreConfig
    # The CLI gives every kind a HeadScoreConfig: its rows of text and batch size are read.
    result = method.function(tiny, config=HeadScoreConfig(n_sequences=2, batch_size=1))
    assert result.values.shape == (2, 4) and result.meta.params["n_texts_scored"] == 2
    assert (result.values > 0).all() and (result.values < 1).all()


def test_with_and_without_the_sink_read_the_same_rows(tiny: LensModel) -> None:
    heads = sink_heads(tiny, SMALL)
    assert isinstance(heads, SinkHeads) and heads.values.shape == (2, 2, 4)
    text = _text_rows(tiny, SMALL.n_texts, SMALL.seq_len)
    assert (text[:, 0] == tiny.sink_token_id).all() and (text[:, 1:] != tiny.sink_token_id).any()
    assert torch.allclose(heads.values[0], sink_scores(tiny, text).values)
    assert torch.allclose(heads.values[1], sink_scores(tiny, text[:, 1:]).values)
    assert torch.allclose(heads.difference, heads.values[0] - heads.values[1], atol=1e-6)
    assert heads.difference_standard_error.shape == (2, 4) and heads.top(2)[0][1] == heads.values[0].max()
    assert "without sink" in heads.summary() and heads.meta.sink == "<|endoftext|>"
    with pytest.raises(UserInputError, match="sink=None"):
        sink_heads(load_model("toy-2l", sink=None), SMALL)


@pytest.mark.parametrize("toy", ["tiny", "tiny_post_norm"])
def test_the_sink_score_and_the_mask_read_and_cut_attention_to_the_first_k_keys(
    toy: str, request: pytest.FixtureRequest
) -> None:
    lm: LensModel = request.getfixturevalue(toy)
    tokens = torch.randint(100, 1000, (2, 7))
    clean = _patterns(lm, tokens)
    k, heads = 2, [Head(1, 2), "L0.H0"]
    scores = sink_scores(lm, tokens, SinkScoreConfig(k=k))
    # By hand: queries 0 and 1 see only keys 0 and 1 and are left out.
    want = torch.stack([p[:, :, k:, :k].sum(-1).mean((0, 2)) for p in clean])
    assert isinstance(scores, HeadScores) and scores.head_kind == "sink"
    assert torch.allclose(scores.values, want, atol=1e-6)
    assert scores.meta.params["k"] == 2 and scores.meta.data_source == "user tokens"
    with mask_first_tokens(lm, heads, k=k):
        masked = _patterns(lm, tokens)
    for layer, head in ((1, 2), (0, 0)):
        after = masked[layer][:, head]
        assert (after[:, k:, :k] == 0).all()
        assert torch.allclose(after.sum(-1), torch.ones(2, 7), atol=1e-5)
        assert torch.equal(after[:, :k], clean[layer][:, head, :k])  # queries that see nothing else
    for head in (1, 2, 3):  # layer 0's other heads; layer 1 reads what L0.H0 wrote
        assert torch.equal(masked[0][:, head], clean[0][:, head])
    with mask_first_tokens(lm, ["L1.H2"], k=k):
        later = _patterns(lm, tokens)[1]
    assert torch.equal(later[:, [0, 1, 3]], clean[1][:, [0, 1, 3]])
    assert len(lm.hooks.active()) == 0 and lm.hooks.attached_count() == 0


def test_the_mask_holds_under_a_kv_cache(tiny: LensModel) -> None:
    """Queries are placed at their absolute positions: one cached step equals the full pass."""
    tokens = torch.randint(100, 1000, (1, 6))
    with mask_first_tokens(tiny, None, k=3), torch.no_grad():
        full = tiny.model(tokens)[0, -1]
        cache = TransformerLensKeyValueCache.init_cache(tiny.cfg, tiny.device, 1)
        tiny.model(tokens[:, :-1], past_kv_cache=cache)
        step = tiny.model(tokens[:, -1:], past_kv_cache=cache)[0, -1]
    assert torch.allclose(full, step, atol=1e-4)
    assert not torch.allclose(full, tiny.model(tokens)[0, -1], atol=1e-3)  # the mask did act


def test_the_mask_restores_the_model_on_error_and_refuses_bad_input(tiny: LensModel) -> None:
    before = weights_fingerprint(tiny)
    with pytest.raises(RuntimeError, match="inside"), mask_first_tokens(tiny, ["L1.H1"]):
        tiny(torch.tensor([[0, 5, 6]]))
        raise RuntimeError("inside")
    assert tiny.hooks.attached_count() == 0 and weights_fingerprint(tiny) == before
    for heads, k, message in ((["L2.H0"], 1, "does not exist"), (["L0.H4"], 1, "does not exist"),
                              (["L0H"], 1, "not a head label"), ([], 1, "no heads"),
                              (None, 0, "k"), (None, True, "k")):
        with pytest.raises(UserInputError, match=message), mask_first_tokens(tiny, heads, k=k):
            pass
    assert tiny.hooks.attached_count() == 0
    with pytest.raises(UserInputError, match="no query"):
        sink_scores(tiny, torch.tensor([[0, 5]]), SinkScoreConfig(k=2))


def test_the_nll_sweep_pairs_every_condition_with_the_clean_run(tiny: LensModel) -> None:
    before = weights_fingerprint(tiny)
    effect = first_token_mask_effect(tiny, ["L1.H0", "L0.H3"], MASK)
    assert effect.conditions == ("clean", "L1.H0", "L0.H3", "together", "random 0", "random 1")
    assert effect.values.shape == (2,) and effect.nll.shape == (6, 3)
    clean = effect.nll[0]
    # The clean NLL by hand: tokens predicted from positions >= k of held-out rows 3..5.
    rows = _text_rows(tiny, 3, 10, skip=3)
    logp = tiny(rows).float().log_softmax(-1)[:, 1:-1]
    assert torch.allclose(clean, -logp.gather(-1, rows[:, 2:, None])[..., 0].mean(-1), atol=1e-5)
    assert effect.each_head[0].estimate == pytest.approx(float((effect.nll[1] - clean).mean()), abs=1e-5)
    random = effect.nll[4:].mean(0)
    assert effect.together_minus_random.estimate == pytest.approx(float((effect.nll[3] - random).mean()), abs=1e-5)
    assert all(len(draw) == 2 and not set(draw) & set(effect.heads) for draw in effect.random_heads)
    assert effect.every_head is None and effect.clean.n == 3
    assert _random_heads(tiny, 2, set(effect.heads), MASK) == list(effect.random_heads)  # seeded
    assert "together" in effect.summary()
    assert tiny.hooks.attached_count() == 0 and weights_fingerprint(tiny) == before
    with pytest.raises(UserInputError, match="random control"):
        first_token_mask_effect(tiny, [f"L{i // 4}.H{i % 4}" for i in range(5)], MASK)
    with pytest.raises(UserInputError, match="seq_len"):
        first_token_mask_effect(tiny, ["L0.H0"], MASK.replace(k=9))

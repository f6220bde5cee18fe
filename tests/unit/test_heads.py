"""Head scores on the tiny random models: agreement with TransformerLens's head detector, the
eigenvalue shortcut of the copying score, composition scores, results and hook cleanup."""

from __future__ import annotations

import pytest
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig
from transformer_lens import head_detector as tl_detector

from lmsci_mi import LensModel
from lmsci_mi.circuits.heads import (
    HeadScoreConfig,
    HeadScores,
    copying_scores,
    detection_pattern,
    head_scores,
    induction_scores,
    previous_token_scores,
)
from lmsci_mi.data.repeated_tokens import repeated_random_tokens
from lmsci_mi.sites import Head

# Equal token length for TL's tokenizer, with repeated words so that the duplicate and induction
# patterns are not empty.
TEXTS = [
    "the cat sat on the mat and the cat sat on the mat",
    "a dog ran to a park and a dog ran to a park",
]
TL_NAMES = {
    "previous_token": "previous_token_head",
    "duplicate_token": "duplicate_token_head",
    "induction": "induction_head",
}


@pytest.mark.parametrize("kind", ["previous_token", "duplicate_token", "induction"])
def test_detection_pattern_matches_transformer_lens(kind: str) -> None:
    tokens = torch.tensor([[0, 5, 6, 7, 5, 6, 7, 9, 5]])
    tl_fn = getattr(tl_detector, f"get_{TL_NAMES[kind]}_detection_pattern")
    expected = tl_fn(tokens)
    assert torch.equal(detection_pattern(tokens, kind)[0], expected.float())  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["previous_token", "duplicate_token", "induction"])
@pytest.mark.parametrize("exclude_bos", [False, True])
@pytest.mark.parametrize("exclude_current_token", [False, True])
def test_scores_match_transformer_lens_detect_head(
    tiny_gpt2: LensModel, kind: str, exclude_bos: bool, exclude_current_token: bool
) -> None:
    tokens = tiny_gpt2.model.to_tokens(TEXTS)  # TL's own tokenisation: the very same inputs
    assert tokens.shape[0] == len(TEXTS)
    config = HeadScoreConfig(
        rows="all", exclude_bos=exclude_bos, exclude_current_token=exclude_current_token
    )
    ours = head_scores(tiny_gpt2, tokens, kind, config)  # type: ignore[arg-type]
    theirs = tl_detector.detect_head(
        tiny_gpt2.model, TEXTS, TL_NAMES[kind],  # type: ignore[arg-type]
        exclude_bos=exclude_bos, exclude_current_token=exclude_current_token,
    )
    torch.testing.assert_close(ours.values, theirs.float(), atol=1e-5, rtol=1e-4)
    assert tiny_gpt2.hooks.attached_count() == 0


def test_matched_rows_give_one_for_a_perfect_head(tiny: LensModel) -> None:
    # Replace one head's pattern with the ideal induction pattern: "matched" scores it 1, while
    # TL's "all rows" normalisation cannot (half the rows have no target).
    tokens = repeated_random_tokens(3, 6, vocab=(1000, 2000), sink_token_id=0, seed=0)
    ideal = detection_pattern(tokens, "induction")
    ideal[:, :, 0] += (ideal.sum(-1) == 0).float()  # rows without a target rest on the sink

    def force(pattern: torch.Tensor, hook: object) -> torch.Tensor:
        pattern = pattern.clone()
        pattern[:, 1] = ideal
        return pattern

    with tiny.hooks.hooks(fwd=[("blocks.1.attn.hook_pattern", force)]):
        matched = head_scores(tiny, tokens, "induction")
        all_rows = head_scores(tiny, tokens, "induction", HeadScoreConfig(rows="all"))
    assert matched.values[1, 1] == pytest.approx(1.0)
    assert all_rows.values[1, 1] == pytest.approx(6 / 13)  # 6 target rows of 13
    (best, score), *_ = matched.top(1)
    assert best == Head(1, 1) and score == pytest.approx(1.0)
    assert matched.heads_above(0.99) == (Head(1, 1),)


def test_one_forward_pass_per_batch(tiny: LensModel) -> None:
    calls = []
    with tiny.hooks.hooks(fwd=[("hook_embed", lambda act, hook: calls.append(act.shape[0]))]):
        induction_scores(tiny, config=HeadScoreConfig(n_sequences=10, half_length=4, batch_size=32))
    assert calls == [10]


def test_bad_inputs_leave_no_hooks(tiny: LensModel) -> None:
    tokens = torch.tensor([[0, 1, 2]])
    with pytest.raises(ValueError, match="head kind"):
        head_scores(tiny, tokens, "nonsense")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="batch, pos"):
        head_scores(tiny, tokens[0], "induction")
    # Checked before the forward pass: on CUDA a bad id would poison the process (device assert).
    with pytest.raises(ValueError, match="vocabulary"):
        head_scores(tiny, torch.tensor([[0, 10**6, 2]]), "induction")
    assert tiny.hooks.attached_count() == 0


def test_head_scores_result_roundtrip_and_plot(tiny: LensModel, tmp_path) -> None:
    scores = previous_token_scores(tiny, config=HeadScoreConfig(n_sequences=2, half_length=4))
    loaded = HeadScores.load(scores.save(tmp_path / "prev.json"))
    assert loaded == scores and loaded.head_kind == "previous_token"
    assert loaded.labels[1][:2] == ("H0", "H1")
    assert loaded.meta.params["n_sequences"] == 2 and loaded.meta.params["rows"] == "matched"
    ranked = scores.top(3)
    # best first, and each score is the value at that head
    assert [s for _, s in ranked] == sorted((s for _, s in ranked), reverse=True)
    assert all(s == float(scores.values[h.layer, h.head]) for h, s in ranked)
    assert ranked[0][1] == float(scores.values.max())
    scores.plot(tmp_path / "prev.png")
    assert (tmp_path / "prev.png").stat().st_size > 0


def _small_model(vocab: int = 40) -> LensModel:
    cfg = HookedTransformerConfig(
        n_layers=2, d_model=24, n_heads=3, d_head=8, n_ctx=16, d_vocab=vocab, attn_only=True,
        normalization_type=None, seed=1,
    )
    return LensModel(HookedTransformer(cfg), name="small", source="test", tokenizer=None,
                     sink_token_id=None)


@torch.no_grad()
def test_copying_score_equals_full_vocab_eigenvalues() -> None:
    lm = _small_model()
    model = lm.model
    ours = copying_scores(lm).values
    for layer in range(2):
        for head in range(3):
            full = model.W_E @ model.W_V[layer, head] @ model.W_O[layer, head] @ model.W_U
            eig = torch.linalg.eigvals(full.double())
            expected = eig.real.sum() / eig.abs().sum()
            assert float(ours[layer, head]) == pytest.approx(float(expected), abs=1e-4)


# An adjacent repeat (" cat cat"): the second copy's induction target is the query's own position.
ADJACENT = "the cat cat sat on the mat and the cat cat sat"


def test_induction_pattern_keeps_the_diagonal_like_transformer_lens() -> None:
    tokens = torch.tensor([[0, 5, 5, 6, 5, 5, 6]])
    expected = tl_detector.get_induction_head_detection_pattern(tokens)
    assert float(expected.diagonal().sum()) > 0  # the case this test is about
    assert torch.equal(detection_pattern(tokens, "induction")[0], expected.float())


@pytest.mark.parametrize("rows", ["all", "matched"])
def test_induction_score_on_adjacent_repeat_equals_detect_head(tiny_gpt2: LensModel, rows: str) -> None:
    tokens = tiny_gpt2.model.to_tokens(ADJACENT)
    ours = head_scores(tiny_gpt2, tokens, "induction", HeadScoreConfig(rows="all"))
    theirs = tl_detector.detect_head(tiny_gpt2.model, ADJACENT, "induction_head")
    torch.testing.assert_close(ours.values, theirs.float(), atol=1e-6, rtol=1e-5)
    if rows == "matched":
        # "matched" divides by the target rows only; every row with a target counts, the
        # diagonal one included, so a pattern forced onto the targets scores exactly 1.
        ideal = detection_pattern(tokens, "induction")
        ideal[:, :, 0] += (ideal.sum(-1) == 0).float()

        def force(pattern: torch.Tensor, hook: object) -> torch.Tensor:
            pattern = pattern.clone()
            pattern[:, 0] = ideal / ideal.sum(-1, keepdim=True)
            return pattern

        with tiny_gpt2.hooks.hooks(fwd=[("blocks.0.attn.hook_pattern", force)]):
            matched = head_scores(tiny_gpt2, tokens, "induction")
        assert float(matched.values[0, 0]) == pytest.approx(1.0)

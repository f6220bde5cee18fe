"""Batched activation patching on the tiny models: equal to TransformerLens's patching, batching
invariants, prompt-pair batches, named-position alignment, and clean errors for bad input."""

from __future__ import annotations

import pytest
import torch
from transformer_lens import patching as tl_patching

from lmsci_mi import LensModel
from lmsci_mi.circuits import LogitDiff, patch_activations
from lmsci_mi.circuits._batching import answer_logits, run_from_layer

CLEAN = "When Mary and John went, John gave it to"
CORRUPTED = "When Mary and John went, Mary gave it to"


def _metric(lm: LensModel) -> LogitDiff:
    return LogitDiff(lm.token_id(" Mary"), lm.token_id(" John"))


def _tl_reference(lm: LensModel, fn, metric: LogitDiff) -> torch.Tensor:
    _, cache = lm.model.run_with_cache(lm.to_tokens(CLEAN))
    return fn(lm.model, lm.to_tokens(CORRUPTED), cache, lambda logits: metric(logits[:, -1]).mean())


@pytest.mark.parametrize("model_fixture", ["tiny", "tiny_gpt2"])
def test_resid_pre_equals_transformer_lens(
    model_fixture: str, request: pytest.FixtureRequest
) -> None:
    lm = request.getfixturevalue(model_fixture)
    metric = _metric(lm)
    expected = _tl_reference(lm, tl_patching.get_act_patch_resid_pre, metric)
    ours = patch_activations(lm, CLEAN, CORRUPTED, metric, site="resid_pre", chunk_size=5)
    assert ours.axes == ("layer", "position")
    torch.testing.assert_close(ours.values, expected.cpu(), atol=1e-4, rtol=0)


def test_head_out_all_pos_equals_transformer_lens(tiny: LensModel) -> None:
    metric = _metric(tiny)
    expected = _tl_reference(tiny, tl_patching.get_act_patch_attn_head_out_all_pos, metric)
    ours = patch_activations(tiny, CLEAN, CORRUPTED, metric, site="z", positions="all")
    assert ours.axes == ("layer", "head")
    assert ours.labels[1] == ("H0", "H1", "H2", "H3")
    torch.testing.assert_close(ours.values, expected.cpu(), atol=1e-4, rtol=0)


def test_gqa_value_heads_equal_transformer_lens(tiny: LensModel) -> None:
    # toy-2l has 4 query heads and 2 key/value heads: the head axis comes from the hook tensor.
    metric = _metric(tiny)
    expected = _tl_reference(tiny, tl_patching.get_act_patch_attn_head_v_all_pos, metric)
    ours = patch_activations(tiny, CLEAN, CORRUPTED, metric, site="v", positions="all")
    assert ours.values.shape == (tiny.cfg.n_layers, 2)
    torch.testing.assert_close(ours.values, expected.cpu(), atol=1e-4, rtol=0)


def test_pattern_by_position_equals_transformer_lens(tiny_gpt2: LensModel) -> None:
    metric = _metric(tiny_gpt2)
    expected = _tl_reference(tiny_gpt2, tl_patching.get_act_patch_attn_head_pattern_by_pos, metric)
    ours = patch_activations(tiny_gpt2, CLEAN, CORRUPTED, metric, site="pattern", positions="each")
    assert ours.axes == ("layer", "position", "head")
    torch.testing.assert_close(ours.values.permute(0, 2, 1), expected.cpu(), atol=1e-4, rtol=0)


def test_resuming_at_a_layer_equals_the_full_pass(tiny: LensModel) -> None:
    tokens = tiny.to_tokens(CLEAN)
    with torch.no_grad(), tiny.hooks.capture("blocks.1.hook_resid_pre") as cap:
        full = tiny.model(tokens)[:, -1]
    resumed = run_from_layer(tiny, cap["blocks.1.hook_resid_pre"], 1)
    torch.testing.assert_close(resumed, full, atol=1e-5, rtol=0)
    final = answer_logits(tiny, tiny.model(tokens, stop_at_layer=tiny.cfg.n_layers))
    torch.testing.assert_close(final, full, atol=1e-5, rtol=0)


def test_chunk_size_does_not_change_results(tiny: LensModel) -> None:
    metric = _metric(tiny)
    one = patch_activations(
        tiny, CLEAN, CORRUPTED, metric, site="z", positions="each", chunk_size=1
    )
    many = patch_activations(tiny, CLEAN, CORRUPTED, metric, site="z", positions="each")
    torch.testing.assert_close(one.values, many.values, atol=1e-5, rtol=0)


def test_normalised_patch_of_everything_is_clean(tiny: LensModel) -> None:
    # Patching the whole residual stream before layer 0 turns the corrupted run into the clean
    # one, so its normalised score is 1; a later layer's patch of every position is also clean.
    res = patch_activations(
        tiny, CLEAN, CORRUPTED, _metric(tiny), site="resid_pre", positions="all", normalise=True
    )
    assert res.axes == ("layer",)
    torch.testing.assert_close(res.values, torch.ones(tiny.cfg.n_layers), atol=1e-4, rtol=0)
    assert res.clean_value != res.corrupted_value


def test_batch_of_pairs_is_the_mean_of_single_pairs(tiny: LensModel) -> None:
    clean = [CLEAN, "When Anna and Bob went, Bob gave it to"]
    corrupted = [CORRUPTED, "When Anna and Bob went, Anna gave it to"]
    answers = [tiny.token_id(" Mary"), tiny.token_id(" Anna")]
    wrongs = [tiny.token_id(" John"), tiny.token_id(" Bob")]
    assert len(tiny.encode(clean[1])) == len(tiny.encode(clean[0]))
    both = patch_activations(tiny, clean, corrupted, LogitDiff(answers, wrongs), site="attn_out")
    singles = [
        patch_activations(tiny, c, k, LogitDiff(a, w), site="attn_out").values
        for c, k, a, w in zip(clean, corrupted, answers, wrongs, strict=True)
    ]
    torch.testing.assert_close(both.values, (singles[0] + singles[1]) / 2, atol=1e-5, rtol=0)


def test_kl_metric_is_zero_when_everything_is_patched(tiny: LensModel) -> None:
    res = patch_activations(tiny, CLEAN, CORRUPTED, "kl", site="resid_pre", positions="all")
    assert res.clean_value == pytest.approx(0.0, abs=1e-6)
    assert res.corrupted_value > 0
    assert float(res.values.abs().max()) < 1e-4


def test_named_positions_align_prompts_of_different_lengths(tiny: LensModel) -> None:
    # Same-length pair patched by named positions equals the plain sweep at those positions.
    metric = _metric(tiny)
    plain = patch_activations(tiny, CLEAN, CORRUPTED, metric, site="resid_pre")
    aligned = patch_activations(
        tiny, CLEAN, CORRUPTED, metric, site="resid_pre", align={"S2": (7, 7), "END": (-1, -1)}
    )
    assert aligned.labels[1] == ("S2", "END")
    torch.testing.assert_close(aligned.values[:, 0], plain.values[:, 7])
    torch.testing.assert_close(aligned.values[:, 1], plain.values[:, -1])
    # A corrupted prompt one token longer runs when aligned by name.
    longer = "When Mary and John went out, Mary gave it to"
    n_clean, n_long = len(tiny.encode(CLEAN)), len(tiny.encode(longer))
    assert n_long == n_clean + 1
    res = patch_activations(
        tiny,
        CLEAN,
        longer,
        metric,
        site="z",
        positions="each",
        align={"S2": (7, 8), "END": (-1, -1)},
    )
    assert res.values.shape == (tiny.cfg.n_layers, 2, tiny.cfg.n_heads)
    assert torch.isfinite(res.values).all()


def test_mismatched_lengths_error_names_the_fix(tiny: LensModel) -> None:
    with pytest.raises(ValueError, match="align="):
        patch_activations(
            tiny, CLEAN, "When Mary and John went out, Mary gave it to", _metric(tiny)
        )
    assert tiny.hooks.attached_count() == 0


def test_unknown_site_is_a_clear_error(tiny: LensModel) -> None:
    with pytest.raises(ValueError, match="unknown site 'resid'"):
        patch_activations(tiny, CLEAN, CORRUPTED, _metric(tiny), site="resid")
    with pytest.raises(ValueError, match="'each' or 'all'"):
        patch_activations(tiny, CLEAN, CORRUPTED, _metric(tiny), positions="some")  # type: ignore[arg-type]
    assert tiny.hooks.attached_count() == 0


def test_multi_token_answer_is_a_clear_error(tiny: LensModel) -> None:
    with pytest.raises(ValueError, match="one token is needed"):
        LogitDiff(tiny.token_id(" Mary Poppins"), tiny.token_id(" John"))
    assert tiny.hooks.attached_count() == 0


def test_error_inside_the_metric_leaves_no_hook(tiny: LensModel) -> None:
    def broken(logits: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("metric failed")

    with pytest.raises(RuntimeError, match="metric failed"):
        patch_activations(tiny, CLEAN, CORRUPTED, broken, site="z")
    assert tiny.hooks.attached_count() == 0


def test_result_round_trip_and_top(tiny: LensModel, tmp_path) -> None:
    res = patch_activations(tiny, CLEAN, CORRUPTED, _metric(tiny), site="z", positions="all")
    loaded = type(res).load(res.save(tmp_path / "patch.json"))
    assert loaded == res
    label, value = res.top(1)[0]
    assert label.startswith("L") and ".H" in label
    assert value == pytest.approx(float(res.values.max()))

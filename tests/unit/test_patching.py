"""Batched activation patching on the tiny models: equal to TransformerLens's patching, batching
invariants, prompt-pair batches, named-position alignment, and clean errors for bad input."""

from __future__ import annotations

import pytest
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig
from transformer_lens import patching as tl_patching

from lmsci_mi import LensModel
from lmsci_mi.circuits import LogitDiff, patch_activations
from lmsci_mi.circuits.patching import PatchingConfig
from lmsci_mi.loading import TOY_MODELS
from lmsci_mi.sites import Head
from lmsci_mi.sweep import SweepConfig

CLEAN = "When Mary and John went, John gave it to"
CORRUPTED = "When Mary and John went, Mary gave it to"


def _metric(lm: LensModel) -> LogitDiff:
    return LogitDiff(lm.token_id(" Mary"), lm.token_id(" John"))


def _patch(lm: LensModel, metric, clean=CLEAN, corrupted=CORRUPTED, *, align=None, **config):
    return patch_activations(lm, clean, corrupted, metric, PatchingConfig(**config), align=align)


def _tl_reference(lm: LensModel, fn, metric: LogitDiff, answer_position: int = -1) -> torch.Tensor:
    _, cache = lm.model.run_with_cache(lm.to_tokens(CLEAN))
    return fn(lm.model, lm.to_tokens(CORRUPTED), cache,
              lambda logits: metric(logits[:, answer_position]).mean())


# Every per-position sweep that TransformerLens offers, against ours: (site, positions, TL
# function, how TL's axes map onto ours).
_TL_SWEEPS = [
    ("resid_pre", "each", tl_patching.get_act_patch_resid_pre, None),
    ("resid_mid", "each", tl_patching.get_act_patch_resid_mid, None),
    ("resid_post", "each", tl_patching.get_act_patch_block_every, "resid_post"),
    ("attn_out", "each", tl_patching.get_act_patch_attn_out, None),
    ("mlp_out", "each", tl_patching.get_act_patch_mlp_out, None),
    ("z", "each", tl_patching.get_act_patch_attn_head_out_by_pos, None),
    ("q", "each", tl_patching.get_act_patch_attn_head_q_by_pos, None),
    ("k", "each", tl_patching.get_act_patch_attn_head_k_by_pos, None),
    ("v", "each", tl_patching.get_act_patch_attn_head_v_by_pos, None),
    ("z", "all", tl_patching.get_act_patch_attn_head_out_all_pos, None),
    ("v", "all", tl_patching.get_act_patch_attn_head_v_all_pos, None),
]


# TransformerLens's patchers run one forward pass per (layer, position, head), 1-3 s a sweep: the
# fast suite checks a vector site and the per-head sites that GQA makes unusual (4 query heads on
# 2 key/value heads: z, k, v) on the GQA toy, and two sites on the GPT-2-shaped toy; the whole
# suite checks every site on both.
_FAST_ON_GPT2 = {("resid_pre", "each"), ("z", "each")}
_FAST_ON_GQA = {("resid_pre", "each"), ("z", "each"), ("k", "each"), ("v", "all")}
_TL_CASES = [
    pytest.param(
        model, *sweep, id=f"{model}-{sweep[0]}-{sweep[1]}",
        marks=[pytest.mark.slow]
        if sweep[:2] not in (_FAST_ON_GPT2 if model == "tiny_gpt2" else _FAST_ON_GQA)
        else [],
    )
    for model in ("tiny", "tiny_gpt2")
    for sweep in _TL_SWEEPS
]


@pytest.mark.parametrize(("model_fixture", "site", "positions", "tl_fn", "pick"), _TL_CASES)
def test_every_site_equals_transformer_lens(model_fixture: str, site: str, positions: str, tl_fn,
                                            pick: str | None, request: pytest.FixtureRequest) -> None:
    lm = request.getfixturevalue(model_fixture)
    metric = _metric(lm)
    expected = _tl_reference(lm, tl_fn, metric)
    if pick is not None:  # get_act_patch_block_every returns [resid_pre, attn_out, mlp_out]
        expected = _tl_reference(lm, tl_patching.get_act_patch_resid_pre, metric)[1:]
    ours = _patch(lm, metric, site=site, positions=positions)
    values = ours.values
    if pick is not None:  # resid_post of layer l is resid_pre of layer l + 1
        values = values[:-1]
    torch.testing.assert_close(values, expected.cpu(), atol=1e-4, rtol=0)


def test_pattern_on_the_gqa_toy_equals_transformer_lens(tiny: LensModel) -> None:
    metric = _metric(tiny)
    expected = _tl_reference(tiny, tl_patching.get_act_patch_attn_head_pattern_by_pos, metric)
    ours = _patch(tiny, metric, site="pattern", positions="each")
    assert ours.axes == ("layer", "position", "head")
    torch.testing.assert_close(ours.values.permute(0, 2, 1), expected.cpu(), atol=1e-4, rtol=0)


@pytest.mark.slow  # the GQA toy's pattern test above is the fast suite's
def test_pattern_by_position_equals_transformer_lens(tiny_gpt2: LensModel) -> None:
    metric = _metric(tiny_gpt2)
    expected = _tl_reference(tiny_gpt2, tl_patching.get_act_patch_attn_head_pattern_by_pos, metric)
    ours = _patch(tiny_gpt2, metric, site="pattern", positions="each")
    torch.testing.assert_close(ours.values.permute(0, 2, 1), expected.cpu(), atol=1e-4, rtol=0)


def test_answer_position_other_than_last_equals_transformer_lens(tiny: LensModel) -> None:
    metric = _metric(tiny)
    expected = _tl_reference(tiny, tl_patching.get_act_patch_resid_pre, metric, answer_position=-3)
    ours = _patch(tiny, metric, site="resid_pre", answer_position=-3)
    # Patches after the answer position cannot reach it: they read the corrupted run.
    torch.testing.assert_close(ours.values, expected.cpu(), atol=1e-4, rtol=0)
    assert torch.equal(ours.values[:, -2:], torch.full_like(ours.values[:, -2:], ours.corrupted_value))


def _deep_toy(tiny: LensModel, n_layers: int = 12) -> LensModel:
    cfg = HookedTransformerConfig(**{**TOY_MODELS["toy-2l"], "n_layers": n_layers}, device="cpu")
    model = HookedTransformer(cfg, tokenizer=tiny.tokenizer, move_to_device=True).eval()
    return LensModel(model, name="toy-12l", source="test", tokenizer=tiny.tokenizer,
                     sink_token_id=tiny.sink_token_id)


@pytest.mark.slow  # TransformerLens's patcher on a deep toy (3 s), the oracle of the sweeps above
def test_merged_layers_on_a_deep_model_equal_transformer_lens(tiny: LensModel) -> None:
    # 12 layers: passes hold rows of layers more than 8 apart, joining at their own layer.
    # One model and one reference for both layer choices (each costs a second).
    lm = _deep_toy(tiny)
    metric = _metric(lm)
    expected = _tl_reference(lm, tl_patching.get_act_patch_attn_head_out_all_pos, metric)
    for layers in (None, (0, 5, 10, 11)):
        for budget in (4096, 40):  # one pass for everything, and many small passes
            ours = _patch(lm, metric, site="z", positions="all", layers=layers,
                          sweep=SweepConfig(token_budget=budget))
            wanted = expected if layers is None else expected[list(layers)]
            torch.testing.assert_close(ours.values, wanted.cpu(), atol=1e-4, rtol=0)


def test_prefix_reuse_changes_nothing_but_the_work(tiny: LensModel) -> None:
    metric = _metric(tiny)
    fast = _patch(tiny, metric, site="resid_pre")
    slow = _patch(tiny, metric, site="resid_pre", sweep=SweepConfig(reuse_prefix=False))
    torch.testing.assert_close(fast.values, slow.values, atol=1e-5, rtol=0)


def test_chunk_size_does_not_change_results(tiny: LensModel) -> None:
    metric = _metric(tiny)
    one = _patch(tiny, metric, site="z", positions="each", sweep=SweepConfig(token_budget=1))
    many = _patch(tiny, metric, site="z", positions="each")
    torch.testing.assert_close(one.values, many.values, atol=1e-5, rtol=0)


def test_normalised_patch_of_everything_is_clean(tiny: LensModel) -> None:
    # Patching the whole residual stream before layer 0 turns the corrupted run into the clean
    # one, so its normalised score is 1; a later layer's patch of every position is also clean.
    res = _patch(tiny, _metric(tiny), site="resid_pre", positions="all", normalise=True)
    assert res.axes == ("layer",)
    torch.testing.assert_close(res.values, torch.ones(tiny.cfg.n_layers), atol=1e-4, rtol=0)
    assert res.clean_value != res.corrupted_value


def test_batch_of_pairs_is_the_mean_of_single_pairs(tiny: LensModel) -> None:
    clean = [CLEAN, "When Anna and Bob went, Bob gave it to"]
    corrupted = [CORRUPTED, "When Anna and Bob went, Anna gave it to"]
    answers = [tiny.token_id(" Mary"), tiny.token_id(" Anna")]
    wrongs = [tiny.token_id(" John"), tiny.token_id(" Bob")]
    assert len(tiny.encode(clean[1])) == len(tiny.encode(clean[0]))
    both = _patch(tiny, LogitDiff(answers, wrongs), clean, corrupted, site="attn_out")
    singles = [
        _patch(tiny, LogitDiff(a, w), c, k, site="attn_out").values
        for c, k, a, w in zip(clean, corrupted, answers, wrongs, strict=True)
    ]
    torch.testing.assert_close(both.values, (singles[0] + singles[1]) / 2, atol=1e-5, rtol=0)


def test_kl_metric_is_zero_when_everything_is_patched(tiny: LensModel) -> None:
    res = _patch(tiny, "kl", site="resid_pre", positions="all")
    assert res.clean_value == pytest.approx(0.0, abs=1e-6)
    assert res.corrupted_value > 0
    assert float(res.values.abs().max()) < 1e-4


def test_named_positions_align_prompts_of_different_lengths(tiny: LensModel) -> None:
    # Same-length pair patched by named positions equals the plain sweep at those positions.
    metric = _metric(tiny)
    plain = _patch(tiny, metric, site="resid_pre")
    aligned = _patch(tiny, metric, site="resid_pre", align={"S2": (7, 7), "END": (-1, -1)})
    assert aligned.labels[1] == ("S2", "END")
    torch.testing.assert_close(aligned.values[:, 0], plain.values[:, 7])
    torch.testing.assert_close(aligned.values[:, 1], plain.values[:, -1])
    # A corrupted prompt one token longer runs when aligned by name.
    longer = "When Mary and John went out, Mary gave it to"
    n_clean, n_long = len(tiny.encode(CLEAN)), len(tiny.encode(longer))
    assert n_long == n_clean + 1
    res = _patch(tiny, metric, CLEAN, longer, site="z", positions="each",
                 align={"S2": (7, 8), "END": (-1, -1)})
    assert res.values.shape == (tiny.cfg.n_layers, 2, tiny.cfg.n_heads)
    # Against a patch made by hand: the clean z of head 2 at S2 (position 7) moved to position 8
    # of the longer run.
    _, clean_cache = tiny.model.run_with_cache(tiny.to_tokens(CLEAN))
    name = "blocks.1.attn.hook_z"
    with torch.no_grad(), tiny.hooks.patch(
            name, _shifted(clean_cache[name], 7, 8, len(tiny.encode(longer))), positions=[8], heads=[2]):
        by_hand = metric(tiny(tiny.to_tokens(longer))[:, -1]).mean()
    assert float(res.values[1, 0, 2]) == pytest.approx(float(by_hand), abs=1e-4)


def test_mismatched_lengths_error_names_the_fix(tiny: LensModel) -> None:
    with pytest.raises(ValueError, match="align="):
        _patch(tiny, _metric(tiny), CLEAN, "When Mary and John went out, Mary gave it to")
    assert tiny.hooks.attached_count() == 0


def test_unknown_site_is_a_clear_error(tiny: LensModel) -> None:
    with pytest.raises(ValueError, match="site must be one of"):
        _patch(tiny, _metric(tiny), site="resid")
    with pytest.raises(ValueError, match="positions must be one of"):
        _patch(tiny, _metric(tiny), positions="some")
    assert tiny.hooks.attached_count() == 0


def test_multi_token_answer_is_a_clear_error(tiny: LensModel) -> None:
    with pytest.raises(ValueError, match="one token is needed"):
        LogitDiff(tiny.token_id(" Mary Poppins"), tiny.token_id(" John"))
    assert tiny.hooks.attached_count() == 0


def test_error_inside_the_metric_leaves_no_hook(tiny: LensModel) -> None:
    def broken(logits: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("metric failed")

    with pytest.raises(RuntimeError, match="metric failed"):
        _patch(tiny, broken, site="z")
    assert tiny.hooks.attached_count() == 0


def test_result_round_trip_and_top(tiny: LensModel, tmp_path) -> None:
    res = _patch(tiny, _metric(tiny), site="z", positions="all")
    loaded = type(res).load(res.save(tmp_path / "patch.json"))
    assert loaded == res
    head, value = res.top(1)[0]
    layer, index = divmod(int(res.values.argmax()), res.values.shape[1])
    assert head == Head(layer, index)  # the same key as every head result's top()
    assert value == pytest.approx(float(res.values.max()))
    by_position = _patch(tiny, _metric(tiny), site="z", positions="each")
    key, _ = by_position.top(1)[0]
    assert isinstance(key, str) and key.startswith("L") and " @" in key


def _shifted(act: torch.Tensor, src: int, dst: int, length: int) -> torch.Tensor:
    """A source of ``length`` positions holding ``act[:, src]`` at ``dst``."""
    out = torch.zeros(act.shape[0], length, *act.shape[2:], dtype=act.dtype)
    out[:, dst] = act[:, src]
    return out

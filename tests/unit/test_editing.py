"""Unit tests for lmsci_mi.editing on the tiny random model: handles, deltas, validation, stats, MEMIT."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lmsci_mi import LensModel, load_model
from lmsci_mi.data.facts import candidate_facts, load_fact_records
from lmsci_mi.editing import (
    EditRequest,
    MEMITHyperParams,
    ROMEHyperParams,
    apply_delta,
    evaluate_edits,
    generation_entropy,
    key_statistics,
    load_facts,
    memit_edit,
    rome_edit,
    target_nll,
)
from lmsci_mi.editing.memit import _top_resid
from lmsci_mi.editing.stats import StatsConfig
from lmsci_mi.editing.rome import _subject_row, _target_ids

FAST_ROME = ROMEHyperParams(n_contexts=2, steps=4)
FAST_MEMIT = MEMITHyperParams(n_contexts=2, steps=4)
EIFFEL = EditRequest(
    "{} is located in the city of",
    "The Eiffel Tower",
    " Rome",
    " Paris",
    ("The Eiffel Tower can be found in the city of",),
    ("The Louvre is located in the city of",),
)


@pytest.fixture(scope="module")
def tiny() -> LensModel:
    """One toy-2l for the module, so context prefixes and statistics are made once (every test
    restores the weights and checks that it did)."""
    return load_model("toy-2l", device="cpu")


@pytest.fixture(scope="module")
def stats(tiny: LensModel, tmp_path_factory: pytest.TempPathFactory):
    config = StatsConfig(n_tokens=1024, seq_len=64)
    return key_statistics(tiny, [0, 1], config, cache_dir=tmp_path_factory.mktemp("stats"))


def snapshot(lm: LensModel) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in lm.model.state_dict().items()}


def assert_identical(lm: LensModel, before: dict[str, torch.Tensor]) -> None:
    after = lm.model.state_dict()
    for name, value in before.items():
        assert torch.equal(after[name], value), f"{name} changed"
    assert lm.hooks.attached_count() == 0


# ---------------------------------------------------------------------- ROME and handles


def test_rome_restore_is_bit_identical(tiny: LensModel, stats) -> None:
    before = snapshot(tiny)
    handle = rome_edit(tiny, EIFFEL, layer=0, stats=stats, hparams=FAST_ROME)
    assert handle.layers == (0,)
    delta = handle.deltas["blocks.0.mlp.W_out"]
    assert delta.shape == tiny.model.blocks[0].mlp.W_out.shape
    singular = torch.linalg.svdvals(delta.double())
    assert singular[1] < 1e-5 * singular[0]  # ROME is rank one (up to float32 rounding)
    assert not torch.equal(tiny.model.blocks[0].mlp.W_out, before["blocks.0.mlp.W_out"])
    handle.restore()
    assert_identical(tiny, before)
    handle.restore()  # twice is harmless
    assert_identical(tiny, before)


def test_rome_moves_the_target_and_context_manager_restores(tiny: LensModel, stats) -> None:
    before = snapshot(tiny)
    nll_before = target_nll(tiny, [EIFFEL.rewrite_prompt], [" Rome"])
    with rome_edit(
        tiny, EIFFEL, layer=0, stats=stats, hparams=ROMEHyperParams(n_contexts=2, steps=8)
    ):
        nll_after = target_nll(tiny, [EIFFEL.rewrite_prompt], [" Rome"])
    assert nll_after < nll_before
    assert_identical(tiny, before)


def test_rome_update_maps_the_averaged_key_to_the_residual(stats) -> None:
    """The consistent-key rule: k̄ @ ΔW == r exactly (PR 44's k₀ in the denominator breaks it),
    and keys C-orthogonal to k̄ are left alone."""
    from lmsci_mi.editing.rome import rome_update

    c = stats.for_layer(0)
    gen = torch.Generator().manual_seed(0)
    k_bar = torch.randn(c.shape[0], generator=gen, dtype=torch.float64)
    r = torch.randn(64, generator=gen, dtype=torch.float64)
    update = rome_update(c, k_bar, r, damping=0.0)
    assert torch.allclose(k_bar @ update, r, atol=1e-8)
    other = torch.randn(c.shape[0], generator=gen, dtype=torch.float64)
    orth = (
        other
        - (other @ torch.linalg.solve(c, k_bar)) / (k_bar @ torch.linalg.solve(c, k_bar)) * k_bar
    )
    assert (orth @ update).abs().max() < 1e-6


def test_edit_aware_optimisation_sees_the_installed_update(tiny: LensModel, stats) -> None:
    """With ``edit_aware`` the optimiser adds (k·u)·δ at each position, u = C⁻¹k̄/(k̄ᵀC⁻¹k̄):
    exactly what the installed ΔW adds to the MLP output there, for any key k."""
    from lmsci_mi.editing.rome import _solve, rome_update

    c = stats.for_layer(0)
    gen = torch.Generator().manual_seed(1)
    k_bar = torch.randn(c.shape[0], generator=gen, dtype=torch.float64)
    r = torch.randn(64, generator=gen, dtype=torch.float64)
    c_inv_k = _solve(c, k_bar, 1e-4)
    u = c_inv_k / (c_inv_k @ k_bar)
    keys = torch.randn(5, c.shape[0], generator=gen, dtype=torch.float64)
    update = rome_update(c, k_bar, r, damping=1e-4)
    assert torch.allclose(keys @ update, (keys @ u)[:, None] * r[None], atol=1e-8)
    before = snapshot(tiny)
    for aware in (True, False):
        hp = ROMEHyperParams(n_contexts=2, steps=4, edit_aware=aware)
        with rome_edit(tiny, EIFFEL, layer=0, stats=stats, hparams=hp) as handle:
            assert torch.isfinite(handle.deltas["blocks.0.mlp.W_out"]).all()
    assert_identical(tiny, before)


def test_delta_save_load_and_reapply(tiny: LensModel, stats, tmp_path: Path) -> None:
    before = snapshot(tiny)
    with rome_edit(tiny, EIFFEL, layer=0, stats=stats, hparams=FAST_ROME) as handle:
        edited = tiny.model.blocks[0].mlp.W_out.detach().clone()
        path = handle.save(tmp_path / "delta.safetensors")
    assert_identical(tiny, before)
    with apply_delta(tiny, path) as loaded:
        assert torch.equal(tiny.model.blocks[0].mlp.W_out, edited)
        assert loaded.requests == (EIFFEL,)
        assert loaded.method == "rome"
    assert_identical(tiny, before)


def test_apply_delta_refuses_another_model(
    tiny: LensModel, tiny_gpt2: LensModel, stats, tmp_path: Path
) -> None:
    with rome_edit(tiny, EIFFEL, layer=0, stats=stats, hparams=FAST_ROME) as handle:
        path = handle.save(tmp_path / "delta.safetensors")
    before = snapshot(tiny_gpt2)
    with pytest.raises(ValueError, match="saved from"):
        apply_delta(tiny_gpt2, path)
    assert_identical(tiny_gpt2, before)


@pytest.mark.parametrize(
    ("request_", "layer", "message"),
    [
        (EditRequest("{} is located in", "The Eiffel Tower", " Rome", " Paris"), 5, "out of range"),
        (
            EditRequest("{} is located in", "The Eiffel Tower", " Rome", " Paris"),
            -1,
            "out of range",
        ),
        (EditRequest("{} is located in", "The Eiffel Tower", "", " Paris"), 0, "empty target"),
        (EditRequest("{} is located in", "The Eiffel Tower", "   ", " Paris"), 0, "empty target"),
        (EditRequest("{} and {} are in", "The Eiffel Tower", " Rome", " Paris"), 0, "exactly one"),
        (EditRequest("Paris is lovely", "The Eiffel Tower", " Rome"), 0, "not in the prompt"),
        (EditRequest("{} is located in", "", " Rome"), 0, "empty subject"),
        (EditRequest("{} is located in", "Eiffel Tower", " Paris", " Paris"), 0, "true answer"),
    ],
)
def test_bad_input_changes_no_weight(tiny: LensModel, stats, request_, layer, message) -> None:
    before = snapshot(tiny)
    with pytest.raises(ValueError, match=message):
        rome_edit(tiny, request_, layer=layer, stats=stats, hparams=FAST_ROME)
    assert_identical(tiny, before)
    with pytest.raises(ValueError, match=message):
        memit_edit(tiny, [EIFFEL, request_], layers=[0, layer], stats=stats, hparams=FAST_MEMIT)
    assert_identical(tiny, before)


def test_subject_not_in_prompt_changes_no_weight(tiny: LensModel, stats) -> None:
    before = snapshot(tiny)
    filled = EditRequest("The Eiffel Tower is located in the city of", "The Eiffel Tower", " Rome")
    assert filled.prompt == "{} is located in the city of"
    with pytest.raises(ValueError, match="not in the prompt"):
        rome_edit(
            tiny,
            EditRequest("Big Ben is in the city of", "The Eiffel Tower", " Rome"),
            layer=0,
            stats=stats,
        )
    assert_identical(tiny, before)
    with pytest.raises(ValueError, match="not in the prompt"):
        memit_edit(
            tiny, [EIFFEL, EditRequest("Big Ben is in", "Louvre", " Rome")], layers=[0], stats=stats
        )
    assert_identical(tiny, before)


def test_stats_for_the_wrong_layer_change_no_weight(tiny: LensModel, tmp_path: Path) -> None:
    stats = key_statistics(tiny, 1, StatsConfig(n_tokens=200, seq_len=64), cache_dir=tmp_path)
    before = snapshot(tiny)
    with pytest.raises(ValueError, match="cover layers"):
        rome_edit(tiny, EIFFEL, layer=0, stats=stats)
    assert_identical(tiny, before)


# ---------------------------------------------------------------------- MEMIT


def test_memit_edits_several_layers_and_restores(tiny: LensModel, stats) -> None:
    before = snapshot(tiny)
    berlin = EditRequest("{} is a city in the country of", "Berlin", " Italy", " Germany")
    with memit_edit(
        tiny, [EIFFEL, berlin], layers=[0, 1], stats=stats, hparams=FAST_MEMIT
    ) as handle:
        assert handle.layers == (0, 1)
        assert len(handle.requests) == 2
        for layer in (0, 1):
            assert torch.isfinite(handle.deltas[f"blocks.{layer}.mlp.W_out"]).all()
    assert_identical(tiny, before)


def test_memit_solve_is_stable_with_duplicate_keys(tiny: LensModel, stats) -> None:
    """Identical requests give identical (linearly dependent) keys: KKᵀ is singular, λC keeps the
    system solvable and the update finite."""
    before = snapshot(tiny)
    with memit_edit(
        tiny, [EIFFEL, EIFFEL, EIFFEL], layers=[0, 1], stats=stats, hparams=FAST_MEMIT
    ) as handle:
        for delta in handle.deltas.values():
            assert torch.isfinite(delta).all()
    assert_identical(tiny, before)


def test_memit_moves_the_top_residual_toward_the_target(tiny: LensModel, stats) -> None:
    rows = [_subject_row(tiny, "{}", EIFFEL.prompt, EIFFEL.subject, _target_ids(tiny, " Rome"))]
    h0 = _top_resid(tiny, 1, rows)
    with memit_edit(
        tiny, [EIFFEL], layers=[0, 1], stats=stats, hparams=MEMITHyperParams(n_contexts=2, steps=6)
    ):
        h1 = _top_resid(tiny, 1, rows)
    assert (h1 - h0).norm() > 0


# ---------------------------------------------------------------------- metrics and data


def test_target_nll_uses_a_continuation(tiny: LensModel) -> None:
    prompt = "The cat sat on the"
    nll = target_nll(tiny, [prompt], [" mat"])
    logits = tiny(tiny.to_tokens(prompt))
    expected = -logits[0, -1].log_softmax(-1)[tiny.token_id(" mat")]
    assert torch.allclose(nll[0], expected, atol=1e-5)


def test_generation_entropy_penalises_repetition() -> None:
    assert generation_entropy(["the the the the the the"]) < generation_entropy(
        ["one two three four five six"]
    )


def test_evaluate_edits_reports_both_rows_and_restores(tiny: LensModel, stats) -> None:
    before = snapshot(tiny)
    ev = evaluate_edits(
        tiny, [EIFFEL], layer=0, stats=stats, rome_hparams=FAST_ROME, generation_tokens=5
    )
    assert ev.labels[0] == ("unedited", "rome")
    assert ev.values.shape == (2, 8)
    assert ev.per_fact.shape == (2, 1, 7)
    both = type(ev).combine([ev, ev])
    assert both.per_fact.shape == (2, 2, 7)
    assert torch.allclose(both.values, ev.values, equal_nan=True)
    assert 0 <= ev.metric("ES") <= 100
    assert_identical(tiny, before)


def test_shipped_facts_have_the_counterfact_shape() -> None:
    records = load_fact_records()
    facts = load_facts()
    assert len(facts) >= 50
    for fact, record in zip(facts, records, strict=True):
        assert fact.rewrite_prompt.startswith(fact.subject) or fact.subject in fact.rewrite_prompt
        assert len(fact.paraphrase_prompts) >= 2 and len(fact.neighborhood_prompts) >= 2
        assert fact.target_new != fact.target_true
        assert all(fact.subject not in p for p in fact.neighborhood_prompts)
        assert record["p_true"] >= 0.1
    assert len({f.subject for f in facts}) == len(facts)


def test_candidate_neighbours_share_the_answer() -> None:
    for record in candidate_facts():
        assert record["subject"] not in " ".join(record["neighborhood_prompts"])
        assert record["target_new"] != record["target_true"]
    json.dumps(candidate_facts())  # plain data

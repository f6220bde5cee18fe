"""Unit tests for lmsci_mi.editing on the tiny random model: handles, deltas, validation, stats, MEMIT."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import weakref
from pathlib import Path

import pytest
import torch

from lmsci_mi import LensModel, load_model
from lmsci_mi.data.facts import candidate_facts
from lmsci_mi.editing import (
    PER_FACT,
    AlphaEditConfig,
    EditRequest,
    EvaluationConfig,
    MEMITConfig,
    ROMEConfig,
    apply_delta,
    context_templates,
    evaluate_edits,
    fit_deltas,
    generation_entropy,
    key_statistics,
    load_facts,
    memit_edit,
    next_token_top1,
    rome_edit,
    target_nll,
)
from lmsci_mi.editing.fit import subject_activations, subject_row
from lmsci_mi.editing.stats import StatsConfig

FAST_ROME = ROMEConfig(layer=0, n_contexts=2, steps=4)
FAST_MEMIT = MEMITConfig(layers=(0, 1), n_contexts=2, steps=4)
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
    handle = rome_edit(tiny, EIFFEL, FAST_ROME, stats=stats)
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
    with rome_edit(tiny, EIFFEL, FAST_ROME.replace(steps=8), stats=stats):
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


def test_edit_aware_optimisation_sees_the_installed_update(stats) -> None:
    """With ``edit_aware`` the optimiser adds (k·u)·δ at each position, u = C⁻¹k̄/(k̄ᵀC⁻¹k̄):
    exactly what the installed ΔW adds to the MLP output there, for any key k."""
    from lmsci_mi.editing.rome import rome_update, solve_ridge

    c = stats.for_layer(0)
    gen = torch.Generator().manual_seed(1)
    k_bar = torch.randn(c.shape[0], generator=gen, dtype=torch.float64)
    r = torch.randn(64, generator=gen, dtype=torch.float64)
    c_inv_k = solve_ridge(c, k_bar, 1e-4)
    u = c_inv_k / (c_inv_k @ k_bar)
    keys = torch.randn(5, c.shape[0], generator=gen, dtype=torch.float64)
    update = rome_update(c, k_bar, r, damping=1e-4)
    assert torch.allclose(keys @ update, (keys @ u)[:, None] * r[None], atol=1e-8)


def test_delta_save_load_and_reapply(tiny: LensModel, stats, tmp_path: Path) -> None:
    before = snapshot(tiny)
    with rome_edit(tiny, EIFFEL, FAST_ROME, stats=stats) as handle:
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
    with rome_edit(tiny, EIFFEL, FAST_ROME, stats=stats) as handle:
        path = handle.save(tmp_path / "delta.safetensors")
    before = snapshot(tiny_gpt2)
    with pytest.raises(ValueError, match="saved from"):
        apply_delta(tiny_gpt2, path)
    assert_identical(tiny_gpt2, before)


@pytest.mark.parametrize(
    ("request_", "layer", "message"),
    [
        (EditRequest("{} is located in", "The Eiffel Tower", " Rome", " Paris"), 5, "out of range"),
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
        rome_edit(tiny, request_, FAST_ROME.replace(layer=layer), stats=stats)
    assert_identical(tiny, before)
    with pytest.raises(ValueError, match=message):
        memit_edit(tiny, [EIFFEL, request_], FAST_MEMIT.replace(layers=(0, layer)), stats=stats)
    assert_identical(tiny, before)


def test_subject_not_in_prompt_changes_no_weight(tiny: LensModel, stats) -> None:
    before = snapshot(tiny)
    filled = EditRequest("The Eiffel Tower is located in the city of", "The Eiffel Tower", " Rome")
    assert filled.prompt == "{} is located in the city of"
    with pytest.raises(ValueError, match="not in the prompt"):
        rome_edit(tiny, EditRequest("Big Ben is in the city of", "The Eiffel Tower", " Rome"),
                  FAST_ROME, stats=stats)
    assert_identical(tiny, before)
    with pytest.raises(ValueError, match="not in the prompt"):
        memit_edit(tiny, [EIFFEL, EditRequest("Big Ben is in", "Louvre", " Rome")],
                   FAST_MEMIT.replace(layers=(0,)), stats=stats)
    assert_identical(tiny, before)


def test_stats_for_the_wrong_layer_change_no_weight(tiny: LensModel, tmp_path: Path) -> None:
    stats = key_statistics(tiny, 1, StatsConfig(n_tokens=200, seq_len=64), cache_dir=tmp_path)
    before = snapshot(tiny)
    with pytest.raises(ValueError, match="cover layers"):
        rome_edit(tiny, EIFFEL, FAST_ROME, stats=stats)
    assert_identical(tiny, before)


# ---------------------------------------------------------------------- MEMIT


def top_residual(lm: LensModel, request: EditRequest, layer: int) -> torch.Tensor:
    row = subject_row(lm, "{}", request.prompt, request.subject, lm.continuation_ids(request.target_new))
    return subject_activations(lm, "resid_post", layer, [row])[0]


def test_memit_moves_each_top_residual_toward_its_target(tiny: LensModel, stats) -> None:
    """MEMIT's aim: the top layer's residual at each subject reaches h + δ. After spreading the
    update over both layers it is much nearer the target than before (λC keeps it from exact)."""
    before = snapshot(tiny)
    berlin = EditRequest("{} is a city in the country of", "Berlin", " Italy", " Germany")
    hp = FAST_MEMIT.replace(steps=6)
    templates = context_templates(tiny, hp.n_contexts, hp.context_lengths, seed=hp.seed)
    fit = fit_deltas(tiny, 1, [EIFFEL, berlin], templates, hp, site="resid_post")
    h0 = torch.stack([top_residual(tiny, r, 1) for r in (EIFFEL, berlin)])
    with memit_edit(tiny, [EIFFEL, berlin], hp.replace(mom2_weight=1.0), stats=stats) as handle:
        assert handle.layers == (0, 1) and len(handle.requests) == 2
        h1 = torch.stack([top_residual(tiny, r, 1) for r in (EIFFEL, berlin)])
    target = h0 + fit.delta
    assert ((target - h1).norm(dim=-1) < 0.5 * (target - h0).norm(dim=-1)).all()
    assert_identical(tiny, before)


@pytest.mark.parametrize("method", ["memit", "alphaedit"])
def test_a_duplicate_request_in_a_batch_is_refused_before_any_edit(tiny: LensModel, stats, method) -> None:
    before = snapshot(tiny)
    config = FAST_MEMIT if method == "memit" else AlphaEditConfig(layers=(0, 1), n_contexts=2, steps=4)
    other_target = dataclasses.replace(EIFFEL, target_new=" London")
    for batch in ([EIFFEL, EIFFEL], [EIFFEL, other_target]):
        with pytest.raises(ValueError, match="requests 0 and 1 both rewrite"):
            evaluate_edits(tiny, batch, config, stats=stats, evaluation=EvaluationConfig(generation_tokens=0))
    assert tiny.hooks.attached_count() == 0
    assert_identical(tiny, before)


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


def direct_scores(lm: LensModel, request: EditRequest) -> tuple[float, float]:
    """(ES, NS) of one fact measured directly: does the new target win on the rewrite prompt,
    the true one on the (single) neighbour?"""
    nll = target_nll(lm, [request.rewrite_prompt] * 2 + [request.neighborhood_prompts[0]] * 2,
                     [request.target_new, request.target_true] * 2)
    return float(nll[0] < nll[1]), float(nll[3] < nll[2])


def test_evaluate_edits_scores_what_the_model_says_and_restores(tiny: LensModel, stats) -> None:
    before = snapshot(tiny)
    unedited = direct_scores(tiny, EIFFEL)
    with rome_edit(tiny, EIFFEL, FAST_ROME.replace(steps=8), stats=stats):
        edited = direct_scores(tiny, EIFFEL)
    ev = evaluate_edits(tiny, [EIFFEL], FAST_ROME.replace(steps=8), stats=stats,
                        evaluation=EvaluationConfig(generation_tokens=5))
    assert ev.labels[0] == ("unedited", "rome") and ev.method == "rome"
    assert (ev.per_fact[0, 0, 0].item(), ev.per_fact[0, 0, 2].item()) == unedited
    assert (ev.per_fact[1, 0, 0].item(), ev.per_fact[1, 0, 2].item()) == edited
    assert ev.metric("ES") == 100 * edited[0] and ev.metric("ES", edited=False) == 100 * unedited[0]
    assert ev.fact_layers == ((0,),) and ev.n_edits == 1 and ev.excluded_neighbours == 0
    both = type(ev).combine([ev, ev])
    assert both.per_fact.shape == (2, 2, len(PER_FACT)) and both.fact_layers == ((0,), (0,))
    assert torch.allclose(both.values, ev.values, equal_nan=True)
    assert_identical(tiny, before)


def test_evaluate_edits_records_the_layer_of_each_fact(
    tiny: LensModel, stats, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the layer chosen per fact (traced), each fact's layer is recorded, not the last one's."""
    from lmsci_mi.editing import rome

    chosen = {"The Eiffel Tower": 0, "Berlin": 1}
    monkeypatch.setattr(rome, "traced_layer", lambda lm, request: chosen[request.subject])
    berlin = EditRequest("{} is a city in the country of", "Berlin", " Italy", " Germany",
                         neighborhood_prompts=("Munich is a city in the country of",))
    ev = evaluate_edits(tiny, [EIFFEL, berlin], FAST_ROME.replace(layer=None, trace_layer=True), stats=stats,
                        evaluation=EvaluationConfig(generation_tokens=0))
    assert ev.fact_layers == ((0,), (1,))


def test_memit_evaluation_leaves_out_neighbours_about_edited_subjects(tiny: LensModel, stats) -> None:
    """The Louvre's rewrite prompt is a neighbour of the Eiffel Tower fact; when the Louvre is
    edited in the same batch, that prompt tests the Louvre's edit, not specificity."""
    eiffel = EditRequest("{} is located in the city of", "The Eiffel Tower", " Rome", " Paris",
                         ("The Eiffel Tower can be found in the city of",),
                         ("The Louvre is located in the city of", "Notre Dame is located in the city of"))
    louvre = EditRequest("{} is located in the city of", "The Louvre", " London", " Paris",
                         ("The Louvre can be found in the city of",),
                         ("The Pantheon is located in the city of",))
    ev = evaluate_edits(tiny, [eiffel, louvre], FAST_MEMIT, stats=stats,
                        evaluation=EvaluationConfig(generation_tokens=0))
    assert ev.excluded_neighbours == 1
    notre_dame = EditRequest("{} is located in the city of", "Notre Dame", " Rome", " Paris",
                             neighborhood_prompts=())
    nll = target_nll(tiny, [notre_dame.rewrite_prompt] * 2, [" Rome", " Paris"])
    assert ev.per_fact[0, 0, 2].item() == float(nll[1] < nll[0])  # NS over Notre Dame alone


@pytest.mark.parametrize("kind", ["rome", "edit_aware"])
def test_rome_invariant_mean_key_maps_to_v0_plus_delta(tiny: LensModel, stats, kind: str) -> None:
    """After rome_edit, k̄ · W_new + b = v₀ + δ, with k̄ the mean key over the context templates and
    v₀ the mean unedited MLP output over the same rows, as ROME computes them (either fit)."""
    from lmsci_mi.editing.rome import rome_key, solve_ridge

    hp = FAST_ROME.replace(steps=6, fit=kind)
    templates = context_templates(tiny, hp.n_contexts, hp.context_lengths, seed=hp.seed)
    k_bar = rome_key(tiny, 0, EIFFEL, templates)
    c_inv_k = solve_ridge(stats.for_layer(0), k_bar, hp.damping)
    u = (c_inv_k / (c_inv_k @ k_bar.double())).float()[None] if kind == "edit_aware" else None
    fit = fit_deltas(tiny, 0, [EIFFEL], templates, hp, site="mlp_out", key_dirs=u)
    mlp = tiny.model.blocks[0].mlp
    v0 = k_bar @ mlp.W_out + mlp.b_out
    assert torch.allclose(v0, fit.v0[0], atol=1e-4)  # v₀ is the mean output over the same rows
    with rome_edit(tiny, EIFFEL, hp, stats=stats):
        assert torch.allclose(k_bar @ mlp.W_out + mlp.b_out, v0 + fit.delta[0], atol=1e-4)
        assert not torch.allclose(v0 + fit.delta[0], v0, atol=1e-2)  # δ is not trivially zero


def test_a_delta_fitted_in_a_batch_equals_it_fitted_alone(tiny: LensModel) -> None:
    """Each request stops on its own: its δ does not depend on its batch-mates."""
    easy = EditRequest("{} is located in the city of", "The Eiffel Tower", " the", " Paris")
    hard = EditRequest("{} is a city in the country of", "Berlin", " Czechoslovakia Republic", " Germany")
    # On the random toy both NLLs start near 11; " the" falls below 10.2 within a few steps and
    # the three-token target does not.
    hp = MEMITConfig(n_contexts=2, steps=12, early_stop_nll=10.2, clamp_norm=10.0, weight_decay=0.0)
    templates = context_templates(tiny, hp.n_contexts, hp.context_lengths, seed=hp.seed)
    alone = fit_deltas(tiny, 0, [easy], templates, hp, site="resid_post")
    batch = fit_deltas(tiny, 0, [easy, hard], templates, hp, site="resid_post")
    assert alone.steps[0] < batch.steps[1]  # the easy one stops while its batch-mate goes on
    # The batch pads to its longer request, so its float32 matmuls sum in another order; that
    # noise (about 1e-5) passes through the Adam steps to some 6e-5 on entries of size ~1.
    assert torch.allclose(batch.delta[0], alone.delta[0], rtol=1e-4, atol=1e-4)


def test_facts_fitted_in_one_pass_equal_them_fitted_one_by_one(tiny: LensModel) -> None:
    """Issue 38: the rows of several facts share each pass (rows of one width together, across
    facts; split by rows under ``pass_tokens``), and each fact's δ, NLL and steps are those of
    its fit alone."""
    facts = [
        EditRequest("{} is located in the city of", "The Eiffel Tower", " the", " Paris"),
        EditRequest("{} is a city in the country of", "Berlin", " Czechoslovakia Republic", " Germany"),
        EditRequest("{} is a city in the country of", "Lyon", " Spain", " France"),
        EditRequest("The mother tongue of {} is", "Vladimir Putin", " French", " Russian"),
    ]
    hp = MEMITConfig(n_contexts=2, steps=8, early_stop_nll=10.4, stop_on="nll", clamp_norm=10.0,
                     weight_decay=0.1)
    templates = context_templates(tiny, hp.n_contexts, hp.context_lengths, seed=hp.seed)
    alone = [fit_deltas(tiny, 0, [fact], templates, hp, site="resid_post") for fact in facts]
    for pass_tokens in (None, 7):  # 7: a width group runs in several passes
        together = fit_deltas(tiny, 0, facts, templates, hp, site="resid_post", pass_tokens=pass_tokens)
        assert together.steps == tuple(a.steps[0] for a in alone)
        assert len(set(together.steps)) > 1  # facts stop on their own, at different steps
        for i, a in enumerate(alone):
            assert torch.allclose(together.delta[i], a.delta[0], rtol=1e-4, atol=1e-5 * a.delta.norm())
            assert torch.allclose(together.nll[i], a.nll[0], rtol=1e-4)
        assert together.padded_tokens == 0


@pytest.mark.parametrize("model", ["toy-2l", "toy-gpt2-2l"])
@pytest.mark.parametrize("layer", [0, 1])
def test_reusing_the_prefix_fits_the_same_deltas(model: str, layer: int) -> None:
    """Only positions from the subject's last token on are recomputed, converged requests drop
    out of the batch: the δ and the steps are those of the full recomputation."""
    lm = load_model(model, device="cpu")
    easy = EditRequest("{} is located in the city of", "The Eiffel Tower", " the", " Paris")
    hard = EditRequest("{} is a city in the country of", "Berlin", " Czechoslovakia Republic", " Germany")
    hp = MEMITConfig(n_contexts=3, steps=8, early_stop_nll=10.2, clamp_norm=10.0, weight_decay=0.1)
    templates = context_templates(lm, hp.n_contexts, (3, 6), seed=hp.seed)
    full = fit_deltas(lm, layer, [easy, hard], templates, hp, site="resid_post", reuse_prefix=False)
    reused = fit_deltas(lm, layer, [easy, hard], templates, hp, site="resid_post")
    assert reused.steps == full.steps
    assert torch.allclose(reused.delta, full.delta, rtol=1e-4, atol=1e-4)
    assert torch.allclose(reused.nll, full.nll, rtol=1e-4, atol=1e-4)


def test_shipped_facts_have_the_counterfact_shape() -> None:
    facts = load_facts()
    assert len(facts) >= 50
    for fact in facts:
        assert fact.rewrite_prompt.startswith(fact.subject) or fact.subject in fact.rewrite_prompt
        assert len(fact.paraphrase_prompts) >= 2 and len(fact.neighborhood_prompts) >= 2
        assert fact.target_new != fact.target_true
        assert all(fact.subject not in p for p in fact.neighborhood_prompts)
        assert fact.p_true is not None and fact.p_true >= 0.1
    assert len({f.subject for f in facts}) == len(facts)


def test_candidate_neighbours_share_the_answer() -> None:
    for record in candidate_facts():
        assert record["subject"] not in " ".join(record["neighborhood_prompts"])
        assert record["target_new"] != record["target_true"]
    json.dumps(candidate_facts())  # plain data


def test_context_templates_are_cached_per_model() -> None:
    """The cache used to be a global keyed by id(model), which a new model at a recycled address
    inherits. It is a weak mapping keyed by the model object now."""
    from lmsci_mi.editing import fit

    lm = load_model("toy-2l", device="cpu")
    first = context_templates(lm, 2, seed=0)
    assert context_templates(lm, 2, seed=0) is first  # cached
    assert isinstance(fit._TEMPLATES, weakref.WeakKeyDictionary) and lm.model in fit._TEMPLATES
    other = load_model("toy-gpt2-2l", device="cpu")
    assert other.model not in fit._TEMPLATES
    context_templates(other, 2, seed=0)
    assert fit._TEMPLATES[other.model] is not fit._TEMPLATES[lm.model]


def test_editing_methods_register_once_with_their_configs() -> None:
    from lmsci_mi.editing import EDITING_METHODS
    from lmsci_mi.editing.methods import method_for

    assert EDITING_METHODS.names() == ("alphaedit", "memit", "rome")
    assert EDITING_METHODS.get("rome").config_type is ROMEConfig
    assert method_for(MEMITConfig())[0].name == "memit"
    assert method_for(AlphaEditConfig())[0].name == "alphaedit"
    with pytest.raises(ValueError, match="already registered"):
        EDITING_METHODS.register("rome", ROMEConfig)(lambda *a, **k: None)
    with pytest.raises(ValueError, match=r"ROMEConfig\.steps must be >= 1, not 0"):
        ROMEConfig(steps=0)


MESSY = EditRequest(
    "{} is located in the city of",
    "The Eiffel Tower",
    " Rome",
    " Paris",
    paraphrase_prompts=("The Eiffel Tower stands in the city of",),
    neighborhood_prompts=("The Louvre is located in the city of",),
    negated_prompt="The Eiffel Tower is not located in the city of",
    reverse_prompt="Rome is the city of",
    reverse_target_new=" The Eiffel Tower",
    reverse_target_true=" the Colosseum",
    two_hop_prompt="The Eiffel Tower is located in the country of",
    two_hop_target_new=" Italy",
    two_hop_target_true=" France",
    other_relation_prompts=("The Eiffel Tower was designed by", "The Eiffel Tower is made of"),
    other_relation_targets=(" Gustave", " iron"),
)


def test_messy_knowledge_columns_score_what_the_model_says(tiny: LensModel, stats) -> None:
    ev = evaluate_edits(tiny, [MESSY], FAST_ROME, stats=stats,
                        evaluation=EvaluationConfig(generation_tokens=0), use_cache=False)
    for row in (0, 1):
        with rome_edit(tiny, MESSY, FAST_ROME, stats=stats) if row else contextlib.nullcontext():
            for column, prompt, win, lose in (
                ("NEG", MESSY.negated_prompt, MESSY.target_new, MESSY.target_true),
                ("REV", MESSY.reverse_prompt, MESSY.reverse_target_new, MESSY.reverse_target_true),
                ("2HOP", MESSY.two_hop_prompt, MESSY.two_hop_target_new, MESSY.two_hop_target_true),
            ):
                nll = target_nll(tiny, [prompt, prompt], [win, lose])
                assert ev.per_fact[row, 0, PER_FACT.index(column)] == float(nll[0] < nll[1])
            top = next_token_top1(tiny, list(MESSY.other_relation_prompts))
            gold = torch.tensor([tiny.continuation_ids(t)[0] for t in MESSY.other_relation_targets])
            assert ev.per_fact[row, 0, PER_FACT.index("ORL")] == (top != gold).float().mean()
    assert torch.isnan(ev.per_fact[:, 0, PER_FACT.index("GE")]).all()  # GE skipped


def test_a_fact_without_messy_prompts_leaves_those_columns_nan(tiny: LensModel, stats) -> None:
    ev = evaluate_edits(tiny, [EIFFEL], FAST_ROME, stats=stats,
                        evaluation=EvaluationConfig(generation_tokens=0), use_cache=False)
    for name in ("NEG", "REV", "2HOP", "ORL"):
        assert math.isnan(ev.metric(name)) and math.isnan(ev.metric(name, edited=False))
    assert not math.isnan(ev.metric("S"))


def test_the_unedited_baseline_is_cached_per_fact(tiny: LensModel, stats, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path))
    config = EvaluationConfig(generation_tokens=4)
    first = evaluate_edits(tiny, [EIFFEL, dataclasses.replace(MESSY, subject="The Louvre")], FAST_ROME,
                           stats=stats, evaluation=config)
    entries = list(tmp_path.rglob("*.pt"))
    assert len(entries) == 2 and not list(tmp_path.rglob("*.partial"))
    # A fact alone, later, reads its baseline from the cache: GE draws the same tokens.
    again = evaluate_edits(tiny, [EIFFEL], FAST_ROME, stats=stats, evaluation=config)
    assert torch.equal(again.per_fact[0, 0].nan_to_num(), first.per_fact[0, 0].nan_to_num())
    assert len(list(tmp_path.rglob("*.pt"))) == 2
    fresh = evaluate_edits(tiny, [EIFFEL], FAST_ROME, stats=stats, evaluation=config, use_cache=False)
    assert torch.allclose(fresh.per_fact[0, 0], first.per_fact[0, 0], equal_nan=True)


def test_bootstrap_interval_brackets_the_metric(tiny: LensModel, stats) -> None:
    ev = evaluate_edits(tiny, [EIFFEL, MESSY], FAST_ROME, stats=stats,
                        evaluation=EvaluationConfig(generation_tokens=0), use_cache=False)
    for name in ("S", "ES", "NS"):
        low, high = ev.interval(name, samples=200)
        assert low <= ev.metric(name) + 1e-9 and ev.metric(name) <= high + 1e-9
    with pytest.raises(ValueError, match="unknown metric"):
        ev.interval("XS")
    # A paired difference with itself is exactly 0; with other scores it is the metrics' gap.
    same = ev.difference(ev, "S", samples=100)
    assert (same.estimate, same.low, same.high, same.n) == (0.0, 0.0, 0.0, 2)
    other = dataclasses.replace(ev, per_fact=ev.per_fact.flip(0), values=ev.values.flip(0))  # edited <-> unedited
    gap = ev.difference(other, "ES", samples=200)
    assert gap.estimate == pytest.approx(ev.metric("ES") - other.metric("ES"))
    assert gap.low - 1e-9 <= gap.estimate <= gap.high + 1e-9
    with pytest.raises(ValueError, match="same facts in the same order"):
        ev.difference(dataclasses.replace(ev, subjects=(*ev.subjects[:-1], "Nobody")), "S")


@pytest.mark.parametrize("method", ["rome", "memit", "alphaedit"])
def test_statistics_of_another_model_are_refused_before_any_edit(tiny: LensModel, method, tmp_path) -> None:
    other = load_model("toy-gpt2-2l", device="cpu")
    foreign = key_statistics(other, [0, 1], StatsConfig(n_tokens=256), cache_dir=tmp_path)
    config = {"rome": FAST_ROME, "memit": FAST_MEMIT,
              "alphaedit": AlphaEditConfig(layers=(0, 1), n_contexts=2, steps=2)}[method]
    before = snapshot(tiny)
    with pytest.raises(ValueError, match="statistics were computed on toy-gpt2-2l"):
        evaluate_edits(tiny, [EIFFEL], config, stats=foreign, evaluation=EvaluationConfig(generation_tokens=0))
    assert_identical(tiny, before)


def test_cached_fits_give_the_same_edit_and_are_fitted_once(
    tiny: LensModel, stats, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lmsci_mi.editing import memit

    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path))
    with memit_edit(tiny, [EIFFEL], FAST_MEMIT, stats=stats) as plain:
        expected = {k: v.clone() for k, v in plain.deltas.items()}
    with memit_edit(tiny, [EIFFEL], FAST_MEMIT.replace(cache_fits=True), stats=stats) as first:
        assert all(torch.allclose(first.deltas[k], v, atol=1e-6) for k, v in expected.items())

    def no_fit(*args, **kwargs):
        raise AssertionError("a cached request was fitted again")

    monkeypatch.setattr(memit, "fit_deltas", no_fit)
    with memit_edit(tiny, [EIFFEL], FAST_MEMIT.replace(cache_fits=True), stats=stats) as again:
        assert all(torch.equal(again.deltas[k], first.deltas[k]) for k in expected)
    assert not list(tmp_path.rglob("*.partial"))


@pytest.mark.parametrize(
    ("module", "old", "new"),
    [
        ("lmsci_mi.editing", "ROMEHyperParams", "ROMEConfig"),
        ("lmsci_mi.editing", "MEMITHyperParams", "MEMITConfig"),
        ("lmsci_mi.editing", "AlphaEditHyperParams", "AlphaEditConfig"),
        ("lmsci_mi.editing.rome", "ROMEHyperParams", "ROMEConfig"),
        ("lmsci_mi.editing.memit", "MEMITHyperParams", "MEMITConfig"),
        ("lmsci_mi.editing.alphaedit", "AlphaEditHyperParams", "AlphaEditConfig"),
    ],
)
def test_the_hyperparams_names_are_deprecated_aliases(module: str, old: str, new: str) -> None:
    import importlib

    home = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=f"{module}.{old} is deprecated: use {new}"):
        exec(f"from {module} import {old} as alias", namespace := {})  # the import users wrote
    assert namespace["alias"] is getattr(home, new)
    assert old not in home.__all__ and new in home.__all__
    with pytest.raises(AttributeError, match="no attribute 'ROMEHyperParam'"):
        home.ROMEHyperParam  # noqa: B018  (a misspelt name is still an error)

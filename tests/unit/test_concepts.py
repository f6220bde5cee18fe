"""Concept directions under the causal inner product (Park et al. 2024) on toy models: the inner
product against a hand computation, whitening, a planted concept recovered, the three checks, the
shipped pairs and the bad inputs (clear errors, no hook left behind)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.data.concepts import load_concept_pairs
from lmsci_mi.representations import (
    CausalInnerProductConfig,
    ConceptConfig,
    ConceptInnerProducts,
    ConceptInterventionConfig,
    causal_inner_product,
    concept_direction,
    concept_inner_products,
    concept_intervention,
    concept_projections,
    single_token_pairs,
    unembedding_site,
    unembedding_vectors,
)
from lmsci_mi.results import Result

# ---------------------------------------------------------------------- the inner product


def _hand_gamma(lm: LensModel) -> np.ndarray:
    """γ rows written out directly: W_U's columns times the final norm's weight, over the
    tokenizer's tokens without its special tokens (SmolLM2's chat and metadata markers included)."""
    w_u = lm.model.W_U.detach().double().cpu().numpy()
    weight = lm.model.ln_final.w.detach().double().cpu().numpy()
    added = lm.tokenizer.added_tokens_decoder
    special = set(lm.tokenizer.all_special_ids) | {i for i, t in added.items() if t.special}
    ids = [i for i in range(len(lm.tokenizer)) if i not in special]
    return (w_u[:, ids] * weight[:, None]).T


def test_causal_inner_product_equals_a_hand_computation(tiny: LensModel) -> None:
    with torch.no_grad():  # a final norm weight that is not all ones, so leaving it out would show
        tiny.model.ln_final.w.copy_(1 + 0.5 * torch.randn_like(tiny.model.ln_final.w))
    gamma = _hand_gamma(tiny)
    covariance = np.cov(gamma, rowvar=False, bias=True)
    metric = np.linalg.inv(covariance)
    x, y = np.random.default_rng(0).normal(size=(2, 5, tiny.cfg.d_model))
    expected = np.einsum("nd,de,ne->n", x, metric, y)

    ip = causal_inner_product(tiny)
    got = ip.inner(torch.tensor(x), torch.tensor(y)).cpu().numpy()
    assert ip.n_tokens == len(gamma)
    np.testing.assert_allclose(ip.covariance.cpu().numpy(), covariance, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(got, expected, rtol=1e-8)
    # λ̄ = Cov(γ)⁻¹ γ̄, and A is the symmetric inverse square root
    np.testing.assert_allclose(ip.embedding_direction(torch.tensor(x)).cpu().numpy(), x @ metric, rtol=1e-8)
    whitening = ip.whitening.cpu().numpy()
    np.testing.assert_allclose(whitening, whitening.T, atol=1e-10)
    np.testing.assert_allclose(whitening @ whitening, metric, rtol=1e-7, atol=1e-6)


def test_whitening_makes_the_unembedding_covariance_the_identity(tiny: LensModel) -> None:
    ip = causal_inner_product(tiny, CausalInnerProductConfig(vocabulary="all"))
    g = ip.whiten(unembedding_vectors(tiny))
    eye = torch.eye(tiny.cfg.d_model, dtype=torch.float64, device=g.device)
    torch.testing.assert_close(g.mean(0), torch.zeros_like(g[0]), atol=1e-10, rtol=0)
    torch.testing.assert_close(g.T @ g / len(g), eye, atol=1e-9, rtol=0)
    # A ridge shrinks every whitened variance below 1: it is a regulariser, not a no-op.
    ridged = causal_inner_product(tiny, CausalInnerProductConfig(vocabulary="all", ridge=0.1))
    g = ridged.whiten(unembedding_vectors(tiny))
    assert float(torch.linalg.eigvalsh(g.T @ g / len(g)).max()) < 0.95


def test_unembedding_vectors_give_the_logits_at_the_unembedding_site(tiny: LensModel) -> None:
    with torch.no_grad():
        tiny.model.ln_final.w.copy_(1 + 0.5 * torch.randn_like(tiny.model.ln_final.w))
    tokens = tiny.to_tokens("The cat sat on the mat")
    site = unembedding_site(tiny)
    with tiny.hooks.capture(site) as cap:
        logits = tiny(tokens)
    assert site == "ln_final.hook_normalized"
    rebuilt = cap[site][0].double() @ unembedding_vectors(tiny).T + tiny.model.b_U.double()
    torch.testing.assert_close(rebuilt, logits[0].double(), atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------------- a planted concept


def _single_token_words(lm: LensModel, n: int) -> list[str]:
    """``n`` distinct words that round-trip to one token each (so the API takes them)."""
    words, seen = [], set()
    for token in torch.randperm(30_000, generator=torch.Generator().manual_seed(1)).tolist():
        word = lm.tokenizer.decode([token + 1000])
        ids = lm.tokenizer(word, add_special_tokens=False)["input_ids"]
        if len(ids) == 1 and ids[0] not in seen and word.strip():
            seen.add(ids[0])
            words.append(word)
        if len(words) == n:
            return words
    raise AssertionError("not enough single-token words")


def _plant(lm: LensModel, n_pairs: int = 32) -> tuple[dict[str, list[tuple[str, str]]], dict[str, torch.Tensor]]:
    """Make W_U anisotropic (per-dimension s.d. from 0.1 to 10) and plant two concepts whose
    pairs differ by 60·u plus noise (whitened: a shift of about 8.5, against about √2 for the
    s.d. of a random pair's projection). u₁ and u₂ are orthogonal under Cov(γ)⁻¹ but nearly parallel
    in Euclidean terms: both lean on the high-variance dimension, which the causal inner product
    discounts."""
    d = lm.cfg.d_model
    words = _single_token_words(lm, 4 * n_pairs)
    ids = [lm.token_id(w) for w in words]
    scales = torch.logspace(-1, 1, d, device=lm.device)  # dimension 0: s.d. 0.1, d-1: s.d. 10
    directions = {"first": torch.zeros(d, device=lm.device), "second": torch.zeros(d, device=lm.device)}
    directions["first"][[d - 1, 0]] = torch.tensor([1.0, 0.01], device=lm.device)  # u1ᵀ M u2 ∝ 1/100 + (0.01)(-0.01)/0.01 = 0
    directions["second"][[d - 1, 0]] = torch.tensor([1.0, -0.01], device=lm.device)
    concepts = {}
    with torch.no_grad():
        w_u = lm.model.W_U
        lm.model.ln_final.w.fill_(1.0)
        w_u.mul_(scales[:, None] / w_u.std())
        for k, (name, u) in enumerate(directions.items()):
            chunk = ids[2 * k * n_pairs : 2 * (k + 1) * n_pairs]
            base, target = chunk[:n_pairs], chunk[n_pairs:]
            noise = 0.05 * scales[:, None] * torch.randn(d, n_pairs, device=lm.device)  # isotropic once whitened
            w_u[:, target] = w_u[:, base] + 60 * u[:, None] + noise
            concepts[name] = [(lm.tokenizer.decode([b]), lm.tokenizer.decode([t]))
                              for b, t in zip(base, target, strict=True)]
    return concepts, directions


def test_a_planted_direction_is_recovered(tiny: LensModel) -> None:
    concepts, directions = _plant(tiny)
    ip = causal_inner_product(tiny)
    for name, pairs in concepts.items():
        found = concept_direction(tiny, pairs, name=name, inner_product=ip)
        planted = (directions[name].double() @ ip.whitening).cpu()  # A u, the whitened difference
        cosine = float(found.values @ planted / planted.norm())
        assert cosine > 0.98, (name, cosine)
        assert float(ip.inner(found.unembedding, found.unembedding)) == pytest.approx(1.0)
        assert len(found.pairs) == len(pairs) and not found.dropped


def test_the_causal_inner_product_separates_what_the_euclidean_one_confuses(tiny: LensModel) -> None:
    concepts, _ = _plant(tiny)
    result = concept_inner_products(tiny, concepts)
    assert abs(float(result.causal()[0, 1])) < 0.1
    assert float(result.euclidean()[0, 1]) > 0.9
    assert result.n_pairs.tolist() == [32, 32]


def test_heldout_pairs_project_far_above_random_pairs(tiny: LensModel) -> None:
    concepts, _ = _plant(tiny)
    result = concept_projections(tiny, concepts, ConceptConfig(n_random_pairs=500))
    assert result.n_heldout.tolist() == [8, 8] and result.n_fit.tolist() == [24, 24]
    assert (result.statistic("above_random_p95") == 1.0).all()
    assert (result.statistic("effect_size") > 4).all()
    # whitened vectors have identity covariance: a random pair's projection has s.d. about √2
    assert result.statistic("random_sd").sub(2**0.5).abs().max() < 0.2
    assert result.random.shape == (2, 500) and len(result.heldout_pairs) == 16


def test_the_intervention_moves_its_own_concept_and_matches_the_closed_form(tiny: LensModel) -> None:
    concepts, _ = _plant(tiny)
    ip = causal_inner_product(tiny)
    result = concept_intervention(tiny, concepts, inner_product=ip)
    own, other = result.target_effect(), result.values.flip(1).diagonal()
    assert (own > 0).all() and (other.abs() < 0.05 * own).all(), result.values
    # At the final norm's output the change is exactly scale · λ̂ᵀ(γ(y₁) − γ(y₀)), λ̂ = λ̄/|λ̄|,
    # λ̄ fitted on the pairs that are not held out.
    for i, pairs in enumerate(concepts.values()):
        held = [j for j, c in enumerate(result.pair_concept.tolist()) if c == i]
        held_labels = {result.pair_labels[j] for j in held}
        fit = [p for p in pairs if f"{p[0].strip()}→{p[1].strip()}" not in held_labels]
        embedding = concept_direction(tiny, fit, inner_product=ip).embedding
        unit = embedding / embedding.norm()
        tokens = single_token_pairs(tiny, [p for p in pairs if p not in fit])
        gap = unembedding_vectors(tiny, tokens.target_ids) - unembedding_vectors(tiny, tokens.base_ids)
        expected = result.scale * gap.cpu() @ unit
        torch.testing.assert_close(result.per_pair[i, held], expected, rtol=2e-3, atol=1e-3)


def test_the_intervention_at_an_earlier_layer_goes_through_the_blocks(tiny: LensModel) -> None:
    concepts = load_concept_pairs(["male_female", "verb_past"])
    small = concept_intervention(tiny, concepts, ConceptInterventionConfig(layer=0, strength=0.1))
    large = concept_intervention(tiny, concepts, ConceptInterventionConfig(layer=0, strength=0.2))
    assert small.site == "blocks.0.hook_resid_post"
    # the later blocks are not linear: doubling the vector does not double the change
    assert not torch.allclose(2 * small.values, large.values, rtol=1e-3)
    final = concept_intervention(tiny, concepts, ConceptInterventionConfig(strength=0.1))
    doubled = concept_intervention(tiny, concepts, ConceptInterventionConfig(strength=0.2))
    torch.testing.assert_close(2 * final.values, doubled.values, rtol=1e-3, atol=1e-5)


# ---------------------------------------------------------------------- results


def test_results_round_trip_and_plot(tiny: LensModel, tmp_path) -> None:
    concepts = load_concept_pairs(["male_female", "verb_past", "lower_upper"])
    ip = causal_inner_product(tiny)
    results: list[Result] = [
        concept_inner_products(tiny, concepts, inner_product=ip),
        concept_projections(tiny, concepts, inner_product=ip),
        concept_intervention(tiny, concepts, inner_product=ip),
        concept_direction(tiny, concepts["male_female"], inner_product=ip, drop=True),
    ]
    for result in results:
        path = result.save(tmp_path / f"{type(result).__name__}.json")
        assert Result.load(path) == result
        assert result.meta.data_source.startswith("written for lmsci-mi")
        assert result.summary()
        result.plot(tmp_path / f"{type(result).__name__}.png")
    inner = results[0]
    assert isinstance(inner, ConceptInnerProducts)
    assert len([ax for ax in inner.plot().axes if ax.get_title().endswith("cosine")]) == 2
    assert results[3].concept == "male_female"


# ---------------------------------------------------------------------- the shipped pairs


def test_the_shipped_pairs_are_clean_and_mostly_single_tokens_in_smollm2(tiny: LensModel) -> None:
    concepts = load_concept_pairs()
    assert len(concepts) >= 12
    usable = {}
    for name, concept in concepts.items():
        assert 20 <= len(concept) <= 60, name
        assert len(set(concept.pairs)) == len(concept.pairs), name
        for base, target in concept:
            assert base.startswith(" ") and target.startswith(" ") and base != target, (name, base)
        usable[name] = len(single_token_pairs(tiny, concept, drop=True))  # SmolLM2's tokenizer
    assert sum(n >= 12 for n in usable.values()) >= 10, usable
    with pytest.raises(ValueError, match="unknown concept"):
        load_concept_pairs(["male_femal"])


# ---------------------------------------------------------------------- bad inputs


def test_a_word_of_several_tokens_is_named_with_the_fixes(tiny: LensModel) -> None:
    pairs = [(" king", " queen"), (" house", " maison")]
    with pytest.raises(ValueError, match=r"' maison' is 2 tokens.*drop=True.*first_token=True"):
        single_token_pairs(tiny, pairs)
    with pytest.raises(ValueError, match="' maison' is 2 tokens"):
        concept_direction(tiny, pairs)
    first = single_token_pairs(tiny, pairs, first_token=True)
    assert first.target_ids.tolist() == [tiny.token_id(" queen"), tiny.token_id(" ma")]
    assert single_token_pairs(tiny, [(" Mr", " Mr"), (" king", " queen")], drop=True).dropped[0][2] \
        == "both words are the token ' Mr'"
    with pytest.raises(ValueError, match="empty word"):
        single_token_pairs(tiny, [(" king", " ")])


def test_too_few_pairs_raise(tiny: LensModel) -> None:
    with pytest.raises(ValueError, match=r"1 usable pair.*at least 2"):
        concept_direction(tiny, [(" king", " queen")])
    few = {"tiny_concept": [(" king", " queen"), (" man", " woman"), (" he", " she")]}
    with pytest.raises(ValueError, match=r"fewer than min_pairs=4.*'tiny_concept': 3"):
        concept_projections(tiny, few)
    assert concept_projections(tiny, few, ConceptConfig(min_pairs=3)).n_fit.tolist() == [2]


def test_a_vector_of_the_wrong_width_raises(tiny: LensModel) -> None:
    ip = causal_inner_product(tiny)
    with pytest.raises(ValueError, match=r"width 10.*d_model = 64"):
        ip.inner(torch.zeros(10), torch.zeros(10))
    with pytest.raises(ValueError, match="width 63"):
        ip.embedding_direction(torch.zeros(63))


def test_bad_settings_raise_and_attach_nothing(tiny: LensModel) -> None:
    concepts = load_concept_pairs(["male_female", "verb_past"])
    with pytest.raises(ValueError, match=r"layer 2 is out of range.*0\.\.1"):
        concept_intervention(tiny, concepts, ConceptInterventionConfig(layer=2))
    assert tiny.hooks.attached_count() == 0
    with pytest.raises(ValueError, match="heldout_fraction"):
        ConceptConfig(heldout_fraction=1.0)
    with pytest.raises(ValueError, match="strength"):
        ConceptInterventionConfig(strength=0.0)


def test_an_error_inside_the_intervention_leaves_no_hook(tiny: LensModel, monkeypatch) -> None:
    concepts = load_concept_pairs(["male_female", "verb_past"])
    forward = tiny.model.unembed.forward
    calls = []

    def failing(x: torch.Tensor) -> torch.Tensor:
        calls.append(len(tiny.hooks.active()))
        if len(calls) == 2:  # the first steered pass: the added vector's hook is on
            raise RuntimeError("boom")
        return forward(x)

    monkeypatch.setattr(tiny.model.unembed, "forward", failing)
    with pytest.raises(RuntimeError, match="boom"):
        concept_intervention(tiny, concepts)
    assert calls == [1, 2]  # capture only, then capture and the vector
    assert tiny.hooks.attached_count() == 0 and not tiny.hooks.active()


def test_cli_concepts_runs_each_check_and_refuses_bad_input(tmp_path, capsys) -> None:
    from lmsci_mi.cli import main
    from lmsci_mi.representations.concepts import ConceptProjections

    base = ["concepts", "projections", "--model", "toy-2l", "--concepts", "male_female,verb_past"]
    out = tmp_path / "p.json"
    assert main([*base, "--out", str(out)]) == 0
    assert ConceptProjections.load(out).meta.model == "toy-2l"
    assert main(["concepts", "inner", "--model", "toy-2l", "--concepts", "male_female,verb_past"]) == 0
    pairs = tmp_path / "pairs.json"
    pairs.write_text(json.dumps({"gender": [[" king", " queen"], [" man", " woman"], [" he", " she"],
                                            [" boy", " girl"], [" father", " mother"]]}))
    assert main(["concepts", "intervention", "--model", "toy-2l", "--pairs", str(pairs),
                 "--heldout-fraction", "0.4"]) == 0
    capsys.readouterr()
    # Bad input: exit 2 before the model loads, one line naming the fix.
    assert main(["concepts", "inner", "--model", "toy-2l", "--concepts", "no_such_concept"]) == 2
    assert main(["concepts", "inner", "--model", "toy-2l", "--pairs", str(tmp_path / "missing.json")]) == 2
    (tmp_path / "bad.json").write_text(json.dumps({"x": [[" a"]]}))
    assert main(["concepts", "inner", "--model", "toy-2l", "--pairs", str(tmp_path / "bad.json")]) == 2
    assert main([*base, "--pairs", str(pairs)]) == 2
    assert main(["concepts", "intervention", "--model", "toy-2l", "--layer", "9"]) == 2


@pytest.mark.slow  # a tour step (4 s), like the other tours
def test_the_tour_step_saves_its_results_and_steers_the_continuations(tmp_path, capsys) -> None:
    from lmsci_mi.cli import main
    from lmsci_mi.representations.concepts import ConceptInnerProducts
    from lmsci_mi.steering.vectors import SteeringVector

    argv = ["tour", "--steps", "concepts", "--model", "toy-2l", "--device", "cpu", "--out-dir", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "16 concepts" in out and "sentiment vector at layer 0" in out
    assert ConceptInnerProducts.load(tmp_path / "concept_inner_products.json").values.shape == (2, 16, 16)
    assert SteeringVector.load(tmp_path / "mean_difference_vector.json").hook == "blocks.0.hook_resid_post"
    page = (tmp_path / "report.html").read_text()
    assert "+4 × vector" in page and "+0 × vector" in page


def test_the_split_keeps_every_old_import_path_and_old_result_files_load(tiny, tmp_path) -> None:
    import lmsci_mi.representations as package
    from lmsci_mi.representations import concepts, intervention, projections
    from lmsci_mi.representations.concepts import ConceptInterventionConfig as old_config

    old_names = [
        "CausalInnerProduct", "CausalInnerProductConfig", "ConceptConfig", "ConceptDirection",
        "ConceptInnerProducts", "ConceptIntervention", "ConceptInterventionConfig",
        "ConceptProjections", "TokenPairs", "causal_inner_product", "concept_direction",
        "concept_inner_products", "concept_intervention", "concept_projections",
        "single_token_pairs", "unembedding_site", "unembedding_vectors",
    ]
    for name in old_names:
        assert getattr(concepts, name) is getattr(package, name), name
    assert old_config is intervention.ConceptInterventionConfig
    assert concepts.PROJECTION_STATISTICS is projections.PROJECTION_STATISTICS
    assert concepts.DEFAULT_INTERVENTION_PROMPTS is intervention.DEFAULT_INTERVENTION_PROMPTS
    with pytest.raises(AttributeError, match="no_such_name"):
        concepts.no_such_name  # noqa: B018
    # A result saved before the split names its kind by the old module, and still loads.
    result = package.concept_inner_products(tiny, load_concept_pairs(["male_female", "verb_past"]))
    path = tmp_path / "inner.json"
    result.save(path)
    kind = "lmsci_mi.representations.orthogonality:ConceptInnerProducts"
    text = path.read_text()
    assert kind in text
    path.write_text(text.replace(kind, "lmsci_mi.representations.concepts:ConceptInnerProducts"))
    assert torch.equal(Result.load(path).values, result.values)

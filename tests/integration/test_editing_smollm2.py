"""ROME and MEMIT on the bundled SmolLM2: an edit flips the Eiffel Tower to Rome and restores
exactly; a small MEMIT batch installs its facts. Statistics come from the on-disk cache (or are
computed once with the default token budget)."""

from __future__ import annotations

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.editing import (
    EditRequest,
    MEMITHyperParams,
    ROMEHyperParams,
    default_memit_layers,
    default_rome_layer,
    key_statistics,
    load_facts,
    memit_edit,
    rome_edit,
    target_nll,
)

pytestmark = pytest.mark.slow

EIFFEL = EditRequest(
    "{} is located in the city of",
    "The Eiffel Tower",
    " Rome",
    " Paris",
    ("The Eiffel Tower can be found in the city of",),
    ("The Louvre is located in the city of",),
)


def p_new_true(lm: LensModel, prompt: str) -> tuple[float, float]:
    nll = target_nll(lm, [prompt, prompt], [" Rome", " Paris"])
    return float((-nll[0]).exp()), float((-nll[1]).exp())


def test_rome_flips_eiffel_to_rome_and_restores(clean_smollm2: LensModel) -> None:
    lm = clean_smollm2
    layer = default_rome_layer(lm)
    stats = key_statistics(lm, layer)
    before = {k: v.clone() for k, v in lm.model.state_dict().items()}
    p_rome, p_paris = p_new_true(lm, EIFFEL.rewrite_prompt)
    assert p_paris > 0.5 > p_rome  # the model knows the fact before the edit
    with rome_edit(lm, EIFFEL, ROMEHyperParams(layer=layer), stats=stats) as handle:
        assert handle.layers == (layer,)
        p_rome, p_paris = p_new_true(lm, EIFFEL.rewrite_prompt)
        assert p_rome > 0.5 > p_paris
        para_rome, para_paris = p_new_true(lm, EIFFEL.paraphrase_prompts[0])
        assert para_rome > para_paris
        # Specificity: the Louvre stays in Paris.
        louvre_rome, louvre_paris = p_new_true(lm, EIFFEL.neighborhood_prompts[0])
        assert louvre_paris > louvre_rome
        assert "Rome" in lm.generate(EIFFEL.rewrite_prompt, 5)
    after = lm.model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in before.items())


def test_rome_bad_layer_changes_nothing(clean_smollm2: LensModel) -> None:
    lm = clean_smollm2
    before = {k: v.clone() for k, v in lm.model.state_dict().items()}
    with pytest.raises(ValueError, match="out of range"):
        rome_edit(lm, EIFFEL, ROMEHyperParams(layer=lm.cfg.n_layers))
    with pytest.raises(ValueError, match="not in the prompt"):
        rome_edit(
            lm, EditRequest("Big Ben is in the city of", "The Eiffel Tower", " Rome"),
            ROMEHyperParams(layer=4),
        )
    after = lm.model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in before.items())


def test_memit_small_batch(clean_smollm2: LensModel) -> None:
    lm = clean_smollm2
    layers = default_memit_layers(lm)
    stats = key_statistics(lm, layers)
    facts = load_facts()[::20][:4]
    before = {k: v.clone() for k, v in lm.model.state_dict().items()}
    prompts = [f.rewrite_prompt for f in facts]
    with memit_edit(lm, facts, MEMITHyperParams(layers=layers, steps=15), stats=stats) as handle:
        assert handle.layers == tuple(layers)
        nll_new = target_nll(lm, prompts, [f.target_new for f in facts])
        nll_true = target_nll(lm, prompts, [f.target_true for f in facts])
        assert int((nll_new < nll_true).sum()) >= 3
    after = lm.model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in before.items())

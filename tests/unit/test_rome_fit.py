"""ROME's δ fit on the toy: the paper's loop (kmeng01/rome ``compute_v``) and the grouped layout.

The grouped layout runs each row over exactly the positions the loss needs; it must give the δ
of the padded layout of before issue 38, for both fits, and the paper's fit (prefix reused) must
give the δ of a plain reimplementation of compute_v's loop that recomputes every position.
"""

from __future__ import annotations

import pytest
import torch

from lmsci_mi import LensModel, load_model
from lmsci_mi.editing import EditRequest, ROMEConfig, context_templates, fit_deltas
from lmsci_mi.editing.fit import subject_row
from lmsci_mi.sites import hook_name

EIFFEL = EditRequest("{} is located in the city of", "The Eiffel Tower", " Rome", " Paris")
# On the random toy the total loss starts near 11: 6 passes without an early stop, or a stop
# after a few steps at 10.5 (checked below: the steps differ).
PAPER = ROMEConfig(layer=0, n_contexts=3, context_lengths=(3, 6), steps=6)


@pytest.fixture(scope="module")
def toy() -> LensModel:
    return load_model("toy-2l", device="cpu")


def _templates(lm: LensModel, hp: ROMEConfig) -> tuple[str, ...]:
    return context_templates(lm, hp.n_contexts, hp.context_lengths, seed=hp.seed)


def compute_v_loop(lm: LensModel, layer: int, request: EditRequest, templates, hp: ROMEConfig):
    """compute_v's loop as its code reads, on every position of the right-padded batch: δ added
    to the MLP output at each row's subject-last token; NLL + KL + ‖δ‖/‖v₀‖² with v₀ the first
    row's output; stop when the loss is below 5e-2; the last pass only checks; clamp after."""
    target = lm.continuation_ids(request.target_new)
    rows = [subject_row(lm, t, request.prompt, request.subject, target) for t in templates]
    rows.append(subject_row(lm, "{}", "{} is a", request.subject))
    tokens = lm.pad_batch([r.ids for r in rows]).tokens
    lookup = torch.tensor([r.subject_last for r in rows])
    delta = torch.zeros(lm.cfg.d_model, requires_grad=True)
    init: dict[str, torch.Tensor] = {}

    def add_delta(act: torch.Tensor, hook) -> torch.Tensor:
        init.setdefault("v0", act[0, lookup[0]].detach().clone())
        add = torch.zeros_like(act)
        add[torch.arange(len(rows)), lookup] = delta
        return act + add

    optimiser = torch.optim.Adam([delta], lr=hp.lr)
    kl_init, updates = None, 0
    for p in lm.model.parameters():
        p.requires_grad_(False)
    try:
        for it in range(hp.steps):
            optimiser.zero_grad()
            with lm.hooks.hooks(fwd=[(hook_name("mlp_out", layer), add_delta)]):
                logits = lm.model(tokens)
            kl_now = logits[-1, lookup[-1]].log_softmax(-1)
            kl_init = kl_now.detach() if kl_init is None else kl_init
            log_probs = logits[:-1].log_softmax(-1)
            nll = torch.stack([
                -sum(log_probs[i, r.target_start + j, t] for j, t in enumerate(target)) / len(target)
                for i, r in enumerate(rows[:-1])
            ]).mean()
            kl = (kl_now.exp() * (kl_now - kl_init)).sum()
            loss = nll + hp.kl_factor * kl + hp.weight_decay * delta.norm() / init["v0"].norm() ** 2
            if loss < hp.early_stop or it == hp.steps - 1:
                break
            loss.backward()
            optimiser.step()
            updates += 1
            max_norm = hp.clamp_norm * init["v0"].norm()
            if delta.norm() > max_norm:
                with torch.no_grad():
                    delta[...] = delta * max_norm / delta.norm()
    finally:
        for p in lm.model.parameters():
            p.requires_grad_(True)
    return delta.detach(), updates


@pytest.mark.parametrize("early_stop", [0.05, 10.5])
def test_the_paper_fit_equals_compute_v_loop(toy: LensModel, early_stop: float) -> None:
    """Prefix reused and rows grouped, the δ and step count are the plain loop's, which
    recomputes every position of every row."""
    hp = PAPER.replace(early_stop=early_stop, clamp_norm=1.5)
    templates = _templates(toy, hp)
    expected, updates = compute_v_loop(toy, 0, EIFFEL, templates, hp)
    fit = fit_deltas(toy, 0, [EIFFEL], templates, hp, site="mlp_out")
    assert fit.steps == (updates,)
    assert (updates < hp.steps - 1) == (early_stop > 1)  # the high threshold stops it early
    assert torch.allclose(fit.delta[0], expected, rtol=1e-4, atol=1e-5)
    assert fit.padded_tokens == 0 and fit.real_tokens > 0


@pytest.mark.parametrize("kind", ["rome", "edit_aware"])
def test_grouped_rows_fit_the_padded_layouts_delta(toy: LensModel, kind: str) -> None:
    """Grouped by width (no padded position) against the padded layout of before issue 38:
    the same δ within relative 1e-4, the same steps; only the padded count differs."""
    hp = PAPER.replace(fit=kind)
    templates = _templates(toy, hp)
    dirs = None
    if kind == "edit_aware":  # any key direction: the layouts must agree for each
        dirs = torch.randn(1, toy.cfg.d_mlp, generator=torch.Generator().manual_seed(0)) / toy.cfg.d_mlp
    requests = [EIFFEL, EditRequest("{} is a city in the country of", "Berlin", " Spain", " Germany")]
    dirs = None if dirs is None else dirs.expand(2, -1)
    grouped = fit_deltas(toy, 0, requests, templates, hp, site="mlp_out", key_dirs=dirs)
    padded = fit_deltas(toy, 0, requests, templates, hp, site="mlp_out", key_dirs=dirs, grouped=False)
    assert grouped.steps == padded.steps
    scale = padded.delta.norm(dim=-1, keepdim=True)
    assert ((grouped.delta - padded.delta).abs() / scale).max() < 1e-4
    assert grouped.padded_tokens == 0 < padded.padded_tokens
    assert grouped.real_tokens == padded.real_tokens


def test_the_old_names_are_deprecated_aliases() -> None:
    with pytest.warns(DeprecationWarning, match="edit_aware -> fit"):
        assert ROMEConfig(edit_aware=True) == ROMEConfig(fit="edit_aware")
    with pytest.warns(DeprecationWarning, match="early_stop_nll -> early_stop"):
        hp = ROMEConfig(early_stop_nll=0.1)
    assert hp.early_stop == 0.1
    with pytest.warns(DeprecationWarning):
        assert ROMEConfig(fit="edit_aware").edit_aware is True

"""Knowledge neurons: integrated gradients against a brute-force Riemann sum, completeness, the
engine's gradient resume keeping every step, the paraphrase refinement, suppress/enhance leaving
the model as it was, bad input, and the CLI subcommand."""

from __future__ import annotations

import argparse

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.cli.knowledge_neurons import add_neurons_command
from lmsci_mi.knowledge.neurons import (
    KnowledgeNeurons,
    KnowledgeNeuronsConfig,
    NeuronAttribution,
    enhance_neurons,
    integrated_gradients,
    knowledge_neurons,
    random_neurons_like,
    scaling_effect,
    suppress_neurons,
    suppression_test,
)
from lmsci_mi.sites import hook_name
from lmsci_mi.sweep import BaseRun, Intervention, Row, run_rows

PROMPT = "The Eiffel Tower is located in"


def _top_token(lm: LensModel, prompt: str) -> str:
    """The tiny model's own top next token: a target with a probability worth attributing."""
    with torch.no_grad():
        logits = lm(lm.to_tokens(prompt))[0, -1]
    return lm.tokenizer.decode([int(logits.argmax())])


def _brute_force(
    lm: LensModel, prompt: str, target_ids: list[int], layer: int, steps: int
) -> torch.Tensor:
    """Dai et al. eq. 2 written out: one full forward and backward per step, no batching, no
    prefix reuse, plain autograd on the replaced activation."""
    prompt_ids = lm.encode(prompt)
    tokens = torch.tensor([prompt_ids + target_ids[:-1]])
    position = len(prompt_ids) - 1
    name = hook_name("mlp_post", layer)
    with torch.no_grad(), lm.hooks.capture([name]) as cap:
        lm(tokens)
    act = cap[name][0, position]
    total = torch.zeros_like(act)
    for k in range(1, steps + 1):
        x = (k / steps * act).clone().requires_grad_(True)

        def put(activation: torch.Tensor, hook: object, x: torch.Tensor = x) -> torch.Tensor:
            out = activation.clone()
            out[0, position] = x
            return out

        with lm.hooks.hooks(fwd=[(name, put)]):
            log_probs = lm(tokens)[0].float().log_softmax(-1)
        if len(target_ids) == 1:
            objective = log_probs[position, target_ids[0]].exp()
        else:
            picked = [log_probs[position + i, t] for i, t in enumerate(target_ids)]
            objective = torch.stack(picked).sum()
        (grad,) = torch.autograd.grad(objective, x)
        total += grad
    return act * total / steps


@pytest.mark.parametrize("two_tokens", [False, True])
def test_scores_equal_a_brute_force_riemann_sum(tiny: LensModel, two_tokens: bool) -> None:
    target = _top_token(tiny, PROMPT) + (" and" if two_tokens else "")
    ids = tiny.continuation_ids(target)
    assert len(ids) == (2 if two_tokens else 1)
    res = integrated_gradients(tiny, PROMPT, target, KnowledgeNeuronsConfig(steps=7))
    assert res.objective == ("log-probability" if two_tokens else "probability")
    for row, layer in enumerate(res.layers):
        expected = _brute_force(tiny, PROMPT, ids, layer, 7)
        torch.testing.assert_close(
            res.values[row], expected.cpu(), rtol=1e-4, atol=1e-4 * float(expected.abs().max())
        )


@pytest.mark.parametrize("two_tokens", [False, True])
def test_completeness_to_the_riemann_error(tiny: LensModel, two_tokens: bool) -> None:
    target = _top_token(tiny, PROMPT) + (" and" if two_tokens else "")
    coarse = integrated_gradients(tiny, PROMPT, target, KnowledgeNeuronsConfig(steps=10))
    fine = integrated_gradients(tiny, PROMPT, target, KnowledgeNeuronsConfig(steps=80))
    change = coarse.value - coarse.baseline_values
    # A random tiny model spreads its probability thin: changes are small but far above float error.
    assert bool((change.abs() > 1e-5 * abs(coarse.value)).all() & (change.abs() > 1e-5).all())
    # The right Riemann sum's error is first order in 1/m: going from 10 to 80 steps divides it
    # by about 8, and at 80 steps it is a few percent of the change. A score at the wrong
    # position or layer, or a missing a/m factor, leaves a gap that does not shrink (the exact
    # rule is pinned by the brute-force test above).
    ratio = coarse.completeness_gap().abs() / fine.completeness_gap().abs()
    assert bool((fine.completeness_gap().abs() < 0.04 * change.abs()).all()), (
        fine.completeness_gap()
    )
    assert bool(((ratio > 5) & (ratio < 12)).all()), ratio


def test_gradient_resume_keeps_every_step(tiny: LensModel) -> None:
    tokens = tiny.to_tokens(PROMPT)
    name = hook_name("mlp_post", 0)
    base = BaseRun.record(tiny, tokens, capture=[name])
    position = tokens.shape[1] - 1
    mask = torch.zeros(1, tokens.shape[1], 1, dtype=torch.bool, device=tiny.device)
    mask[:, position] = True
    act = base.acts[name][0, position]
    leaf = (torch.tensor([0.5, 1.0], device=act.device)[:, None] * act).requires_grad_(True)
    rows = [Row((Intervention(name, leaf[k].reshape(1, 1, -1), mask),)) for k in range(2)]
    readout = lambda logits: logits.float().log_softmax(-1)[..., 0]  # noqa: E731
    # Without gradients the alpha = 1 row equals the base run and is read without a pass.
    assert (
        run_rows(
            tiny, base, [Row((Intervention(name, act.reshape(1, 1, -1), mask),))], readout
        ).stats.rows_skipped
        == 1
    )
    out = run_rows(tiny, base, rows, readout, grad=True)
    assert out.stats.rows_skipped == 0
    assert out.stats.token_layers == 2 * tiny.cfg.n_layers  # one position per row and layer
    torch.testing.assert_close(out.values[1], readout(base.logits[None])[0])
    (grad,) = torch.autograd.grad(out.values.sum(), leaf)
    assert bool((grad[1] != 0).any()), "the step equal to the base run must still give a gradient"


def test_several_answer_positions_equal_a_forward_pass(tiny: LensModel) -> None:
    tokens = tiny.to_tokens(PROMPT)
    base = BaseRun.record(tiny, tokens, answer_positions=torch.tensor([[3, 5]]))
    with torch.no_grad():
        logits = tiny(tokens)[0]
    torch.testing.assert_close(base.logits[0], logits[[3, 5]], rtol=1e-4, atol=1e-4)


def test_refinement_keeps_neurons_shared_by_enough_prompts(tiny: LensModel) -> None:
    prompts = [PROMPT, "The Eiffel Tower stands in", "Where is the Eiffel Tower? It is in"]
    cfg = KnowledgeNeuronsConfig(steps=4, threshold=0.1, share=0.6)
    kn = knowledge_neurons(tiny, prompts, " Paris", cfg)
    assert isinstance(kn, KnowledgeNeurons) and kn.scores.shape[0] == 3
    peaks = kn.scores.flatten(1).max(1).values
    for layer, neuron in kn.neurons:
        passed = kn.scores[:, kn.layers.index(layer), neuron] > 0.1 * peaks
        assert int(passed.sum()) >= 2  # 0.6 of 3 prompts
    strict = knowledge_neurons(tiny, prompts, " Paris", cfg.replace(share=1.0))
    assert set(strict.neurons) <= set(kn.neurons)
    with pytest.raises(ValueError, match="at least 3 prompts"):
        knowledge_neurons(tiny, prompts[:2], " Paris", cfg)


def _fingerprint(lm: LensModel) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in lm.model.named_parameters()}


def test_suppress_and_enhance_scale_only_the_chosen_neurons(tiny: LensModel) -> None:
    tokens = tiny.to_tokens(PROMPT)
    names = [hook_name("mlp_post", 0), hook_name("mlp_post", 1)]
    before = _fingerprint(tiny)
    with torch.no_grad(), tiny.hooks.capture(names) as clean:
        tiny(tokens)
    for manager, factor in ((suppress_neurons, 0.0), (enhance_neurons, 2.0)):
        with torch.no_grad(), manager(tiny, [(1, 5), (1, 9)]), tiny.hooks.capture(names) as cap:
            tiny(tokens)
        expected = clean[names[1]].clone()
        expected[:, -1, [5, 9]] *= factor
        torch.testing.assert_close(cap[names[1]], expected)
        torch.testing.assert_close(cap[names[0]], clean[names[0]])  # below the change
    with (
        torch.no_grad(),
        suppress_neurons(tiny, [(0, 2)], position=None),
        tiny.hooks.capture(names[0]) as cap,
    ):
        tiny(tokens)
    assert bool((cap[names[0]][..., 2] == 0).all())
    with (
        torch.no_grad(),
        enhance_neurons(tiny, [(1, 4)], position=2),
        tiny.hooks.capture(names[1]) as cap,
    ):
        tiny(tokens)
    expected = clean[names[1]].clone()
    expected[:, 2, 4] *= 2
    torch.testing.assert_close(cap[names[1]], expected)
    with pytest.raises(RuntimeError, match="boom"), enhance_neurons(tiny, [(0, 1)]):
        raise RuntimeError("boom")
    assert tiny.hooks.attached_count() == 0
    after = _fingerprint(tiny)
    assert all(torch.equal(before[name], after[name]) for name in before)


def _p_scaled(lm: LensModel, prompt: str, answer: str, neurons: list, factor: float) -> float:
    """p(answer) with the neurons multiplied by ``factor`` at the last position, hooked by hand
    on the full-sequence run (not through scale_neurons)."""
    tokens = lm.to_tokens(prompt)

    def hook_for(layer: int):
        chosen = [n for la, n in neurons if la == layer]

        def scale(activation: torch.Tensor, hook: object) -> torch.Tensor:
            out = activation.clone()
            out[:, -1, chosen] = activation[:, -1, chosen] * factor
            return out

        return scale

    layers = sorted({layer for layer, _ in neurons})
    with torch.no_grad(), lm.hooks.hooks(fwd=[(hook_name("mlp_post", la), hook_for(la)) for la in layers]):
        probs = lm(tokens)[0, -1].float().softmax(-1)
    return float(probs[lm.continuation_ids(answer)[0]])


def test_scaling_effect_is_the_mean_relative_change_of_p_answer(tiny: LensModel) -> None:
    cases = [(PROMPT, " Paris"), ("The capital of Germany is", " Berlin")]
    neurons = [(0, 5), (1, 9), (1, 30)]
    before = _fingerprint(tiny)
    effect = scaling_effect(tiny, neurons, cases)
    for kind, factor in (("suppress", 0.0), ("enhance", 2.0)):
        changes = [(_p_scaled(tiny, p, a, neurons, factor) - _p_scaled(tiny, p, a, neurons, 1.0))
                   / _p_scaled(tiny, p, a, neurons, 1.0) for p, a in cases]
        assert getattr(effect, kind) == pytest.approx(sum(changes) / len(changes), rel=1e-4, abs=1e-7)
    assert effect.n_prompts == 2 and effect.suppress != 0
    assert effect.as_dict() == {"suppress": effect.suppress, "enhance": effect.enhance}
    assert scaling_effect(tiny, [], cases).as_dict() == {"suppress": 0.0, "enhance": 0.0}
    assert tiny.hooks.attached_count() == 0
    after = _fingerprint(tiny)
    assert all(torch.equal(before[name], after[name]) for name in before)


def test_random_control_neurons_share_the_layers_and_avoid_the_neurons() -> None:
    neurons = [(3, 10), (3, 11), (5, 0), (5, 1)]
    control = random_neurons_like(neurons, 8, seed=1)
    assert [layer for layer, _ in control] == [3, 3, 5, 5]
    assert not set(control) & set(neurons) and len(set(control)) == len(control)
    assert control == random_neurons_like(neurons, 8, seed=1) != random_neurons_like(neurons, 8, seed=2)
    with pytest.raises(ValueError, match="too few other neurons"):
        random_neurons_like([(0, 0), (0, 1), (0, 2)], 5, seed=0)


def test_suppression_test_runs_both_controls(tiny: LensModel) -> None:
    cases = [(PROMPT, " Paris"), ("Where is the Eiffel Tower? In", " Paris")]
    others = [("The capital of Germany is", " Berlin")]
    test = suppression_test(tiny, [(1, 3), (1, 8)], cases, others, seed=4)
    assert test.neurons == ((1, 3), (1, 8))
    assert list(test.control) == random_neurons_like(test.neurons, int(tiny.cfg.d_mlp or 0), seed=4)
    assert test.knowledge == scaling_effect(tiny, test.neurons, cases)
    assert test.random == scaling_effect(tiny, test.control, cases)
    assert test.other_facts == scaling_effect(tiny, test.neurons, others)
    assert test.knowledge != test.random


def test_bad_input_names_the_fix(tiny: LensModel) -> None:
    d_mlp = int(tiny.cfg.d_mlp or 0)
    with (
        pytest.raises(ValueError, match="layer 7 does not exist"),
        suppress_neurons(tiny, [(7, 0)]),
    ):
        pass
    with (
        pytest.raises(ValueError, match=f"index {d_mlp} does not exist"),
        enhance_neurons(tiny, [(0, 1), (1, d_mlp)]),
    ):
        pass
    with pytest.raises(ValueError, match="do not exist"):
        integrated_gradients(tiny, PROMPT, " Paris", KnowledgeNeuronsConfig(layers=(0, 5)))
    with pytest.raises(ValueError, match="empty prompt"):
        integrated_gradients(tiny, "  ", " Paris")
    with pytest.raises(ValueError, match="empty target"):
        integrated_gradients(tiny, PROMPT, " ")
    with pytest.raises(ValueError, match="steps"):
        KnowledgeNeuronsConfig(steps=0)
    assert tiny.hooks.attached_count() == 0


def test_result_round_trips_and_reports(tiny: LensModel, tmp_path: object) -> None:
    res = integrated_gradients(tiny, PROMPT, " Paris", KnowledgeNeuronsConfig(steps=3, layers=(1,)))
    assert res.layers == (1,) and res.values.shape == (1, tiny.cfg.d_mlp)
    top = res.top(3)
    assert [t.score for t in top] == sorted((t.score for t in top), reverse=True)
    assert top[0].score == float(res.values.max())
    assert "Integrated gradients (3 steps" in res.summary()
    path = res.save(f"{tmp_path}/ig.json")
    assert NeuronAttribution.load(path) == res


def test_cli_subcommand(
    tiny: LensModel, tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser()
    add_neurons_command(parser.add_subparsers(dest="command"))
    out = f"{tmp_path}/kn.json"
    args = parser.parse_args(
        [
            "neurons",
            "--model",
            "toy-2l",
            "--device",
            "cpu",
            "--prompt",
            PROMPT,
            "--target",
            " Paris",
            "--paraphrase",
            "The Eiffel Tower stands in",
            "--paraphrase",
            "The Eiffel Tower is in",
            "--steps",
            "2",
            "--top",
            "3",
            "--out",
            out,
        ]
    )
    assert args.run(args) == 0
    assert "knowledge neurons of ' Paris'" in capsys.readouterr().out
    assert KnowledgeNeurons.load(out).steps == 2
    bad = parser.parse_args(
        [
            "neurons",
            "--model",
            "toy-2l",
            "--prompt",
            PROMPT,
            "--target",
            " Paris",
            "--paraphrase",
            "The Eiffel Tower is in",
        ]
    )
    with pytest.raises(ValueError, match="at least 3 prompts"):
        bad.run(bad)


@pytest.mark.slow
def test_eiffel_neurons_on_smollm2(clean_smollm2: LensModel) -> None:
    lm = clean_smollm2
    prompt, target = "The Eiffel Tower is located in the city of", " Paris"
    coarse, fine = (
        integrated_gradients(lm, prompt, target, KnowledgeNeuronsConfig(steps=m, layers=(28, 29)))
        for m in (20, 80)
    )
    # Completeness converges like 1/m in the top layers. (Layer 0 is much steeper near the zero
    # baseline: at 20 steps its scores miss ~40% of its change; see docs/knowledge_neurons.md.)
    change = (fine.value - fine.baseline_values).abs()
    assert bool((fine.completeness_gap().abs() < 0.05 * change).all()), fine.completeness_gap()
    assert bool((fine.completeness_gap().abs() < coarse.completeness_gap().abs() / 2.5).all())
    tokens = lm.to_tokens(prompt)
    paris = lm.token_id(target)

    def p_paris() -> float:
        with torch.no_grad():
            return float(lm(tokens)[0, -1].float().softmax(-1)[paris])

    top = [(n.layer, n.neuron) for n in coarse.top(10)]
    clean = p_paris()
    with suppress_neurons(lm, top):
        suppressed = p_paris()
    with enhance_neurons(lm, top):
        enhanced = p_paris()
    # Zeroing the neurons IG credits removes most of p(Paris). Doubling them does not raise it on
    # SmolLM2 (0.75 -> 0.51 measured): enhancing is inconsistent here, as the table in
    # docs/knowledge_neurons.md shows, so only the direction of suppression is asserted.
    assert suppressed < 0.5 * clean
    assert enhanced != clean

"""Activation-addition steering on the toy model: which positions a scope changes in a ragged batch
under the KV cache, cached and uncached greedy decoding, the vectors, and bad input."""

from __future__ import annotations

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.generation import GenerationConfig, decoding_step, generate, prompt_lengths
from lmsci_mi.hooks import PositionScope
from lmsci_mi.sites import hook_name
from lmsci_mi.steering import (
    MeanDifferenceConfig,
    SteeringVector,
    mean_difference_vector,
    steering_vector,
)

# In ascending token length: the sampler batches rows by length, so a hook's row r is prompt r.
PROMPTS = ["A dog", "The cat sat on the mat", "Hello there my good friend, how"]
NEW = 4
HOOK = hook_name("resid_post", 0)

SCOPES = {
    "all": PositionScope.all(),
    "all but the sink": PositionScope.all(skip=1),
    "prompt": PositionScope.prompt(),
    "last prompt token": PositionScope.prompt(-1),
    "prompt[1:3]": PositionScope.prompt(1, 3),
    "generated": PositionScope.generated(),
    "from last prompt": PositionScope.from_last_prompt(),
}


def expected(scope: PositionScope, length: int, n_pos: int) -> list[int]:
    """The absolute positions ``scope`` covers in a row with a ``length``-token prompt, written
    out from the documented semantics, independently of ``PositionScope.mask``."""
    positions = range(n_pos)
    chosen = {
        "all": list(positions),
        "generated": [p for p in positions if p >= length],
        "from_last_prompt": [p for p in positions if p >= length - 1],
    }.get(scope.kind)
    if chosen is None:  # prompt[start:stop], in the prompt's own coordinates
        chosen = list(range(length))[scope.start : scope.stop]
    return [p for p in chosen if p >= scope.skip]


def residuals(lm: LensModel, prompts: list[str], vector: SteeringVector | None, scope, *, cache: bool):
    """Greedy generation; every pass's layer-0 residual (after the steer) stored at its absolute
    positions, so a cached run (one column per step) and an uncached one give the same grid."""
    grid: dict[tuple[int, int], torch.Tensor] = {}

    def record(activation, hook):
        step = decoding_step()
        assert step is not None
        assert step.prompt_lengths.tolist() == [len(lm.encode(p)) for p in prompts]
        for r in range(activation.shape[0]):
            for j in range(activation.shape[1]):
                grid[(r, step.offset + j)] = activation[r, j].detach().clone()

    config = GenerationConfig(max_new_tokens=NEW, temperature=0)
    if vector is None:
        with lm.hooks.hooks(fwd=[(HOOK, record)]):
            out = generate(lm, prompts, config, use_kv_cache=cache)
    else:
        with vector.apply(lm, 3.0, scope), lm.hooks.hooks(fwd=[(HOOK, record)]):
            out = generate(lm, prompts, config, use_kv_cache=cache)
    return out, grid


@pytest.mark.parametrize("name", sorted(SCOPES))
def test_scope_changes_exactly_its_positions_in_a_ragged_cached_batch(tiny: LensModel, name: str) -> None:
    scope = SCOPES[name]
    vector = steering_vector(tiny, torch.randn(tiny.cfg.d_model), 0)
    steered_out, steered = residuals(tiny, PROMPTS, vector, scope, cache=True)
    # The unsteered residuals of the very tokens the steered run produced (teacher forced): at
    # layer 0's output a position depends only on earlier tokens, never on another position's
    # steer, so the difference is the vector exactly where the scope applies and 0 elsewhere.
    n_fed = 1 + max(p for _, p in steered)
    for r, prompt in enumerate(PROMPTS):
        ids = list(tiny.encode(prompt)) + list(steered_out.tokens[r])
        # A row with a short prompt keeps decoding while longer rows finish; those extra tokens
        # are not returned, so compare the positions whose tokens are known.
        n_pos = min(n_fed, len(ids))
        with tiny.hooks.capture([HOOK]) as cap:
            tiny.model(torch.tensor([ids[:n_pos]], device=tiny.device))
        plain = cap[HOOK][0]
        changed = [p for p in range(n_pos) if not torch.allclose(steered[(r, p)], plain[p], atol=1e-4)]
        length = len(tiny.encode(prompt))
        assert changed == expected(scope, length, n_pos), (name, r, length)
        for p in changed:
            torch.testing.assert_close(steered[(r, p)] - plain[p], 3.0 * vector.values, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", sorted(SCOPES))
def test_cached_and_uncached_greedy_generation_agree_under_every_scope(tiny: LensModel, name: str) -> None:
    vector = steering_vector(tiny, 4 * torch.randn(tiny.cfg.d_model), 0)
    cached, _ = residuals(tiny, PROMPTS, vector, SCOPES[name], cache=True)
    uncached, _ = residuals(tiny, PROMPTS, vector, SCOPES[name], cache=False)
    assert cached.tokens == uncached.tokens


def test_a_steer_changes_the_greedy_tokens(tiny: LensModel) -> None:
    # Guards the agreement test above: it would pass trivially if the vector did nothing.
    vector = steering_vector(tiny, 4 * torch.randn(tiny.cfg.d_model), 0)
    plain, _ = residuals(tiny, PROMPTS, None, None, cache=True)
    steered, _ = residuals(tiny, PROMPTS, vector, PositionScope.all(), cache=True)
    assert plain.tokens != steered.tokens


def test_prompt_lengths_scope_a_plain_forward_of_a_padded_batch(tiny: LensModel) -> None:
    batch = tiny.encode_batch(PROMPTS)
    vector = steering_vector(tiny, torch.ones(tiny.cfg.d_model), 0)
    with tiny.hooks.capture([HOOK]) as plain:
        tiny.model(batch.tokens)
    scope = PositionScope.prompt(-1)
    with prompt_lengths(batch.lengths), vector.apply(tiny, 1.0, scope), tiny.hooks.capture([HOOK]) as steered:
        tiny.model(batch.tokens)
    changed = (steered[HOOK] - plain[HOOK]).abs().amax(-1) > 1e-5
    want = torch.zeros_like(changed)
    want[torch.arange(len(PROMPTS)), batch.lengths - 1] = True  # each row's own last token
    assert torch.equal(changed, want)


def test_mean_difference_is_the_difference_of_last_token_means(tiny: LensModel) -> None:
    positive, negative = ["I love it", "Great film"], ["I hate it", "Awful, truly awful"]
    v = mean_difference_vector(tiny, positive, negative, MeanDifferenceConfig(layer=1))

    def mean_last(prompts: list[str]) -> torch.Tensor:
        rows = []
        for prompt in prompts:
            with tiny.hooks.capture([v.hook]) as cap:
                tiny.model(tiny.to_tokens(prompt))
            rows.append(cap[v.hook][0, -1])
        return torch.stack(rows).mean(0)

    torch.testing.assert_close(v.values, mean_last(positive) - mean_last(negative), atol=1e-5, rtol=1e-5)
    mean = mean_difference_vector(tiny, positive, negative, MeanDifferenceConfig(layer=1, read="mean"))
    assert not torch.allclose(mean.values, v.values)


def test_steering_vector_saves_and_loads(tiny: LensModel, tmp_path) -> None:
    v = mean_difference_vector(tiny, ["I love it"], ["I hate it"], MeanDifferenceConfig(layer=1))
    back = SteeringVector.load(v.save(tmp_path / "v"))
    assert back == v and back.hook == v.hook and back.n_positive == 1


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda lm: steering_vector(lm, torch.ones(7), 0), "width 7"),
        (lambda lm: steering_vector(lm, torch.ones(64), 5), "out of range"),
        (lambda lm: steering_vector(lm, torch.ones(64), 0, "resid_middle"), "unknown site"),
        (lambda lm: steering_vector(lm, torch.ones(64), 0, "z"), "no single vector"),
        (lambda lm: mean_difference_vector(lm, [], ["I hate it"]), "at least one prompt"),
        (lambda lm: mean_difference_vector(lm, ["a"], ["b"], MeanDifferenceConfig(layer=9)), "out of range"),
    ],
)
def test_bad_input_is_refused_before_anything_is_attached(tiny: LensModel, call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call(tiny)
    assert tiny.hooks.active() == []


def test_a_vector_of_another_model_is_refused_and_an_exception_leaves_no_hook(tiny: LensModel) -> None:
    v = steering_vector(tiny, torch.ones(64), 0)
    wide = SteeringVector(values=torch.ones(65), axes=("d",), labels=((),), meta=v.meta, hook=v.hook, method="x")
    with pytest.raises(ValueError, match="width 65"), wide.apply(tiny, 1.0):
        pass
    assert tiny.hooks.active() == []
    with pytest.raises(RuntimeError, match="boom"), v.apply(tiny, 1.0, PositionScope.generated()):
        assert len(tiny.hooks.active()) == 1
        raise RuntimeError("boom")
    assert tiny.hooks.active() == []
    with pytest.raises(TypeError, match="PositionScope"), v.apply(tiny, 1.0, [1, 2]):  # type: ignore[arg-type]
        pass


def test_scope_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown scope"):
        PositionScope("middle")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="takes none"):
        PositionScope("generated", start=1)
    with pytest.raises(ValueError, match="skip"):
        PositionScope.all(skip=-1)


def test_cli_steer_vector_builds_saves_reuses_and_refuses_bad_input(tmp_path, capsys) -> None:
    from lmsci_mi.cli import main

    pos, neg, out = tmp_path / "pos.txt", tmp_path / "neg.txt", tmp_path / "v.json"
    pos.write_text("I love it\nWhat a great day\n")
    neg.write_text("I hate it\nWhat an awful day\n")
    base = ["steer", "vector", "--model", "toy-2l", "--max-new-tokens", "3", "--temperature", "0"]
    assert main([*base, "--positive", str(pos), "--negative", str(neg), "--layer", "1",
                 "--scope", "generated", "--out", str(out)]) == 0
    assert "[+4 × vector, scope generated]" in capsys.readouterr().out
    assert SteeringVector.load(out).n_positive == 2
    assert main(["steer", "vector", "--vector", str(out), "--max-new-tokens", "2"]) == 0
    # Bad input: exit 2, one line, nothing attached to the model.
    assert main([*base, "--positive", str(pos), "--negative", str(neg), "--layer", "7"]) == 2
    assert main([*base, "--positive", str(pos)]) == 2
    assert main([*base, "--positive", str(tmp_path / "missing.txt"), "--negative", str(neg)]) == 2
    assert main(["steer", "vector", "--vector", str(out), "--model", "toy-3l"]) == 2  # another model
    (tmp_path / "empty.txt").write_text("\n")
    assert main([*base, "--positive", str(tmp_path / "empty.txt"), "--negative", str(neg)]) == 2


def test_evaluate_intervention_records_standard_errors_and_reads_old_files(tiny: LensModel, tmp_path) -> None:
    import json

    from lmsci_mi.steering import ControlCurve, SteerEvalConfig, evaluate_intervention

    v = steering_vector(tiny, torch.ones(64), 1)
    config = SteerEvalConfig(
        n_prompts=4, generation=GenerationConfig(max_new_tokens=4, top_p=0.9), progress=False
    )
    curve = evaluate_intervention(tiny, lambda c: v.apply(tiny, c), [0.0, 3.0], config, name="ones")
    assert curve.settings == ((0.0,), (3.0,)) and curve.attributes == ("ones",)
    # Strength 0 adds nothing: the same continuations as the unsteered model, so the same metrics.
    assert curve.values[0].tolist() == pytest.approx(curve.unsteered, rel=1e-6)  # values: float32
    errors = curve.error("sentiment")
    assert errors.shape == (2,) and bool((errors >= 0).all())
    assert torch.isnan(curve.error("distinct_2")).all()
    # A curve saved before errors were recorded loads with none.
    path = curve.save(tmp_path / "c")
    data = json.loads(path.read_text())
    for key in ("errors", "unsteered_errors"):
        data["result"].pop(key)
    path.write_text(json.dumps(data))
    old = ControlCurve.load(path)
    assert old.errors == () and torch.isnan(old.error("sentiment")).all()

"""Task and function vectors (lmsci_mi.icl.vectors) on toy-2l: the replacement and addition are
exact where they must be, the sweep agrees with the steering-vector route, the random control
has the vector's norm, the per-prompt indirect effects resume from their cache, and an error
leaves no hook behind."""

from __future__ import annotations

import pytest
import torch

import lmsci_mi.icl.vectors as vectors_module
from lmsci_mi.errors import UnknownNameError, UserInputError
from lmsci_mi.hooks import PositionScope
from lmsci_mi.icl import (
    ICL_VECTOR_METHODS,
    FunctionVectorConfig,
    ICLGainRecovery,
    ICLPromptConfig,
    TaskVectorConfig,
    function_vector,
    head_indirect_effects,
    icl_gain_recovery,
    icl_prompts,
    matched_random_vectors,
    task_vectors,
    vector_recovery,
    zero_shot_prompts,
)
from lmsci_mi.model import LensModel
from lmsci_mi.sites import hook_name

SMALL = ICLPromptConfig(n_demonstrations=2, n_prompts=4)


def _last_states(lm: LensModel, token_lists: list[list[int]], layer: int) -> torch.Tensor:
    """Each sequence's last-token residual after ``layer``, one unpadded forward per sequence."""
    hook = hook_name("resid_post", layer)
    rows = []
    for tokens in token_lists:
        with torch.no_grad(), lm.hooks.capture(hook) as cap:
            lm.model(torch.tensor([tokens]))
        rows.append(cap[hook][0, -1])
    return torch.stack(rows)


def _answer_probs(lm: LensModel, prompts) -> torch.Tensor:
    rows = []
    for p in prompts:
        with torch.no_grad():
            logits = lm.model(torch.tensor([p.tokens]))[0, -1]
        rows.append(logits.softmax(-1)[p.answer_token])
    return torch.stack(rows)


def test_replacing_the_last_state_with_the_icl_state_gives_the_icl_output(tiny: LensModel) -> None:
    icl = icl_prompts(tiny, "antonyms", SMALL)
    last = tiny.cfg.n_layers - 1
    own = _last_states(tiny, [list(p.tokens) for p in icl], last)
    result = vector_recovery(tiny, icl, own[:, None], (last,), "replace")
    # The zero-shot prompt's final state is the ICL prompt's: its answer is the ICL answer.
    torch.testing.assert_close(result.probs[0, 0], _answer_probs(tiny, icl), rtol=1e-4, atol=1e-6)
    assert torch.equal(result.values[0, 0], result.icl)
    # Without the replacement, the zero-shot prompts answer otherwise (the check can fail).
    assert not torch.allclose(result.probs[0, 0], _answer_probs(tiny, zero_shot_prompts(tiny, icl)))


def test_adding_zero_changes_nothing_and_the_sweep_matches_the_steering_route(tiny: LensModel) -> None:
    icl = icl_prompts(tiny, "antonyms", SMALL)
    zero = zero_shot_prompts(tiny, icl)
    none = vector_recovery(tiny, icl, torch.zeros(2, 64), (0, 1), "add")
    expected = _answer_probs(tiny, zero)
    for layer in (0, 1):
        torch.testing.assert_close(none.probs[0, layer], expected, rtol=1e-4, atol=1e-6)
    assert torch.equal(none.values[0, 0], none.zero_shot)

    fv = function_vector(tiny, "antonyms", FunctionVectorConfig(
        n_demonstrations=2, n_mean_prompts=4, n_aie_prompts=2, n_top_heads=3, cache=False))
    swept = vector_recovery(tiny, icl, fv.values[None].expand(2, -1) * 5, (0, 1), "add")
    steer = fv.steering_vector(tiny, 0)
    for i, p in enumerate(zero):  # added at the last prompt token, the one the answer is read at
        with torch.no_grad(), steer.apply(tiny, 5.0, PositionScope.prompt(-1)):
            logits = tiny.model(torch.tensor([p.tokens]))[0, -1]
        torch.testing.assert_close(swept.probs[0, 0, i], logits.softmax(-1)[p.answer_token], rtol=1e-4, atol=1e-6)
    assert len(tiny.hooks.active()) == 0


def test_the_random_control_has_each_vectors_norm_and_its_own_direction() -> None:
    v = torch.randn(5, 3, 64)
    r = matched_random_vectors(v, seed=3)
    torch.testing.assert_close(r.norm(dim=-1), v.norm(dim=-1))
    assert torch.equal(r, matched_random_vectors(v, seed=3))
    assert not torch.equal(r, matched_random_vectors(v, seed=4))
    cosine = torch.nn.functional.cosine_similarity(r, v, dim=-1)
    assert cosine.abs().max() < 0.6  # 64 dimensions: a random direction is far from each vector


def test_task_vectors_average_the_dummy_queries_states(tiny: LensModel) -> None:
    icl = icl_prompts(tiny, "antonyms", SMALL)
    tv = task_vectors(tiny, icl, TaskVectorConfig(n_dummy_queries=2))
    assert all(p.query not in d and len(set(d)) == 2 for p, d in zip(icl, tv.dummy_queries, strict=True))
    p, dummies = icl[0], tv.dummy_queries[0]
    fmt, items = icl.config.format, icl.task.items
    prefix = p.text.removesuffix(fmt.input_template.replace("{x}", items[p.query].input))
    texts = [prefix + fmt.input_template.replace("{x}", items[i].input) for i in dummies]
    expected = _last_states(tiny, [tiny.encode(t) for t in texts], 1).mean(0)
    torch.testing.assert_close(tv.values[0, 1], expected, rtol=1e-4, atol=1e-5)


def test_indirect_effects_resume_from_their_cache(tiny: LensModel, tmp_path, monkeypatch) -> None:
    clean = icl_prompts(tiny, "antonyms", SMALL)
    shuffled = icl_prompts(tiny, "antonyms", SMALL.replace(n_prompts=3, label_mode="shuffled", seed=1))
    config = FunctionVectorConfig(cache_dir=str(tmp_path), batch_size=1)
    computed: list[int] = []
    original = vectors_module._prompt_effects

    def counting(lm, prompts, group, means, budget):
        computed.extend(group)
        return original(lm, prompts, group, means, budget)

    monkeypatch.setattr(vectors_module, "_prompt_effects", counting)
    first = head_indirect_effects(tiny, clean, shuffled, config)
    assert sorted(computed) == [0, 1, 2]
    (folder,) = tmp_path.iterdir()
    (folder / "1.json").unlink()  # as if the run had stopped before prompt 1
    computed.clear()
    again = head_indirect_effects(tiny, clean, shuffled, config)
    assert computed == [1]
    torch.testing.assert_close(again.values, first.values, rtol=1e-5, atol=1e-7)
    # The effects are the gain in p(answer) of one patched head: a head patched by hand agrees.
    means = first.mean_activations
    p = shuffled[0]
    with torch.no_grad():
        base = tiny.model(torch.tensor([p.tokens]))[0, -1].softmax(-1)[p.answer_token]
        with tiny.hooks.ablate(hook_name("z", 1), mode="mean", means={hook_name("z", 1): means[1]},
                               positions=[-1], heads=2):
            patched = tiny.model(torch.tensor([p.tokens]))[0, -1].softmax(-1)[p.answer_token]
    torch.testing.assert_close(first.values[0, 1, 2], patched - base, rtol=1e-4, atol=1e-6)


def test_errors_leave_no_hook(tiny: LensModel, monkeypatch) -> None:
    with pytest.raises(UserInputError, match="layer 7 does not exist"):
        icl_gain_recovery(tiny, "antonyms", "task_vector", TaskVectorConfig(layers=(7,), n_prompts=2))
    with pytest.raises(UserInputError, match="takes a FunctionVectorConfig"):
        icl_gain_recovery(tiny, "antonyms", "function_vector", TaskVectorConfig())
    with pytest.raises(UnknownNameError):
        icl_gain_recovery(tiny, "antonyms", "task_vectr")
    with pytest.raises(UserInputError, match="n_top_heads=99"):
        function_vector(tiny, "antonyms", FunctionVectorConfig(n_top_heads=99, cache=False))
    icl = icl_prompts(tiny, "antonyms", SMALL)
    with pytest.raises(UserInputError, match="vectors of shape"):
        vector_recovery(tiny, icl, torch.zeros(3, 64), (0, 1), "add")

    def failing(answers):
        def read(logits):
            raise RuntimeError("readout failed mid-sweep")
        return read

    monkeypatch.setattr(vectors_module, "_answer_readout", failing)
    with pytest.raises(RuntimeError, match="mid-sweep"):
        vector_recovery(tiny, icl, torch.ones(2, 64), (0, 1), "replace")
    assert tiny.hooks.attached_count() == 0 and not tiny.hooks.active()


def test_gain_recovery_reports_held_out_at_the_dev_layer_and_round_trips(tiny: LensModel, tmp_path) -> None:
    assert set(ICL_VECTOR_METHODS.names()) == {"task_vector", "function_vector"}
    result = icl_gain_recovery(tiny, "antonyms", "task_vector", TaskVectorConfig(n_prompts=3))
    assert result.best_layer == result.dev.best_layer()
    report = result.report()
    assert report.n == 3 and report.best_layer in (0, 1)
    assert report.vector.estimate == float(result.held_out.accuracy()[report.best_layer])
    assert ICLGainRecovery.load(result.save(tmp_path / "tv.json")) == result


def test_the_benchmark_entry_is_json_and_renders(tiny: LensModel) -> None:
    import json
    import sys

    from tests.fixtures import benchmark_script

    bench = benchmark_script("icl_vectors")
    result = icl_gain_recovery(tiny, "antonyms", "task_vector", TaskVectorConfig(n_prompts=3))
    record = bench.entry(result, 1.0)
    text = json.dumps(record, allow_nan=False)  # a share where ICL gains nothing is null, not NaN
    data = {"model": "toy-2l", "tasks": ["antonyms"], "methods": {}, "results": {"antonyms": {"task_vector": json.loads(text)}}}
    table = sys.modules["doc_tables"].RENDERERS["icl_vectors"](data)
    assert table.count("\n") == 2 and "`antonyms` | task vector (replace) | 3 |" in table


def test_the_findings_count_tasks_recovered_above_random() -> None:
    from tests.fixtures import benchmark_script

    benchmark_script("icl_vectors")  # puts benchmarks/ on the path
    from doc_tables.icl_vectors import icl_vectors_findings

    def rec(estimate: float, low: float, high: float) -> dict:
        return {"estimate": estimate, "low": low, "high": high}

    def report(share: dict, icl: dict) -> dict:
        return {"report": {"share": share, "random_share": rec(0.0, -0.1, 0.05), "icl": icl,
                           "zero_shot": rec(0.0, 0.0, 0.1)}, "curves": {"dev": {"share": [0.1, share["estimate"]]}}}

    data = {"tasks": ["a", "b"], "results": {
        "a": {"task_vector": report(rec(0.9, 0.7, 1.1), rec(0.6, 0.5, 0.7))},
        "b": {"task_vector": report(rec(0.2, 0.0, 0.4), rec(0.15, 0.05, 0.3))}}}
    text = icl_vectors_findings(data)  # type: ignore[arg-type]
    assert "on 1 of 2 tasks: a (task vector 0.90)" in text and "Not recovered above random: b." in text
    assert "overlaps zero-shot's (little gain to recover) on b (task vector)" in text
    assert "task vector above random on 1 of 2 tasks (its largest share at any layer on dev: 0.90)" in text
    assert "function vector above random on 0 of 0 tasks" in text
    data["results"]["b"]["task_vector"]["report"]["share"] = rec(0.5, 0.3, 0.7)
    assert "on 2 of 2 tasks" in icl_vectors_findings(data)  # type: ignore[arg-type]

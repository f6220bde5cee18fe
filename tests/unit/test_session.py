"""Sequential editing sessions: order, exact restore, specificity against the original model."""

from __future__ import annotations

import json

import pytest
import torch

from lmsci_mi import LensModel, load_model
from lmsci_mi.editing import (
    AlphaEditConfig,
    EditHandle,
    EditingSession,
    EditRequest,
    EvaluationConfig,
    MEMITConfig,
    ROMEConfig,
    SessionConfig,
    StatsConfig,
    key_statistics,
)
from tests.fixtures import TEST_DEVICE, weights_fingerprint

REQUESTS = [
    EditRequest(
        "{} is in",
        s,
        new,
        true,
        paraphrase_prompts=(f"The city of {s} is in",),
        neighborhood_prompts=(f"{n} is in",),
    )
    for s, new, true, n in [
        ("Paris", " Rome", " France", "Lyon"),
        ("Berlin", " Oslo", " Germany", "Munich"),
        ("Madrid", " Tokyo", " Spain", "Seville"),
    ]
]


# GE's sampled generation is 90% of a session's evaluation time on the toy; one test measures it.
NO_GE = EvaluationConfig(generation_tokens=0)


@pytest.fixture(scope="module")
def stats(tmp_path_factory: pytest.TempPathFactory):
    # Once per module: every test's `tiny` is a copy of the same seeded build, so the statistics
    # (a frozen result, keyed by the weights) are the same for each; computing them took 0.9 s a test.
    lm = load_model("toy-2l", device=TEST_DEVICE)
    return key_statistics(lm, [0, 1], StatsConfig(n_tokens=512), cache_dir=tmp_path_factory.mktemp("stats"))


def _top(lm: LensModel, prompts: list[str]) -> torch.Tensor:
    batch = lm.encode_batch(prompts)
    with torch.no_grad():
        logits = lm(batch.tokens)
    return logits[torch.arange(len(prompts)), batch.lengths - 1].argmax(-1)


def test_three_sequential_edits_restore_bit_exactly(tiny: LensModel, stats) -> None:
    before = weights_fingerprint(tiny)
    session = EditingSession(
        tiny, MEMITConfig(layers=(0, 1), steps=3), SessionConfig(eval_every=1, evaluation=NO_GE), stats=stats
    )
    result = session.run(REQUESTS)
    assert result.n_edited == (0, 1, 2, 3) and result.order == ("Paris", "Berlin", "Madrid")
    assert result.targets == (" Rome", " Oslo", " Tokyo") and result.values.shape == (4, 5)
    assert [r.subject for r in session.order] == ["Paris", "Berlin", "Madrid"]
    assert len(session.handles) == 3 and weights_fingerprint(tiny) != before
    with pytest.raises(RuntimeError):  # an earlier edit cannot be undone under a later one
        session.handles[0].restore()
    session.restore()
    assert weights_fingerprint(tiny) == before


def test_specificity_is_measured_against_the_original_model(tiny: LensModel, stats) -> None:
    neighbours = [p for r in REQUESTS for p in r.neighborhood_prompts]
    original = _top(tiny, neighbours)
    session = EditingSession(
        tiny, MEMITConfig(layers=(0, 1), steps=2), SessionConfig(evaluation=NO_GE), stats=stats
    )
    session.run(REQUESTS)
    # A later change that moves every answer to token 0: against the original answers nothing is
    # kept; against the edited model's own answers everything would be.
    assert not bool((original == 0).any())
    push = torch.zeros_like(tiny.model.unembed.b_U)
    push[0] = 1e4
    with EditHandle(tiny, {"unembed.b_U": push}, method="test").apply():
        assert bool((_top(tiny, neighbours) == 0).all())
        assert session.evaluate()["specificity"] == 0.0
    session.restore()


def test_alphaedit_sessions_carry_the_earlier_keys(tiny: LensModel, stats) -> None:
    before = weights_fingerprint(tiny)
    hp = AlphaEditConfig(layers=(0, 1), steps=2, nullspace_threshold=1e-2)
    session = EditingSession(tiny, hp, SessionConfig(batch_size=2, evaluation=NO_GE), stats=stats)
    session.run(REQUESTS)
    assert {layer: k.shape[0] for layer, k in session._keys.items()} == {0: 3, 1: 3}
    session.restore()
    assert weights_fingerprint(tiny) == before and not session._keys


def test_a_rome_session_with_a_traced_layer_is_refused_before_any_edit(tiny: LensModel) -> None:
    before = weights_fingerprint(tiny)
    with pytest.raises(ValueError, match="fixed layer"):
        EditingSession(tiny, ROMEConfig(trace_layer=True)).run(REQUESTS)
    assert weights_fingerprint(tiny) == before


def test_step_zero_is_the_original_model_and_the_result_round_trips(tiny: LensModel, stats, tmp_path) -> None:
    config = SessionConfig(evaluation=EvaluationConfig(generation_tokens=4))
    session = EditingSession(tiny, ROMEConfig(layer=1, n_contexts=2, steps=3), config, stats=stats)
    result = session.run(REQUESTS[:2])
    assert result.n_edited == (0, 2) and result.method == "rome" and result.batch_size == 1
    assert result.metric("specificity")[0] == 100.0  # the original model agrees with itself
    assert all(v == v for v in result.metric("GE"))  # GE measured at every step
    loaded = type(result).load(result.save(tmp_path / "session.json"))
    assert loaded == result
    result.plot(tmp_path / "session.png")
    session.restore()
    assert session.order == []


def test_a_bad_request_late_in_the_run_is_refused_before_any_edit(tiny: LensModel, stats) -> None:
    before = weights_fingerprint(tiny)
    bad = EditRequest("{} is in", "Atlantis", " Rome", " Nowhere")
    missing = EditRequest("The city is in", "Vienna", " Rome", " Austria")
    session = EditingSession(tiny, MEMITConfig(layers=(0, 1), steps=2), stats=stats)
    with pytest.raises(ValueError, match="Vienna"):
        session.run([*REQUESTS, bad, missing])
    assert weights_fingerprint(tiny) == before and not session.handles


def test_a_saved_session_resumes_where_it_stopped(tiny: LensModel, stats, tmp_path) -> None:
    before = weights_fingerprint(tiny)
    hp = AlphaEditConfig(layers=(0, 1), steps=2, nullspace_threshold=1e-2)
    config = SessionConfig(evaluation=NO_GE)
    whole = EditingSession(tiny, hp, config, stats=stats)
    whole.run(REQUESTS[:2])
    expected = whole.run(REQUESTS[2:])
    after_all = weights_fingerprint(tiny)
    whole.restore()

    first = EditingSession(tiny, hp, config, stats=stats)
    first.run(REQUESTS[:2])
    first.save(tmp_path / "session")
    first.restore()
    saved = tmp_path / "session" / "session.json"  # as written before *HyperParams became *Config
    state = json.loads(saved.read_text())
    assert state["config"]["config"] == "AlphaEditConfig"
    saved.write_text(json.dumps({**state, "config": {**state["config"], "config": "AlphaEditHyperParams"}}))
    resumed = EditingSession.resume(tiny, tmp_path / "session", hp, config, stats=stats)
    assert [r.subject for r in resumed.order] == ["Paris", "Berlin"]
    result = resumed.run(REQUESTS[2:])
    assert weights_fingerprint(tiny) == after_all
    assert torch.allclose(result.values, expected.values, equal_nan=True)
    assert result.n_edited == expected.n_edited
    with pytest.raises(ValueError, match="other weights"):  # the model is edited now
        EditingSession.resume(tiny, tmp_path / "session", hp, config, stats=stats)
    resumed.restore()
    with pytest.raises(ValueError, match="other settings"):
        EditingSession.resume(tiny, tmp_path / "session", hp.replace(steps=3), config, stats=stats)
    assert weights_fingerprint(tiny) == before

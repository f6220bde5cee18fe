"""Causal tracing on the tiny models: the batched trace equals the naive one-pass-per-restoration
loop on the same noise, its invariants hold, and bad input fails cleanly with no hook left."""

from __future__ import annotations

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.circuits import CausalTrace, TraceConfig, causal_trace
from lmsci_mi.circuits.tracing import naive_causal_trace
from lmsci_mi.sweep import SweepConfig

PROMPT = "The Eiffel Tower is located in the city of"
SUBJECT = "Eiffel Tower"


@pytest.mark.parametrize("model_fixture", ["tiny", "tiny_gpt2"])
def test_batched_trace_equals_naive_loop(
    model_fixture: str, request: pytest.FixtureRequest
) -> None:
    lm = request.getfixturevalue(model_fixture)
    trace = causal_trace(lm, "The Eiffel Tower is in", SUBJECT,
                         TraceConfig(n_samples=3, window=2, sweep=SweepConfig(token_budget=20)))
    naive = naive_causal_trace(lm, trace)
    torch.testing.assert_close(trace.values, naive, atol=1e-5, rtol=0)
    assert lm.hooks.attached_count() == 0


def test_trace_invariants(tiny: LensModel) -> None:
    trace = causal_trace(tiny, PROMPT, SUBJECT, TraceConfig(n_samples=4, window=1))
    assert trace.axes == ("kind", "layer", "position")
    assert trace.kinds == ("resid", "mlp", "attn")
    assert trace.subject_positions == tuple(tiny.find_subject(PROMPT, SUBJECT))
    assert 0 not in trace.subject_positions
    # The corrupted probability, recomputed by hand from the trace's own noise.
    tokens = tiny.to_tokens(PROMPT).expand(4, -1)
    subject = list(trace.subject_positions)

    def noised(act, hook):
        act = act.clone()
        act[:, subject] += trace.noise.to(act.device)
        return act

    with torch.no_grad(), tiny.hooks.hooks(fwd=[("hook_embed", noised)]):
        probs = tiny(tokens)[:, -1].softmax(-1)[:, trace.target_id]
    assert trace.corrupted_prob == pytest.approx(float(probs.mean()), abs=1e-6)
    # Restoring the last layer's residual at the last position gives back the clean prediction.
    assert float(trace.values[0, -1, -1]) == pytest.approx(trace.clean_prob, abs=1e-5)
    assert trace.target_id == int(tiny(tiny.to_tokens(PROMPT))[0, -1].argmax())
    assert 0 <= trace.peak_layer("mlp") < tiny.cfg.n_layers
    assert trace.noise.shape == (4, len(trace.subject_positions), tiny.cfg.d_model)


def test_noise_scale_is_recorded_and_seeded(tiny: LensModel) -> None:
    a = causal_trace(tiny, PROMPT, SUBJECT, TraceConfig(n_samples=2, kinds=("resid",), seed=1))
    b = causal_trace(tiny, PROMPT, SUBJECT, TraceConfig(n_samples=2, kinds=("resid",), seed=1))
    c = causal_trace(tiny, PROMPT, SUBJECT, TraceConfig(n_samples=2, kinds=("resid",), seed=2))
    assert torch.equal(a.values, b.values)
    assert not torch.equal(a.noise, c.noise)
    # The scale is 3 x the std of the embedding matrix (toy-2l embeds without scaling), and the
    # noise drawn has that std.
    step = max(1, tiny.cfg.d_vocab // 8192)
    assert a.noise_scale == pytest.approx(3 * float(tiny.model.W_E.detach()[::step].std()), rel=1e-4)
    assert float(a.noise.std()) == pytest.approx(a.noise_scale, rel=0.15)
    assert a.meta.params["noise_scale"] == a.noise_scale
    d = causal_trace(tiny, PROMPT, SUBJECT, TraceConfig(n_samples=2, kinds=("resid",), noise_scale=0.5))
    assert d.noise_scale == 0.5 and d.meta.params["noise_scale"] == 0.5


def test_explicit_target(tiny: LensModel) -> None:
    trace = causal_trace(tiny, PROMPT, SUBJECT, TraceConfig(target=" Paris", n_samples=2, kinds=("mlp",)))
    assert trace.target_id == tiny.token_id(" Paris")
    assert trace.values.shape[0] == 1
    with pytest.raises(ValueError, match="was not traced"):
        trace.peak_layer("attn")


def test_subject_not_in_prompt(tiny: LensModel) -> None:
    with pytest.raises(ValueError, match="not in the prompt"):
        causal_trace(tiny, PROMPT, "Big Ben")
    assert tiny.hooks.attached_count() == 0


def test_multi_token_target(tiny: LensModel) -> None:
    with pytest.raises(ValueError, match="one token is needed"):
        causal_trace(tiny, PROMPT, SUBJECT, TraceConfig(target=" Paris, France"))
    assert tiny.hooks.attached_count() == 0


def test_bad_kind_and_window(tiny: LensModel) -> None:
    with pytest.raises(ValueError, match=r"TraceConfig\.kinds must hold values from .*'embed'"):
        causal_trace(tiny, PROMPT, SUBJECT, TraceConfig(kinds=("mlp", "embed")))
    with pytest.raises(ValueError, match=r"TraceConfig\.window must be >= 1, not 0"):
        causal_trace(tiny, PROMPT, SUBJECT, TraceConfig(window=0))
    assert tiny.hooks.attached_count() == 0


def test_subject_on_the_sink_is_refused(tiny: LensModel, monkeypatch: pytest.MonkeyPatch) -> None:
    # The policy keeps the subject off position 0; if a tokenizer ever put it there, noising the
    # attention sink would break every head, so the trace refuses.
    monkeypatch.setattr(type(tiny), "find_subject", lambda self, prompt, subject: range(0, 2))
    with pytest.raises(ValueError, match="attention sink"):
        causal_trace(tiny, PROMPT, SUBJECT)
    assert tiny.hooks.attached_count() == 0


def test_save_load_and_plot(tiny: LensModel, tmp_path) -> None:
    trace = causal_trace(tiny, PROMPT, SUBJECT, TraceConfig(n_samples=2, window=2))
    loaded = CausalTrace.load(trace.save(tmp_path / "trace.json"))
    assert loaded == trace
    assert loaded.peak_layer("resid") == trace.peak_layer("resid")
    trace.plot(tmp_path / "trace.png")
    assert (tmp_path / "trace.png").stat().st_size > 10_000


def test_last_subject_only_restores_that_token_alone_and_peak_test_reads_it(tiny: LensModel) -> None:
    """What ROME's guard runs: the last subject token's values equal the full trace's; the other
    positions keep the corrupted run; the max-over-layers test is exact at 6 samples."""
    import dataclasses

    cfg = TraceConfig(kinds=("mlp",), n_samples=6, window=1)
    full = causal_trace(tiny, PROMPT, SUBJECT, cfg)
    last = causal_trace(tiny, PROMPT, SUBJECT, cfg.replace(last_subject_only=True))
    pos = last.subject_positions[-1]
    torch.testing.assert_close(last.sample_values[:, :, pos], full.sample_values[:, :, pos], atol=1e-6, rtol=0)
    others = [p for p in range(last.values.shape[-1]) if p != pos]
    assert torch.equal(last.sample_values[:, :, others], last.corrupted_samples.expand(1, 2, len(others), 6))
    test = last.peak_test("mlp")
    layer, effect, _ = last.peak_effect("mlp")
    assert (test.argmax, test.n_tests, test.n_samples, test.n_flips, test.exact) == (layer, 2, 6, 64, True)
    assert test.statistic == pytest.approx(effect, abs=1e-6) and 1 / 64 <= test.p_value <= 1
    with pytest.raises(ValueError, match="was not traced"):
        last.peak_test("attn")
    with pytest.raises(ValueError, match="per-sample values"):
        dataclasses.replace(last, sample_values=None).peak_test("mlp")


def test_gap_test_compares_the_clean_run_with_each_corrupted_sample(tiny: LensModel) -> None:
    """The gap test reads the clean metric and the corrupted samples only, one-sided."""
    import dataclasses

    from lmsci_mi.stats import sign_flip_test

    trace = causal_trace(tiny, PROMPT, SUBJECT, TraceConfig(kinds=("mlp",), n_samples=6, window=1))
    test = trace.gap_test()
    assert test == sign_flip_test(trace.clean_metric - trace.corrupted_samples.double())
    assert (test.n_tests, test.n_samples, test.n_flips, test.exact) == (1, 6, 64, True)
    assert test.statistic == pytest.approx(trace.clean_metric - trace.corrupted_metric, abs=1e-6)
    above = float(trace.corrupted_samples.max()) + 0.1
    assert dataclasses.replace(trace, clean_value=above).gap_test().p_value == 1 / 64
    below = float(trace.corrupted_samples.min()) - 0.1
    assert dataclasses.replace(trace, clean_value=below).gap_test().p_value == 1.0
    with pytest.raises(ValueError, match="per-sample values"):
        dataclasses.replace(trace, corrupted_samples=None).gap_test()

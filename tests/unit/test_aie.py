"""Causal tracing over a fact set on the tiny model: corruptions (STR, a given prompt), severing,
token categories, the per-fact cache, and the average indirect effect as a mean of traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformer_lens.hook_points import HookPoint

from lmsci_mi import LensModel
from lmsci_mi.circuits import aie as aie_module
from lmsci_mi.circuits.aie import (
    AIEConfig,
    aggregate_traces,
    known_facts,
    str_partners,
    token_categories,
    trace_facts,
)
from lmsci_mi.circuits.tracing import TraceConfig, causal_trace, subject_embedding_std
from lmsci_mi.cli import main
from lmsci_mi.data import Fact, load_facts
from lmsci_mi.sites import hook_name
from tests.fixtures import FACT_TEMPLATE as TEMPLATE
from tests.fixtures import toy_known_facts


def _known(lm: LensModel) -> list[Fact]:
    return toy_known_facts(lm)


def _small(corruption: str = "str", **changes: object) -> AIEConfig:
    trace = TraceConfig(corruption=corruption, n_samples=2, window=1, **changes)  # type: ignore[arg-type]
    return AIEConfig(trace=trace)


def test_token_categories_by_hand() -> None:
    # sink, "The", " Eiffel"(2) " Tower"(3) " in"(4)... : a three-token subject in 8 tokens.
    assert token_categories([2, 3, 4], 8) == {
        "first subject": [2],
        "middle subject": [3],
        "last subject": [4],
        "first subsequent": [5],
        "further tokens": [6],
        "last token": [7],
    }
    # A one-token subject is first and last; one token after it is first subsequent and last.
    cats = token_categories([3], 5)
    assert cats["first subject"] == cats["last subject"] == [3]
    assert cats["middle subject"] == [] and cats["further tokens"] == []
    assert cats["first subsequent"] == cats["last token"] == [4]
    with pytest.raises(ValueError, match="no token after it"):
        token_categories([3, 4], 5)


def test_str_partner_has_same_length_and_another_answer(tiny: LensModel) -> None:
    facts = [
        *_known(tiny),
        Fact("Rio de Janeiro is a city in the country of", "Rio de Janeiro", target_true=" Brazil"),
    ]
    partners = str_partners(tiny, facts)
    assert partners[-1] is None  # no other subject of its length
    paired = [(f, p) for f, p in zip(facts, partners, strict=True) if p is not None]
    assert paired
    for fact, partner in paired:
        assert partner.prompt == fact.prompt  # the template
        assert len(tiny.find_subject(partner.rewrite_prompt, partner.subject)) == len(
            tiny.find_subject(fact.rewrite_prompt, fact.subject)
        )
        assert tiny.continuation_ids(partner.target_true)[0] != tiny.continuation_ids(fact.target_true)[0]


def test_str_trace_metric_and_alignment(tiny: LensModel) -> None:
    fact = next(f for f in _known(tiny) if f.subject != "Rome")
    trace = causal_trace(
        tiny,
        fact.rewrite_prompt,
        fact.subject,
        TraceConfig(corruption="str", replacement="Rome", wrong=" the", window=1),
    )
    assert trace.metric == "logit_diff" and trace.corrupted_prompt == TEMPLATE.format("Rome")
    with torch.no_grad():
        clean = tiny(tiny.to_tokens(fact.rewrite_prompt))[0, -1]
        bad = tiny(tiny.to_tokens(trace.corrupted_prompt))[0, -1]
    t, w = trace.target_id, tiny.token_id(" the")
    assert trace.clean_metric == pytest.approx(float(clean[t] - clean[w]), abs=1e-4)
    assert trace.corrupted_metric == pytest.approx(float(bad[t] - bad[w]), abs=1e-4)
    # Restoring the whole last stream at the last token gives back the clean metric exactly.
    assert float(trace.kind_values("resid")[-1, -1]) == pytest.approx(trace.clean_metric, abs=1e-4)
    with pytest.raises(ValueError, match=r"same number of tokens|equal token length"):
        causal_trace(
            tiny,
            fact.rewrite_prompt,
            fact.subject,
            TraceConfig(corruption="str", replacement="Rio de Janeiro"),
        )
    with pytest.raises(ValueError, match="equal token length"):
        causal_trace(
            tiny,
            fact.rewrite_prompt,
            fact.subject,
            TraceConfig(
                corruption="prompt", corrupted_prompt="A much longer prompt " + fact.rewrite_prompt
            ),
        )
    assert tiny.hooks.attached_count() == 0


def test_severing_nothing_equals_restoration_and_a_two_pass_patch(tiny: LensModel) -> None:
    fact = next(f for f in _known(tiny) if f.subject != "Rome")
    cfg = TraceConfig(
        corruption="str",
        replacement="Rome",
        wrong=" the",
        kinds=("resid", "sever_mlp", "sever_attn"),
    )
    trace = causal_trace(tiny, fact.rewrite_prompt, fact.subject, cfg)
    last = tiny.cfg.n_layers - 1
    # Above the last layer nothing is left to sever: severed = ordinary restoration.
    for kind in ("sever_mlp", "sever_attn"):
        torch.testing.assert_close(trace.kind_values(kind)[last], trace.kind_values("resid")[last])
    # Layer 0 at the last subject token, MLP severed, by hand: record the corrupted run, then
    # restore resid_pre(1) and hold mlp_out at that token in every layer at its corrupted value.
    pos = trace.subject_positions[-1]
    clean_tokens, bad_tokens = tiny.to_tokens(fact.rewrite_prompt), tiny.to_tokens(trace.corrupted_prompt)
    mlps = [hook_name("mlp_out", layer) for layer in range(tiny.cfg.n_layers)]
    with torch.no_grad():
        with tiny.hooks.capture([hook_name("resid_pre", 1)]) as clean:
            tiny(clean_tokens)
        with tiny.hooks.capture(mlps) as bad:
            tiny(bad_tokens)

        def restore(activation: torch.Tensor, hook: HookPoint) -> torch.Tensor:
            activation = activation.clone()
            activation[:, pos] = clean[str(hook.name)][:, pos]
            return activation

        def hold(activation: torch.Tensor, hook: HookPoint) -> torch.Tensor:
            activation = activation.clone()
            activation[:, pos] = bad[str(hook.name)][:, pos]
            return activation

        with tiny.hooks.hooks(
            fwd=[(hook_name("resid_pre", 1), restore), *[(m, hold) for m in mlps]]
        ):
            logits = tiny(bad_tokens)[0, -1]
    expected = float(logits[trace.target_id] - logits[trace.wrong_id])
    assert float(trace.kind_values("sever_mlp")[0, pos]) == pytest.approx(expected, abs=1e-4)
    assert aggregate_traces([trace]).plot_severing() is not None
    assert tiny.hooks.attached_count() == 0


def test_cache_resumes_and_aie_is_the_mean_of_traces(
    tiny: LensModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path))
    facts = _known(tiny)
    first = trace_facts(tiny, facts, _small(), max_new=1)
    assert len(first.traces) == 1 and not first.complete
    second = trace_facts(tiny, facts, _small())
    assert second.complete and len(second.traces) >= 2

    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("a cached fact was traced again")

    monkeypatch.setattr(aie_module, "causal_trace", fail)
    third = trace_facts(tiny, facts, _small())
    assert [t.values.tolist() for t in third.traces] == [t.values.tolist() for t in second.traces]
    result = aggregate_traces(third.traces)
    assert result.n_facts == len(third.traces) and result.values.shape == (3, 6, tiny.cfg.n_layers)
    # The AIE at the last subject token is the mean of the per-fact indirect effects there.
    per_fact = torch.stack(
        [t.indirect_effect()[:, :, t.subject_positions[-1]] for t in third.traces]
    )
    torch.testing.assert_close(result.values[:, 2], per_fact.mean(0))
    band = 1.959964 * per_fact.std(0) / len(per_fact) ** 0.5  # the normal 97.5th percentile
    torch.testing.assert_close(result.band[:, 2], band)
    assert "last subject" in result.summary()
    assert result.plot() is not None


def test_gaussian_fact_set_uses_subject_embedding_std(
    tiny: LensModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path))
    facts = _known(tiny)[:2]
    done = trace_facts(tiny, facts, _small("gaussian", kinds=("resid",)))
    expected = 3 * subject_embedding_std(
        tiny, [f.rewrite_prompt for f in facts], [f.subject for f in facts]
    )
    assert done.noise_scale == pytest.approx(expected)
    assert all(t.noise_scale == pytest.approx(expected) and t.metric == "prob" for t in done.traces)


def test_bad_fact_sets(tiny: LensModel, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="empty"):
        trace_facts(tiny, [], _small())
    with pytest.raises(ValueError, match="not in the prompt"):
        load_facts([{"prompt": "Paris is in", "subject": "Rome", "target_true": " France"}])
    with pytest.raises(ValueError, match="set per fact"):
        AIEConfig(trace=TraceConfig(replacement="Rome"))
    with pytest.raises(ValueError, match="corruption"):
        AIEConfig(trace=TraceConfig(corruption="prompt"))
    assert known_facts(tiny, load_facts()[:3]) == []
    empty = tmp_path / "facts.json"
    empty.write_text(json.dumps({"facts": []}))
    assert main(["trace", "--model", "toy-2l", "--device", "cpu", "--facts", str(empty)]) == 2
    assert main(["trace", "--model", "toy-2l", "--device", "cpu", "--prompt", "The cat"]) == 2


def test_cli_traces_a_fact_file(
    tiny: LensModel,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path / "cache"))
    records = [
        {"prompt": TEMPLATE, "subject": f.subject, "target_true": f.target_true} for f in _known(tiny)
    ]
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(records))
    argv = [
        "trace",
        "--model",
        "toy-2l",
        "--device",
        "cpu",
        "--facts",
        str(path),
        "--corruption",
        "str",
        "--n-facts",
        "2",
        "--window",
        "1",
        "--kinds",
        "resid",
        "--out",
        str(tmp_path / "aie.json"),
    ]
    assert main(argv) == 0
    assert "AIE (str, logit diff)" in capsys.readouterr().out
    assert (tmp_path / "aie.json").is_file()

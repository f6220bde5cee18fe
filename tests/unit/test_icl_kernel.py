"""Kernel-regression heads (lmsci_mi.icl.kernel): the paper's span-max and the tutorial's label
weighting on hand-made attention, the per-head bookkeeping on toy-2l, bad input that leaves no
hook attached, and a dev choice that never reads held-out results."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.errors import UserInputError
from lmsci_mi.icl import (
    ICLPromptConfig,
    KernelRegressionConfig,
    KernelRegressionHeads,
    choose_kr_heads,
    icl_prompts,
    kernel_regression_heads,
    kr_predictions,
    kr_table,
)
from lmsci_mi.icl.kernel import label_weights, pearson_r, span_max_weights
from lmsci_mi.icl.prompts import Demonstration, ICLPrompt
from lmsci_mi.results import Meta
from lmsci_mi.sites import Head

# One prompt of 12 tokens: sink, three demonstrations of spans [1, 4), [4, 7), [7, 10) whose
# label tokens sit at 3, 6 and 9, then the query at 10 and 11.
DEMOS = tuple(Demonstration(k, label, label, range(s, s + 3), range(s, s + 2), range(s + 2, s + 3),
                            range(s + 3, s + 3)) for k, (s, label) in enumerate([(1, "a"), (4, "b"), (7, "a")]))
PROMPT = ICLPrompt("", (0,) * 12, 9, DEMOS, range(10, 12), "a", "a", 0)
DEMO_LABELS = torch.tensor([[0, 1, 0]])  # a, b, a
# Two heads' final-row attention. Head 0: the spans' largest values are 0.10 (x_1), 0.30 (x_2)
# and 0.05, so the span maxima vote b (0.30 > 0.15), while its label tokens get 0.02, 0.01, 0.04
# and vote a. Head 1: the reverse (span maxima vote a; labels vote b).
ROWS = torch.zeros(1, 1, 2, 12)
ROWS[0, 0, 0, [1, 3, 5, 6, 8, 9]] = torch.tensor([0.10, 0.02, 0.30, 0.01, 0.05, 0.04])
ROWS[0, 0, 1, [2, 3, 4, 6, 7, 9]] = torch.tensor([0.40, 0.01, 0.10, 0.20, 0.05, 0.03])


def test_span_max_weighting_takes_the_largest_attention_in_each_span() -> None:
    weights = span_max_weights(ROWS, [PROMPT])
    torch.testing.assert_close(weights[0, 0], torch.tensor([[0.10, 0.30, 0.05], [0.40, 0.20, 0.05]]))
    assert kr_predictions(weights, DEMO_LABELS, 2)[0, 0].tolist() == [1, 0]  # b, a


def test_label_weighting_reads_the_label_tokens() -> None:
    weights = label_weights(ROWS, [PROMPT])
    torch.testing.assert_close(weights[0, 0], torch.tensor([[0.02, 0.01, 0.04], [0.01, 0.20, 0.03]]))
    assert kr_predictions(weights, DEMO_LABELS, 2)[0, 0].tolist() == [0, 1]  # a, b


def test_pearson_r_matches_the_textbook_formula() -> None:
    x = torch.tensor([[0.1, 0.5, 0.2], [0.9, 0.3, 0.4]])
    y = torch.tensor([[1.0, 3.0, 2.0], [5.0, 1.0, 0.0]])[:, None, None, :]
    expected = torch.corrcoef(torch.stack([x.flatten(), y.flatten()]))[0, 1]
    assert float(pearson_r(x, y)[0, 0]) == pytest.approx(float(expected), abs=1e-6)


@pytest.fixture
def parity(tiny: LensModel) -> KernelRegressionHeads:
    prompts = icl_prompts(tiny, "parity", ICLPromptConfig(n_demonstrations=4, n_prompts=8))
    return kernel_regression_heads(tiny, prompts, KernelRegressionConfig(batch_size=3))


def test_per_head_accuracy_and_agreement_bookkeeping(parity: KernelRegressionHeads) -> None:
    model = parity.model_predictions()
    for w, weighting in enumerate(parity.weightings):
        for layer, head in [(0, 1), (1, 3)]:
            votes = torch.zeros(parity.n_prompts, 2)
            for p in range(parity.n_prompts):
                for d in range(parity.demo_labels.shape[1]):
                    votes[p, parity.demo_labels[p, d]] += parity.demo_weights[w, p, layer, head, d]
            predicted = votes.argmax(-1)
            assert float(parity.values[w, 0, layer, head]) == pytest.approx(float((predicted == parity.gold).float().mean()))
            assert float(parity.values[w, 1, layer, head]) == pytest.approx(float((predicted == model).float().mean()))
            hits = parity.interval(weighting, Head(layer, head), against="model")
            assert (hits.n, hits.estimate) == (8, pytest.approx(float(parity.values[w, 1, layer, head])))
    # Label weights are attention probabilities; the map sums them over the demonstrations.
    assert float(parity.label_attention().min()) > 0 and float(parity.label_attention().max()) < 1
    assert parity.pearson("logit").shape == (2, 4)


def test_batches_and_their_order_do_not_change_the_result(tiny: LensModel, parity: KernelRegressionHeads) -> None:
    prompts = icl_prompts(tiny, "parity", ICLPromptConfig(n_demonstrations=4, n_prompts=8))
    whole = kernel_regression_heads(tiny, prompts, KernelRegressionConfig(batch_size=8))
    assert torch.allclose(whole.demo_weights, parity.demo_weights, atol=1e-5)
    assert torch.equal(whole.gold, parity.gold)


def test_bad_input_raises_and_leaves_no_hook(tiny: LensModel) -> None:
    prompts = icl_prompts(tiny, "parity", ICLPromptConfig(n_demonstrations=2, n_prompts=3))
    with pytest.raises(UserInputError, match="layer 7 does not exist"):
        kernel_regression_heads(tiny, prompts, KernelRegressionConfig(layers=(0, 7)))
    with pytest.raises(UserInputError, match="is empty"):
        kernel_regression_heads(tiny, dataclasses.replace(prompts, prompts=()))
    with pytest.raises(UserInputError, match="pair task"):
        kernel_regression_heads(tiny, icl_prompts(tiny, "antonyms", ICLPromptConfig(n_demonstrations=2, n_prompts=2)))
    with pytest.raises(UserInputError, match="weighting"):
        KernelRegressionConfig(weightings=("span_mx",))
    # An error inside the forward pass, while the hooks are attached: a token outside the vocabulary.
    broken = dataclasses.replace(prompts[0], tokens=(*prompts[0].tokens[:-1], 10**6))
    with pytest.raises(UserInputError, match="token ids"):
        kernel_regression_heads(tiny, dataclasses.replace(prompts, prompts=(prompts[1], broken)))
    assert tiny.hooks.attached_count() == 0 and tiny.hooks.active() == []
    with pytest.raises(UserInputError, match="not in this result"):
        kernel_regression_heads(tiny, prompts).interval("span_max", "L2.H0")


def _synthetic(split: str, best: tuple[int, int]) -> KernelRegressionHeads:
    """A result of 4 prompts on a 2-layer, 2-head model where only head ``best`` follows gold."""
    gold = torch.tensor([0, 1, 0, 1])
    demo_labels = torch.tensor([[0, 1]] * 4)
    weights = torch.full((1, 4, 2, 2, 2), 0.5)
    weights[0, :, :, :, 0] = 0.6  # every head votes label 0...
    weights[0, :, best[0], best[1], :] = torch.stack([1.0 - gold, gold.float()], -1)
    hits = (kr_predictions(weights[0], demo_labels, 2) == gold[:, None, None]).float().mean(0)
    return KernelRegressionHeads(
        values=torch.stack([hits, hits])[None], axes=("weighting", "measure", "layer", "head"),
        labels=(("span_max",), ("accuracy", "agreement"), ("0", "1"), ("H0", "H1")),
        meta=Meta(model="m", sink=None), task="t", split=split, label_names=("x", "y"), similarity="char_ngram",
        demo_weights=weights, demo_logits=torch.zeros(0), label_logits=torch.nn.functional.one_hot(gold, 2).float(),
        demo_labels=demo_labels, gold=gold, baseline_similarity=torch.ones(4, 2), predicted_similarity=torch.zeros(0),
    )


def test_heads_are_chosen_on_dev_and_only_reported_on_held_out() -> None:
    dev, held_out = _synthetic("dev", (1, 0)), _synthetic("held_out", (0, 1))
    choice = choose_kr_heads({"t": dev})
    assert choice.task_best["span_max"]["t"] == Head(1, 0) == choice.overall_best["span_max"]
    table = kr_table(choice, {"t": held_out})
    # Held-out's own best head is L0.H1, but the table reports dev's choice, at its held-out score.
    assert table.heads[table.axis_labels(0).index("task_best:span_max")] == ("L1.H0",)
    assert table.cell("task_best:span_max", "t").estimate == 0.5
    assert table.cell("icl", "t").estimate == 1.0 and table.cell("icl", "t").n == 4
    with pytest.raises(UserInputError, match="held_out"):
        choose_kr_heads({"t": held_out})
    with pytest.raises(UserInputError, match="no head chosen"):
        kr_table(choice, {"other": held_out})


def test_the_benchmark_writes_rows_its_renderer_lays_out_like_the_tutorial() -> None:
    from tests.fixtures import benchmark_script

    bench = benchmark_script("icl_kernel")
    harness, doc_tables = (__import__(name) for name in ("harness", "doc_tables"))
    run = harness.start(bench.__doc__, bench.__file__, flags=bench.add_flags, out=bench.data_file,
                        argv=["--quick", "--threads", str(torch.get_num_threads())])
    assert bench.settings(run.args).model == "toy-2l" and run.out.name == "icl_kernel_toy-2l.json"
    table = kr_table(choose_kr_heads({"t": _synthetic("dev", (1, 0))}), {"t": _synthetic("held_out", (0, 1))})
    data = {"model": "m", "tasks": ["t"], "n_prompts": {"t": {"held_out": 4}}, "rows": bench.table_rows(table),
            "kernel_config": {"similarity": "char_ngram", "ngram": 3}, "quoted": bench.QUOTED}
    rendered = doc_tables.RENDERERS["icl_kernel"](data).splitlines()
    assert rendered[0] == "| held-out prompts | t (n=4) |"
    assert "| task-specific best head KR (span max, the paper's) | 0.50 [0.15, 0.85] L1.H0 |" in rendered
    assert "| 0.797 | 0.597 |" in doc_tables.RENDERERS["icl_kernel_quoted"](data)


def test_one_answer_tasks_are_named_where_agreement_is_no_evidence() -> None:
    from tests.fixtures import benchmark_script

    bench = benchmark_script("icl_kernel")
    # The synthetic model answers gold: half x, half y.
    assert bench.majority_answer(_synthetic("held_out", (0, 1))) == {"label": "x", "share": 0.5, "n": 4}
    from doc_tables.icl_kernel import _one_answer

    flat = {"parity": {"label": "even", "share": 1.0, "n": 60}, "topic": {"label": "sports", "share": 0.4, "n": 60}}
    [line] = _one_answer({"model_answers": flat})  # type: ignore[typeddict-item]
    assert "parity ('even' on 100% of 60 prompts)" in line and "topic" not in line
    assert _one_answer({}) == []  # type: ignore[typeddict-item]  # a file written before the field

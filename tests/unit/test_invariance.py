"""Invariance: one text gives the same numbers whatever shares its batch, and the same tokens
whichever entry point it comes in by.

TransformerLens users' commonest complaint is silent numerical drift: a prompt scored in a padded
batch differs from the same prompt alone, or a BOS is added on one code path and not another.
Both would corrupt every result quietly, so they are pinned here, on the toy models.

1. Ragged batches. Every analysis that takes prompts of different token lengths right-pads them
   (``LensModel.pad_batch``): causal attention never lets a real token see the padding after it,
   and rotary or learned positions stay those of the unpadded row. So each prompt's values in a
   batch must equal its values alone. Not bit for bit: a batched matrix product may sum in
   another order, so float32 values agree to ``ATOL`` (measured differences are about 1e-6 on
   values of order 1-10); token choices (argmax, top-k) must agree exactly. Here on toy-2l
   (rotary positions); learned positions are covered on toy-gpt2-2l by the logit-lens test below.

   Checked elsewhere, not repeated here: the logit lens, and with it the tuned lens, which runs the
   same loop (tests/unit/test_lenses.py, ``test_logit_lens_equals_transformer_lens``: a two-prompt
   ragged batch against each prompt run alone through TransformerLens, on both toys); activation collection (test_collect.py,
   ``test_all_positions_equal_a_plain_forward_pass``); EAP / EAP-IG (test_edges.py,
   ``test_scores_do_not_depend_on_batching_or_padding``); generation, ragged batch against one
   prompt at a time (test_generation.py, ``test_a_row_samples_the_same_alone_and_in_a_mixed_batch``;
   greedy under a steer, test_steering.py, ``test_batched_generation_equals_one_prompt_at_a_time``);
   MEMIT's delta fits (test_editing.py, ``test_a_delta_fitted_in_a_batch_equals_it_fitted_alone``);
   patching of same-length pairs (test_patching.py, ``test_batch_of_pairs_is_the_mean_of_single_pairs``).

   Same-length prompts only, by design, so not checked for padding: activation patching and
   attribution patching within one side of the pairs (``to_tokens`` refuses unequal lengths, since
   silent padding would shift positions; named positions align clean with corrupted, checked
   here), path patching, head scores, and key statistics (fixed-length corpus rows). Causal
   tracing takes one prompt; tracing over facts (AIE) traces them one at a time, and its only
   batched step, the known-fact filter, is checked here.

2. One tokenisation. The forward pass, ``encode``, ``encode_batch``, the hook registry's capture,
   patching, tracing, edge prompts, collection, target NLLs, the lenses, generation and the CLI
   must feed the model the same tokens for one text: the sink in front exactly once (also for a
   text that starts with the sink's own text), and no sink at all on a model loaded with
   ``sink=None``. What each path feeds is recorded at ``HookedTransformer.forward``, below every
   lmsci-mi wrapper. Rows the library builds from ids (corpus rows, repeated random tokens) obey
   the same rule, and two ways a sink went missing or appeared are pinned: a sink-free model's
   rows once got the tokenizer's BOS (and its key statistics were cached under the same key as
   the model's with a sink), and a left-padding tokenizer once masked a sink that is the pad token.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import Tensor
from transformer_lens import HookedTransformer

from lmsci_mi import LensModel
from lmsci_mi.circuits import (
    AttributionConfig,
    LogitDiff,
    PatchingConfig,
    TraceConfig,
    attribution_patch,
    causal_trace,
    patch_activations,
)
from lmsci_mi.circuits.aie import known_facts
from lmsci_mi.circuits.edges.graph import edge_graph
from lmsci_mi.circuits.edges.patching import evaluate_circuits, prepare_edge_prompts
from lmsci_mi.circuits.heads import HeadScoreConfig, induction_scores
from lmsci_mi.cli import main
from lmsci_mi.collect import CollectConfig, collect_activations
from lmsci_mi.data import Fact
from lmsci_mi.data.text_corpus import text_chunks
from lmsci_mi.editing.metrics import next_token_top1, target_nll
from lmsci_mi.editing.stats import StatsConfig, key_statistics
from lmsci_mi.generation import GenerationConfig, generate
from lmsci_mi.knowledge.triggers import TriggerConfig, top_coefficients
from lmsci_mi.lenses import LogitLens, direct_logit_attribution, logit_lens
from lmsci_mi.sae.stats import reconstruction_loss
from lmsci_mi.sites import hook_name
from lmsci_mi.steering.evaluate import continuation_nll

ATOL = 1e-5
"""float32 values, batched against alone: the same sums, possibly in another order."""

# 4, 9, 2 and 6 tokens with the sink: the longest row pads the others by up to 7 positions.
PROMPTS = ["The cat sat", "Once upon a time there was a small", "Hi", "A dog ran to the"]
TARGETS = [" mat", " big red barn", " there", " park and back"]  # 1 to 3 tokens


def test_prompts_are_ragged(tiny: LensModel) -> None:
    assert len({len(tiny.encode(p)) for p in PROMPTS}) == len(PROMPTS)


# ------------------------------------------------------------------ 1. ragged batch = alone


def test_direct_logit_attribution(tiny: LensModel) -> None:
    together = direct_logit_attribution(tiny, PROMPTS, " Paris", " London")
    for i, prompt in enumerate(PROMPTS):
        alone = direct_logit_attribution(tiny, prompt, " Paris", " London")
        assert int(together.positions[i]) == int(alone.positions[0]) == len(tiny.encode(prompt)) - 1
        for name in ("per_prompt", "embed", "bias", "logit"):
            torch.testing.assert_close(
                getattr(together, name)[i], getattr(alone, name)[0], atol=ATOL, rtol=0
            )


def test_target_nll_and_next_token(tiny: LensModel) -> None:
    together = target_nll(tiny, PROMPTS, TARGETS)
    alone = torch.cat([target_nll(tiny, [p], [t]) for p, t in zip(PROMPTS, TARGETS, strict=True)])
    torch.testing.assert_close(together, alone, atol=ATOL, rtol=0)
    top = torch.cat([next_token_top1(tiny, [p]) for p in PROMPTS])
    assert torch.equal(next_token_top1(tiny, PROMPTS), top)


def test_steering_continuation_nll(tiny: LensModel) -> None:
    continuations = [tiny.continuation_ids(t) for t in TARGETS]
    nll, count = continuation_nll(tiny, PROMPTS, continuations)
    for i, (prompt, continuation) in enumerate(zip(PROMPTS, continuations, strict=True)):
        one, n = continuation_nll(tiny, [prompt], [continuation])
        assert int(count[i]) == int(n[0]) == len(continuation)
        # A sum of up to 3 float32 log-probabilities of about 11 nats each.
        assert float(nll[i]) == pytest.approx(float(one[0]), abs=ATOL)


def test_known_fact_filter(tiny: LensModel) -> None:
    """AIE's batched step: a fact is known in a ragged batch exactly when it is known alone."""
    facts = []
    for prompt in PROMPTS:
        top = int(tiny(tiny.to_tokens(prompt))[0, -1].argmax())
        answer = tiny.tokenizer.decode([top])
        facts.append(Fact(prompt, prompt.split()[-1], target_true=answer))  # the model's own top-1: known
        facts.append(Fact(prompt, prompt.split()[-1], target_true=" zebra"))  # never its top-1 here
    alone = [f for f in facts if known_facts(tiny, [f])]
    assert known_facts(tiny, facts) == alone == facts[::2]


def test_exact_edge_patching(tiny: LensModel) -> None:
    clean = ["Mary and John: John gave it to", "The cat sat on", "one two three four five"]
    corrupted = ["Mary and John: Mary gave it to", "The dog sat on", "one two three four six"]
    answers, wrongs = [5, 7, 9], [6, 8, 10]
    graph = edge_graph(tiny)
    random = torch.rand(2, *graph.real.shape, generator=torch.Generator().manual_seed(0)) < 0.5
    masks = torch.cat([random & graph.real, graph.full_mask()[None]])
    together = evaluate_circuits(tiny, graph, masks, clean, corrupted, LogitDiff(answers, wrongs))
    for i, pair in enumerate(zip(clean, corrupted, answers, wrongs, strict=True)):
        alone = evaluate_circuits(tiny, graph, masks, pair[0], pair[1], LogitDiff(pair[2], pair[3]))
        torch.testing.assert_close(together.per_prompt[:, i], alone.per_prompt[:, 0], atol=ATOL, rtol=0)
        for name in ("clean_per_prompt", "corrupted_per_prompt"):
            torch.testing.assert_close(
                getattr(together, name)[i], getattr(alone, name)[0], atol=ATOL, rtol=0
            )


@pytest.mark.parametrize(
    ("analysis", "config"),
    [(patch_activations, PatchingConfig), (attribution_patch, AttributionConfig)],
    ids=["exact", "attribution"],
)
def test_patching_pairs_aligned_by_named_positions(
    tiny: LensModel, analysis: Callable[..., object], config: type[PatchingConfig]
) -> None:
    """Clean and corrupted prompts of different lengths, aligned by per-pair named positions:
    the batch's values are the mean of each pair's values alone (padding never happens here)."""
    clean = ["When Mary and John went, John gave it to", "When Anna and Bob went, Bob gave it to"]
    # One word more than the clean prompt: before S2 in the first pair, after it in the second.
    corrupted = [
        "When Mary and John went out, Mary gave it to",
        "When Anna and Bob went, Anna gave it all to",
    ]
    s2 = [8, 7]  # S2 in each corrupted prompt; position 7 in both clean prompts
    assert [tiny.to_str_tokens(c)[p] for c, p in zip(corrupted, s2, strict=True)] == [" Mary", " Anna"]
    answers = [tiny.token_id(" Mary"), tiny.token_id(" Anna")]
    wrongs = [tiny.token_id(" John"), tiny.token_id(" Bob")]
    cfg = config(site="z", positions="each")
    together = analysis(tiny, clean, corrupted, LogitDiff(answers, wrongs), cfg,
                        align={"S2": (7, s2), "END": (-1, -1)})
    alone = [
        analysis(tiny, c, k, LogitDiff(a, w), cfg, align={"S2": (7, p), "END": (-1, -1)}).values
        for c, k, a, w, p in zip(clean, corrupted, answers, wrongs, s2, strict=True)
    ]
    assert together.values.shape == (tiny.cfg.n_layers, 2, tiny.cfg.n_heads)
    torch.testing.assert_close(together.values, (alone[0] + alone[1]) / 2, atol=ATOL, rtol=0)
    assert float(together.values.abs().max()) > 0.01  # the patches do move the metric


def test_neuron_trigger_examples(tiny: LensModel) -> None:
    """Padded batches against one text per forward pass (a budget of one token)."""
    sequences = [tiny.encode(p) for p in PROMPTS]
    neurons = {0: [1, 2, 3], 1: [4, 5]}
    together = top_coefficients(tiny, sequences, neurons, TriggerConfig(n_examples=6))
    alone = top_coefficients(tiny, sequences, neurons, TriggerConfig(n_examples=6, token_budget=1))
    for layer in neurons:
        torch.testing.assert_close(
            together[layer].coefficient, alone[layer].coefficient, atol=ATOL, rtol=0
        )
        assert torch.equal(together[layer].text, alone[layer].text)
        assert torch.equal(together[layer].position, alone[layer].position)


def test_sae_reconstruction_loss(tiny: LensModel) -> None:
    """The loss over ragged held-out rows, batched and one row per pass; zero-ablating the site
    checks that a spliced site sees no padding either."""
    rows = [tiny.encode(p) for p in PROMPTS]
    site = SimpleNamespace(hook=hook_name("resid_post", 0))  # "zero" reads only the SAE's hook
    for mode in ("clean", "zero"):
        together = reconstruction_loss(tiny, site, rows, mode)  # type: ignore[arg-type]
        alone = reconstruction_loss(tiny, site, rows, mode, batch_size=1)  # type: ignore[arg-type]
        assert together == pytest.approx(alone, abs=ATOL)


# ------------------------------------------------------------------ 2. one tokenisation

PLAIN = "The cat sat on the mat"
SINK_TEXT = "<|endoftext|>The cat sat"  # starts with the default sink's own text


@pytest.fixture
def fed(monkeypatch: pytest.MonkeyPatch) -> list[Tensor]:
    """The token tensors every HookedTransformer forward pass receives during the test (float
    inputs, a pass resumed from a residual stream, are not tokens and are left out)."""
    calls: list[Tensor] = []
    forward = HookedTransformer.forward

    def recording(self: HookedTransformer, input: object, *args: object, **kwargs: object) -> object:
        if isinstance(input, Tensor) and not input.is_floating_point():
            calls.append(input.detach().cpu())
        return forward(self, input, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(HookedTransformer, "forward", recording)
    return calls


def _rows(calls: list[Tensor]) -> list[list[int]]:
    return [row.tolist() for call in calls for row in call]


# Each path runs one entry point on one text and returns the token lists it fed the model for
# that text (every recorded forward pass, unless the path says otherwise).


def _forward(lm: LensModel, text: str, fed: list[Tensor], tmp_path: Path) -> list[list[int]]:
    lm(lm.to_tokens(text))
    return _rows(fed)


def _encode(lm: LensModel, text: str, fed: list[Tensor], tmp_path: Path) -> list[list[int]]:
    return [lm.encode(text)]


def _encode_batch(lm: LensModel, text: str, fed: list[Tensor], tmp_path: Path) -> list[list[int]]:
    batch = lm.encode_batch([text + " and then a much longer tail", text])
    return [batch.tokens[1, : int(batch.lengths[1])].tolist()]


def _capture(lm: LensModel, text: str, fed: list[Tensor], tmp_path: Path) -> list[list[int]]:
    """What the registry's capture of the embeddings saw, read back as token ids."""
    with torch.no_grad(), lm.hooks.capture(hook_name("embed")) as cap:
        lm(lm.to_tokens(text))
    # The nearest embedding row of each position: random toy embeddings are far apart.
    return [torch.cdist(cap[hook_name("embed")][0], lm.model.W_E).argmin(-1).tolist()]


def _top_tokens(lm: LensModel, text: str, fed: list[Tensor], tmp_path: Path) -> list[list[int]]:
    lm.top_tokens(text)
    return _rows(fed)


def _patching(lm: LensModel, text: str, fed: list[Tensor], tmp_path: Path) -> list[list[int]]:
    # The clean run and the corrupted base run both hold the text.
    patch_activations(lm, text, text, LogitDiff(5, 6), PatchingConfig(layers=(0,)))
    return _rows(fed)


def _causal_trace(lm: LensModel, text: str, fed: list[Tensor], tmp_path: Path) -> list[list[int]]:
    causal_trace(lm, text, "cat", TraceConfig(n_samples=2, window=1, kinds=("resid",)))
    return _rows(fed)


def _edge_prompts(lm: LensModel, text: str, fed: list[Tensor], tmp_path: Path) -> list[list[int]]:
    longer = text + " and more"
    prompts = prepare_edge_prompts(lm, [text, longer], [text, longer])
    return [prompts.clean[0, : int(prompts.answer_positions[0]) + 1].tolist()]


def _collect(lm: LensModel, text: str, fed: list[Tensor], tmp_path: Path) -> list[list[int]]:
    n = len(lm.encode(text))
    acts = collect_activations(lm, [text], [hook_name("resid_pre", 0)], positions=[list(range(n))],
                               config=CollectConfig(progress=False))
    # A shared prefix is fed first, then the rest: together, the text.
    return [acts.token.tolist(), [t for row in _rows(fed) for t in row]]


def _target_nll(lm: LensModel, text: str, fed: list[Tensor], tmp_path: Path) -> list[list[int]]:
    target_nll(lm, [text], [" mat"])
    return [row[:-1] for row in _rows(fed)]  # less the target's one token


def _logit_lens(lm: LensModel, text: str, fed: list[Tensor], tmp_path: Path) -> list[list[int]]:
    lens = logit_lens(lm, text)
    rows = _rows(fed)
    assert list(lens.tokens[0]) == lm.to_str_tokens(rows[0])  # the result names what was fed
    return rows


def _generate(lm: LensModel, text: str, fed: list[Tensor], tmp_path: Path) -> list[list[int]]:
    lm.generate(text, max_new_tokens=2)
    return _rows(fed[:1])  # the prompt; each later pass feeds one new token


def _cli(lm: LensModel, text: str, fed: list[Tensor], tmp_path: Path) -> list[list[int]]:
    """`lmsci-mi lens logit` loads its own copy of the model, with the same sink choice."""
    sink = "default" if lm.sink_token_id is not None else "none"
    out = tmp_path / "lens.json"
    argv = ["lens", "logit", "--model", "toy-2l", "--device", "cpu", "--sink", sink,
            "--prompt", text, "--out", str(out)]
    assert main(argv) == 0
    rows = _rows(fed)
    assert list(LogitLens.load(out).tokens[0]) == lm.to_str_tokens(rows[0])
    return rows


PATHS: dict[str, Callable[[LensModel, str, list[Tensor], Path], list[list[int]]]] = {
    "forward": _forward,
    "encode": _encode,
    "encode_batch": _encode_batch,
    "capture": _capture,
    "top_tokens": _top_tokens,
    "patching": _patching,
    "causal_trace": _causal_trace,
    "edge_prompts": _edge_prompts,
    "collect": _collect,
    "target_nll": _target_nll,
    "logit_lens": _logit_lens,
    "generate": _generate,
    "cli": _cli,
}


@pytest.mark.parametrize("path", list(PATHS))
def test_every_entry_point_feeds_the_same_tokens(
    tiny: LensModel, fed: list[Tensor], tmp_path: Path, path: str
) -> None:
    bare = LensModel.wrap(tiny.model, tiny.name, sink=None)  # what load_model(sink=None) makes
    sink = tiny.sink_token_id
    # Built from the tokenizer itself, not from lm.encode, which is one of the paths checked.
    words = {text: list(tiny.tokenizer(text, add_special_tokens=False)["input_ids"])
             for text in (PLAIN, SINK_TEXT)}
    assert words[SINK_TEXT][0] == sink and words[PLAIN][0] != sink
    cases = [
        (tiny, PLAIN, [sink, *words[PLAIN]]),  # the sink added once
        (tiny, SINK_TEXT, words[SINK_TEXT]),  # already there: not added a second time
        (bare, PLAIN, words[PLAIN]),  # sink=None: none added
    ]
    for lm, text, expected in cases:
        if path == "cli" and text == SINK_TEXT:
            # Each CLI call builds the whole parser (0.2 s); the command runs the logit lens,
            # whose handling of this text the "logit_lens" path checks.
            continue
        fed.clear()
        seen = PATHS[path](lm, text, fed, tmp_path)
        assert seen, f"{path} fed nothing"
        for tokens in seen:
            assert tokens == expected, f"{path} on {text!r} (sink {lm.sink!r}) fed {tokens}"
        assert lm.hooks.attached_count() == 0


# Given text: the default, the standard library's docstrings, takes a second to gather.
DOCUMENTS = [
    "The quick brown fox jumps over the lazy dog while the cat sleeps in the warm sun. " * 3,
    "A second document follows the first, so the rows cross a document boundary. " * 3,
]


def test_rows_the_library_builds_itself_carry_the_models_sink_only(
    tiny: LensModel, fed: list[Tensor]
) -> None:
    """Corpus rows (key statistics, the tuned lens, SAE data, neuron triggers) and repeated random
    tokens (head scores) are built from ids, not text: they too start with the sink once, and
    with nothing on a sink-free model (no stand-in BOS)."""
    bare = LensModel.wrap(tiny.model, tiny.name, sink=None)
    with_sink = text_chunks(tiny, 40, seq_len=8, documents=DOCUMENTS)
    without = text_chunks(bare, 40, seq_len=8, documents=DOCUMENTS)
    assert with_sink.shape[1] == without.shape[1] == 8
    assert (with_sink[:, 0] == tiny.sink_token_id).all()
    # The same stream of text tokens, with and without a sink in front of each row.
    n = min(with_sink[:, 1:].numel(), without.numel())
    assert torch.equal(without.flatten()[:n], with_sink[:, 1:].flatten()[:n])
    config = HeadScoreConfig(n_sequences=2, half_length=5)
    for lm, front in ((tiny, 1), (bare, 0)):
        fed.clear()
        induction_scores(lm, None, config)
        rows = torch.cat(fed)
        assert rows.shape == (2, front + 10)  # the sink, if any, then two halves of 5 tokens
        assert bool((rows[:, 0] == tiny.sink_token_id).all()) == (front == 1)
        assert torch.equal(rows[:, front : front + 5], rows[:, front + 5 :])


def test_key_statistics_of_a_sink_free_model_are_its_own(tiny: LensModel, tmp_path: Path) -> None:
    """Key statistics are cached by the weights behind the keys; a sink-free model's rows have no
    sink, so its statistics differ and must never be read from (or for) the model with one."""
    bare = LensModel.wrap(tiny.model, tiny.name, sink=None)
    config = StatsConfig(n_tokens=30, seq_len=16)
    with_sink = key_statistics(tiny, 0, config, text=DOCUMENTS, cache_dir=tmp_path)
    without = key_statistics(bare, 0, config, text=DOCUMENTS, cache_dir=tmp_path)
    assert without.meta.sink is None and with_sink.meta.sink == tiny.sink
    assert not torch.allclose(without.values, with_sink.values)
    assert len(list(tmp_path.rglob("mom2-*.json"))) == 2
    # The sink-free model reads its own entry back, not the other's.
    again = key_statistics(bare, 0, config, text=DOCUMENTS, cache_dir=tmp_path)
    torch.testing.assert_close(again.values, without.values)


def test_a_left_padding_tokenizer_does_not_mask_a_sink_that_is_the_pad_token(
    tiny: LensModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TransformerLens tokenizer set to pad on the left makes every forward pass without a mask
    infer one from the pad id; a sink that shares that id was masked out there, but attended in
    generation (which passes its own mask)."""
    monkeypatch.setattr(tiny.model.tokenizer, "padding_side", "left")  # restored after the test
    lm = LensModel.wrap(tiny.model, tiny.name, sink=tiny.model.tokenizer.pad_token_id)
    assert lm.encode("The cat sat")[0] == lm.tokenizer.pad_token_id
    with torch.no_grad():
        forward = lm(lm.to_tokens("The cat sat"))[0, -1].cpu()
    greedy = GenerationConfig(max_new_tokens=1, temperature=0.0)
    generated = generate(lm, ["The cat sat"], greedy, keep_logits=True).logits
    assert generated is not None
    torch.testing.assert_close(forward, generated[0][0], atol=ATOL, rtol=0)

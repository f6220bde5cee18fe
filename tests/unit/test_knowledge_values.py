"""FFN key-value memories (lmsci_mi.knowledge): value projections, trigger examples, sub-updates and
the agreement curve, checked against hand computations on tiny random models."""

from __future__ import annotations

import copy

import pytest
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from lmsci_mi import LensModel
from lmsci_mi.cli import main
from lmsci_mi.knowledge import (
    AgreementConfig,
    SubUpdateConfig,
    SubUpdates,
    TriggerConfig,
    ValueVectorConfig,
    key_value_agreement,
    sub_updates,
    trigger_examples,
    value_vectors,
)
from lmsci_mi.loading import TOY_MODELS
from lmsci_mi.sites import hook_name

TEXTS = [
    "The cat sat on the mat and looked at the door.",
    "Paris is the capital of France, and Rome is the capital of Italy.",
    "def add(a, b): return a + b",
    "One two three four five six seven eight nine ten.",
    "A short one.",
]


def _random_gains(lm: LensModel) -> LensModel:
    """Norm weights away from 1, so a missing or doubled gain changes the numbers."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in lm.model.named_parameters():
            if name.endswith(".w") and "ln" in name:
                param.copy_(0.5 + torch.rand(param.shape, generator=generator))
    return lm


@pytest.fixture
def gained(tiny: LensModel) -> LensModel:
    return _random_gains(tiny)


@pytest.fixture
def post_norm(tiny: LensModel) -> LensModel:
    """toy-2l with Gemma 3's extra norms after attention and after the MLP."""
    cfg = HookedTransformerConfig(
        **{**TOY_MODELS["toy-2l"], "use_normalization_before_and_after": True}, device="cpu"
    )
    model = HookedTransformer(cfg, tokenizer=tiny.tokenizer, move_to_device=True).eval()
    lm = LensModel(
        model,
        name="toy-post-norm",
        source="test",
        tokenizer=tiny.tokenizer,
        sink_token_id=tiny.sink_token_id,
    )
    return _random_gains(lm)


def test_value_projection_equals_hand_computation(post_norm: LensModel) -> None:
    m = post_norm.model
    vv = value_vectors(post_norm, 1, [7, 40], ValueVectorConfig(top_k=5))
    for n, neuron in enumerate((7, 40)):
        value = m.blocks[1].mlp.W_out[neuron].detach()
        normed = (value * m.blocks[1].ln2_post.w * m.ln_final.w) @ m.W_U
        raw = value @ m.W_U
        for p, logits in enumerate((normed, raw)):
            top, bottom = logits.detach().topk(5), logits.detach().topk(5, largest=False)
            assert torch.equal(vv.token_ids[n, p, 0], top.indices)
            assert torch.equal(vv.token_ids[n, p, 1], bottom.indices)
            torch.testing.assert_close(vv.values[n, p, 0], top.values, rtol=1e-5, atol=1e-5)
    assert vv.post_norm and vv.projections == ("normed", "raw")
    frame = vv.to_dataframe()
    assert len(frame) == 2 * 2 * 2 * 5 and frame["token"].iloc[0] == vv.tokens[0]


def test_folded_model_gives_the_same_normed_projection(gained: LensModel) -> None:
    folded = LensModel(
        copy.deepcopy(gained.model),
        name="folded",
        source="test",
        tokenizer=gained.tokenizer,
        sink_token_id=gained.sink_token_id,
    )
    folded.model.process_weights_(fold_ln=True, center_writing_weights=False, center_unembed=False)
    unfolded_vv = value_vectors(gained, 1, [3, 9])
    folded_vv = value_vectors(folded, 1, [3, 9])
    assert folded_vv.folded and folded_vv.projections == ("normed",)
    assert not unfolded_vv.folded
    torch.testing.assert_close(
        folded_vv.values[:, 0], unfolded_vv.values[:, 0], rtol=1e-4, atol=1e-4
    )
    assert "fold_ln=False" in folded_vv.summary()


def _frozen_readout_check(lm: LensModel, result: SubUpdates, prompt: str) -> None:
    """Embedding + every attention and MLP output, read through the frozen final norm, give the
    logit; the MLP part is the sub-updates plus the output biases."""
    tokens = lm.to_tokens(prompt)
    names = [hook_name("embed"), hook_name("ln_final_scale")]
    names += [
        hook_name(s, layer) for layer in range(lm.cfg.n_layers) for s in ("attn_out", "mlp_out")
    ]
    with torch.no_grad(), lm.hooks.capture(names) as cap:
        lm(tokens)
    pos = result.position
    u = lm.model.ln_final.w.detach() * lm.model.W_U.detach()[:, result.target_id]
    u = u / cap[hook_name("ln_final_scale")][0, pos]
    mlp = torch.stack(
        [cap[hook_name("mlp_out", layer)][0, pos] @ u for layer in range(lm.cfg.n_layers)]
    )
    mlp = mlp.cpu()
    torch.testing.assert_close(result.mlp_total, mlp, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(result.values.sum(1) + result.bias, mlp, rtol=1e-4, atol=1e-4)
    attn = sum(cap[hook_name("attn_out", layer)][0, pos] @ u for layer in range(lm.cfg.n_layers))
    total = cap[hook_name("embed")][0, pos] @ u + attn + mlp.sum()
    assert float(total) == pytest.approx(result.logit, abs=1e-3)


@pytest.mark.parametrize("model", ["gained", "post_norm"])
def test_sub_updates_sum_to_the_mlp_contribution(
    model: str, request: pytest.FixtureRequest
) -> None:
    lm = request.getfixturevalue(model)
    prompt = "The Eiffel Tower is located in the city of"
    result = sub_updates(lm, prompt, SubUpdateConfig(target=" Paris", top_k=5))
    assert result.target == " Paris" and result.position == len(lm.encode(prompt)) - 1
    _frozen_readout_check(lm, result, prompt)
    assert 0 < result.mass_share() <= 1
    raising = sum(c for _, c, _ in result.top(5))
    assert result.top_share == pytest.approx(raising / float(result.mlp_total.sum()), rel=1e-5)


def _brute_force_triggers(
    lm: LensModel, layer: int, neuron: int, n: int, sign: str
) -> list[tuple[float, int, int]]:
    rows = []
    for t, text in enumerate(TEXTS):
        with torch.no_grad(), lm.hooks.capture(hook_name("mlp_post", layer)) as cap:
            lm(lm.to_tokens(text))
        coefs = cap[hook_name("mlp_post", layer)][0, :, neuron]
        rows += [(float(coefs[p]), t, p) for p in range(1, len(coefs))]  # never the sink
    key = {"magnitude": abs, "positive": lambda c: c, "negative": lambda c: -c}[sign]
    return sorted(rows, key=lambda row: -key(row[0]))[:n]


@pytest.mark.parametrize("sign", ["magnitude", "negative"])
def test_triggers_equal_a_per_text_loop(tiny: LensModel, sign: str) -> None:
    # token_budget 40 splits the texts over several padded batches
    cfg = TriggerConfig(n_examples=6, sign=sign, token_budget=40, window=3)
    result = trigger_examples(tiny, 1, [5, 77], TEXTS, cfg)
    for n, neuron in enumerate((5, 77)):
        expected = _brute_force_triggers(tiny, 1, neuron, 6, sign)
        assert [(t, p) for _, t, p in expected] == list(
            zip(result.text_index[n].tolist(), result.position[n].tolist(), strict=True)
        )
        torch.testing.assert_close(
            result.values[n], torch.tensor([c for c, _, _ in expected]), rtol=1e-4, atol=1e-5
        )
    if sign == "negative":
        assert (result.values < 0).all()
    t, p = int(result.text_index[0, 0]), int(result.position[0, 0])
    assert result.contexts[0].endswith(f"[{tiny.to_str_tokens(TEXTS[t])[p]}]")


def test_a_negative_coefficient_promotes_the_bottom_tokens(tiny: LensModel) -> None:
    prompt = "Paris is the capital of France"
    with torch.no_grad(), tiny.hooks.capture(hook_name("mlp_post", 1)) as cap:
        tiny(tiny.to_tokens(prompt))
    neuron = int(cap[hook_name("mlp_post", 1)][0, -1].argmin())
    vv = value_vectors(tiny, 1, neuron)
    bottom = vv.top_tokens(neuron, "bottom")[0]
    result = sub_updates(tiny, prompt, SubUpdateConfig(target=bottom))
    assert result.coefficients[1, neuron] < 0
    assert result.values[1, neuron] > 0  # negative coefficient x most negative logit
    assert "bottom tokens are then promoted" in vv.summary()


def test_agreement_counts_hits_by_hand(tiny: LensModel) -> None:
    cfg = AgreementConfig(neurons_per_layer=6, n_triggers=3, top_k=50, n_shuffles=3)
    result = key_value_agreement(tiny, TEXTS, cfg)
    assert result.values.shape == (2, 2) and int(result.n_pairs[0]) == 18
    # recount layer 0's own hits from trigger examples and value vectors
    neurons = result.neurons[0].tolist()
    ex = trigger_examples(tiny, 0, neurons, TEXTS, TriggerConfig(n_examples=3, skip_last=True))
    vv = value_vectors(tiny, 0, neurons, ValueVectorConfig(top_k=50))
    hits = []
    for n in range(len(neurons)):
        for r in range(3):
            side = "bottom" if float(ex.values[n, r]) < 0 else "top"
            ids = vv.token_ids[n, 0, ("top", "bottom").index(side)].tolist()
            hits.append(int(ex.next_token_id[n, r]) in ids)
    assert float(result.values[0, 0]) == pytest.approx(sum(hits) / len(hits))
    p = float(result.values[0, 0])
    assert float(result.stderr[0, 0]) == pytest.approx((p * (1 - p) / 18) ** 0.5)


def test_results_round_trip(tmp_path, tiny: LensModel) -> None:
    result = sub_updates(tiny, "Hello there", SubUpdateConfig(top_k=3))
    assert SubUpdates.load(result.save(tmp_path / "su.json")) == result


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda lm: value_vectors(lm, 2, 0), "layer 2 does not exist"),
        (lambda lm: value_vectors(lm, 0, [1, 256]), "neuron 256 does not exist"),
        (lambda lm: trigger_examples(lm, 0, 1, []), "no texts"),
        (lambda lm: sub_updates(lm, "  "), "empty prompt"),
        (lambda lm: sub_updates(lm, "Hi", SubUpdateConfig(target=" ")), "empty continuation"),
        (lambda lm: sub_updates(lm, "Hi", SubUpdateConfig(position=9)), "outside the prompt"),
        (lambda lm: key_value_agreement(lm, TEXTS, AgreementConfig(layers=(3,))), "layer 3"),
    ],
)
def test_bad_input_raises_before_any_hook(tiny: LensModel, call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call(tiny)
    assert tiny.hooks.attached_count() == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["values", "--layer", "5", "--neurons", "1"],
        ["values", "--layer", "0", "--neurons", "9999"],
        ["subupdates", "--prompt", ""],
        ["subupdates", "--prompt", "Hi", "--target", " "],
    ],
)
def test_cli_bad_input_exits_2(argv: list[str]) -> None:
    assert main(["knowledge", *argv[:1], "--model", "toy-2l", *argv[1:]]) == 2


def test_cli_subupdates_writes_its_result(tmp_path) -> None:
    out = tmp_path / "su.json"
    argv = [
        "knowledge",
        "subupdates",
        "--model",
        "toy-2l",
        "--prompt",
        "Hi there",
        "--out",
        str(out),
    ]
    assert main(argv) == 0 and out.exists()


@pytest.mark.slow
def test_eiffel_sub_updates_on_smollm2(clean_smollm2: LensModel) -> None:
    """On SmolLM2 the MLPs' direct effect on ' Paris' is positive, and the frozen-norm
    decomposition closes to the logit."""
    prompt = "The Eiffel Tower is located in the city of"
    result = sub_updates(clean_smollm2, prompt, SubUpdateConfig(target=" Paris"))
    assert float(result.mlp_total.sum()) > 0
    torch.testing.assert_close(
        result.values.sum(1) + result.bias, result.mlp_total, rtol=1e-3, atol=1e-3
    )

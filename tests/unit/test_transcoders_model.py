"""The transcoder model: circuit-tracer's orientation and activations, the set's hooks, bad input."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lmsci_mi import LensModel
from lmsci_mi.errors import UserInputError
from lmsci_mi.transcoders import Transcoder, TranscoderMismatchError, TranscoderSet


def test_forward_is_decode_of_encode_plus_skip_in_circuit_tracers_orientation() -> None:
    tc = Transcoder.random(8, 32, activation="topk", k=4, skip=True, seed=3)
    x = torch.randn(2, 5, 8)
    pre = x @ tc.W_enc.T + tc.b_enc  # W_enc is [d_transcoder, d_model]
    top = pre.topk(4, dim=-1).indices
    acts = torch.zeros_like(pre).scatter(-1, top, pre.gather(-1, top))  # kept as they are
    expected = acts @ tc.W_dec + tc.b_dec + x @ tc.W_skip.T
    torch.testing.assert_close(tc.encode(x), acts)
    torch.testing.assert_close(tc(x), expected)
    assert (tc.encode(x) != 0).sum(-1).eq(4).all()
    assert tc.d_model == 8 and tc.d_transcoder == 32


def test_relu_jumprelu_and_no_skip() -> None:
    x = torch.randn(6, 8)
    relu = Transcoder.random(8, 16, activation="relu", skip=False)
    assert relu.W_skip is None and relu.k is None
    torch.testing.assert_close(relu.encode(x), F.relu(F.linear(x, relu.W_enc, relu.b_enc)))
    torch.testing.assert_close(relu.skip(x), torch.zeros_like(x))
    jump = Transcoder.random(8, 16, activation="jumprelu", skip=False)
    pre = F.linear(x, jump.W_enc, jump.b_enc)
    torch.testing.assert_close(jump.encode(x), pre * (pre > jump.threshold))
    assert (jump.threshold > 0).all()


def test_set_hooks_and_bad_input(tiny: LensModel) -> None:
    tcs = TranscoderSet.random(tiny, 16, k=2)
    assert sorted(tcs) == [0, 1] and tcs.model_name == tiny.name
    assert tcs.hook_names(1) == ("blocks.1.ln2.hook_normalized", "blocks.1.hook_mlp_out")
    tiny.hooks.resolve(list(tcs.hook_names(0)))  # real hook points of the model
    tcs.check(tiny)
    with pytest.raises(TranscoderMismatchError, match=r"no transcoder for layer 5.*covers layers \[0, 1\]"):
        tcs[5]
    assert 1 in tcs and 5 not in tcs and True not in tcs  # a membership test is no error
    with pytest.raises(TranscoderMismatchError, match="width 64"):
        tcs[0].encode(torch.zeros(3, 32))
    narrow = TranscoderSet({0: Transcoder.random(32, 16)}, model_name=tiny.name)
    with pytest.raises(TranscoderMismatchError, match="d_model 64"):
        narrow.check(tiny)
    with pytest.raises(UserInputError, match=r"k in 1\.\.16"):
        Transcoder(8, 16, activation="topk", k=None)
    with pytest.raises(UserInputError, match="unknown site"):
        TranscoderSet({0: Transcoder.random(8, 16)}, input_site="mlp_inn")


def test_the_target_is_what_the_block_adds_after_gemmas_post_mlp_norm(tiny_post_norm: LensModel) -> None:
    from lmsci_mi.transcoders.data import harvest_pairs

    rows = [tiny_post_norm.encode("The cat sat on the mat")]
    x, y = harvest_pairs(tiny_post_norm, rows, [0])[0]
    block = tiny_post_norm.model.blocks[0]
    mlp_in = x * block.ln2.w  # hook_normalized comes before the (unfolded) norm's weight
    torch.testing.assert_close(block.ln2_post(block.mlp(mlp_in[None]))[0], y)  # after ln2_post
    assert not torch.allclose(block.mlp(mlp_in[None])[0], y)


def test_a_post_norm_block_is_refused(tiny: LensModel, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tiny.cfg, "original_architecture", "Olmo2ForCausalLM")
    with pytest.raises(TranscoderMismatchError, match="resid_mid"):
        TranscoderSet.random(tiny, 16).check(tiny)

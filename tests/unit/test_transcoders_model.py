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
    with pytest.raises(TranscoderMismatchError, match="width 64"):
        tcs[0].encode(torch.zeros(3, 32))
    narrow = TranscoderSet({0: Transcoder.random(32, 16)}, model_name=tiny.name)
    with pytest.raises(TranscoderMismatchError, match="d_model 64"):
        narrow.check(tiny)
    with pytest.raises(UserInputError, match=r"k in 1\.\.16"):
        Transcoder(8, 16, activation="topk", k=None)
    with pytest.raises(UserInputError, match="unknown site"):
        TranscoderSet({0: Transcoder.random(8, 16)}, input_site="mlp_inn")

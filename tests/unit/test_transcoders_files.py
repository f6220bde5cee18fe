"""Transcoder files: circuit-tracer's format round-trips bit for bit, the compact form keeps the
live latents to float16 precision and a dropped latent never fires, bad files are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from lmsci_mi.errors import UserInputError
from lmsci_mi.transcoders import Transcoder, TranscoderSet
from lmsci_mi.transcoders.files import (
    expand_transcoders,
    load_circuit_tracer,
    save_circuit_tracer,
    save_compact,
)


def _set(activation: str) -> TranscoderSet:
    layers = {i: Transcoder.random(8, 32, activation=activation, k=4, skip=activation != "relu", seed=i)  # type: ignore[arg-type]
              for i in range(2)}
    return TranscoderSet(layers, model_name="toy")


@pytest.mark.parametrize("activation", ["topk", "relu", "jumprelu"])
def test_circuit_tracer_round_trip_is_exact(tmp_path: Path, activation: str) -> None:
    tcs = _set(activation)
    save_circuit_tracer(tcs, tmp_path)
    tensors = load_file(str(tmp_path / "layer_1.safetensors"))
    assert tensors["W_enc"].shape == (32, 8) and tensors["W_dec"].shape == (32, 8)  # [d_tc, d_model]
    assert ("activation_function.threshold" in tensors) == (activation == "jumprelu")
    assert ("W_skip" in tensors) == (activation != "relu") and "k" not in tensors
    config = (tmp_path / "config.yaml").read_text()
    assert "feature_input_hook: ln2.hook_normalized" in config
    assert "feature_output_hook: hook_mlp_out" in config
    back = load_circuit_tracer(tmp_path)
    assert (back.input_site, back.output_site, back.model_name) == ("mlp_in_normed", "mlp_out", "toy")
    x = torch.randn(5, 8)
    for layer in tcs:
        ours, theirs = tcs[layer].state_dict(), back[layer].state_dict()
        assert ours.keys() == theirs.keys()
        assert all(torch.equal(ours[k], theirs[k]) for k in ours)
        assert (back[layer].activation, back[layer].k) == (tcs[layer].activation, tcs[layer].k)
        assert torch.equal(back[layer](x), tcs[layer](x))


def test_compact_keeps_live_latents_and_drops_the_rest(tmp_path: Path) -> None:
    tcs = _set("topk")
    with torch.no_grad():
        tcs[0].W_dec[:10] = 0  # latents 0..9 never learned anything
    save_compact(tcs, tmp_path)
    back = expand_transcoders(tmp_path)
    assert back[0].d_transcoder == 32 and torch.equal(back[0].W_dec[:10], torch.zeros(10, 8))
    torch.testing.assert_close(back[0].W_enc[10:], tcs[0].W_enc[10:], atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(back[1].W_skip, tcs[1].W_skip, atol=1e-3, rtol=1e-3)
    assert torch.equal(back[1].b_enc, tcs[1].b_enc)  # biases stay float32
    acts = back[0].encode(torch.randn(50, 8))
    assert not acts[:, :10].any() and (acts != 0).sum(-1).eq(4).all()


def test_bad_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no circuit-tracer transcoders"):
        load_circuit_tracer(tmp_path)
    (tmp_path / "config.yaml").write_text("model_kind: cross_layer_transcoder\n")
    with pytest.raises(UserInputError, match="only per-layer"):
        load_circuit_tracer(tmp_path)
    gap = TranscoderSet({1: Transcoder.random(8, 16)})
    with pytest.raises(UserInputError, match="every layer from 0"):
        save_circuit_tracer(gap, tmp_path / "gap")

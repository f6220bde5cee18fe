"""Feature interventions on the real forward pass: setting a feature adds (value − a)·W_dec at its
MLP output, the transcoder's error kept; bad input is refused with nothing attached."""

from __future__ import annotations

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.circuits.graphs import InterventionEffect, feature_intervention
from lmsci_mi.circuits.graphs.replacement import last_logits
from lmsci_mi.errors import UserInputError
from lmsci_mi.transcoders import TranscoderSet

PROMPT = "The cat sat"


def _active_feature(lm: LensModel, tcs: TranscoderSet, layer: int, position: int) -> tuple[int, float]:
    tokens = lm.to_tokens(PROMPT)
    source = tcs.hook_names(layer)[0]
    with torch.no_grad(), lm.hooks.capture(source) as cap:
        lm.model(tokens)
        acts = tcs[layer].encode(cap[source])[0, position]
    index = int(acts.abs().argmax())
    return index, float(acts[index])


def test_setting_a_feature_adds_its_decoder_row(tiny: LensModel, tmp_path) -> None:
    tcs = TranscoderSet.random(tiny, 64, k=4)
    index, activation = _active_feature(tiny, tcs, 0, 2)
    unchanged = feature_intervention(tiny, tcs, PROMPT, [(0, 2, index, activation)])
    assert unchanged.values.abs().max() < 1e-5  # its own value: nothing moves
    effect = feature_intervention(tiny, tcs, PROMPT, [(0, 2, index, 0.0)], token_ids=[3, 4, 5])
    # Ablating = adding −a·W_dec at layer 0's MLP output, position 2; the rest of the model runs.
    tokens = tiny.to_tokens(PROMPT)
    vector = -activation * tcs[0].W_dec[index].detach()
    with torch.no_grad(), tiny.hooks.add_vector(tcs.hook_names(0)[1], vector, positions=[2]):
        expected = last_logits(tiny, tokens)[0]
    expected = expected.cpu()
    torch.testing.assert_close(effect.new_logits, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(effect.values, (expected - effect.clean_logits)[[3, 4, 5]])
    assert effect.token_ids.tolist() == [3, 4, 5] and effect.freeze == "none"
    assert InterventionEffect.load(effect.save(tmp_path / "effect.json")) == effect
    assert tiny.hooks.attached_count() == 0


def test_frozen_attention_differs_from_the_real_model(tiny: LensModel) -> None:
    tcs = TranscoderSet.random(tiny, 64, k=4)
    index, activation = _active_feature(tiny, tcs, 0, 1)
    steer = [(0, 1, index, 4 * activation)]
    real = feature_intervention(tiny, tcs, PROMPT, steer, token_ids=[3])
    frozen = feature_intervention(tiny, tcs, PROMPT, steer, token_ids=[3], freeze="attention")
    direct = feature_intervention(tiny, tcs, PROMPT, steer, token_ids=[3], freeze="all")
    assert len({float(real.values[0]), float(frozen.values[0]), float(direct.values[0])}) == 3
    assert tiny.hooks.attached_count() == 0


def test_bad_interventions_attach_nothing(tiny: LensModel) -> None:
    tcs = TranscoderSet.random(tiny, 64, k=4)
    partial = TranscoderSet({0: tcs[0]}, model_name=tiny.name)
    cases = [
        (tcs, [(0, 1, 64, 1.0)], "feature 64 is out of range"),
        (tcs, [(0, 9, 3, 1.0)], "position 9 is out of range"),
        (tcs, [(0, 1, 3, float("nan"))], "finite"),
        (tcs, [], "no interventions"),
        (partial, [(1, 1, 3, 1.0)], "no transcoder for layer 1"),
    ]
    for transcoders, interventions, message in cases:
        with pytest.raises(UserInputError, match=message):
            feature_intervention(tiny, transcoders, PROMPT, interventions)
        assert tiny.hooks.attached_count() == 0
    with pytest.raises(UserInputError, match="freeze must be one of"):
        feature_intervention(tiny, tcs, PROMPT, [(0, 1, 3, 1.0)], freeze="some")  # type: ignore[arg-type]
    with pytest.raises(UserInputError, match="over the budget"):
        feature_intervention(tiny, tcs, PROMPT, [(0, 1, 3, 1.0)], max_tokens=2)
    assert tiny.hooks.attached_count() == 0

"""Transcoder metrics: a transcoder that outputs nothing recovers none of the loss, one that is the
MLP recovers all of it; bad input raises before anything is attached, and nothing is left attached
(weights untouched) when a transcoder fails mid-run."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from lmsci_mi import LensModel
from lmsci_mi.errors import UserInputError
from lmsci_mi.transcoders import Transcoder, TranscoderMismatchError, TranscoderSet
from lmsci_mi.transcoders.metrics import (
    MEASURES,
    TranscoderMetrics,
    clean_losses,
    transcoder_metrics,
)
from tests.fixtures import weights_fingerprint


class _TheMLP(Transcoder):
    """A 'transcoder' whose skip is the block's own MLP (its latents add nothing): exact."""

    def __init__(self, lm: LensModel, layer: int) -> None:
        super().__init__(lm.cfg.d_model, 16, activation="relu")
        self.mlp = lm.model.blocks[layer].mlp
        self.norm_weight = getattr(lm.model.blocks[layer].ln2, "w", None)

    def skip(self, x: Tensor) -> Tensor:
        # ln2.hook_normalized comes before the norm's weight where it is not folded
        return self.mlp(x if self.norm_weight is None else x * self.norm_weight)


def _rows(lm: LensModel) -> list[list[int]]:
    texts = ("The cat sat on the mat and looked", "A dog ran to the park", "Rain fell all day long")
    return [lm.encode(t) for t in texts]


def test_nothing_recovers_nothing_and_the_mlp_recovers_everything(tiny: LensModel) -> None:
    silent = Transcoder(tiny.cfg.d_model, 16, activation="relu")  # every weight zero
    tcs = TranscoderSet({0: silent, 1: _TheMLP(tiny, 1)}, model_name=tiny.name)
    m = transcoder_metrics(tiny, tcs, _rows(tiny), n_resamples=20)
    zero, exact = m.layers
    assert zero.loss_spliced == zero.loss_zero and zero.loss_recovered.estimate == 0.0
    assert zero.l0.estimate == 0.0 and zero.dead_fraction.estimate == 1.0
    assert exact.loss_spliced == pytest.approx(exact.loss_clean, abs=1e-5)
    assert exact.loss_recovered.estimate == pytest.approx(1.0, abs=1e-4)
    assert exact.explained_variance.estimate == pytest.approx(1.0, abs=1e-5)
    assert exact.loss_zero != exact.loss_clean and exact.n_tokens == sum(len(r) - 1 for r in _rows(tiny))
    assert m.values.shape == (2, len(MEASURES)) and m.labels[0] == ("0", "1")
    assert tiny.hooks.attached_count() == 0
    assert "loss recovered" in m.summary()


def test_result_round_trips(tiny: LensModel, tmp_path: object) -> None:
    tcs = TranscoderSet.random(tiny, 16, k=2)
    m = transcoder_metrics(tiny, tcs, _rows(tiny), layers=[1], n_resamples=10)
    path = m.save(tmp_path / "m.json")  # type: ignore[operator]
    assert TranscoderMetrics.load(path) == m


def test_clean_losses_computed_once_give_the_same_layer(tiny: LensModel) -> None:
    tcs = TranscoderSet.random(tiny, 16, k=2)
    clean = clean_losses(tiny, _rows(tiny))
    given = transcoder_metrics(tiny, tcs, _rows(tiny), layers=[1], n_resamples=10, clean=clean)
    assert given == transcoder_metrics(tiny, tcs, _rows(tiny), layers=[1], n_resamples=10)
    with pytest.raises(UserInputError, match="one per row"):
        transcoder_metrics(tiny, tcs, _rows(tiny), layers=[1], clean=clean[:1])


def test_bad_input_and_a_failure_leave_nothing_attached(tiny: LensModel, monkeypatch: pytest.MonkeyPatch) -> None:
    before = weights_fingerprint(tiny)
    tcs = TranscoderSet.random(tiny, 16, k=2)
    with pytest.raises(TranscoderMismatchError, match="no transcoder for layer 3"):
        transcoder_metrics(tiny, tcs, _rows(tiny), layers=[3])
    narrow = TranscoderSet({0: Transcoder.random(32, 16)}, model_name=tiny.name)
    with pytest.raises(TranscoderMismatchError, match="d_model 64"):
        transcoder_metrics(tiny, narrow, _rows(tiny))

    def broken(self: Transcoder, x: Tensor) -> Tensor:
        raise RuntimeError("transcoder failed")

    monkeypatch.setattr(Transcoder, "forward", broken)
    with pytest.raises(RuntimeError, match="transcoder failed"):
        transcoder_metrics(tiny, tcs, _rows(tiny), n_resamples=5)
    assert tiny.hooks.attached_count() == 0
    assert weights_fingerprint(tiny) == before
    assert torch.equal(tcs[0].W_enc, TranscoderSet.random(tiny, 16, k=2)[0].W_enc)

"""Transcoder training: it lowers the loss, a stopped run resumes to the same weights, Dunefsky's
variant keeps unit decoder rows, and the per-layer cache trains each layer once."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.errors import UserInputError
from lmsci_mi.transcoders import train as train_module
from lmsci_mi.transcoders.data import TranscoderDataConfig
from lmsci_mi.transcoders.train import TranscoderTrainConfig, train_transcoder, train_transcoders


def _pairs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(1024, 16, generator=generator)
    return x, torch.relu(x @ torch.randn(16, 16, generator=generator)) + 0.1 * x


# AuxK on (a latent is dead after 256 tokens without firing), so its counter is resumed too.
CONFIG = TranscoderTrainConfig(n_latents=64, k=4, batch_size=128, training_tokens=128 * 40,
                               warmup=4, lr=1e-2, checkpoint_every=10, dead_tokens=256)


def test_training_lowers_the_loss_and_a_stopped_run_resumes_to_the_same_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    x, y = _pairs()
    whole, record = train_transcoder(x, y, CONFIG, threads=1)
    assert record.steps == 40 and record.final_loss(5) < 0.6 * record.losses[0]
    original = train_module._Batches.__call__

    def stop_at_25(self: object, step: int, batch_size: int) -> object:
        if step == 25:
            raise KeyboardInterrupt
        return original(self, step, batch_size)  # type: ignore[arg-type]

    monkeypatch.setattr(train_module._Batches, "__call__", stop_at_25)
    with pytest.raises(KeyboardInterrupt):
        train_transcoder(x, y, CONFIG, checkpoints=tmp_path, threads=1)
    monkeypatch.setattr(train_module._Batches, "__call__", original)
    resumed, again = train_transcoder(x, y, CONFIG, checkpoints=tmp_path, threads=1)
    assert again.resumed_from == 20 and again.losses == record.losses
    for name, value in whole.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[name]), name


def test_dunefsky_variant_relu_l1_unit_decoder_rows() -> None:
    x, y = _pairs()
    config = TranscoderTrainConfig.dunefsky(n_latents=64, batch_size=128, training_tokens=128 * 30,
                                            warmup=3, lr=4e-3, checkpoint_every=0)
    tc, record = train_transcoder(x, y, config, threads=1)
    assert tc.activation == "relu" and tc.W_skip is None
    assert record.final_loss(5) < record.losses[0]
    torch.testing.assert_close(tc.W_dec.norm(dim=-1), torch.ones(64))
    with pytest.raises(UserInputError, match="warm-up"):
        TranscoderTrainConfig(training_tokens=4096 * 10)  # 10 steps, 1,000 warm-up steps


def test_each_layer_trains_once_then_comes_from_the_cache(
    tiny: LensModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path))
    data = TranscoderDataConfig(train_tokens=600, held_out_tokens=64, seq_len=32)
    config = TranscoderTrainConfig(n_latents=32, k=4, batch_size=128, training_tokens=128 * 4,
                                   warmup=1, checkpoint_every=0)
    tcs, records = train_transcoders(tiny, data, config, layers=[1])
    assert sorted(tcs) == [1] and records[1].steps == 4 and records[1].n_train_tokens >= 600
    assert tiny.hooks.attached_count() == 0

    def no_training(*args: object, **kwargs: object) -> None:
        raise AssertionError("trained again")

    monkeypatch.setattr(train_module, "train_transcoder", no_training)
    cached, _ = train_transcoders(tiny, data, config, layers=[1])
    assert torch.equal(cached[1].W_enc, tcs[1].W_enc) and cached.model_name == tiny.name
    with pytest.raises(UserInputError, match="not layers of"):
        train_transcoders(tiny, data, config, layers=[5])
    # no time left: layer 0 does not start, the set holds the cached layer 1 only
    partial, _ = train_transcoders(tiny, data, config, layers=[0, 1], budget_seconds=0)
    assert sorted(partial) == [1]
    with pytest.raises(UserInputError, match="budget"):
        train_transcoders(tiny, data, config, layers=[0], budget_seconds=0)


def test_the_warmup_linear_schedule_decays_from_the_end_of_the_warm_up() -> None:
    from lmsci_mi.training import SCHEDULES, TrainConfig

    run = TrainConfig(steps=10, warmup=2, final_lr_fraction=0.0, schedule="warmup_linear")
    factors = [SCHEDULES.get("warmup_linear").function(step, run) for step in range(10)]
    assert factors == [0.5, 1.0, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125]

"""The training home: a stopped and resumed run ends bitwise where an uninterrupted one does, the
cache trains once, the schedules are the formulas the toys were trained with, and both toy
trainers run on it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from transformer_lens import HookedTransformerConfig

from lmsci_mi import training
from lmsci_mi.training import (
    CHECKPOINT,
    SCHEDULES,
    TrainConfig,
    load_or_train,
    train_model,
    trained_folder,
    training_key,
)

CFG = HookedTransformerConfig(
    n_layers=1, d_model=16, n_ctx=6, d_head=8, d_vocab=7, attn_only=True, device="cpu", seed=3
)
RUN = TrainConfig(steps=9, batch_size=4, lr=1e-2, schedule="cosine", warmup=2, grad_clip=1.0,
                  seed=3, checkpoint_every=3)


def _global_rows(step: int, n: int) -> torch.Tensor:
    # Drawn from the global generator on purpose: a resumed run sees the same rows only if the
    # checkpoint restored the RNG state.
    return torch.randint(0, 7, (n, 6))


def _loss(model, rows: torch.Tensor) -> torch.Tensor:
    return model(rows, return_type="loss")


class _Stop(Exception):
    pass


def _stop_at(at: int):
    def on_step(step: int, model) -> None:
        if step == at:
            raise _Stop

    return on_step


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _stopped(folder: Path) -> None:
    with pytest.raises(_Stop):  # stopped after step 7: the last checkpoint is after step 6
        train_model(CFG, _global_rows, _loss, RUN, checkpoints=folder, threads=1,
                    on_step=_stop_at(7))
    assert (folder / CHECKPOINT).is_file()
    torch.manual_seed(12345)  # the resumed run must not depend on the caller's RNG state


def test_a_stopped_run_resumes_to_bitwise_the_uninterrupted_weights(tmp_path: Path) -> None:
    whole, whole_record = train_model(CFG, _global_rows, _loss, RUN, threads=1)
    _stopped(tmp_path)
    resumed, record = train_model(CFG, _global_rows, _loss, RUN, checkpoints=tmp_path, threads=1)
    assert record.resumed_from == 6 and whole_record.resumed_from == 0
    assert record.losses == whole_record.losses and len(record.losses) == RUN.steps
    whole_state, resumed_state = whole.state_dict(), resumed.state_dict()
    assert all(torch.equal(whole_state[k], resumed_state[k]) for k in whole_state)


def test_without_the_checkpoints_rng_state_a_resumed_run_differs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The check above could fail: here the RNG state is not restored, the rows after step 6
    # differ, and so do the weights.
    whole, _ = train_model(CFG, _global_rows, _loss, RUN, threads=1)
    _stopped(tmp_path)
    monkeypatch.setattr(training, "_set_rng_state", lambda tensors, plain: None)
    resumed, record = train_model(CFG, _global_rows, _loss, RUN, checkpoints=tmp_path, threads=1)
    assert record.resumed_from == 6 and not torch.equal(resumed.W_E, whole.W_E)


def test_the_cache_trains_once_and_resumes_a_checkpoint(empty_cache: Path) -> None:
    folder = trained_folder("demo", f"m-{training_key(1, model={'d': 16}, data={'seed': 3})}")
    calls: list[Path] = []

    def train(checkpoints: Path):
        calls.append(checkpoints)
        model, record = train_model(CFG, _global_rows, _loss, RUN, checkpoints=checkpoints)
        return model, {"run": record.to_dict()}

    def build():
        from transformer_lens import HookedTransformer

        return HookedTransformer(CFG)

    with pytest.raises(FileNotFoundError, match="nothing here"):
        load_or_train(folder, build, train, missing="nothing here")
    model, record = load_or_train(folder, build, train)
    again, cached = load_or_train(folder, build, train)
    assert len(calls) == 1 and cached == json.loads(json.dumps(record))
    assert torch.equal(model.W_E, again.W_E) and not (folder / "checkpoints").exists()
    load_or_train(folder, build, train, retrain=True)
    assert len(calls) == 2


def test_the_schedules_are_the_toys_formulas() -> None:
    toy = TrainConfig(steps=2000, schedule="linear", warmup=100, final_lr_fraction=0.05)
    linear = SCHEDULES.get("linear").function
    for step in (0, 50, 99, 100, 1000, 1999):
        assert linear(step, toy) == min(1.0, (step + 1) / 100) * max(0.05, 1 - step / 2000)
    gpt = TrainConfig(steps=700, schedule="cosine", warmup=50)
    cosine = SCHEDULES.get("cosine").function
    assert cosine(0, gpt) == 1 / 50 and cosine(50, gpt) == 1.0
    assert cosine(699, gpt) == pytest.approx(0.1 + 0.45 * (1 + math.cos(649 / 650 * math.pi)))
    assert SCHEDULES.get("constant").function(5, TrainConfig(warmup=0)) == 1.0


def test_the_toy_induction_model_trains_and_caches_on_the_home(empty_cache: Path) -> None:
    from lmsci_mi.circuits.toy_induction import (
        ToyInductionConfig,
        load_toy_induction,
        train_toy_induction,
        training_record,
    )

    config = ToyInductionConfig(steps=12, batch_size=4)
    lm = load_toy_induction(config, device="cpu")
    trained, record = train_toy_induction(config)
    assert torch.equal(lm.model.W_Q, trained.W_Q)  # seeded: the cached run is the same run
    assert training_record(config)["final_loss"] == record["final_loss"]
    saved = json.loads((Path(lm.source) / "config.json").read_text())
    assert len(saved["run"]["losses"]) == 12 and saved["run"]["losses"][-1] == record["final_loss"]

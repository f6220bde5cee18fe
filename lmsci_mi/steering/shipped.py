"""The LM-Steer sentiment steer of the bundled SmolLM2 that ships with lmsci-mi
(:mod:`lmsci_mi.artefacts`): its builder, used by ``scripts/build_artefacts.py steer`` and by the
test that repeats a small rebuild."""

from __future__ import annotations

from lmsci_mi.artefacts import ARTEFACT_BUILDERS, BuiltArtefact
from lmsci_mi.data.steering_texts import steering_texts
from lmsci_mi.loading import DEFAULT_MODEL, load_model
from lmsci_mi.steering.lm_steer import LMSteer, LMSteerConfig
from lmsci_mi.steering.train import (
    SteerTrainConfig,
    SteerTraining,
    cached_steer_paths,
    train_steer,
)

__all__ = ["SMALL_STEER_TRAINING", "build_steer_artefact"]

SMALL_STEER_TRAINING = SteerTrainConfig(steps=5, batch_tokens=256, progress=False)
"""The small rebuild: the same model, texts, steer and seed, five short steps (seconds)."""


def _figures(steer: LMSteer, training: SteerTraining) -> dict[str, float]:
    # The loss curve's ends and a checksum of every steer weight: any drift shows in one of them.
    weights = sum(float(p.detach().double().abs().sum()) for p in steer.parameters())
    return {
        "first_loss": float(training.values[0]),
        "final_loss": training.final_loss,
        "weight_abs_sum": weights,
    }


@ARTEFACT_BUILDERS.register(
    "steer", SteerTrainConfig, "the LM-Steer sentiment steer of the bundled SmolLM2-135M, seed 0"
)
def build_steer_artefact(*, small: bool, retrain: bool = False) -> BuiltArtefact:
    """Train the default sentiment steer on the bundled model (or read it from the cache unless
    ``retrain``), or with ``small`` the small rebuild :data:`SMALL_STEER_TRAINING` (not cached)."""
    lm = load_model(DEFAULT_MODEL)
    texts = steering_texts("sentiment")
    train_config = SMALL_STEER_TRAINING if small else SteerTrainConfig()
    params = {"model": lm.name, "texts": "sentiment", **LMSteerConfig().params()}
    params.update({f"train.{k}": v for k, v in train_config.params().items()})
    steer_path, record_path = cached_steer_paths(lm, texts, train_config=train_config)
    files = (steer_path, record_path, record_path.with_suffix(".safetensors"))
    if retrain and not small:
        for path in files:
            path.unlink(missing_ok=True)
    steer, training = train_steer(lm, texts, train_config=train_config, cache=not small)
    return BuiltArtefact(() if small else files, params, _figures(steer, training))

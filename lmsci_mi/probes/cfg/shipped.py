"""The CFG GPT that ships with lmsci-mi (:mod:`lmsci_mi.artefacts`): its builder, used by
``scripts/build_artefacts.py cfg`` and by the test that repeats a small rebuild."""

from __future__ import annotations

import torch
from transformer_lens import HookedTransformer

from lmsci_mi.artefacts import ARTEFACT_BUILDERS, BuiltArtefact
from lmsci_mi.data.cfg import CFGConfig, build_grammar
from lmsci_mi.probes.cfg.model import (
    CFGModelConfig,
    CFGTraining,
    cfg_model_folder,
    load_cfg_model,
    train_cfg_model,
)

__all__ = ["SMALL_CFG_MODEL", "build_cfg_artefact"]

SMALL_CFG_MODEL = CFGModelConfig(
    n_layers=2, d_model=32, n_heads=2, batch_size=8, steps=30, warmup=5
)
"""The small rebuild: the same grammar, trainer and seed, a model and a run small enough for a test
(a few seconds)."""


def _figures(model: HookedTransformer, training: CFGTraining) -> dict[str, float]:
    # A checksum of every weight and the final loss: a rebuild that drifts anywhere shows in both.
    weights = sum(float(p.detach().double().abs().sum()) for p in model.parameters())
    return {"final_loss": training.final_loss, "weight_abs_sum": weights}


@ARTEFACT_BUILDERS.register(
    "cfg", CFGModelConfig, "the GPT trained on the default CFG (Physics of LMs Part 1), seed 0"
)
def build_cfg_artefact(*, small: bool, retrain: bool = False) -> BuiltArtefact:
    """Train the default CFG GPT (or read it from the cache unless ``retrain``), or with ``small``
    the small rebuild :data:`SMALL_CFG_MODEL` (not cached, not shipped)."""
    grammar_config = CFGConfig()
    model_config = SMALL_CFG_MODEL if small else CFGModelConfig()
    params = {"grammar": grammar_config.params(), "model": model_config.params()}
    if small:
        torch.manual_seed(0)
        model, training = train_cfg_model(build_grammar(grammar_config), model_config)
        return BuiltArtefact((), params, _figures(model, training))
    lm, training = load_cfg_model(
        grammar_config, model_config, train=True, retrain=retrain, progress=True
    )
    folder = cfg_model_folder(grammar_config, model_config)
    files = (folder / "weights.safetensors", folder / "record.json")
    return BuiltArtefact(files, params, _figures(lm.model, training))

"""The CFG GPT's transcoders, shipped with lmsci-mi in the compact float16 form
(:mod:`lmsci_mi.artefacts`): their builder, used by ``scripts/build_artefacts.py transcoders-cfg``
and by the test that repeats a small rebuild.

The compact form keeps the latents that ever fired in training (a non-zero decoder row) in float16,
biases in float32: about half the float32 files' size. :func:`~lmsci_mi.transcoders.presets.load_transcoders`
expands it when the trained layers are not in the cache.
"""

from __future__ import annotations

from lmsci_mi.artefacts import ARTEFACT_BUILDERS, BuiltArtefact
from lmsci_mi.probes.cfg.model import load_cfg_model
from lmsci_mi.transcoders.files import COMPACT_FILE, COMPACT_META, save_compact
from lmsci_mi.transcoders.presets import TRANSCODER_PRESETS, shipped_compact_folder
from lmsci_mi.transcoders.train import TranscoderTrainConfig, train_transcoders

__all__ = ["SMALL_CFG_TRANSCODERS", "build_cfg_transcoders"]

SMALL_CFG_TRANSCODERS = dict(n_latents=128, k=8, batch_size=256, training_tokens=256 * 20, warmup=2)
"""The small rebuild: the shipped GPT, one layer, a narrow transcoder and 20 steps (seconds)."""


@ARTEFACT_BUILDERS.register(
    "transcoders-cfg", TranscoderTrainConfig,
    "the CFG GPT's per-layer skip transcoders (Paulo et al.'s recipe, the cfg-gpt preset), compact float16",
)
def build_cfg_transcoders(*, small: bool, retrain: bool = False) -> BuiltArtefact:
    """Train the CFG GPT's transcoders at their preset (or read them from the cache unless
    ``retrain``) and write the compact form beside them; with ``small``, a one-layer rebuild of
    :data:`SMALL_CFG_TRANSCODERS` (not cached for shipping, not shipped)."""
    lm = load_cfg_model(train=False)[0]
    preset = TRANSCODER_PRESETS["cfg-gpt"]
    train = TranscoderTrainConfig(**SMALL_CFG_TRANSCODERS) if small else preset.train_config()
    layers = [0] if small else None
    data = preset.data.replace(train_tokens=5_000) if small else preset.data
    tcs, trained = train_transcoders(lm, data, train, layers=layers, retrain=retrain or small, progress=not small)
    params = {"data": data.params(), "train": train.params()}
    figures = {f"final_loss_layer_{i}": record.final_loss for i, record in sorted(trained.items())}
    if small:
        return BuiltArtefact((), params, figures)
    folder = shipped_compact_folder(lm)
    save_compact(tcs, folder)
    return BuiltArtefact((folder / COMPACT_FILE, folder / COMPACT_META), params, figures)

"""Each supported model's transcoder build (the data, the settings that fit this CPU, and why) and
:func:`load_transcoders`, which a user, the CLI and the tour call to get a model's set.

A set comes from the cache, else from the package (the CFG GPT's ships in the compact float16
form, :mod:`lmsci_mi.transcoders.shipped`), else it is built on request (``build=True``, with a
progress bar; ``benchmarks/transcoders.py --model NAME`` builds and measures it). Without
``build`` a missing set is a clear error that names the command and its cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmsci_mi.artefacts import restore_shipped
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.transcoders.data import TranscoderDataConfig
from lmsci_mi.transcoders.files import COMPACT_FILE, COMPACT_META, expand_transcoders
from lmsci_mi.transcoders.model import TranscoderSet
from lmsci_mi.transcoders.train import (
    TranscoderTrainConfig,
    missing_layers,
    train_transcoders,
    transcoder_folder,
)

__all__ = ["TRANSCODER_PRESETS", "TranscoderPreset", "load_transcoders", "shipped_compact_folder"]


@dataclass(frozen=True)
class TranscoderPreset:
    """One model's build: the data, the training settings that differ from the defaults (Paulo et
    al.'s recipe, :class:`TranscoderTrainConfig`), why, its cost here, and how many layers one
    harvest pass holds."""

    data: TranscoderDataConfig
    train: dict[str, Any]
    reason: str
    cost: str
    layers_per_pass: int | None = None
    metrics_batch: int = 16

    def train_config(self) -> TranscoderTrainConfig:
        return TranscoderTrainConfig(**self.train)


TRANSCODER_PRESETS: dict[str, TranscoderPreset] = {
    "cfg-gpt": TranscoderPreset(
        data=TranscoderDataConfig(source="cfg", train_tokens=200_000, held_out_tokens=10_000),
        train=dict(training_tokens=4096 * 400, warmup=40),
        reason=("the GPT's width is 128, so 32x expansion is 4,096 latents; 400 steps of 4,096 "
                "tokens (8 epochs of the 200k-token harvest) take about 1 s each on one thread "
                "(a 40-step check at L1 reached EV 0.67, loss recovered 0.81); the paper's 1,000 "
                "warm-up steps would exceed the run, so 10% of it"),
        cost="about 7 minutes a layer, 4 layers, at one CPU thread (shipped: built only on request)",
    ),
    "smollm2-135m": TranscoderPreset(
        data=TranscoderDataConfig(source="text", train_tokens=150_000, held_out_tokens=4_000,
                                  harvest_dtype="float16"),
        train=dict(expansion=8, training_tokens=4096 * 150, warmup=15),
        reason=("30 layers within one working session of this CPU, with the harvest and the metrics: "
                "a 4,096-token step at 8x expansion (4,608 latents) took 0.7-1.0 s at one thread here "
                "beside other jobs, and at the paper's 32x 3.8 s, so 150 steps at 32x would take about "
                "3-5 hours for the training alone; 150 steps per layer at 8x, 150k harvested tokens "
                "(float16, 10 layers per pass) and 4k held-out tokens"),
        cost="about 1.5 hours at one CPU thread (resumable: a stopped build goes on where it stopped)",
        layers_per_pass=10,
    ),
    "toy-2l": TranscoderPreset(
        data=TranscoderDataConfig(source="text", train_tokens=3_000, held_out_tokens=500, seq_len=64),
        train=dict(n_latents=256, k=8, batch_size=256, training_tokens=256 * 60, warmup=6,
                   checkpoint_every=20),
        reason="a check of the script end to end in seconds",
        cost="seconds",
    ),
}
"""The builds by model name (``LensModel.name``)."""


def preset_name(lm: LensModel) -> str:
    """The preset's name for ``lm``: its name, or ``cfg-gpt`` for a trained CFG GPT (whose name
    carries the key of its configs, ``cfg-gpt-<key>``)."""
    trained_cfg = lm.name.startswith("cfg-gpt-") and not lm.name.startswith("cfg-gpt-random-")
    return "cfg-gpt" if trained_cfg else lm.name


def preset_for(lm: LensModel) -> TranscoderPreset:
    """``lm``'s preset; a model without one is refused, naming those that have one."""
    if preset_name(lm) not in TRANSCODER_PRESETS:
        raise UserInputError(
            f"no transcoder build for {lm.name!r}; models with one: {', '.join(sorted(TRANSCODER_PRESETS))} "
            "(or train a set with lmsci_mi.transcoders.train_transcoders and pass it yourself)"
        )
    return TRANSCODER_PRESETS[preset_name(lm)]


def shipped_compact_folder(lm: LensModel) -> Path:
    """Where the compact form of ``lm``'s preset set lies in the cache (and, for a shipped set,
    under the package's artefacts at the same relative path)."""
    preset = preset_for(lm)
    return transcoder_folder(lm, preset.data, preset.train_config()) / "compact"


def load_transcoders(lm: LensModel, *, build: bool = False, progress: bool = True) -> TranscoderSet:
    """``lm``'s transcoder set at its preset: trained layers from the cache, else the shipped
    compact form, else (``build``) trained now, layer by layer, resumably.

    Raises:
        UserInputError: no preset for the model; or no set cached or shipped and not ``build``
            (the message gives the command that builds it and its cost).
    """
    preset = preset_for(lm)
    train = preset.train_config()
    folder = transcoder_folder(lm, preset.data, train)
    trained = not missing_layers(folder, range(lm.cfg.n_layers))
    compact = folder / "compact"
    if not trained and restore_shipped(compact / COMPACT_FILE, compact / COMPACT_META):
        return expand_transcoders(compact).to(lm.device)
    if trained or build:
        return train_transcoders(lm, preset.data, train, layers_per_pass=preset.layers_per_pass,
                                 progress=progress)[0]
    raise UserInputError(
        f"no transcoders for {lm.name} yet: build them with `python benchmarks/transcoders.py "
        f"--model {preset_name(lm)}` ({preset.cost}), or pass build=True (--build on the command line)"
    )

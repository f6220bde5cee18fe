"""Transcoders: sparse, interpretable replacements of a model's MLPs, one per layer, with an
optional linear skip (Dunefsky et al. 2024; Paulo et al. 2025).

:class:`Transcoder` is one layer's map in circuit-tracer's orientation; :class:`TranscoderSet`
holds one per layer with the sites they read and write. Train a set with
:func:`train_transcoders` (Paulo et al.'s recipe, cached and resumable per layer), measure it with
:func:`transcoder_metrics`, and write it in circuit-tracer's format (:func:`save_circuit_tracer`)
or the compact float16 form (:func:`save_compact`). :func:`load_transcoders` gives a supported
model's set at its preset (cached, shipped for the CFG GPT, or built on request). The package uses the core, the data sets
(text corpus, CFG grammar) and the SAE statistics' splice loop.
"""

from lmsci_mi.transcoders.data import TranscoderData as TranscoderData
from lmsci_mi.transcoders.data import TranscoderDataConfig as TranscoderDataConfig
from lmsci_mi.transcoders.data import harvest_pairs as harvest_pairs
from lmsci_mi.transcoders.data import transcoder_rows as transcoder_rows
from lmsci_mi.transcoders.files import expand_transcoders as expand_transcoders
from lmsci_mi.transcoders.files import load_circuit_tracer as load_circuit_tracer
from lmsci_mi.transcoders.files import save_circuit_tracer as save_circuit_tracer
from lmsci_mi.transcoders.files import save_compact as save_compact
from lmsci_mi.transcoders.metrics import LayerQuality as LayerQuality
from lmsci_mi.transcoders.metrics import TranscoderMetrics as TranscoderMetrics
from lmsci_mi.transcoders.metrics import transcoder_metrics as transcoder_metrics
from lmsci_mi.transcoders.model import Activation as Activation
from lmsci_mi.transcoders.model import Transcoder as Transcoder
from lmsci_mi.transcoders.model import TranscoderMismatchError as TranscoderMismatchError
from lmsci_mi.transcoders.model import TranscoderSet as TranscoderSet
from lmsci_mi.transcoders.presets import (
    TRANSCODER_PRESETS,
    TranscoderPreset,
    load_transcoders,
)
from lmsci_mi.transcoders.train import TrainedLayer as TrainedLayer
from lmsci_mi.transcoders.train import TranscoderTrainConfig as TranscoderTrainConfig
from lmsci_mi.transcoders.train import train_transcoder as train_transcoder
from lmsci_mi.transcoders.train import train_transcoders as train_transcoders
from lmsci_mi.transcoders.train import transcoder_folder as transcoder_folder

__all__ = [
    "TRANSCODER_PRESETS",
    "Activation",
    "LayerQuality",
    "TrainedLayer",
    "Transcoder",
    "TranscoderData",
    "TranscoderDataConfig",
    "TranscoderMetrics",
    "TranscoderMismatchError",
    "TranscoderPreset",
    "TranscoderSet",
    "TranscoderTrainConfig",
    "expand_transcoders",
    "harvest_pairs",
    "load_circuit_tracer",
    "load_transcoders",
    "save_circuit_tracer",
    "save_compact",
    "train_transcoder",
    "train_transcoders",
    "transcoder_folder",
    "transcoder_metrics",
    "transcoder_rows",
]

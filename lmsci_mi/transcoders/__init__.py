"""Transcoders: sparse, interpretable replacements of a model's MLPs, one per layer, with an
optional linear skip (Dunefsky et al. 2024; Paulo et al. 2025).

:class:`Transcoder` is one layer's map in circuit-tracer's orientation; :class:`TranscoderSet`
holds one per layer with the sites they read and write.
"""

from lmsci_mi.transcoders.model import Activation as Activation
from lmsci_mi.transcoders.model import Transcoder as Transcoder
from lmsci_mi.transcoders.model import TranscoderMismatchError as TranscoderMismatchError
from lmsci_mi.transcoders.model import TranscoderSet as TranscoderSet

__all__ = ["Activation", "Transcoder", "TranscoderMismatchError", "TranscoderSet"]

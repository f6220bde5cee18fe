"""Attention and outliers (issue 40): massive activations, super weights, attention sinks and length."""

from lmsci_mi.outliers.consequences import (
    ExclusionEffect,
    ExclusionEffectConfig,
    lens_kl_without,
    sae_explained_variance_without,
)
from lmsci_mi.outliers.sinks import (
    FirstTokenMaskConfig,
    FirstTokenMaskEffect,
    SinkHeads,
    SinkScoreConfig,
    first_token_mask_effect,
    mask_first_tokens,
    sink_heads,
    sink_scores,
)

__all__ = [
    "ExclusionEffect",
    "ExclusionEffectConfig",
    "FirstTokenMaskConfig",
    "FirstTokenMaskEffect",
    "SinkHeads",
    "SinkScoreConfig",
    "first_token_mask_effect",
    "lens_kl_without",
    "mask_first_tokens",
    "sae_explained_variance_without",
    "sink_heads",
    "sink_scores",
]

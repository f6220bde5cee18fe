"""Attention and outliers (issue 40): massive activations, super weights and sinks; why length
generalisation fails, and LM-Infinite's Λ-shaped mask."""

from lmsci_mi.outliers.short_context_lm import (
    ByteTokenizer,
    ShortLMConfig,
    heldout_rows,
    load_short_context_lm,
    short_context_lm_folder,
    short_lm_documents,
    train_short_context_lm,
    wrap_short_context_lm,
)

__all__ = [
    "ByteTokenizer",
    "ShortLMConfig",
    "heldout_rows",
    "load_short_context_lm",
    "short_context_lm_folder",
    "short_lm_documents",
    "train_short_context_lm",
    "wrap_short_context_lm",
]

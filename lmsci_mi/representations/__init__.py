"""Linear representations: concept directions under the causal inner product (Park et al., ICML
2024) and representation reading (Zou et al. 2023).

Steering with these directions (activation addition) lives in :mod:`lmsci_mi.steering`.
"""

from lmsci_mi.representations.reading import (
    READING_METHODS,
    READING_SCORES,
    READING_SPLITS,
    ReadingConfig,
    RepresentationReading,
    pairwise_accuracy,
    reading_from_activations,
    reading_vector,
    representation_reading,
)

__all__: list[str] = [
    "READING_METHODS",
    "READING_SCORES",
    "READING_SPLITS",
    "ReadingConfig",
    "RepresentationReading",
    "pairwise_accuracy",
    "reading_from_activations",
    "reading_vector",
    "representation_reading",
]

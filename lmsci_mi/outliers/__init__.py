"""Outliers of the forward pass: massive activations, super weights and attention sinks, their
causal role, and why length generalisation fails (issue 40).

Sun et al. 2024's massive activations and Yu et al. 2024's super weights are found here from
hooked forward passes; each analysis says whether the prepended sink token was there.
"""

from lmsci_mi.outliers.massive import MassiveActivations as MassiveActivations
from lmsci_mi.outliers.massive import MassiveConfig as MassiveConfig
from lmsci_mi.outliers.massive import MassiveEntry as MassiveEntry
from lmsci_mi.outliers.massive import RecurringDimension as RecurringDimension
from lmsci_mi.outliers.massive import find_massive_activations as find_massive_activations
from lmsci_mi.outliers.super_weights import YU_PROMPT as YU_PROMPT
from lmsci_mi.outliers.super_weights import SuperWeightCandidate as SuperWeightCandidate
from lmsci_mi.outliers.super_weights import SuperWeightCandidates as SuperWeightCandidates
from lmsci_mi.outliers.super_weights import SuperWeightConfig as SuperWeightConfig
from lmsci_mi.outliers.super_weights import down_proj_output_hooks as down_proj_output_hooks
from lmsci_mi.outliers.super_weights import find_super_weights as find_super_weights

__all__ = [
    "YU_PROMPT",
    "MassiveActivations",
    "MassiveConfig",
    "MassiveEntry",
    "RecurringDimension",
    "SuperWeightCandidate",
    "SuperWeightCandidates",
    "SuperWeightConfig",
    "down_proj_output_hooks",
    "find_massive_activations",
    "find_super_weights",
]

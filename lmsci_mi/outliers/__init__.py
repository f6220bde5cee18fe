"""Outliers of the forward pass: massive activations, super weights and attention sinks, their
causal role, and why length generalisation fails (issue 40).

Sun et al. 2024's massive activations and Yu et al. 2024's super weights are found here from
hooked forward passes; each analysis says whether the prepended sink token was there.
"""

from lmsci_mi.outliers.ablations import (
    AblationEffect,
    MassiveActivationAblation,
    MassiveCoordinate,
    OutlierAblationConfig,
    OutlierAblations,
    OutlierPositions,
    SuperWeightCoordinate,
    SuperWeightRestoreActivation,
    SuperWeightScaling,
    ablate_massive_activations,
    outlier_ablations,
    remove_super_weight_restore_activation,
    scale_super_weights,
    sensitivity_interventions,
    super_activation,
)
from lmsci_mi.outliers.consequences import (
    ExclusionEffect,
    ExclusionEffectConfig,
    lens_kl_without,
    sae_explained_variance_without,
)
from lmsci_mi.outliers.massive import (
    MassiveActivations,
    MassiveConfig,
    MassiveEntry,
    RecurringDimension,
    find_massive_activations,
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
from lmsci_mi.outliers.super_weights import (
    YU_PROMPT,
    SuperWeightCandidate,
    SuperWeightCandidates,
    SuperWeightConfig,
    down_proj_output_hooks,
    find_super_weights,
)

__all__ = [
    "YU_PROMPT",
    "AblationEffect",
    "ExclusionEffect",
    "ExclusionEffectConfig",
    "FirstTokenMaskConfig",
    "FirstTokenMaskEffect",
    "MassiveActivationAblation",
    "MassiveActivations",
    "MassiveConfig",
    "MassiveCoordinate",
    "MassiveEntry",
    "OutlierAblationConfig",
    "OutlierAblations",
    "OutlierPositions",
    "RecurringDimension",
    "SinkHeads",
    "SinkScoreConfig",
    "SuperWeightCandidate",
    "SuperWeightCandidates",
    "SuperWeightConfig",
    "SuperWeightCoordinate",
    "SuperWeightRestoreActivation",
    "SuperWeightScaling",
    "ablate_massive_activations",
    "down_proj_output_hooks",
    "find_massive_activations",
    "find_super_weights",
    "first_token_mask_effect",
    "lens_kl_without",
    "mask_first_tokens",
    "outlier_ablations",
    "remove_super_weight_restore_activation",
    "sae_explained_variance_without",
    "scale_super_weights",
    "sensitivity_interventions",
    "sink_heads",
    "sink_scores",
    "super_activation",
]

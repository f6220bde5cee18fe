"""Outliers (issue 40): massive activations, super weights and attention sinks, and their causal role."""

from lmsci_mi.outliers.ablations import AblationEffect as AblationEffect
from lmsci_mi.outliers.ablations import MassiveActivationAblation as MassiveActivationAblation
from lmsci_mi.outliers.ablations import MassiveCoordinate as MassiveCoordinate
from lmsci_mi.outliers.ablations import OutlierAblationConfig as OutlierAblationConfig
from lmsci_mi.outliers.ablations import OutlierAblations as OutlierAblations
from lmsci_mi.outliers.ablations import OutlierPositions as OutlierPositions
from lmsci_mi.outliers.ablations import SuperWeightCoordinate as SuperWeightCoordinate
from lmsci_mi.outliers.ablations import SuperWeightRestoreActivation as SuperWeightRestoreActivation
from lmsci_mi.outliers.ablations import SuperWeightScaling as SuperWeightScaling
from lmsci_mi.outliers.ablations import ablate_massive_activations as ablate_massive_activations
from lmsci_mi.outliers.ablations import outlier_ablations as outlier_ablations
from lmsci_mi.outliers.ablations import (
    remove_super_weight_restore_activation as remove_super_weight_restore_activation,
)
from lmsci_mi.outliers.ablations import scale_super_weights as scale_super_weights
from lmsci_mi.outliers.ablations import sensitivity_interventions as sensitivity_interventions
from lmsci_mi.outliers.ablations import super_activation as super_activation

__all__ = [
    "AblationEffect",
    "MassiveActivationAblation",
    "MassiveCoordinate",
    "OutlierAblationConfig",
    "OutlierAblations",
    "OutlierPositions",
    "SuperWeightCoordinate",
    "SuperWeightRestoreActivation",
    "SuperWeightScaling",
    "ablate_massive_activations",
    "outlier_ablations",
    "remove_super_weight_restore_activation",
    "scale_super_weights",
    "sensitivity_interventions",
    "super_activation",
]

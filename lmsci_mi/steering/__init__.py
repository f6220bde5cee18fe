"""Steering: LM-Steer (Han et al., ACL 2024) and activation-addition vectors (the mean difference,
ActAdd-style; CAA as Rimsky et al. 2024 define it, read at the answer letter of A/B items) on any
HookedTransformer, through the hook registry.

Train steers on cached final-norm states (:func:`train_steer`), steer continuously and in
combination (:meth:`LMSteer.apply`), evaluate a control curve (:func:`evaluate_steer`), probe W
with the SVD (:func:`steer_svd`), highlight keywords (:func:`highlight_keywords`), transfer a
steer to another model (:func:`transfer_steer`), and compare steers at a fluency budget
(:func:`at_fluency_budget`).
"""

from lmsci_mi.steering.budget import BudgetPoint as BudgetPoint
from lmsci_mi.steering.budget import at_fluency_budget as at_fluency_budget
from lmsci_mi.steering.budget import choose_within_budget as choose_within_budget
from lmsci_mi.steering.budget import (
    symmetric_strength_within_budget as symmetric_strength_within_budget,
)
from lmsci_mi.steering.caa import CAAConfig as CAAConfig
from lmsci_mi.steering.caa import ab_behaviour_probability as ab_behaviour_probability
from lmsci_mi.steering.caa import caa_scope as caa_scope
from lmsci_mi.steering.caa import caa_vector as caa_vector
from lmsci_mi.steering.evaluate import ControlCurve as ControlCurve
from lmsci_mi.steering.evaluate import SteerEvalConfig as SteerEvalConfig
from lmsci_mi.steering.evaluate import evaluate_intervention as evaluate_intervention
from lmsci_mi.steering.evaluate import evaluate_settings as evaluate_settings
from lmsci_mi.steering.evaluate import evaluate_steer as evaluate_steer
from lmsci_mi.steering.evaluate import generate_steered as generate_steered
from lmsci_mi.steering.highlight import Highlight as Highlight
from lmsci_mi.steering.highlight import HighlightConfig as HighlightConfig
from lmsci_mi.steering.highlight import highlight_keywords as highlight_keywords
from lmsci_mi.steering.highlight import max_spans as max_spans
from lmsci_mi.steering.lm_steer import LMSteer as LMSteer
from lmsci_mi.steering.lm_steer import LMSteerConfig as LMSteerConfig
from lmsci_mi.steering.lm_steer import logits_from_normalized as logits_from_normalized
from lmsci_mi.steering.svd import SteerSVD as SteerSVD
from lmsci_mi.steering.svd import SVDConfig as SVDConfig
from lmsci_mi.steering.svd import steer_svd as steer_svd
from lmsci_mi.steering.train import SteerTrainConfig as SteerTrainConfig
from lmsci_mi.steering.train import SteerTraining as SteerTraining
from lmsci_mi.steering.train import steered_logits as steered_logits
from lmsci_mi.steering.train import train_steer as train_steer
from lmsci_mi.steering.transfer import SteerTransfer as SteerTransfer
from lmsci_mi.steering.transfer import TransferConfig as TransferConfig
from lmsci_mi.steering.transfer import transfer_steer as transfer_steer
from lmsci_mi.steering.vectors import MeanDifferenceConfig as MeanDifferenceConfig
from lmsci_mi.steering.vectors import SteeringVector as SteeringVector
from lmsci_mi.steering.vectors import mean_difference_vector as mean_difference_vector
from lmsci_mi.steering.vectors import steering_vector as steering_vector

__all__ = [
    "BudgetPoint",
    "CAAConfig",
    "ControlCurve",
    "Highlight",
    "HighlightConfig",
    "LMSteer",
    "LMSteerConfig",
    "MeanDifferenceConfig",
    "SVDConfig",
    "SteerEvalConfig",
    "SteerSVD",
    "SteerTrainConfig",
    "SteerTraining",
    "SteerTransfer",
    "SteeringVector",
    "TransferConfig",
    "ab_behaviour_probability",
    "at_fluency_budget",
    "caa_scope",
    "caa_vector",
    "choose_within_budget",
    "evaluate_intervention",
    "evaluate_settings",
    "evaluate_steer",
    "generate_steered",
    "highlight_keywords",
    "logits_from_normalized",
    "max_spans",
    "mean_difference_vector",
    "steer_svd",
    "steered_logits",
    "steering_vector",
    "symmetric_strength_within_budget",
    "train_steer",
    "transfer_steer",
]

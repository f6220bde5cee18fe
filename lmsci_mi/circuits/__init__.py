"""Circuit discovery: causal tracing, activation and attribution patching, edge-level circuits
(:mod:`lmsci_mi.circuits.edges`: EAP/EAP-IG, exact edge patching, faithfulness), head detection,
IOI."""

from lmsci_mi.circuits.ablation import mean_ablate_heads as mean_ablate_heads
from lmsci_mi.circuits.ablation import mean_ablated_logits as mean_ablated_logits
from lmsci_mi.circuits.aie import AIEConfig as AIEConfig
from lmsci_mi.circuits.aie import AverageIndirectEffect as AverageIndirectEffect
from lmsci_mi.circuits.aie import average_indirect_effect as average_indirect_effect
from lmsci_mi.circuits.attention import AttentionSummary as AttentionSummary
from lmsci_mi.circuits.attention import attention_html as attention_html
from lmsci_mi.circuits.attention import attention_summary as attention_summary
from lmsci_mi.circuits.attention import attention_view as attention_view
from lmsci_mi.circuits.attention import head_patterns as head_patterns
from lmsci_mi.circuits.attention import save_attention_html as save_attention_html
from lmsci_mi.circuits.attribution import AttributionConfig as AttributionConfig
from lmsci_mi.circuits.attribution import AttributionResult as AttributionResult
from lmsci_mi.circuits.attribution import attribution_patch as attribution_patch
from lmsci_mi.circuits.edges import EDGE_METHODS as EDGE_METHODS
from lmsci_mi.circuits.edges import CircuitValues as CircuitValues
from lmsci_mi.circuits.edges import EAPConfig as EAPConfig
from lmsci_mi.circuits.edges import EdgeGraph as EdgeGraph
from lmsci_mi.circuits.edges import EdgeScores as EdgeScores
from lmsci_mi.circuits.edges import edge_attribution as edge_attribution
from lmsci_mi.circuits.edges import edge_graph as edge_graph
from lmsci_mi.circuits.edges import evaluate_circuit as evaluate_circuit
from lmsci_mi.circuits.edges import evaluate_circuits as evaluate_circuits
from lmsci_mi.circuits.edges import score_edges as score_edges
from lmsci_mi.circuits.heads import HEAD_SCORES as HEAD_SCORES
from lmsci_mi.circuits.heads import CompositionScores as CompositionScores
from lmsci_mi.circuits.heads import HeadScoreConfig as HeadScoreConfig
from lmsci_mi.circuits.heads import HeadScores as HeadScores
from lmsci_mi.circuits.heads import InductionAblation as InductionAblation
from lmsci_mi.circuits.heads import InductionAblationConfig as InductionAblationConfig
from lmsci_mi.circuits.heads import composition_scores as composition_scores
from lmsci_mi.circuits.heads import copying_scores as copying_scores
from lmsci_mi.circuits.heads import duplicate_token_scores as duplicate_token_scores
from lmsci_mi.circuits.heads import head_scores as head_scores
from lmsci_mi.circuits.heads import induction_ablation as induction_ablation
from lmsci_mi.circuits.heads import induction_scores as induction_scores
from lmsci_mi.circuits.heads import prefix_matching_scores as prefix_matching_scores
from lmsci_mi.circuits.heads import previous_token_scores as previous_token_scores
from lmsci_mi.circuits.ioi import CircuitHead as CircuitHead
from lmsci_mi.circuits.ioi import IOICircuit as IOICircuit
from lmsci_mi.circuits.ioi import IOIConfig as IOIConfig
from lmsci_mi.circuits.ioi import find_ioi_circuit as find_ioi_circuit
from lmsci_mi.circuits.ioi import path_patch_senders as path_patch_senders
from lmsci_mi.circuits.ioi import path_patch_to_queries as path_patch_to_queries
from lmsci_mi.circuits.metrics import KLToClean as KLToClean
from lmsci_mi.circuits.metrics import LogitDiff as LogitDiff
from lmsci_mi.circuits.metrics import Metric as Metric
from lmsci_mi.circuits.metrics import Normalised as Normalised
from lmsci_mi.circuits.metrics import TargetProb as TargetProb
from lmsci_mi.circuits.metrics import normalised as normalised
from lmsci_mi.circuits.patching import PATCH_SITES as PATCH_SITES
from lmsci_mi.circuits.patching import PatchingConfig as PatchingConfig
from lmsci_mi.circuits.patching import PatchingResult as PatchingResult
from lmsci_mi.circuits.patching import patch_activations as patch_activations
from lmsci_mi.circuits.path_patching import PathPatchingConfig as PathPatchingConfig
from lmsci_mi.circuits.path_patching import PathPatchingResult as PathPatchingResult
from lmsci_mi.circuits.path_patching import path_patch as path_patch
from lmsci_mi.circuits.toy_induction import load_toy_induction as load_toy_induction
from lmsci_mi.circuits.tracing import CausalTrace as CausalTrace
from lmsci_mi.circuits.tracing import TraceConfig as TraceConfig
from lmsci_mi.circuits.tracing import causal_trace as causal_trace

__all__ = [
    "EDGE_METHODS",
    "HEAD_SCORES",
    "PATCH_SITES",
    "AIEConfig",
    "AttentionSummary",
    "AttributionConfig",
    "AttributionResult",
    "AverageIndirectEffect",
    "CausalTrace",
    "CircuitHead",
    "CircuitValues",
    "CompositionScores",
    "EAPConfig",
    "EdgeGraph",
    "EdgeScores",
    "HeadScoreConfig",
    "HeadScores",
    "IOICircuit",
    "IOIConfig",
    "InductionAblation",
    "InductionAblationConfig",
    "KLToClean",
    "LogitDiff",
    "Metric",
    "Normalised",
    "PatchingConfig",
    "PatchingResult",
    "PathPatchingConfig",
    "PathPatchingResult",
    "TargetProb",
    "TraceConfig",
    "attention_html",
    "attention_summary",
    "attention_view",
    "attribution_patch",
    "average_indirect_effect",
    "causal_trace",
    "composition_scores",
    "copying_scores",
    "duplicate_token_scores",
    "edge_attribution",
    "edge_graph",
    "evaluate_circuit",
    "evaluate_circuits",
    "find_ioi_circuit",
    "head_patterns",
    "head_scores",
    "induction_ablation",
    "induction_scores",
    "load_toy_induction",
    "mean_ablate_heads",
    "mean_ablated_logits",
    "normalised",
    "patch_activations",
    "path_patch",
    "path_patch_senders",
    "path_patch_to_queries",
    "prefix_matching_scores",
    "previous_token_scores",
    "save_attention_html",
    "score_edges",
]

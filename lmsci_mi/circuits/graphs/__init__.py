"""Attribution graphs over transcoder features (Ameisen et al. 2025, "Circuit Tracing"; the
algorithm of circuit-tracer v0.5.0): the frozen replacement model, the graph of direct effects
from tokens through features and errors to logits, pruning by influence, the replacement and
completeness scores, and feature interventions that test a graph's claim.

``replacement`` builds the replacement model through the hook registry, ``attribution`` computes
graphs, ``prune`` scores and prunes them, ``intervene`` sets features on the model. The
transcoders come from :mod:`lmsci_mi.transcoders` (a feature package used by its public API).
"""

from lmsci_mi.circuits.graphs.attribution import AttributionGraph as AttributionGraph
from lmsci_mi.circuits.graphs.attribution import GraphConfig as GraphConfig
from lmsci_mi.circuits.graphs.attribution import GraphNodes as GraphNodes
from lmsci_mi.circuits.graphs.attribution import LogitTargets as LogitTargets
from lmsci_mi.circuits.graphs.attribution import attribution_graph as attribution_graph
from lmsci_mi.circuits.graphs.attribution import logit_targets as logit_targets
from lmsci_mi.circuits.graphs.intervene import Intervention as Intervention
from lmsci_mi.circuits.graphs.intervene import InterventionEffect as InterventionEffect
from lmsci_mi.circuits.graphs.intervene import feature_intervention as feature_intervention
from lmsci_mi.circuits.graphs.intervene import feature_interventions as feature_interventions
from lmsci_mi.circuits.graphs.prune import GraphPruning as GraphPruning
from lmsci_mi.circuits.graphs.prune import GraphScores as GraphScores
from lmsci_mi.circuits.graphs.prune import NodeLayout as NodeLayout
from lmsci_mi.circuits.graphs.prune import graph_scores as graph_scores
from lmsci_mi.circuits.graphs.prune import prune_graph as prune_graph
from lmsci_mi.circuits.graphs.replacement import ReplacementRun as ReplacementRun
from lmsci_mi.circuits.graphs.replacement import frozen_forward as frozen_forward
from lmsci_mi.circuits.graphs.replacement import replacement_gradients as replacement_gradients
from lmsci_mi.circuits.graphs.replacement import replacement_run as replacement_run

__all__ = [
    "AttributionGraph",
    "GraphConfig",
    "GraphNodes",
    "GraphPruning",
    "GraphScores",
    "Intervention",
    "InterventionEffect",
    "LogitTargets",
    "NodeLayout",
    "ReplacementRun",
    "attribution_graph",
    "feature_intervention",
    "feature_interventions",
    "frozen_forward",
    "graph_scores",
    "logit_targets",
    "prune_graph",
    "replacement_gradients",
    "replacement_run",
]

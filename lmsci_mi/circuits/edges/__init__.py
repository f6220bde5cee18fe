"""Edge-level circuits: the graph, its wiring into the model, EAP/EAP-IG scores, exact edge
patching, pruning and faithfulness curves (Hanna et al. 2024; Conmy et al. 2023; MIB, Mueller et
al. 2025).

``graph`` says which node feeds which input, ``wiring`` where each is read and written in the
model, ``eap`` scores edges by the methods registered in :data:`EDGE_METHODS`, ``patching``
evaluates circuits exactly, ``pruning`` turns scores into circuits and ``faithfulness`` draws the
curves. A new scoring method is one module plus one ``@EDGE_METHODS.register(...)``, imported here.
"""

from lmsci_mi.circuits.edges.eap import EDGE_METHODS as EDGE_METHODS
from lmsci_mi.circuits.edges.eap import EAPConfig as EAPConfig
from lmsci_mi.circuits.edges.eap import EdgeScores as EdgeScores
from lmsci_mi.circuits.edges.eap import edge_attribution as edge_attribution
from lmsci_mi.circuits.edges.eap import score_edges as score_edges
from lmsci_mi.circuits.edges.faithfulness import MIB_FRACTIONS as MIB_FRACTIONS
from lmsci_mi.circuits.edges.faithfulness import Circuit as Circuit
from lmsci_mi.circuits.edges.faithfulness import CurveConfig as CurveConfig
from lmsci_mi.circuits.edges.faithfulness import FaithfulnessCurve as FaithfulnessCurve
from lmsci_mi.circuits.edges.faithfulness import area_under_curve as area_under_curve
from lmsci_mi.circuits.edges.faithfulness import faithfulness_curve as faithfulness_curve
from lmsci_mi.circuits.edges.faithfulness import (
    plot_faithfulness_curves as plot_faithfulness_curves,
)
from lmsci_mi.circuits.edges.graph import EdgeGraph as EdgeGraph
from lmsci_mi.circuits.edges.graph import edge_graph as edge_graph
from lmsci_mi.circuits.edges.patching import CircuitValues as CircuitValues
from lmsci_mi.circuits.edges.patching import evaluate_circuit as evaluate_circuit
from lmsci_mi.circuits.edges.patching import evaluate_circuits as evaluate_circuits
from lmsci_mi.circuits.edges.pruning import PRUNE_METHODS as PRUNE_METHODS
from lmsci_mi.circuits.edges.pruning import prune_dead as prune_dead
from lmsci_mi.circuits.edges.pruning import prune_greedy as prune_greedy
from lmsci_mi.circuits.edges.pruning import prune_threshold as prune_threshold
from lmsci_mi.circuits.edges.pruning import prune_to_fractions as prune_to_fractions
from lmsci_mi.circuits.edges.pruning import prune_topn as prune_topn

__all__ = [
    "EDGE_METHODS",
    "MIB_FRACTIONS",
    "PRUNE_METHODS",
    "Circuit",
    "CircuitValues",
    "CurveConfig",
    "EAPConfig",
    "EdgeGraph",
    "EdgeScores",
    "FaithfulnessCurve",
    "area_under_curve",
    "edge_attribution",
    "edge_graph",
    "evaluate_circuit",
    "evaluate_circuits",
    "faithfulness_curve",
    "plot_faithfulness_curves",
    "prune_dead",
    "prune_greedy",
    "prune_threshold",
    "prune_to_fractions",
    "prune_topn",
    "score_edges",
]

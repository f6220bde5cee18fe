"""Every default of a paper-named method beside the paper's value, read from the configs' field
metadata (``"paper"``, ``"paper_source"``, ``"why"``; ``lmsci_mi.config.paper_defaults``).

Runs no model: it imports the configs and writes docs/data/paper_defaults.json, from which each
method's page renders its table (``paper_defaults_<method>``). A paper value our reference notes
lack is declared "not in our notes", never guessed.

    PYTHONPATH=. python benchmarks/paper_defaults.py
"""

from __future__ import annotations

import sys
from typing import Any

import harness

from lmsci_mi.circuits.edges.eap import EAPConfig
from lmsci_mi.circuits.graphs import GraphConfig
from lmsci_mi.circuits.ioi import IOIConfig
from lmsci_mi.circuits.tracing import TraceConfig
from lmsci_mi.config import paper_defaults
from lmsci_mi.editing.alphaedit import AlphaEditConfig
from lmsci_mi.editing.memit import MEMITConfig
from lmsci_mi.editing.rome import ROMEConfig
from lmsci_mi.icl.kernel import KernelRegressionConfig
from lmsci_mi.icl.regression import ICLRegressionConfig
from lmsci_mi.icl.vectors import FunctionVectorConfig, TaskVectorConfig
from lmsci_mi.knowledge.neurons import KnowledgeNeuronsConfig
from lmsci_mi.lenses.logit_lens import LogitLensConfig
from lmsci_mi.lenses.tuned_lens import TunedLensConfig
from lmsci_mi.outliers import (
    LambdaMaskConfig,
    MassiveConfig,
    NLLByPositionConfig,
    OutlierAblationConfig,
    SinkScoreConfig,
    SuperWeightConfig,
)
from lmsci_mi.probes.linear import ProbeConfig
from lmsci_mi.representations.concepts import ConceptConfig
from lmsci_mi.representations.inner_product import CausalInnerProductConfig
from lmsci_mi.representations.intervention import ConceptInterventionConfig
from lmsci_mi.representations.reading import ReadingConfig
from lmsci_mi.sae.train import SAETrainConfig
from lmsci_mi.steering.caa import CAAConfig
from lmsci_mi.steering.evaluate import SteerEvalConfig
from lmsci_mi.steering.highlight import HighlightConfig
from lmsci_mi.steering.lm_steer import LMSteerConfig
from lmsci_mi.steering.svd import SVDConfig
from lmsci_mi.steering.train import SteerTrainConfig
from lmsci_mi.steering.transfer import TransferConfig
from lmsci_mi.transcoders import TranscoderTrainConfig

METHODS: dict[str, tuple[str, str, tuple[type, ...]]] = {
    # key: (method, its page, its configs)
    "tuned_lens": ("Tuned lens (Belrose et al. 2023)", "lenses", (TunedLensConfig,)),
    "causal_tracing": ("Causal tracing and AIE (Meng et al. 2022)", "circuits, aie", (TraceConfig,)),
    "eap": ("EAP-IG (Hanna et al. 2024)", "edges", (EAPConfig,)),
    "knowledge_neurons": ("Knowledge neurons (Dai et al. 2022)", "knowledge_neurons", (KnowledgeNeuronsConfig,)),
    "lm_steer": ("LM-Steer (Han et al. 2024)", "steering",
                 (LMSteerConfig, SteerTrainConfig, SteerEvalConfig, SVDConfig, HighlightConfig, TransferConfig)),
    "caa": ("CAA (Rimsky et al. 2024)", "steering", (CAAConfig,)),
    "sae": ("TopK SAE training (Gao et al. 2024)", "sae", (SAETrainConfig,)),
    "logit_lens": ("Logit lens (nostalgebraist 2020)", "lenses", (LogitLensConfig,)),
    "ioi": ("IOI circuit discovery (Wang et al. 2022)", "ioi", (IOIConfig,)),
    "probes": ("Probes with control tasks (Hewitt & Liang 2019)", "probes", (ProbeConfig,)),
    "concepts": ("Concept directions under the causal inner product (Park et al. 2024)", "representations",
                 (CausalInnerProductConfig, ConceptConfig, ConceptInterventionConfig)),
    "reading": ("Representation reading, LAT (Zou et al. 2023)", "representations", (ReadingConfig,)),
    "rome": ("ROME (Meng et al. 2022)", "editing", (ROMEConfig,)),
    "memit": ("MEMIT (Meng et al. 2023) and AlphaEdit (Fang et al. 2025)", "editing", (MEMITConfig, AlphaEditConfig)),
    "icl_kernel": ("Kernel-regression heads (Han et al. 2023; the tutorial's baseline rows)", "icl",
                   (KernelRegressionConfig,)),
    "task_vectors": ("Task vectors (Hendel et al. 2023)", "icl", (TaskVectorConfig,)),
    "function_vectors": ("Function vectors (Todd et al. 2024)", "icl", (FunctionVectorConfig,)),
    "icl_regression": ("In-context linear regression (Garg et al. 2022)", "icl", (ICLRegressionConfig,)),
    "massive_activations": ("Massive activations (Sun et al. 2024)", "outliers", (MassiveConfig,)),
    "super_weights": ("Super weights (Yu et al. 2024)", "outliers", (SuperWeightConfig,)),
    "outlier_ablations": ("Outlier ablations (Sun et al. 2024; Yu et al. 2024)", "outliers", (OutlierAblationConfig,)),
    "sink_scores": ("Attention sinks (Xiao et al. 2024)", "outliers", (SinkScoreConfig,)),
    "lambda_mask": ("LM-Infinite's Λ-shaped mask (Han et al. 2024)", "outliers", (LambdaMaskConfig,)),
    "nll_by_position": ("NLL by position (Han et al. 2024)", "outliers", (NLLByPositionConfig,)),
    "transcoders": ("Transcoders (Paulo et al. 2025; Dunefsky et al. 2024)", "graphs", (TranscoderTrainConfig,)),
    "attribution_graphs": ("Attribution graphs (Ameisen et al. 2025; circuit-tracer 0.5)", "graphs", (GraphConfig,)),
}
"""Every paper-named method with a table (in editing, ROME, and MEMIT with AlphaEdit). Not here: direct logit
attribution (``DLAConfig`` has no setting a paper fixes) and the mean-difference (ActAdd-style)
vector (``MeanDifferenceConfig``: its settings are CAA's and ActAdd's reading choices, not a
paper's defaults), and the ICL prompt sets (``ICLPromptConfig``: how every ICL analysis draws its prompts;
the task and function vectors' configs declare their papers' formats, demonstrations and counts)."""


def collect() -> dict[str, Any]:
    """The methods' declared paper values, as the data file holds them. A field a config inherits
    from an earlier config of the same method (AlphaEditConfig's MEMIT fields) is listed once,
    under the earlier."""
    out = {}
    for key, (method, page, configs) in METHODS.items():
        rows, seen = [], set()
        for cls in configs:
            for d in paper_defaults(cls):
                if d.field not in seen:
                    seen.add(d.field)
                    rows.append(d.to_dict())
        out[key] = {"method": method, "page": page, "rows": rows}
    return out


def main() -> int:
    run = harness.start(__doc__, __file__, threads=1)
    run.write({"methods": collect()}, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())

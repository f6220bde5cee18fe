"""Fact editing: ROME, MEMIT and AlphaEdit on any HookedTransformer, CounterFact-style metrics, and
WILD-EM (edits judged by greedy generation, without teacher forcing: :func:`evaluate_wild`).

Methods register in :data:`EDITING_METHODS` (importing their modules here registers them).
``ROMEHyperParams``, ``MEMITHyperParams`` and ``AlphaEditHyperParams`` are deprecated names of
the ``*Config`` classes.
"""

from lmsci_mi._deprecation import renamed as _renamed
from lmsci_mi.editing.alphaedit import AlphaEditConfig as AlphaEditConfig
from lmsci_mi.editing.alphaedit import alphaedit_edit as alphaedit_edit
from lmsci_mi.editing.fit import DeltaFit as DeltaFit
from lmsci_mi.editing.fit import context_templates as context_templates
from lmsci_mi.editing.fit import fit_deltas as fit_deltas
from lmsci_mi.editing.handle import EditHandle as EditHandle
from lmsci_mi.editing.handle import apply_delta as apply_delta
from lmsci_mi.editing.memit import MEMITConfig as MEMITConfig
from lmsci_mi.editing.memit import default_memit_layers as default_memit_layers
from lmsci_mi.editing.memit import memit_edit as memit_edit
from lmsci_mi.editing.methods import EDITING_METHODS as EDITING_METHODS
from lmsci_mi.editing.metrics import GENERATION_TOKENS as GENERATION_TOKENS
from lmsci_mi.editing.metrics import METRICS as METRICS
from lmsci_mi.editing.metrics import PER_FACT as PER_FACT
from lmsci_mi.editing.metrics import EditEvaluation as EditEvaluation
from lmsci_mi.editing.metrics import EvaluationConfig as EvaluationConfig
from lmsci_mi.editing.metrics import evaluate_edits as evaluate_edits
from lmsci_mi.editing.metrics import fact_fluency as fact_fluency
from lmsci_mi.editing.metrics import generation_entropy as generation_entropy
from lmsci_mi.editing.metrics import next_token_top1 as next_token_top1
from lmsci_mi.editing.metrics import target_nll as target_nll
from lmsci_mi.editing.requests import EditRequest as EditRequest
from lmsci_mi.editing.requests import load_edit_facts as load_edit_facts
from lmsci_mi.editing.requests import load_facts as load_facts
from lmsci_mi.editing.requests import load_requests as load_requests
from lmsci_mi.editing.rome import ROMEConfig as ROMEConfig
from lmsci_mi.editing.rome import default_rome_layer as default_rome_layer
from lmsci_mi.editing.rome import rome_edit as rome_edit
from lmsci_mi.editing.session import SESSION_METRICS as SESSION_METRICS
from lmsci_mi.editing.session import EditingSession as EditingSession
from lmsci_mi.editing.session import SessionConfig as SessionConfig
from lmsci_mi.editing.session import SessionResult as SessionResult
from lmsci_mi.editing.stats import KeyStatistics as KeyStatistics
from lmsci_mi.editing.stats import StatsConfig as StatsConfig
from lmsci_mi.editing.stats import TextSource as TextSource
from lmsci_mi.editing.stats import key_statistics as key_statistics
from lmsci_mi.editing.wild import WILD_METRICS as WILD_METRICS
from lmsci_mi.editing.wild import WildConfig as WildConfig
from lmsci_mi.editing.wild import WildEvaluation as WildEvaluation
from lmsci_mi.editing.wild import evaluate_wild as evaluate_wild
from lmsci_mi.editing.wild import wild_generate as wild_generate

__getattr__ = _renamed(
    __name__,
    {
        "AlphaEditHyperParams": "AlphaEditConfig",
        "MEMITHyperParams": "MEMITConfig",
        "ROMEHyperParams": "ROMEConfig",
    },
)

__all__ = [
    "EDITING_METHODS",
    "GENERATION_TOKENS",
    "METRICS",
    "PER_FACT",
    "SESSION_METRICS",
    "WILD_METRICS",
    "AlphaEditConfig",
    "DeltaFit",
    "EditEvaluation",
    "EditHandle",
    "EditRequest",
    "EditingSession",
    "EvaluationConfig",
    "KeyStatistics",
    "MEMITConfig",
    "ROMEConfig",
    "SessionConfig",
    "SessionResult",
    "StatsConfig",
    "TextSource",
    "WildConfig",
    "WildEvaluation",
    "alphaedit_edit",
    "apply_delta",
    "context_templates",
    "default_memit_layers",
    "default_rome_layer",
    "evaluate_edits",
    "evaluate_wild",
    "fact_fluency",
    "fit_deltas",
    "generation_entropy",
    "key_statistics",
    "load_edit_facts",
    "load_facts",
    "load_requests",
    "memit_edit",
    "next_token_top1",
    "rome_edit",
    "target_nll",
    "wild_generate",
]

"""DP-feature probes on a synthetic CFG (Allen-Zhu & Li, Physics of LMs Part 1): a small GPT trained
on one grammar of the family, linear and multi-head linear probes for each token's NT ancestors and
NT boundaries at every level and layer, against the same GPT with random weights, and attention
transitions between NT ends."""

from lmsci_mi.probes.cfg.attention import (
    AttentionTransitionConfig,
    CFGAttentionTransitions,
    cfg_attention_transitions,
)
from lmsci_mi.probes.cfg.model import (
    CFGEvaluation,
    CFGModelConfig,
    CFGTraining,
    evaluate_cfg_model,
    load_cfg_model,
    random_cfg_model,
    sample_cfg_model,
    train_cfg_model,
)
from lmsci_mi.probes.cfg.multihead import (
    MultiHeadLinearProbe,
    MultiHeadProbeConfig,
    MultiHeadProbeFits,
    fit_multihead_probes,
)
from lmsci_mi.probes.cfg.probing import (
    CFGProbeConfig,
    CFGProbeTable,
    cfg_hidden_states,
    cfg_probe_table,
    run_cfg_probes,
)

__all__ = [
    "AttentionTransitionConfig",
    "CFGAttentionTransitions",
    "CFGEvaluation",
    "CFGModelConfig",
    "CFGProbeConfig",
    "CFGProbeTable",
    "CFGTraining",
    "MultiHeadLinearProbe",
    "MultiHeadProbeConfig",
    "MultiHeadProbeFits",
    "cfg_attention_transitions",
    "cfg_hidden_states",
    "cfg_probe_table",
    "evaluate_cfg_model",
    "fit_multihead_probes",
    "load_cfg_model",
    "random_cfg_model",
    "run_cfg_probes",
    "sample_cfg_model",
    "train_cfg_model",
]

"""In-context learning: ICL prompt sets with the token spans of every demonstration (Han et al.
2023's setting), task and function vectors (Hendel et al. 2023; Todd et al. 2024), and a
transformer that learns regression in context. The tasks' data live in
``lmsci_mi/data/icl/`` (:mod:`lmsci_mi.data.icl_tasks`)."""

from lmsci_mi.data.icl_tasks import (
    ICL_CLASSIFICATION_TASKS,
    ICL_PAIR_TASKS,
    ICL_TASKS,
    ICLItem,
    ICLTask,
    fact_relation_task,
    load_icl_task,
)
from lmsci_mi.icl.prompts import (
    ICL_FORMATS,
    LABEL_MODES,
    Demonstration,
    ICLFormat,
    ICLPrompt,
    ICLPromptConfig,
    ICLPromptSet,
    ICLSplit,
    ICLTokenizer,
    icl_prompts,
    icl_split,
    label_token_ids,
    zero_shot_prompts,
)

# --- task and function vectors (Hendel et al. 2023; Todd et al. 2024): lmsci_mi.icl.vectors ---
from lmsci_mi.icl.vectors import (
    CONDITIONS,
    ICL_VECTOR_METHODS,
    FunctionVector,
    FunctionVectorConfig,
    HeadIndirectEffects,
    ICLGainRecovery,
    RecoveryReport,
    TaskVectorConfig,
    TaskVectors,
    VectorRecovery,
    function_vector,
    function_vector_recovery,
    head_indirect_effects,
    icl_gain_recovery,
    matched_random_vectors,
    task_vector_recovery,
    task_vectors,
    vector_recovery,
)

# --- end of task and function vectors ---

# lmsci_mi.icl.regression (the in-context regression transformer, another helper's part) adds
# its imports here and its names to __all__ below.

__all__ = [
    "ICL_CLASSIFICATION_TASKS",
    "ICL_FORMATS",
    "ICL_PAIR_TASKS",
    "ICL_TASKS",
    "LABEL_MODES",
    "Demonstration",
    "ICLFormat",
    "ICLItem",
    "ICLPrompt",
    "ICLPromptConfig",
    "ICLPromptSet",
    "ICLSplit",
    "ICLTask",
    "ICLTokenizer",
    "fact_relation_task",
    "icl_prompts",
    "icl_split",
    "label_token_ids",
    "load_icl_task",
    "zero_shot_prompts",
    # the regression transformer's names
]

__all__ += [  # task and function vectors (lmsci_mi.icl.vectors)
    "CONDITIONS",
    "ICL_VECTOR_METHODS",
    "FunctionVector",
    "FunctionVectorConfig",
    "HeadIndirectEffects",
    "ICLGainRecovery",
    "RecoveryReport",
    "TaskVectorConfig",
    "TaskVectors",
    "VectorRecovery",
    "function_vector",
    "function_vector_recovery",
    "head_indirect_effects",
    "icl_gain_recovery",
    "matched_random_vectors",
    "task_vector_recovery",
    "task_vectors",
    "vector_recovery",
]

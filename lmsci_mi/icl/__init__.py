"""In-context learning: ICL prompt sets with the token spans of every demonstration (Han et al.
2023's setting), kernel-regression heads (:mod:`lmsci_mi.icl.kernel`), and a transformer that
learns regression in context. The tasks' data live in
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

# --- kernel-regression heads (issue 39, item 2) ---
from lmsci_mi.icl.kernel import (
    KR_SIMILARITIES,
    KR_WEIGHTINGS,
    KernelRegressionConfig,
    KernelRegressionHeads,
    KernelRegressionTable,
    KRHeadChoice,
    choose_kr_heads,
    kernel_regression_heads,
    kr_predictions,
    kr_table,
)

# --- end of kernel-regression heads ---
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

# lmsci_mi.icl.regression (the in-context regression transformer, another helper's part) adds
# its imports here and its names to __all__ below.

__all__ = [
    "ICL_CLASSIFICATION_TASKS",
    "ICL_FORMATS",
    "ICL_PAIR_TASKS",
    "ICL_TASKS",
    "KR_SIMILARITIES",
    "KR_WEIGHTINGS",
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
    "KRHeadChoice",
    "KernelRegressionConfig",
    "KernelRegressionHeads",
    "KernelRegressionTable",
    "choose_kr_heads",
    "fact_relation_task",
    "icl_prompts",
    "icl_split",
    "kernel_regression_heads",
    "kr_predictions",
    "kr_table",
    "label_token_ids",
    "load_icl_task",
    "zero_shot_prompts",
    # the regression transformer's names
]


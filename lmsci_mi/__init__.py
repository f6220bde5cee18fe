"""lmsci-mi: mechanistic interpretability on TransformerLens hook points.

The core is three pieces that every analysis uses: :func:`load_model` (bundled real models that
load offline, hub names, local files, toys), the hook registry (``lm.hooks``: every intervention
is a context manager that cleans up after itself) and :class:`Result` (typed, saveable results).
Analyses live in the subpackages ``lmsci_mi.circuits`` and ``lmsci_mi.editing``.
"""

from lmsci_mi._version import __version__ as __version__
from lmsci_mi.hooks import Capture as Capture
from lmsci_mi.hooks import HookRegistry as HookRegistry
from lmsci_mi.hooks import UnknownHookError as UnknownHookError
from lmsci_mi.hooks import registry_for as registry_for
from lmsci_mi.loading import ModelNotAvailableError as ModelNotAvailableError
from lmsci_mi.loading import list_models as list_models
from lmsci_mi.loading import load_model as load_model
from lmsci_mi.model import LensModel as LensModel
from lmsci_mi.model import TokenPredictions as TokenPredictions
from lmsci_mi.results import LayerCurve as LayerCurve
from lmsci_mi.results import Meta as Meta
from lmsci_mi.results import Result as Result
from lmsci_mi.results import result_type as result_type
from lmsci_mi.weights import WeightEdit as WeightEdit

__all__ = [
    "Capture",
    "HookRegistry",
    "LayerCurve",
    "LensModel",
    "Meta",
    "ModelNotAvailableError",
    "Result",
    "TokenPredictions",
    "UnknownHookError",
    "WeightEdit",
    "__version__",
    "list_models",
    "load_model",
    "registry_for",
    "result_type",
]

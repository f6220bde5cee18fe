"""lmsci-mi: mechanistic interpretability on TransformerLens hook points.

The core is what every analysis uses: :func:`load_model` (bundled real models that load offline,
hub names, local files, toys), the hook registry (``lm.hooks``: every intervention is a context
manager that cleans up after itself), the site table (:mod:`lmsci_mi.sites`, with :class:`Head`),
the sweep engine (:mod:`lmsci_mi.sweep`), frozen configs (:class:`Config`), method registries
(:class:`MethodRegistry`), :class:`Result` (typed, saveable results), :class:`Exclude` (the
positions an analysis leaves out: the sink, chosen positions, chosen tokens) and the library's
errors (:class:`UserInputError` for input the caller can fix, :class:`UnknownNameError` for a
name no registry holds; anything else is a bug). Analyses live in the
subpackages, imported by name: ``lmsci_mi.circuits`` (patching, tracing, heads, IOI, edges),
``lmsci_mi.lenses`` (logit and tuned lens, direct logit attribution), ``lmsci_mi.knowledge`` (FFN
key-value memories, knowledge neurons), ``lmsci_mi.editing``, ``lmsci_mi.probes``,
``lmsci_mi.steering`` and ``lmsci_mi.sae``.
"""

from lmsci_mi._version import __version__ as __version__
from lmsci_mi.cache import cache_root as cache_root
from lmsci_mi.config import Config as Config
from lmsci_mi.errors import UnknownNameError as UnknownNameError
from lmsci_mi.errors import UserInputError as UserInputError
from lmsci_mi.generation import GenerationConfig as GenerationConfig
from lmsci_mi.generation import Generations as Generations
from lmsci_mi.generation import generate as generate
from lmsci_mi.hooks import Capture as Capture
from lmsci_mi.hooks import HookRegistry as HookRegistry
from lmsci_mi.hooks import UnknownHookError as UnknownHookError
from lmsci_mi.hooks import registry_for as registry_for
from lmsci_mi.loading import ModelNotAvailableError as ModelNotAvailableError
from lmsci_mi.loading import list_models as list_models
from lmsci_mi.loading import load_model as load_model
from lmsci_mi.model import DEFAULT_SINK as DEFAULT_SINK
from lmsci_mi.model import LensModel as LensModel
from lmsci_mi.model import TokenPredictions as TokenPredictions
from lmsci_mi.positions import Exclude as Exclude
from lmsci_mi.registry import MethodRegistry as MethodRegistry
from lmsci_mi.results import LayerCurve as LayerCurve
from lmsci_mi.results import Meta as Meta
from lmsci_mi.results import Result as Result
from lmsci_mi.results import ResultFileError as ResultFileError
from lmsci_mi.results import result_type as result_type
from lmsci_mi.sites import Head as Head
from lmsci_mi.sites import hook_name as hook_name
from lmsci_mi.sweep import SweepConfig as SweepConfig
from lmsci_mi.weights import WeightEdit as WeightEdit

__all__ = [
    "DEFAULT_SINK",
    "Capture",
    "Config",
    "Exclude",
    "GenerationConfig",
    "Generations",
    "Head",
    "HookRegistry",
    "LayerCurve",
    "LensModel",
    "Meta",
    "MethodRegistry",
    "ModelNotAvailableError",
    "Result",
    "ResultFileError",
    "SweepConfig",
    "TokenPredictions",
    "UnknownHookError",
    "UnknownNameError",
    "UserInputError",
    "WeightEdit",
    "__version__",
    "cache_root",
    "generate",
    "hook_name",
    "list_models",
    "load_model",
    "registry_for",
    "result_type",
]

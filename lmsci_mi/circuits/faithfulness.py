"""Deprecated alias of :mod:`lmsci_mi.circuits.edges.faithfulness` (the edge files moved to
``circuits/edges/``): every name resolves there, with a DeprecationWarning."""

from lmsci_mi._deprecation import moved
from lmsci_mi.circuits.edges import faithfulness as _new

__all__ = _new.__all__  # each name fetched through __getattr__, so `import *` warns too
__getattr__ = moved(__name__, _new)

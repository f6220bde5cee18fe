"""Runtime checks of the jaxtyping annotations of the core entry points, on under the test suite.

:func:`shape_checked` wraps a function with jaxtyping's checker (beartype underneath) when the
environment variable ``LMSCI_MI_SHAPE_CHECKS=1`` is set before lmsci_mi is imported (the suite's
conftest.py sets it), and returns the function untouched otherwise, so users pay nothing. Every
argument annotated ``Float[Tensor, "batch pos"]`` and the like is then checked for its dtype and
for shapes consistent across the arguments and the return value of one call.

jaxtyping's package-wide import hook would be the usual way; it does not support
``from __future__ import annotations``, which most modules use, so the entry points are marked one
by one instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., object])

ENABLED = os.environ.get("LMSCI_MI_SHAPE_CHECKS") == "1"
"""Read once, at import: the decorators below are applied when their modules load."""


def shape_checked(fn: F) -> F:
    """``fn`` with its annotations checked at every call when :data:`ENABLED`, else ``fn``."""
    if not ENABLED:
        return fn
    from beartype import beartype
    from jaxtyping import jaxtyped

    return jaxtyped(typechecker=beartype)(fn)  # type: ignore[return-value]

"""`EditHandle`: a fact edit's weight deltas, the requests they install, and an exact undo.

The weight bookkeeping (checks before touching anything, originals kept for a bit-for-bit
restore, safetensors save) is the core's `lmsci_mi.weights.WeightEdit`; this adds what a fact edit
knows about itself: the method and the requests, which travel in the saved file's metadata.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torch import Tensor

from lmsci_mi.editing.requests import EditRequest
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.weights import WeightEdit, read_deltas

__all__ = ["EditHandle", "apply_delta"]


class EditHandle(WeightEdit):
    """An applied edit: ``deltas`` (parameter name → ΔW) and the originals to restore.

    Use ``handle.restore()`` or ``with rome_edit(...) as handle:`` to put the original weights back
    bit for bit.

    Attributes:
        method: ``"rome"``, ``"memit"``, ``"alphaedit"`` or ``"loaded"``.
        requests: the requests the edit installs.
        seconds: how long the edit took to compute.
        details: what a method reports about its edit (AlphaEdit: null-space dimensions, the
            share of the keys kept by the projection, the keys); empty for the others.
    """

    def __init__(
        self,
        lm: LensModel,
        deltas: Mapping[str, Tensor],
        *,
        method: str,
        requests: Sequence[EditRequest] = (),
        seconds: float = 0.0,
    ) -> None:
        super().__init__(lm, deltas)
        self.method = method
        self.requests = tuple(requests)
        self.seconds = seconds
        self.details: dict[str, Any] = {}

    def __repr__(self) -> str:
        state = "restored" if self.restored else "applied"
        return f"EditHandle({self.method}, {len(self.requests)} request(s), layers {self.layers}, {state})"

    def save(self, path: str | Path, metadata: Mapping[str, str] | None = None) -> Path:
        """Write the deltas as safetensors, with the method and requests in the metadata."""
        header = {
            "method": self.method,
            "requests": json.dumps([r.to_json() for r in self.requests]),
            **(metadata or {}),
        }
        return super().save(path, header)


def apply_delta(lm: LensModel, path: str | Path, *, check_model: bool = True) -> EditHandle:
    """Re-apply an edit saved by :meth:`EditHandle.save`. Changes ``lm``'s weights in place.

    Args:
        lm: the model to edit.
        path: the ``.safetensors`` file.
        check_model: refuse a file saved from a model of another name.

    Returns:
        An :class:`EditHandle` that restores the weights as they were before this call.

    Raises:
        ValueError: not an edit file, another model, or a delta that does not fit (no weight changes).
    """
    deltas, metadata = read_deltas(path)
    if check_model and metadata.get("model") != lm.name:
        raise UserInputError(f"{path} was saved from {metadata.get('model')!r}, not {lm.name!r}")
    requests = [EditRequest.from_json(r) for r in json.loads(metadata.get("requests", "[]"))]
    return EditHandle(lm, deltas, method=metadata.get("method", "loaded"), requests=requests).apply()

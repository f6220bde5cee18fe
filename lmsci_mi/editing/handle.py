"""`EditHandle`: the weight deltas of an edit, and the original weights to restore bit for bit.

ROME and MEMIT change a model's weights in place. The handle they return remembers the original
tensors (copies, not deltas, so that `restore()` is exact in floating point), holds the deltas
and saves them as safetensors so that an edit can be shared and re-applied (after penzai).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor

from lmsci_mi.editing.requests import EditRequest

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel

__all__ = ["EditHandle", "apply_delta"]

logger = logging.getLogger(__name__)


def _parameter(lm: LensModel, name: str) -> torch.nn.Parameter:
    params = dict(lm.model.named_parameters())
    if name not in params:
        raise ValueError(f"{lm.name} has no parameter {name!r}")
    return params[name]


class EditHandle:
    """An applied edit: ``deltas`` (parameter name → ΔW) and the originals to restore.

    Use ``handle.restore()`` or ``with rome_edit(...) as handle:`` to put the original weights back
    bit for bit. Restoring twice is harmless. Stacked edits must be restored in reverse order.

    Attributes:
        lm: the edited model.
        method: ``"rome"``, ``"memit"`` or ``"loaded"``.
        deltas: ΔW per parameter name, e.g. ``"blocks.4.mlp.W_out"`` (same dtype as the weight).
        requests: the requests the edit installs.
        restored: whether :meth:`restore` has run.
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
        self.lm = lm
        self.method = method
        self.deltas = {name: delta.detach() for name, delta in deltas.items()}
        self.requests = tuple(requests)
        self.seconds = seconds
        self.restored = False
        self._originals: dict[str, Tensor] = {}

    def _apply(self) -> EditHandle:
        """Add the deltas to the weights, after checking every name and shape (nothing changes on error)."""
        params = {name: _parameter(self.lm, name) for name in self.deltas}
        for name, delta in self.deltas.items():
            if params[name].shape != delta.shape:
                raise ValueError(
                    f"delta for {name} has shape {tuple(delta.shape)}, the weight {tuple(params[name].shape)}"
                )
        with torch.no_grad():
            for name, delta in self.deltas.items():
                self._originals[name] = params[name].detach().clone()
                params[name].add_(delta.to(device=params[name].device, dtype=params[name].dtype))
        return self

    @property
    def layers(self) -> tuple[int, ...]:
        """The edited layers, ascending."""
        return tuple(sorted(int(name.split(".")[1]) for name in self.deltas))

    def restore(self) -> None:
        """Put the original weights back, bit for bit."""
        if self.restored:
            return
        with torch.no_grad():
            for name, original in self._originals.items():
                _parameter(self.lm, name).copy_(original)
        self.restored = True

    def __enter__(self) -> EditHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.restore()

    def __repr__(self) -> str:
        state = "restored" if self.restored else "applied"
        return f"EditHandle({self.method}, {len(self.requests)} request(s), layers {self.layers}, {state})"

    def save(self, path: str | Path) -> Path:
        """Write the deltas as safetensors, with the model name, method and requests as metadata."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        metadata = {
            "format": "lmsci-mi-edit/1",
            "model": self.lm.name,
            "method": self.method,
            "requests": json.dumps([r.to_json() for r in self.requests]),
        }
        save_file(
            {k: v.detach().cpu().contiguous() for k, v in self.deltas.items()}, path, metadata
        )
        return path


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
    path = Path(path)
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata() or {}
        deltas = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118
    if metadata.get("format") != "lmsci-mi-edit/1":
        raise ValueError(f"{path} is not an lmsci-mi edit file")
    if check_model and metadata.get("model") != lm.name:
        raise ValueError(f"{path} was saved from {metadata.get('model')!r}, not {lm.name!r}")
    requests = [EditRequest.from_json(r) for r in json.loads(metadata.get("requests", "[]"))]
    return EditHandle(
        lm, deltas, method=metadata.get("method", "loaded"), requests=requests
    )._apply()

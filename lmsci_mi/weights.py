"""`WeightEdit`: additive changes to a model's parameters that can be undone bit for bit.

Fact edits (ROME, MEMIT) and weight steers change weights in place. They all return a
`WeightEdit` (or a subclass): it checks every name and shape before touching anything, keeps
copies of the original tensors (not negated deltas, so `restore()` is exact in floating point),
works as a context manager, and saves its deltas as safetensors to re-apply later. After penzai's
copy-on-edit and ROME's "model at the end == model at the start" invariant.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor
from typing_extensions import Self

from lmsci_mi.model import LensModel

__all__ = ["WeightEdit", "read_deltas"]

log = logging.getLogger(__name__)


class WeightEdit:
    """Deltas for named parameters (``"blocks.4.mlp.W_out"`` → ΔW) and the originals they replace.

    Create it, then :meth:`apply` it (the editing functions return it applied). ``restore()`` puts
    the original tensors back; restoring twice is harmless. Stacked edits must be restored in
    reverse order, as with any undo.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> before = lm.model.blocks[0].mlp.W_out.clone()
    >>> delta = {"blocks.0.mlp.W_out": torch.ones_like(before)}
    >>> with WeightEdit(lm, delta).apply():
    ...     bool((lm.model.blocks[0].mlp.W_out != before).all())
    True
    >>> torch.equal(lm.model.blocks[0].mlp.W_out, before)
    True
    """

    def __init__(self, lm: LensModel, deltas: Mapping[str, Tensor]) -> None:
        self.lm = lm
        self.deltas: dict[str, Tensor] = {name: delta.detach() for name, delta in deltas.items()}
        self.restored = False
        self._originals: dict[str, Tensor] = {}

    @property
    def applied(self) -> bool:
        return bool(self._originals) and not self.restored

    @property
    def layers(self) -> tuple[int, ...]:
        """The edited layers (from ``blocks.L.…`` names), ascending."""
        return tuple(sorted({int(n.split(".")[1]) for n in self.deltas if n.startswith("blocks.")}))

    def _parameters(self) -> dict[str, torch.nn.Parameter]:
        params = dict(self.lm.model.named_parameters())
        unknown = [name for name in self.deltas if name not in params]
        if unknown:
            raise ValueError(
                f"{self.lm.name} has no parameter {unknown}; names look like 'blocks.4.mlp.W_out'"
            )
        for name, delta in self.deltas.items():
            if params[name].shape != delta.shape:
                raise ValueError(
                    f"delta for {name} has shape {tuple(delta.shape)}, the weight "
                    f"{tuple(params[name].shape)}"
                )
        return {name: params[name] for name in self.deltas}

    def apply(self) -> Self:
        """Add the deltas in place. Every name and shape is checked first: on error nothing changes."""
        if self._originals:
            raise RuntimeError("this edit is already applied (or was restored); make a new one")
        params = self._parameters()
        with torch.no_grad():
            for name, param in params.items():
                self._originals[name] = param.detach().clone()
            for name, param in params.items():
                param.add_(self.deltas[name].to(device=param.device, dtype=param.dtype))
        return self

    # Kept for the editing modules, which call the private spelling.
    _apply = apply

    def restore(self) -> None:
        """Put the original weights back, bit for bit."""
        if self.restored:
            return
        params = dict(self.lm.model.named_parameters())
        with torch.no_grad():
            for name, original in self._originals.items():
                params[name].copy_(original)
        self.restored = True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.restore()

    def __repr__(self) -> str:
        state = "restored" if self.restored else "applied" if self._originals else "not applied"
        return f"{type(self).__name__}(layers {self.layers}, {state})"

    def save(self, path: str | Path, metadata: Mapping[str, str] | None = None) -> Path:
        """Write the deltas as safetensors, with ``metadata`` (strings) in the header."""
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        header = {"format": "lmsci-mi-edit/1", "model": self.lm.name, **(metadata or {})}
        save_file({k: v.detach().cpu().contiguous() for k, v in self.deltas.items()}, out, header)
        return out


def read_deltas(path: str | Path) -> tuple[dict[str, Tensor], dict[str, str]]:
    """The deltas and header metadata of a file written by :meth:`WeightEdit.save`.

    Raises:
        ValueError: the file is not an lmsci-mi edit file.
    """
    with safe_open(str(path), framework="pt") as handle:
        metadata = dict(handle.metadata() or {})
        deltas = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118
    if metadata.get("format") != "lmsci-mi-edit/1":
        raise ValueError(f"{path} is not an lmsci-mi edit file (saved by WeightEdit.save)")
    return deltas, metadata

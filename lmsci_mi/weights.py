"""`WeightEdit`: additive changes to a model's parameters that can be undone bit for bit.

Fact edits (ROME, MEMIT) and weight steers change weights in place. They all return a
`WeightEdit` (or a subclass): it checks every name and shape before touching anything, keeps
copies of the original tensors (not negated deltas, so `restore()` is exact in floating point),
works as a context manager, and saves its deltas as safetensors to re-apply later. After penzai's
copy-on-edit and ROME's "model at the end == model at the start" invariant.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor
from typing_extensions import Self

from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.sites import layer_of

__all__ = ["EDIT_FORMAT", "WeightEdit", "read_deltas"]

log = logging.getLogger(__name__)

EDIT_FORMAT = "lmsci-mi-edit/1"
"""The ``format`` entry in the header of every saved edit file."""

# The edits applied to a model and not yet restored, oldest first, are kept on the model itself.
# Not in a WeakKeyDictionary keyed by the model: an edit refers to its model, and a value that
# refers to its key keeps the key (and every model ever edited) alive. On the model, the record is
# an ordinary reference cycle that goes with the model, and a deep copy of an edited model gets
# its own record of the same edits.
_APPLIED_ATTR = "_lmsci_mi_applied_edits"


def _applied(model: torch.nn.Module) -> list[WeightEdit]:
    """The applied-edit stack of ``model`` (created empty on first use)."""
    return vars(model).setdefault(_APPLIED_ATTR, [])


class WeightEdit:
    """Deltas for named parameters (``"blocks.4.mlp.W_out"`` → ΔW) and the originals they replace.

    Create it, then :meth:`apply` it (the editing functions return it applied). ``restore()`` puts
    the original tensors back; restoring twice is harmless. Stacked edits must be restored in
    reverse order, as with any undo: ``restore()`` refuses (and changes nothing) when a later
    edit of the same weight is still applied, or the weight is no longer original + delta.

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
        return tuple(sorted({layer for n in self.deltas if (layer := layer_of(n)) is not None}))

    @staticmethod
    def applied_to(lm: LensModel) -> tuple[WeightEdit, ...]:
        """The edits applied to ``lm``'s model and not yet restored, oldest first."""
        return tuple(_applied(lm.model))

    def _parameters(self) -> dict[str, torch.nn.Parameter]:
        params = dict(self.lm.model.named_parameters())
        unknown = [name for name in self.deltas if name not in params]
        if unknown:
            raise UserInputError(
                f"{self.lm.name} has no parameter {unknown}; names look like 'blocks.4.mlp.W_out'"
            )
        for name, delta in self.deltas.items():
            if params[name].shape != delta.shape:
                raise UserInputError(
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
        _applied(self.lm.model).append(self)
        return self

    @classmethod
    def combine(cls, edits: Sequence[WeightEdit], **fields: Any) -> Self:
        """One applied edit standing for several applied edits of one model (MEMIT's layers).

        The result's deltas are the parts' deltas summed per parameter, its originals the weights
        before the first part touched them; its ``restore()`` undoes all parts at once. The parts
        are taken over: they no longer count as applied, and restoring one of them does nothing.
        ``fields`` go to ``cls``'s constructor (e.g. ``method=`` of an edit handle).

        Raises:
            ValueError: no edits, edits of different models, or an edit that is not applied.
        """
        if not edits:
            raise UserInputError("nothing to combine: give at least one applied edit")
        lm = edits[0].lm
        stack = _applied(lm.model)
        for edit in edits:
            if edit.lm.model is not lm.model or not edit.applied or edit not in stack:
                raise UserInputError(f"{edit!r} is not applied to {lm.name}; only applied edits of one model combine")
        parts = sorted(edits, key=stack.index)
        deltas: dict[str, Tensor] = {}
        originals: dict[str, Tensor] = {}
        for part in parts:
            for name, delta in part.deltas.items():
                deltas[name] = deltas[name] + delta if name in deltas else delta
                originals.setdefault(name, part._originals[name])
        combined = cls(lm, deltas, **fields)
        combined._originals = originals
        stack.insert(stack.index(parts[0]), combined)
        for part in parts:
            stack.remove(part)
            part.restored = True  # taken over by `combined`
        return combined

    def restore(self) -> None:
        """Put the original weights back, bit for bit.

        Raises:
            RuntimeError: a later edit of the same weights is still applied, or a weight was
                changed since this edit was applied. Nothing is changed; restore the later edits
                first (newest first), then this one.
        """
        if self.restored:
            return
        params = dict(self.lm.model.named_parameters())
        self._check_restorable(params)
        with torch.no_grad():
            for name, original in self._originals.items():
                params[name].copy_(original)
        stack = _applied(self.lm.model)
        if self in stack:
            stack.remove(self)
        self.restored = True

    def _check_restorable(self, params: Mapping[str, Tensor]) -> None:
        """Refuse an out-of-order restore, which would silently bring back an earlier state."""
        stack = _applied(self.lm.model)
        later = stack[stack.index(self) + 1 :] if self in stack else []
        blocking = [edit for edit in later if set(edit.deltas) & set(self._originals)]
        if blocking:
            order = ", ".join(repr(edit) for edit in reversed(blocking))
            raise RuntimeError(
                f"cannot restore {self!r} while later edits of the same weights are applied: "
                f"restore in reverse order of application, first {order}, then this one"
            )
        with torch.no_grad():
            for name, original in self._originals.items():
                current = params[name].detach()
                delta = self.deltas[name].to(device=current.device, dtype=current.dtype)
                expected = original + delta
                # Exact for a single edit (the same add); a few ulps for combined deltas.
                tol = 8 * torch.finfo(current.dtype).eps * (original.abs() + delta.abs()) + 1e-30
                if not bool(((current - expected).abs() <= tol).all()):
                    raise RuntimeError(
                        f"cannot restore {self!r}: {name} is no longer its original + this "
                        "edit's delta (it was changed after this edit was applied). Restore the "
                        "edits applied after this one first, newest first, then this one"
                    )

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
        if out.is_dir() or not out.name:
            raise UserInputError(f"{path} is a folder; give a file name, e.g. {out / 'edit.safetensors'}")
        out.parent.mkdir(parents=True, exist_ok=True)
        header = {"format": EDIT_FORMAT, "model": self.lm.name, **(metadata or {})}
        save_file({k: v.detach().cpu().contiguous() for k, v in self.deltas.items()}, out, header)
        return out


def read_deltas(path: str | Path) -> tuple[dict[str, Tensor], dict[str, str]]:
    """The deltas and header metadata of a file written by :meth:`WeightEdit.save`.

    Raises:
        ValueError: no such file, or a file that is not an lmsci-mi edit file; the message says
            how to make one.
    """
    fix = "give a file written by `lmsci-mi edit --delta-out FILE` or EditHandle.save(FILE)"
    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = dict(handle.metadata() or {})
            deltas = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118
    except OSError as error:  # missing, a folder, a device...
        raise UserInputError(f"no edit file at {path} ({error.strerror}); {fix}") from None
    except SafetensorError as error:
        raise UserInputError(f"{path} is not a saved edit (not safetensors: {error}); {fix}") from None
    if metadata.get("format") != EDIT_FORMAT:
        raise UserInputError(f"{path} is not an lmsci-mi edit file (no '{EDIT_FORMAT}' header); {fix}")
    return deltas, metadata

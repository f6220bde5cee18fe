"""Result types: every analysis in lmsci-mi returns a frozen dataclass derived from `Result`.

A result holds its main tensor with named axes and axis labels, any further typed fields, and a
`Meta` record (model, prompts, seed, data source, version). The base class gives every result
`to_dict`/`from_dict`, `save`/`load` (JSON plus safetensors, never pickle), a long-format
`to_dataframe()`, a `summary()`, a matplotlib `plot()` and a notebook view (`_repr_html_`).
After SAELens configs and TransformerLens `logits_to_df`.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import os
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, Union

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor
from typing_extensions import dataclass_transform

from lmsci_mi._version import __version__
from lmsci_mi.errors import UserInputError

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = [
    "UNRECORDED_SINK",
    "LayerCurve",
    "Meta",
    "ParamValue",
    "Result",
    "ResultFileError",
    "kind_of",
    "result_type",
]

ParamValue = str | int | float | bool | None | tuple[Any, ...]
"""A JSON-able setting recorded in `Meta.params` (a noise scale, a layer window, a chunk size)."""

R = TypeVar("R", bound="Result")
T = TypeVar("T")

_RESULT_TYPES: dict[str, type[Result]] = {}
_FORMAT = "lmsci-mi-result/1"
# Results load their own types by importing the module the file names, but only lmsci-mi's own
# modules: a shared file must not be able to make `load` import (run) arbitrary code.
_AUTO_IMPORT_PACKAGE = "lmsci_mi"

UNRECORDED_SINK = "<unrecorded>"
"""``Meta.sink`` of a result saved before results recorded their sink (version 0.1)."""


class ResultFileError(UserInputError):
    """A file given to :meth:`Result.load` is not a readable lmsci-mi result; says why."""


@dataclass(frozen=True)
class Meta:
    """Where a result came from, so that a number can be traced back to its inputs.

    Attributes:
        model: the model's name.
        sink: the attention-sink token put in front of every prompt (its text, e.g.
            ``"<|endoftext|>"``), or None when prompts had no sink. It changes results, so every
            result states it; :meth:`LensModel.meta` fills it in.
        prompts, seed, data_source, version, params: the inputs and settings of the analysis.
    """

    model: str
    prompts: tuple[str, ...] = ()
    seed: int | None = None
    data_source: str = ""
    version: str = __version__
    params: Mapping[str, ParamValue] = field(default_factory=dict)
    sink: str | None = field(kw_only=True)


@dataclass_transform(frozen_default=True, eq_default=False)
def result_type(cls: type[T]) -> type[T]:
    """Class decorator for result types: a frozen dataclass, registered for :meth:`Result.load`.

    Equality and the repr are the base class's (tensors compared with ``torch.equal``; a short
    repr, not a dump of every tensor), so the dataclass's own ``__eq__`` and ``__repr__`` are off.
    """
    wrapped = dataclass(frozen=True, eq=False, repr=False)(cls)
    name = wrapped.__name__
    if name in _RESULT_TYPES and _RESULT_TYPES[name] is not wrapped:
        existing = _RESULT_TYPES[name]
        if existing.__module__ != wrapped.__module__ or existing.__qualname__ != wrapped.__qualname__:
            raise ValueError(f"result type {name!r} is already registered by {existing.__module__}")
    _RESULT_TYPES[name] = wrapped  # type: ignore[assignment]
    return wrapped


@dataclass(frozen=True, eq=False)
class Result:
    """Base of every analysis result.

    Attributes:
        values: the main tensor of the analysis (a trace, a patching sweep, head scores).
        axes: the names of ``values``' axes, e.g. ``("layer", "position")``.
        labels: for each axis, one label per index (token strings, head names), or ``()`` to use
            the integer index.
        meta: provenance.
    """

    values: Tensor
    axes: tuple[str, ...]
    labels: tuple[tuple[str, ...], ...]
    meta: Meta

    def __post_init__(self) -> None:
        if len(self.axes) != self.values.ndim:
            raise ValueError(
                f"{type(self).__name__}: {len(self.axes)} axis names {self.axes} for a tensor "
                f"with {self.values.ndim} dimensions"
            )
        if len(self.labels) != len(self.axes):
            raise ValueError(f"{type(self).__name__}: need one label tuple per axis {self.axes}")
        for axis, (name, labels) in enumerate(zip(self.axes, self.labels, strict=True)):
            if labels and len(labels) != self.values.shape[axis]:
                raise ValueError(
                    f"{type(self).__name__}: axis {name!r} has {self.values.shape[axis]} entries "
                    f"but {len(labels)} labels"
                )

    # ------------------------------------------------------------------ equality

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return _equal(self.to_dict(), other.to_dict())  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]

    # ------------------------------------------------------------------ display

    def __repr__(self) -> str:
        shape = " × ".join(f"{n} {a}" for n, a in zip(self.values.shape, self.axes, strict=True))
        return f"<{type(self).__name__} on {self.meta.model}: {shape or 'scalar'}>"

    def _repr_html_(self) -> str:
        """The notebook view: what a report section shows (plot, largest numbers, meta), offline."""
        # Imported here, as `plot` imports matplotlib: loading results must not load the plotting.
        from lmsci_mi.viz.result_html import notebook_html

        return notebook_html(self)

    # ------------------------------------------------------------------ dict round trip

    def to_dict(self) -> dict[str, Any]:
        """The result as nested plain data: dataclasses become dicts, tensors stay tensors."""
        return {"kind": kind_of(type(self)), **_encode_fields(self)}

    @classmethod
    def from_dict(cls: type[R], data: Mapping[str, Any]) -> R:
        """Rebuild a result from :meth:`to_dict`; dispatches on ``data["kind"]``.

        The kind names its module (``"lmsci_mi.circuits.tracing:CausalTrace"``); a type of
        lmsci-mi that is not imported yet is imported here. Bare kinds (``"CausalTrace"``, older
        files) resolve among the registered types.
        """
        target = _resolve_kind(data.get("kind", kind_of(cls)))
        if not issubclass(target, cls):
            raise TypeError(f"{data.get('kind')} is not a {cls.__name__}")
        return typing.cast(R, _decode_dataclass(target, data))

    # ------------------------------------------------------------------ files

    def save(self, path: str | Path) -> Path:
        """Write ``path`` (JSON) and ``path`` with suffix ``.safetensors`` (the tensors).

        Returns the JSON path. No pickle is involved, so a saved result is safe to share.

        Raises:
            ValueError: ``path`` names no file (empty, or ending in ``..``), or the tensor file
                cannot be written there.
        """
        json_path = Path(path)
        if json_path.name in ("", ".", ".."):
            raise UserInputError(f"cannot save a result as {str(path)!r}: give a file name, e.g. trace.json")
        if json_path.suffix != ".json":
            json_path = json_path.with_suffix(json_path.suffix + ".json")
        tensors: dict[str, Tensor] = {}
        plain = _externalise(self.to_dict(), tensors, prefix="")
        json_path.parent.mkdir(parents=True, exist_ok=True)
        tensor_path = json_path.with_suffix(".safetensors")
        document = {"format": _FORMAT, "tensors": tensor_path.name, "result": plain}
        # Tensors first, then the JSON that points at them, each written under a private name and
        # renamed into place: a reader (another process filling the same cache entry) that finds
        # the JSON always finds complete tensors, and a failed write leaves no half file.
        staged = tensor_path.with_name(f".{tensor_path.name}.{os.getpid()}.partial")
        try:
            save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, staged)
            os.replace(staged, tensor_path)
        except (SafetensorError, OSError) as error:  # e.g. a folder of that name: I/O, not a bug
            raise UserInputError(f"cannot write {tensor_path}: {error}") from None
        finally:
            staged.unlink(missing_ok=True)
        staged = json_path.with_name(f".{json_path.name}.{os.getpid()}.partial")
        try:
            staged.write_text(json.dumps(document, indent=1, allow_nan=True))
            os.replace(staged, json_path)
        finally:
            staged.unlink(missing_ok=True)
        return json_path

    @classmethod
    def load(cls: type[R], path: str | Path) -> R:
        """Read a result written by :meth:`save` (either file's path may be given).

        Works in a fresh interpreter: the module that defines the result's type is imported
        when needed (lmsci-mi's own modules only; import your own result types first).

        Raises:
            FileNotFoundError: no result file at ``path``.
            ResultFileError: the file is not an lmsci-mi result, its tensor file is missing or
                unreadable, or its fields do not fit its type; the message says which.
        """
        json_path = _json_path(Path(path))
        document = _read_document(json_path)
        tensor_path = json_path.parent / document["tensors"]
        if not tensor_path.is_file():
            raise ResultFileError(f"{json_path}: its tensor file {tensor_path} is missing")
        try:
            tensors = load_file(tensor_path)
        except (SafetensorError, OSError, ValueError) as error:
            raise ResultFileError(f"{tensor_path} is not a readable safetensors file ({error})") from None
        try:
            return cls.from_dict(_internalise(document["result"], tensors))
        except ResultFileError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise ResultFileError(
                f"{json_path} does not hold a valid {document['result'].get('kind', 'result')}: "
                f"{type(error).__name__}: {error}"
            ) from error

    # ------------------------------------------------------------------ tables and plots

    def to_dataframe(self) -> pd.DataFrame:
        """``values`` in long format: one row per cell, a column per axis, and ``value``.

        Each axis gives two columns: ``<axis>`` (its label, or the index when unlabelled) and
        ``<axis>_index``.
        """
        import pandas as pd

        array = self.values.detach().cpu().float().numpy()
        grids = np.meshgrid(*[np.arange(n) for n in array.shape], indexing="ij")
        columns: dict[str, Any] = {}
        for axis, (name, labels) in enumerate(zip(self.axes, self.labels, strict=True)):
            index = grids[axis].ravel()
            columns[name] = np.asarray(labels, dtype=object)[index] if labels else index
            columns[f"{name}_index"] = index
        columns["value"] = array.ravel()
        return pd.DataFrame(columns)

    def export(self, path: str | Path) -> Path:
        """Write :meth:`to_dataframe` as a table: ``.csv``, ``.parquet`` (pyarrow) or ``.json``
        (a list of records), chosen by the suffix.

        The table is written to a temporary file beside ``path`` and renamed into place, so a
        failed export never leaves a half-written file.

        Raises:
            ValueError: an unsupported suffix (the message lists the supported ones).
        """
        out = Path(path)
        writer = _TABLE_WRITERS.get(out.suffix.lower())
        if writer is None:
            raise UserInputError(f"cannot export to {str(path)!r}: use a file ending in one of "
                             f"{sorted(_TABLE_WRITERS)}")
        frame = self.to_dataframe()
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(f".{out.name}.partial")
        try:
            writer(frame, partial)
            os.replace(partial, out)
        finally:
            partial.unlink(missing_ok=True)
        return out

    def summary(self, rows: int = 10) -> str:
        """A short plain-text account of the result: what the CLI prints and a notebook shows.

        The base gives the type, the model and the ``rows`` largest entries of ``values`` with
        their labels; a result type with a headline (a peak layer, an accuracy) overrides it.
        """
        frame = self.to_dataframe()
        if "value" in frame.columns and len(frame) > rows:
            order = np.argsort(-np.abs(frame["value"].to_numpy(dtype=float)), kind="stable")
            frame = frame.iloc[order[:rows]]  # NaN sorts last
        head = f"{type(self).__name__} on {self.meta.model}, values {tuple(self.values.shape)}"
        return head + "\n" + frame.to_string(index=False)

    def axis_labels(self, axis: int) -> list[str]:
        """Labels of one axis, falling back to the indices."""
        labels = self.labels[axis]
        return list(labels) if labels else [str(i) for i in range(self.values.shape[axis])]

    def plot(
        self, path: str | Path | None = None, *, title: str | None = None, **options: Any
    ) -> Figure:
        """The result's figure; written to ``path`` as PNG when one is given.

        A template: the result type draws the figure (``_draw``) under a title, ``title`` or its
        :meth:`default_title`; this method saves it and returns it. The base draws ``values``: a
        line for 1-D, a heatmap for 2-D, a row of heatmaps for 3-D.

        Args:
            path: if given, the figure is also written there as PNG.
            title: the figure's title; empty or None gives :meth:`default_title`.
            options: the result type's own plot options (e.g. ``LogitLens``'s ``prompt``),
                passed on to its ``_draw`` and :meth:`default_title`.
        """
        return self._plotted(self._draw, path, title or self.default_title(**options), **options)

    def default_title(self, **options: Any) -> str:
        """The title :meth:`plot` gives when none is given: the result type and the model.

        ``options`` are :meth:`plot`'s options, for a title that depends on them.
        """
        return f"{type(self).__name__} — {self.meta.model}"

    def _draw(self, title: str, **options: Any) -> Figure:
        """The hook of :meth:`plot`: a new figure, ``title`` drawn where the figure's title goes."""
        from lmsci_mi.viz.plots import plot_tensor

        return plot_tensor(
            self.values,
            axes=self.axes,
            labels=[self.axis_labels(i) for i in range(self.values.ndim)],
            title=title,
        )

    @staticmethod
    def _plotted(
        draw: Callable[..., Figure], path: str | Path | None, title: str, **options: Any
    ) -> Figure:
        """``draw(title, **options)``, saved to ``path`` when one is given: the tail of every plot.

        :meth:`plot` uses it, and so does a second view of a result (``plot_severing``); it is
        the one place that saves a figure, so every plot saves the same way.
        """
        from lmsci_mi.viz.plots import save_figure

        fig = draw(title, **options)
        if path is not None:
            save_figure(fig, path)
        return fig


@result_type
class LayerCurve(Result):
    """A quantity per layer, possibly for several series: probe accuracy, a trace's peak.

    ``values`` is ``[layer]`` or ``[series, layer]``; the plot draws one line per series.
    """

    def _draw(self, title: str) -> Figure:
        from lmsci_mi.viz.plots import plot_curves

        values = self.values if self.values.ndim == 2 else self.values[None]
        series = self.axis_labels(0) if self.values.ndim == 2 else [self.meta.model]
        return plot_curves(values, series=series, x_label=self.axes[-1], title=title)


_RESULT_TYPES["Result"] = Result

_TABLE_WRITERS: dict[str, Callable[[pd.DataFrame, Path], object]] = {
    ".csv": lambda frame, path: frame.to_csv(path, index=False),
    ".parquet": lambda frame, path: frame.to_parquet(path, index=False, engine="pyarrow"),
    ".json": lambda frame, path: frame.to_json(path, orient="records", indent=1),
}
"""Table formats of :meth:`Result.export`, by file suffix."""


# ---------------------------------------------------------------------- kinds and files


def kind_of(cls: type) -> str:
    """The kind a result type saves under: ``"module:Name"``, so a loader can import it."""
    return f"{cls.__module__}:{cls.__name__}"


def _resolve_kind(kind: Any) -> type[Result]:
    """The registered type of ``kind``, importing its module (lmsci-mi's own) if needed."""
    if not isinstance(kind, str) or not kind:
        raise ResultFileError(f"the result's kind {kind!r} is not a type name")
    module, _, name = kind.rpartition(":")
    if name not in _RESULT_TYPES and module:
        in_package = module == _AUTO_IMPORT_PACKAGE or module.startswith(_AUTO_IMPORT_PACKAGE + ".")
        if not in_package:
            raise ResultFileError(
                f"result kind {kind!r} is defined outside lmsci-mi; import {module} first "
                "(loading imports only lmsci-mi's own modules)"
            )
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise ResultFileError(f"result kind {kind!r}: cannot import {module} ({error})") from None
    if name not in _RESULT_TYPES:
        raise ResultFileError(
            f"unknown result kind {kind!r}; import the module that defines it first "
            f"(known: {sorted(_RESULT_TYPES)})"
        )
    return _RESULT_TYPES[name]


def _json_path(path: Path) -> Path:
    """The JSON half of a saved result, from either file's path (or the path without suffix)."""
    if path.suffix == ".safetensors":
        path = path.with_suffix(".json")
    if not path.exists() and path.with_suffix(path.suffix + ".json").exists():
        path = path.with_suffix(path.suffix + ".json")
    if not path.is_file():
        raise FileNotFoundError(f"no result file at {path}")
    return path


def _read_document(json_path: Path) -> dict[str, Any]:
    """The parsed JSON of a saved result, checked for the format key and its parts."""
    try:
        document = json.loads(json_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ResultFileError(f"{json_path} is not an lmsci-mi result (not JSON: {error})") from None
    if not isinstance(document, dict) or document.get("format") != _FORMAT:
        raise ResultFileError(
            f"{json_path} is not an lmsci-mi result (JSON without \"format\": \"{_FORMAT}\")"
        )
    if not isinstance(document.get("tensors"), str) or not isinstance(document.get("result"), dict):
        raise ResultFileError(f"{json_path} is an incomplete lmsci-mi result (no tensors or result)")
    return document


# ---------------------------------------------------------------------- encoding helpers


def _encode_fields(obj: Any) -> dict[str, Any]:
    return {f.name: _encode(getattr(obj, f.name)) for f in dataclasses.fields(obj)}


def _encode(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _encode_fields(value)
    if isinstance(value, Mapping):
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_encode(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _decode(value: Any, hint: Any) -> Any:
    if value is None or isinstance(value, Tensor):
        return value
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        for option in options:
            option_origin = typing.get_origin(option) or option
            if isinstance(value, list) and option_origin in (tuple, list):
                return _decode(value, option)
            if isinstance(value, dict) and (
                dataclasses.is_dataclass(option) or option_origin in (dict, Mapping)
            ):
                return _decode(value, option)
        return value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _decode_dataclass(hint, value)
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(v, args[0]) for v in value)
        if args:
            return tuple(_decode(v, a) for v, a in zip(value, args, strict=True))
        return tuple(value)
    if origin is list or origin is Sequence:
        (arg,) = typing.get_args(hint) or (Any,)
        return [_decode(v, arg) for v in value]
    if origin in (dict, Mapping):
        args = typing.get_args(hint)
        arg = args[1] if len(args) == 2 else Any
        return {k: _decode(v, arg) for k, v in value.items()}
    if isinstance(value, list):
        return tuple(_decode(v, Any) for v in value)
    if hint is float and isinstance(value, int):
        return float(value)
    return value


def _decode_dataclass(cls: type, data: Mapping[str, Any]) -> Any:
    if not isinstance(data, Mapping):
        raise TypeError(f"{cls.__name__} needs a mapping of fields, not {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.name not in data:
            if cls is Meta and f.name == "sink":
                kwargs["sink"] = UNRECORDED_SINK  # saved before results recorded their sink
            continue  # a field added later with a default: old files still load
        kwargs[f.name] = _decode(data[f.name], hints.get(f.name, Any))
    return cls(**kwargs)


def _externalise(value: Any, tensors: dict[str, Tensor], prefix: str) -> Any:
    if isinstance(value, Tensor):
        key = prefix or "values"
        tensors[key] = value
        return {"__tensor__": key}
    if isinstance(value, dict):
        return {k: _externalise(v, tensors, f"{prefix}.{k}" if prefix else k) for k, v in value.items()}
    if isinstance(value, list):
        return [_externalise(v, tensors, f"{prefix}.{i}") for i, v in enumerate(value)]
    return value


def _internalise(value: Any, tensors: Mapping[str, Tensor]) -> Any:
    if isinstance(value, dict):
        if set(value) == {"__tensor__"}:
            if value["__tensor__"] not in tensors:
                raise ResultFileError(f"tensor {value['__tensor__']!r} is not in the tensor file")
            return tensors[value["__tensor__"]]
        return {k: _internalise(v, tensors) for k, v in value.items()}
    if isinstance(value, list):
        return [_internalise(v, tensors) for v in value]
    return value


def _same_values(a: Tensor, b: Tensor) -> bool:
    """Bit-for-bit equal, with NaN equal to NaN (a result marks "not tested" cells with NaN)."""
    if a.is_floating_point() or a.is_complex():
        return bool(torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0)))
    return bool(torch.equal(a, b))


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return (
            isinstance(a, Tensor)
            and isinstance(b, Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and _same_values(a.detach().cpu(), b.detach().cpu())
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)

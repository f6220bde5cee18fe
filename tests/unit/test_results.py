"""The result base: save/load round trip, long-format tables, plots, nested typed fields."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from lmsci_mi import LayerCurve, Meta, Result, result_type


@dataclass(frozen=True)
class Evidence:
    head: tuple[int, int]
    score: float
    note: str | None = None


@result_type
class _NestedResult(Result):
    extra: torch.Tensor
    baseline: float
    evidence: tuple[Evidence, ...]
    best: Evidence | None


def _meta() -> Meta:
    return Meta(model="toy", prompts=("a b", "c d"), seed=3, data_source="test",
                params={"noise": 3.0, "window": (1, 2)})


def _result() -> _NestedResult:
    return _NestedResult(
        values=torch.arange(6, dtype=torch.float32).reshape(2, 3),
        axes=("layer", "position"),
        labels=((), ("<s>", "a", "b")),
        meta=_meta(),
        extra=torch.tensor([1, 2], dtype=torch.int64),
        baseline=0.5,
        evidence=(Evidence((0, 1), 0.9), Evidence((1, 2), -0.2, "neg")),
        best=Evidence((0, 1), 0.9),
    )


def test_save_load_round_trip_is_equal(tmp_path: Path) -> None:
    result = _result()
    path = result.save(tmp_path / "r.json")
    assert path.exists() and path.with_suffix(".safetensors").exists()
    loaded = Result.load(path)
    assert type(loaded) is _NestedResult
    assert loaded == result
    assert loaded.evidence[1].head == (1, 2) and isinstance(loaded.evidence[1], Evidence)
    assert loaded.extra.dtype == torch.int64


def test_changed_result_is_not_equal() -> None:
    other = _NestedResult(**{**_result().__dict__, "baseline": 0.6})
    assert other != _result()


def test_dataframe_has_one_row_per_cell() -> None:
    frame = _result().to_dataframe()
    assert len(frame) == 6
    assert list(frame.columns) == ["layer", "layer_index", "position", "position_index", "value"]
    row = frame[(frame.layer == 1) & (frame.position == "b")]
    assert row.value.item() == 5.0


def test_labels_must_match_axis_length() -> None:
    with pytest.raises(ValueError, match="3 entries but 2 labels"):
        Result(values=torch.zeros(2, 3), axes=("a", "b"), labels=((), ("x", "y")), meta=_meta())
    with pytest.raises(ValueError, match="axis names"):
        Result(values=torch.zeros(2, 3), axes=("a",), labels=((),), meta=_meta())


def test_plot_writes_png(tmp_path: Path) -> None:
    _result().plot(tmp_path / "heat.png")
    curve = LayerCurve(values=torch.rand(2, 5), axes=("probe", "layer"),
                       labels=(("real", "control"), ()), meta=_meta())
    curve.plot(tmp_path / "curve.png")
    for name in ("heat.png", "curve.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert Result.load(curve.save(tmp_path / "curve")) == curve


def test_unknown_kind_is_a_clear_error() -> None:
    data = _result().to_dict()
    data["kind"] = "NoSuchResult"
    with pytest.raises(ValueError, match="unknown result kind"):
        Result.from_dict(data)

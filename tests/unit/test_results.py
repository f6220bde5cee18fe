"""The result base: save/load round trip, long-format tables, plots, nested typed fields."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch

from lmsci_mi import LayerCurve, Meta, Result, result_type
from lmsci_mi.results import UNRECORDED_SINK, ResultFileError

if TYPE_CHECKING:
    from matplotlib.figure import Figure


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
                params={"noise": 3.0, "window": (1, 2)}, sink="<|endoftext|>")


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


@result_type
class _DrawnResult(Result):
    """A result type that gives only the hooks of the plot template."""

    def default_title(self, *, scale: float = 1.0, **options: object) -> str:
        return f"scaled by {scale}"

    def _draw(self, title: str, *, scale: float = 1.0) -> Figure:
        from matplotlib.figure import Figure

        fig = Figure()
        fig.subplots().plot((self.values.flatten() * scale).tolist())
        fig.suptitle(title)
        return fig


def test_plot_template_titles_saves_and_passes_options_on(tmp_path: Path) -> None:
    result = _DrawnResult(values=torch.arange(3.0), axes=("layer",), labels=((),), meta=_meta())
    fig = result.plot(tmp_path / "drawn.png", scale=2.0)
    assert (tmp_path / "drawn.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert fig.get_suptitle() == "scaled by 2.0"
    assert fig.axes[0].lines[0].get_ydata().tolist() == [0.0, 2.0, 4.0]
    assert result.plot(title="given").get_suptitle() == "given"
    assert result.plot(title="").get_suptitle() == "scaled by 1.0"  # empty: the default
    with pytest.raises(TypeError, match="scael"):
        result.plot(scael=2.0)  # a misspelt option is an error, not ignored
    assert not list(tmp_path.glob("*.png"))[1:], "only the plot given a path was saved"


def _calls_to(name: str, tree: ast.AST) -> list[tuple[str, int]]:
    """(innermost enclosing function, line) of each call of ``name``, bare or as an attribute."""
    calls: list[tuple[str, int]] = []

    def visit(node: ast.AST, scope: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            scope = node.name
        if isinstance(node, ast.Call):
            func = node.func
            if (func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)) == name:
                calls.append((scope, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, scope)

    visit(tree, "<module>")
    return calls


# A module may call save_figure only here; each exception says why.
_SAVE_FIGURE_ALLOWED = {
    "results.py": {"_plotted"},  # the plot template's tail, used by `plot` and `plot_severing`
}


def test_save_figure_is_called_only_by_the_plot_template() -> None:
    """Every figure of a result is saved by `Result.plot` (through `Result._plotted`): titles,
    paths and closing pyplot figures are then handled once."""
    package = Path(__file__).resolve().parents[2] / "lmsci_mi"
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        for function, line in _calls_to("save_figure", ast.parse(path.read_text())):
            module = path.relative_to(package).as_posix()
            assert function in _SAVE_FIGURE_ALLOWED.get(module, set()), (
                f"lmsci_mi/{module}:{line} ({function}) calls save_figure; give the result type "
                "a `_draw` hook and let `Result.plot` save the figure"
            )
            found.setdefault(module, set()).add(function)
    assert found.get("results.py") == {"_plotted"}  # the scan sees the template's own call


def test_result_types_leave_plot_to_the_template() -> None:
    """Result types implement `_draw` (and `default_title`), not `plot` itself."""
    allowed = {
        ("results.py", "Result"),  # the template
        ("viz/result_html.py", "Result"),  # a Protocol naming the template's signature
    }
    package = Path(__file__).resolve().parents[2] / "lmsci_mi"
    own = []
    for path in sorted(package.rglob("*.py")):
        module = path.relative_to(package).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and (module, node.name) not in allowed and any(
                isinstance(f, ast.FunctionDef) and f.name == "plot" for f in node.body
            ):
                own.append(f"{module}:{node.name}")
    assert own == [], f"these classes define plot instead of the template's _draw hook: {own}"


def test_unknown_kind_is_a_clear_error() -> None:
    data = _result().to_dict()
    data["kind"] = "NoSuchResult"
    with pytest.raises(ValueError, match="unknown result kind"):
        Result.from_dict(data)


def test_kind_names_the_module() -> None:
    assert _result().to_dict()["kind"] == f"{__name__}:_NestedResult"


def _python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=Path(__file__).parents[2], timeout=120)


@pytest.mark.slow  # a fresh interpreter: seconds of imports
def test_load_in_a_fresh_interpreter_imports_the_type(tmp_path: Path) -> None:
    """A result saved by a feature module loads where only `lmsci_mi` was imported."""
    from lmsci_mi.circuits.attention import attention_summary
    from lmsci_mi.loading import load_model

    path = attention_summary(load_model("toy-2l", device="cpu"), "The cat sat").save(tmp_path / "a")
    child = _python(
        "import sys, lmsci_mi\n"
        "assert 'lmsci_mi.circuits.attention' not in sys.modules\n"
        f"r = lmsci_mi.Result.load({str(path)!r})\n"
        "print(type(r).__module__, type(r).__name__, r.meta.sink)"
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["lmsci_mi.circuits.attention", "AttentionSummary", "<|endoftext|>"]


def test_old_files_with_a_bare_kind_still_load(tmp_path: Path) -> None:
    result = _result()
    path = result.save(tmp_path / "old.json")
    document = json.loads(path.read_text())
    document["result"]["kind"] = "_NestedResult"
    del document["result"]["meta"]["sink"]  # saved before results recorded their sink
    path.write_text(json.dumps(document))
    loaded = Result.load(path)
    assert type(loaded) is _NestedResult
    assert loaded.meta.sink == UNRECORDED_SINK
    assert loaded.values.equal(result.values)


def test_load_imports_only_lmsci_mi_modules(tmp_path: Path) -> None:
    path = _result().save(tmp_path / "r.json")
    document = json.loads(path.read_text())
    document["result"]["kind"] = "antigravity:Fly"
    path.write_text(json.dumps(document))
    with pytest.raises(ResultFileError, match="outside lmsci-mi; import antigravity first"):
        Result.load(path)
    assert "antigravity" not in sys.modules


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("just some text\n", "not JSON"),
        (b"\x89PNG\r\n\x1a\n\x00\xff", "not JSON"),
        ('{"a": 1}', "without \"format\""),
        ("[1, 2]", "without \"format\""),
        ('{"format": "lmsci-mi-result/1"}', "incomplete"),
    ],
)
def test_a_file_that_is_not_a_result_is_a_clear_error(
    tmp_path: Path, content: str | bytes, problem: str
) -> None:
    path = tmp_path / "notes.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(ResultFileError, match=problem) as info:
        Result.load(path)
    assert str(path) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_missing_or_broken_tensor_file_is_a_clear_error(tmp_path: Path) -> None:
    path = _result().save(tmp_path / "r.json")
    tensors = path.with_suffix(".safetensors")
    tensors.write_bytes(b"not safetensors")
    with pytest.raises(ResultFileError, match="not a readable safetensors file"):
        Result.load(path)
    tensors.unlink()
    with pytest.raises(ResultFileError, match=r"tensor file .* is missing"):
        Result.load(path)
    with pytest.raises(FileNotFoundError, match="no result file"):
        Result.load(tmp_path / "nothing.json")


def test_saving_where_no_file_can_be_is_a_value_error(tmp_path: Path) -> None:
    for bad in ("", ".", tmp_path / ".."):
        with pytest.raises(ValueError, match="give a file name"):
            _result().save(bad)
    (tmp_path / "r.safetensors").mkdir()
    with pytest.raises(ValueError, match="cannot write"):
        _result().save(tmp_path / "r.json")


def test_fields_that_do_not_fit_the_type_are_a_clear_error(tmp_path: Path) -> None:
    path = _result().save(tmp_path / "r.json")
    document = json.loads(path.read_text())
    del document["result"]["baseline"]
    path.write_text(json.dumps(document))
    with pytest.raises(ResultFileError, match="does not hold a valid"):
        Result.load(path)


@pytest.mark.slow  # a fresh interpreter: seconds of imports
def test_importing_viz_keeps_the_matplotlib_backend(tmp_path: Path) -> None:
    """`lmsci_mi.viz` used to call matplotlib.use("Agg") on import, for the whole process."""
    child = _python(
        "import sys, matplotlib, torch\n"
        "matplotlib.use('svg')\n"
        "import lmsci_mi.viz\n"
        "from lmsci_mi import LayerCurve, Meta\n"
        "assert matplotlib.get_backend() == 'svg', matplotlib.get_backend()\n"
        "curve = LayerCurve(values=torch.rand(5), axes=('layer',), labels=((),),\n"
        "                   meta=Meta(model='toy', sink=None))\n"
        f"curve.plot({str(tmp_path / 'c.png')!r})\n"
        "assert matplotlib.get_backend() == 'svg', matplotlib.get_backend()\n"
        "print('pyplot' if 'matplotlib.pyplot' in sys.modules else 'no pyplot')"
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "no pyplot"
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_results_holding_nan_equal_themselves_after_a_round_trip(tmp_path) -> None:
    from lmsci_mi.results import LayerCurve, Meta

    curve = LayerCurve(values=torch.tensor([0.5, float("nan")]), axes=("layer",), labels=((),),
                       meta=Meta(model="toy", sink=None))
    assert curve == LayerCurve.load(curve.save(tmp_path / "curve.json"))
    other = LayerCurve(values=torch.tensor([0.5, 1.0]), axes=("layer",), labels=((),),
                       meta=Meta(model="toy", sink=None))
    assert curve != other

"""benchmarks/harness.py: flags, provenance, the resumable per-item cache and atomic data files;
every docs/data/*.json carries a provenance record; benchmarks import only public lmsci_mi names.
Reads files and git only (no model)."""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHA = re.compile(r"^[0-9a-f]{40}(\+dirty)?$")


@functools.cache
def _harness() -> ModuleType:
    """benchmarks/harness.py, loaded by path (benchmarks/ is no package)."""
    spec = importlib.util.spec_from_file_location("bench_harness", ROOT / "benchmarks" / "harness.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _flags(parser) -> None:
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])


@pytest.fixture
def cache_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_flags_parse_with_the_scripts_own(tmp_path: Path) -> None:
    import torch

    h = _harness()
    before = torch.get_num_threads()
    try:
        run = h.start("A benchmark.", ROOT / "benchmarks" / "induction.py", threads=3, flags=_flags,
                      argv=["--seeds", "4", "5", "--threads", "1", "--fresh"])
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert run.name == "induction"
    assert run.args.seeds == [4, 5] and run.args.fresh and not run.quick
    assert run.out == ROOT / "docs" / "data" / "induction.json"
    assert run.settings() == {"quick": False, "seeds": [4, 5]}
    assert run.command.endswith("benchmarks/induction.py --seeds 4 5 --threads 1 --fresh")
    default = h.start(None, ROOT / "benchmarks" / "sink.py", threads=1, argv=["--quick"],
                      out=ROOT / "docs" / "data" / "other.json")
    assert default.args.threads == 1 and default.quick
    # A quick run never writes over the docs' data unless told to.
    assert default.out == h.QUICK / "other.json"
    given = h.start(None, ROOT / "benchmarks" / "sink.py", argv=["--out", str(tmp_path / "x.json")])
    assert given.out == tmp_path / "x.json" and given.args.threads == 2
    # A data file named by the flags (one per model).
    def by_seed(args) -> Path:
        return h.DATA / f"induction_{args.seeds[0]}.json"

    named = h.start(None, ROOT / "benchmarks" / "induction.py", flags=_flags, argv=["--seeds", "7"], out=by_seed)
    assert named.out == h.DATA / "induction_7.json"
    assert h.start(None, ROOT / "benchmarks" / "induction.py", flags=_flags, argv=["--quick"],
                   out=by_seed).out == h.QUICK / "induction_0.json"


def test_write_puts_provenance_first_with_the_commit_of_head(tmp_path: Path) -> None:
    import lmsci_mi

    h = _harness()
    run = h.start(None, ROOT / "benchmarks" / "sink.py", argv=["--out", str(tmp_path / "d.json")])
    with run.timed("step") as timer:
        pass
    path = run.write({"model": "toy", "provenance": "replaced"})
    text = path.read_text()
    data = json.loads(text)
    assert list(data) == ["provenance", "model", "timings"]
    assert text == json.dumps(data, indent=1) + "\n"
    p = data["provenance"]
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert p["commit"].removesuffix("+dirty") == head
    assert p["version"] == lmsci_mi.__version__
    assert p["threads"] >= 1 and re.match(r"^\d{4}-\d{2}-\d{2}$", p["date"])
    assert "backfilled" not in p
    assert p["command"].endswith(f"benchmarks/sink.py --out {tmp_path / 'd.json'}")
    assert data["timings"] == {"step": round(timer.seconds, 3)}


def test_the_cache_resumes_each_item_computed_once(tmp_path: Path, cache_root: Path) -> None:
    h = _harness()
    calls: list[int] = []

    def measure(seed: int, fail: int | None) -> dict:
        if seed == fail:
            raise KeyboardInterrupt  # the run is stopped here
        calls.append(seed)
        return {"seed": seed, "value": seed * 0.5}

    def go(argv: list[str], fail: int | None = None, settings: dict | None = None) -> list[dict]:
        run = h.start(None, ROOT / "benchmarks" / "induction.py", flags=_flags, argv=argv)
        cache = run.cache(settings)
        return [cache.get(f"seed {s}", lambda s=s: measure(s, fail)) for s in run.args.seeds]

    with pytest.raises(KeyboardInterrupt):
        go(["--seeds", "0", "1", "2"], fail=2)
    assert calls == [0, 1]
    done = go(["--seeds", "0", "1", "2"])  # the same command again: only seed 2 is left
    assert calls == [0, 1, 2] and [d["seed"] for d in done] == [0, 1, 2]
    assert (cache_root / "benchmarks" / "induction").is_dir()
    go(["--seeds", "0", "--fresh"])  # --fresh empties the cache first (other flags, other key)
    go(["--seeds", "0", "--fresh"])
    assert calls == [0, 1, 2, 0, 0]
    # Keyed by explicit settings that leave out the item list, more seeds reuse the done ones.
    go(["--seeds", "0", "1"], settings={"n": 20})
    go(["--seeds", "0", "1", "3"], settings={"n": 20})
    assert calls == [0, 1, 2, 0, 0, 0, 1, 3]


def test_the_cache_keeps_lmsci_mi_results(tmp_path: Path) -> None:
    import torch

    from lmsci_mi.results import Meta
    from lmsci_mi.steering import ControlCurve
    from lmsci_mi.steering.evaluate import METRICS

    cache = _harness().ItemCache(tmp_path / "items")
    curve = ControlCurve(
        values=torch.arange(6.0).reshape(1, 6), axes=("setting", "metric"), labels=(("c=+1",), METRICS),
        meta=Meta(model="demo", sink=None), attributes=("c",), settings=((1.0,),),
        unsteered=(0.0,) * 6, continuations=(("a text",),))
    calls: list[int] = []

    def compute() -> ControlCurve:
        calls.append(1)
        return curve

    assert cache.result("curve", compute) is curve and "curve" in cache
    again = cache.result("curve", compute)  # read back from its JSON and safetensors
    assert calls == [1] and isinstance(again, ControlCurve) and again == curve


def test_the_renderers_provenance_is_the_harness_record() -> None:
    spec = importlib.util.spec_from_file_location(
        "bench_schemas", ROOT / "benchmarks" / "doc_tables" / "schemas" / "__init__.py")
    assert spec is not None and spec.loader is not None
    schemas = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(schemas)
    written, read = _harness().Provenance, schemas.Provenance

    def fields(typed: type) -> dict[str, str]:  # the annotations' text (both modules defer them)
        return {k: getattr(v, "__forward_arg__", v) for k, v in typed.__annotations__.items()}

    assert fields(written) == fields(read) and "threads" in fields(read)
    assert written.__total__ == read.__total__


def test_an_exception_mid_write_leaves_the_old_file(tmp_path: Path) -> None:
    h = _harness()
    path = tmp_path / "d.json"
    h.write_json(path, {"old": 1})
    with pytest.raises(TypeError):
        h.write_json(path, {"new": [1, 2, object()]})  # fails after part of the file is written
    assert json.loads(path.read_text()) == {"old": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["d.json"]  # no temporary file left


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_backfill_reads_git_the_docs_and_the_file(tmp_path: Path) -> None:
    h = _harness()
    data = tmp_path / "docs" / "data"
    data.mkdir(parents=True)
    (data / "a.json").write_text(json.dumps({"model": "m", "threads": 1, "note": "é"}, indent=1,
                                            ensure_ascii=False))
    (data / "b.json").write_text(json.dumps({"script": "benchmarks/b.py", "date": "2026-01-02"}, indent=1) + "\n")
    (tmp_path / "README.md").write_text(
        "<!-- table: t from docs/data/a.json (written by: python benchmarks/a.py --x) -->\n<!-- /table -->\n"
        "<!-- table: t from docs/data/a.json, docs/data/b.json (written by: python a.py; python b.py) -->\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "data")
    commit = _git(tmp_path, "rev-parse", "HEAD")
    before = (data / "a.json").read_text()
    record = h.backfill_provenance(data / "a.json", tmp_path)
    assert record == {"command": "python benchmarks/a.py --x", "date": _git(tmp_path, "log", "-1", "--format=%cs"),
                      "commit": commit, "version": None, "threads": 1, "backfilled": True}
    after = (data / "a.json").read_text()
    # Only the record is added: same indentation, non-ASCII kept, still no final newline.
    assert after == json.dumps({"provenance": record, **json.loads(before)}, indent=1, ensure_ascii=False)
    b = h.backfill_provenance(data / "b.json", tmp_path)
    assert b["command"] == "python benchmarks/b.py" and b["date"] == "2026-01-02"
    assert h.backfill_provenance(data / "b.json", tmp_path) is None  # already has one
    assert h.documented_command(data / "b.json", tmp_path) == "python b.py"


def test_every_data_file_has_provenance() -> None:
    missing = []
    for path in sorted((ROOT / "docs" / "data").glob("*.json")):
        p = json.loads(path.read_text()).get("provenance", {})
        if not (p.get("command") and re.match(r"^\d{4}-\d{2}-\d{2}$", p.get("date") or "")
                and SHA.match(p.get("commit") or "")):
            missing.append(path.name)
    assert not missing, f"data files without a provenance record (command, date, commit): {missing}"


def _forbidden_imports(path: Path) -> list[str]:
    """``lmsci_mi`` imports of private names or modules, and of ``lmsci_mi.cli``."""

    def bad(module: str) -> bool:
        parts = module.split(".")
        return parts[0] == "lmsci_mi" and (parts[:2] == ["lmsci_mi", "cli"] or any(
            p.startswith("_") for p in parts))

    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if bad(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [f"{node.module}.{a.name}" for a in node.names
                      if bad(f"{node.module}.{a.name}")]
    return found


def test_benchmarks_import_public_names_only() -> None:
    found = {p.name: _forbidden_imports(p) for p in sorted((ROOT / "benchmarks").glob("*.py"))}
    offenders = {name: names for name, names in found.items() if names}
    assert not offenders, f"benchmarks importing private lmsci_mi names or lmsci_mi.cli: {offenders}"


def test_the_import_scan_finds_private_and_cli_names(tmp_path: Path) -> None:
    script = tmp_path / "b.py"
    script.write_text("from lmsci_mi.loading import _x, load_model\nimport lmsci_mi.cli.heads\n"
                      "from lmsci_mi import cli\nfrom lmsci_mi._version import v\nfrom os import _exit\n")
    assert _forbidden_imports(script) == [
        "lmsci_mi.loading._x", "lmsci_mi.cli.heads", "lmsci_mi.cli", "lmsci_mi._version.v"]

"""The measured tables of README.md and docs/ agree with the data files they are generated from
(scripts/doc_tables.py --check over the repository), and the block parser and its errors behave:
reads JSON and markdown only."""

from __future__ import annotations

import functools
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def _doc_tables() -> ModuleType:
    """scripts/doc_tables.py, loaded by path (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location("doc_tables_script", ROOT / "scripts" / "doc_tables.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_every_generated_table_agrees_with_its_data() -> None:
    dt = _doc_tables()
    stale = dt.check(ROOT)
    listing = "\n\n".join(
        f"{s.block.path.relative_to(ROOT)}:{s.block.line}: table '{s.block.name}'\n{s.diff}"
        for s in stale
    )
    assert not stale, (
        f"tables that differ from their data files (python scripts/doc_tables.py rewrites them):"
        f"\n\n{listing}"
    )


def test_the_pages_have_generated_tables() -> None:
    dt = _doc_tables()
    blocks = [b for page in dt.pages(ROOT) for b in dt.parse_blocks(page, page.read_text(), ROOT)]
    assert len(blocks) >= 20
    assert {b.name for b in blocks} <= set(dt._renderers())


# A repository of one page and one data file, with a renderer of its own.


def _toy(data: dict) -> str:
    return "| x | y |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in data.items())


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setitem(_doc_tables()._renderers(), "toy", _toy)
    (tmp_path / "docs" / "data").mkdir(parents=True)
    (tmp_path / "bench.py").write_text("")
    (tmp_path / "docs" / "data" / "toy.json").write_text(json.dumps({"a": 1, "b": 2}))
    return tmp_path


OPEN = "<!-- table: toy from docs/data/toy.json (written by: python bench.py --fast) -->"
CURRENT = "| x | y |\n|---|---|\n| a | 1 |\n| b | 2 |"


def _page(repo: Path, text: str, name: str = "README.md") -> Path:
    path = repo / name
    path.write_text(text)
    return path


def test_parse_reads_name_files_command_and_indentation(repo: Path) -> None:
    dt = _doc_tables()
    text = (f"intro\n\n{OPEN}\n{CURRENT}\n<!-- /table -->\n\n- item:\n\n  "
            "<!-- table: toy from docs/data/a.json, docs/data/b.json (written by: x.py; y) -->\n"
            "  | old |\n  <!-- /table -->\n")
    first, second = dt.parse_blocks(repo / "README.md", text, repo)
    assert (first.name, first.files, first.command, first.indent) == (
        "toy", ("docs/data/toy.json",), "python bench.py --fast", "")
    assert (first.line, first.end, first.body) == (3, 8, tuple(CURRENT.split("\n")))
    assert second.files == ("docs/data/a.json", "docs/data/b.json")
    assert (second.indent, second.body) == ("  ", ("  | old |",))


def test_a_comment_in_a_code_fence_is_not_a_block(repo: Path) -> None:
    text = f"```\n{OPEN}\n```\n\n~~~md\n<!-- /table -->\n~~~\n"
    assert _doc_tables().parse_blocks(repo / "README.md", text, repo) == []


def test_regenerates_in_place_and_check_rewrites_nothing(repo: Path, capsys) -> None:
    dt = _doc_tables()
    stale = f"before\n\n  {OPEN}\n  | x | y |\n  | a | 0 |\n  <!-- /table -->\nafter\n"
    page = _page(repo, stale, "docs/page.md")
    assert dt.main(["--check", "--root", str(repo)]) == 1
    out = capsys.readouterr().out
    assert "docs/page.md:3: table 'toy' differs from its data" in out
    assert "-  | a | 0 |" in out and "+  | b | 2 |" in out
    assert page.read_text() == stale
    assert dt.main(["--root", str(repo)]) == 0
    indented = "\n".join("  " + line for line in CURRENT.split("\n"))
    assert page.read_text() == f"before\n\n  {OPEN}\n{indented}\n  <!-- /table -->\nafter\n"
    assert not list(repo.glob("docs/.page.md.*"))  # no temporary file left behind
    assert dt.main(["--check", "--root", str(repo)]) == 0


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        (f"x\n{OPEN}\n{CURRENT}\n", 2, "block 'toy' is not closed"),
        (f"{OPEN}\n{OPEN}\n<!-- /table -->\n", 1, "is not closed before the next one opens at line 2"),
        ("x\n\n<!-- /table -->\n", 3, "without an opening comment"),
        ("<!-- table: toy from docs/data/toy.json -->\n<!-- /table -->\n", 1, "malformed"),
        (OPEN.replace("toy from", "nope from") + "\n<!-- /table -->\n", 1, "no renderer named 'nope'"),
        (OPEN.replace("toy.json", "gone.json") + "\n<!-- /table -->\n", 1,
         "data file docs/data/gone.json does not exist"),
        (OPEN.replace("bench.py", "missing.py") + "\n<!-- /table -->\n", 1, "names no script"),
    ],
    ids=["unterminated", "nested", "stray close", "malformed", "unknown renderer",
         "missing data file", "no script"],
)
def test_errors_name_the_file_and_line(repo: Path, text: str, line: int, message: str, capsys) -> None:
    dt = _doc_tables()
    page = _page(repo, f"{text}", "docs/page.md")
    with pytest.raises(dt.DocTableError, match=rf"^docs/page\.md:{line}: .*{message}"):
        dt.check(repo, write=True)
    assert page.read_text() == text
    assert dt.main(["--root", str(repo)]) == 2
    assert f"docs/page.md:{line}:" in capsys.readouterr().err


def test_an_error_in_one_page_leaves_every_page_unwritten(repo: Path) -> None:
    stale = f"{OPEN}\n| old |\n<!-- /table -->\n"
    readme = _page(repo, stale)
    _page(repo, f"{OPEN}\n", "docs/broken.md")
    with pytest.raises(_doc_tables().DocTableError):
        _doc_tables().check(repo, write=True)
    assert readme.read_text() == stale


def test_several_data_files_reach_the_renderer_by_stem(repo: Path, monkeypatch) -> None:
    dt = _doc_tables()
    seen = []
    monkeypatch.setitem(dt._renderers(), "pair", lambda data: seen.append(data) or "| x |\n|---|")
    (repo / "docs" / "data" / "two.json").write_text('{"c": 3}')
    text = ("<!-- table: pair from docs/data/toy.json, docs/data/two.json (written by: bench.py) -->"
            "\n| x |\n|---|\n<!-- /table -->\n")
    _page(repo, text)
    assert dt.check(repo) == []
    assert seen == [{"toy": {"a": 1, "b": 2}, "two": {"c": 3}}]


def test_sequential_editing_grows_with_its_data() -> None:
    """More steps and another method in the data file are more rows, with no edit to the page."""
    render = _doc_tables()._renderers()["sequential_editing"]
    data = json.loads((ROOT / "docs" / "data" / "sequential_editing.json").read_text())
    before = render(data).split("\n")
    curve = data["methods"]["memit"]
    curve["n_edited"].append(curve["n_edited"][-1] + 20)
    curve["seconds"].append(curve["seconds"][-1] + 150.0)
    for series in (*curve["metrics"].values(), *curve["se"].values()):
        series.append(series[-1])
    data["methods"]["ft"] = {
        "batch_size": 5, "n_edited": [0, 20], "seconds": [0.0, 10.4],
        "metrics": {m: [1.0, 2.0] for m in ("ES", "PS", "NS", "specificity", "GE")},
    }
    after = render(data).split("\n")
    assert len(after) == len(before) + 3
    last_memit = max(i for i, row in enumerate(after) if row.startswith("| memit"))
    assert after[last_memit].startswith(f"| memit (b=10) | {curve['n_edited'][-1]} |")
    assert after[-1] == "| ft (b=5) | 20 | 2.0 | 2.0 | 2.0 | 2.0 | 2.0 | 10 |"

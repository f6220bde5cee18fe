"""lmsci_mi.data.text_corpus: the statements-only walk finds the docstrings a walk over every node
finds, in the same order (the text, and every statistic fitted on it, stays what it was)."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from lmsci_mi.data import text_corpus

LONG = "x" * 90
NESTED = textwrap.dedent(f'''
    """{LONG} module"""
    try:
        import foo
    except ImportError:
        def fallback():
            """{LONG} in an except clause"""
    match value:
        case 1:
            class InCase:
                """{LONG} in a case"""
                def method(self):
                    """{LONG} a method"""
                    def inner():
                        """{LONG} nested in a function"""
    if flag:
        async def later():
            """{LONG} async, under an if"""
    else:
        def short():
            """short"""
    handler = lambda: None
''')


def _every_node_walk(path: Path) -> tuple[str, ...]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    documented = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return tuple(doc for node in ast.walk(tree) if isinstance(node, documented)
                 and (doc := ast.get_docstring(node)) and len(doc) >= 80)


def test_the_walk_order_and_docstrings_equal_ast_walk(tmp_path: Path) -> None:
    path = tmp_path / "nested.py"
    path.write_text(NESTED)
    found = text_corpus._docstrings.__wrapped__(path)
    assert found == _every_node_walk(path) and len(found) == 6


def test_stdlib_files_equal_ast_walk_on_a_sample() -> None:
    files = text_corpus._stdlib_files()
    assert files == tuple(sorted(files)) and len(files) > 300
    for path in files[:: len(files) // 25]:
        assert text_corpus._docstrings(path) == _every_node_walk(path), path

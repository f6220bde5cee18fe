"""Regenerate, or check, the measured tables of README.md and docs/*.md from their data files.

A generated table sits between two HTML comments, which GitHub does not show:

    <!-- table: NAME from docs/data/FILE.json (written by: COMMAND) -->
    | ... the table ... |
    <!-- /table -->

NAME is a renderer in benchmarks/doc_tables/, FILE the JSON file it reads (several files are
separated by commas; usually under docs/data/, or a shipped file such as the artefact manifest)
and COMMAND the benchmark, example or build script that writes that file. The
comments may be indented (a table inside a list item); the table takes the opening comment's
indentation. Comments inside fenced code blocks are text, not blocks.

    python scripts/doc_tables.py            # rewrite every stale block in place
    python scripts/doc_tables.py --check    # rewrite nothing; exit 1 listing each stale block

An unknown renderer, a missing data file (unless its renderer is registered with ``missing_ok``:
then it receives None and says "not yet"), a command that names no script of the repository and
an unterminated or malformed block are errors naming the file and line (exit 2).
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
OPEN = re.compile(r"^(?P<indent>\s*)<!-- table: (?P<name>\S+) from (?P<files>.+?) "
                  r"\(written by: (?P<command>.+)\) -->\s*$")
CLOSE = re.compile(r"^\s*<!-- /table -->\s*$")
STARTS_BLOCK = re.compile(r"^\s*<!-- */?table\b")
FENCE = re.compile(r"^\s*(```|~~~)")
DIFF_LINES = 12
"""Changed lines shown per stale block."""


class DocTableError(Exception):
    """A block that cannot be rendered; the message starts with ``file:line:``."""


@dataclass(frozen=True)
class Block:
    """One generated table in a page: where it is, what renders it, and what it holds now."""

    path: Path
    line: int
    """The opening comment's line, counted from 1."""
    end: int
    """The closing comment's line."""
    name: str
    files: tuple[str, ...]
    command: str
    indent: str
    body: tuple[str, ...]
    """The lines between the comments, as the page has them."""


@dataclass(frozen=True)
class Stale:
    block: Block
    diff: str


def _renderers() -> dict:
    """benchmarks/doc_tables/'s renderers, loaded by path: benchmarks/ is no installed package."""
    name = "lmsci_mi_doc_tables"
    if name not in sys.modules:
        folder = ROOT / "benchmarks" / "doc_tables"
        spec = importlib.util.spec_from_file_location(
            name, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )
        assert spec is not None and spec.loader is not None
        module: ModuleType = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name].RENDERERS


def pages(root: Path) -> list[Path]:
    """README.md and docs/*.md, the pages that may hold generated tables."""
    found = [root / "README.md"] if (root / "README.md").is_file() else []
    return found + sorted((root / "docs").glob("*.md"))


def _where(path: Path, line: int, root: Path) -> str:
    try:
        shown = path.relative_to(root)
    except ValueError:
        shown = path
    return f"{shown}:{line}"


def parse_blocks(path: Path, text: str, root: Path = ROOT) -> list[Block]:
    """Every generated block of a page, in order; malformed, nested, stray or unterminated
    comments raise ``DocTableError``."""
    blocks = []
    lines = text.split("\n")
    fenced = False
    opened: tuple[int, re.Match] | None = None
    for number, line in enumerate(lines, start=1):
        if FENCE.match(line):
            fenced = not fenced
        if fenced or not STARTS_BLOCK.match(line):
            continue
        where = _where(path, number, root)
        if CLOSE.match(line):
            if opened is None:
                raise DocTableError(f"{where}: '<!-- /table -->' without an opening comment")
            start, match = opened
            blocks.append(Block(
                path=path, line=start, end=number, name=match["name"],
                files=tuple(f.strip() for f in match["files"].split(",")),
                command=match["command"], indent=match["indent"],
                body=tuple(lines[start:number - 1]),
            ))
            opened = None
            continue
        match = OPEN.match(line)
        if match is None:
            raise DocTableError(
                f"{where}: malformed block comment; the form is "
                "'<!-- table: NAME from docs/data/FILE.json (written by: COMMAND) -->'"
            )
        if opened is not None:
            raise DocTableError(
                f"{_where(path, opened[0], root)}: block '{opened[1]['name']}' is not closed "
                f"before the next one opens at line {number} (add '<!-- /table -->')"
            )
        opened = (number, match)
    if opened is not None:
        raise DocTableError(
            f"{_where(path, opened[0], root)}: block '{opened[1]['name']}' is not closed "
            "(add '<!-- /table -->' after its table)"
        )
    return blocks


def render(block: Block, root: Path = ROOT) -> tuple[str, ...]:
    """The block's lines as its renderer writes them from its data file(s) today."""
    where = _where(block.path, block.line, root)
    renderers = _renderers()
    if block.name not in renderers:
        raise DocTableError(
            f"{where}: no renderer named '{block.name}' in benchmarks/doc_tables.py "
            f"(there are: {', '.join(sorted(renderers))})"
        )
    scripts = [word.strip(";,()`'\"") for word in block.command.split()]
    scripts = [word for word in scripts if word.endswith(".py")]
    if not any((root / script).is_file() for script in scripts):
        raise DocTableError(
            f"{where}: the command '{block.command}' names no script of the repository "
            "(the benchmark or example that writes the data file)"
        )
    documents = {}
    for name in block.files:
        path = root / name
        if not path.is_file() and getattr(renderers[block.name], "missing_ok", False):
            documents[path.stem] = None  # the renderer says "not yet: <command>"
            continue
        if not path.is_file():
            raise DocTableError(f"{where}: data file {name} does not exist")
        try:
            documents[path.stem] = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise DocTableError(f"{where}: data file {name} is not JSON: {error}") from error
    # A file not written yet stays keyed by its stem, so the renderer can name what writes it.
    data = next(iter(documents.values())) if len(documents) == 1 and None not in documents.values() else documents
    try:
        table = renderers[block.name](data)
    except (KeyError, IndexError, TypeError, ValueError) as error:
        raise DocTableError(
            f"{where}: renderer '{block.name}' cannot read {', '.join(block.files)}: "
            f"{type(error).__name__}: {error}"
        ) from error
    return tuple(block.indent + line if line else line for line in table.split("\n"))


def _diff(block: Block, new: tuple[str, ...]) -> str:
    changed = [
        line for line in difflib.unified_diff(block.body, new, lineterm="", n=0)
        if not line.startswith(("---", "+++", "@@"))
    ]
    more = len(changed) - DIFF_LINES
    return "\n".join(changed[:DIFF_LINES] + ([f"... {more} more changed lines"] if more > 0 else []))


def _write_atomic(path: Path, text: str) -> None:
    """Replace the file in one step, so an interrupted run never leaves half a page."""
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as out:
            out.write(text)
        os.chmod(temp, path.stat().st_mode & 0o7777)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def update(path: Path, root: Path = ROOT) -> tuple[list[Stale], str]:
    """The page's stale blocks, and the page's text with them regenerated."""
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    stale = []
    # Back to front, so that replacing a block keeps the earlier blocks' line numbers.
    for block in reversed(parse_blocks(path, text, root)):
        new = render(block, root)
        if new != block.body:
            stale.append(Stale(block, _diff(block, new)))
            lines[block.line:block.end - 1] = new
    return stale[::-1], "\n".join(lines)


def check(root: Path = ROOT, *, write: bool = False) -> list[Stale]:
    """Every stale block of the repository's pages. With ``write`` the pages that have one are
    rewritten, and only once every block of every page has rendered, so an error changes none."""
    stale, rewritten = [], {}
    for page in pages(root):
        found, text = update(page, root)
        stale += found
        if found:
            rewritten[page] = text
    if write:
        for page, text in rewritten.items():
            _write_atomic(page, text)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="rewrite nothing; exit 1 listing each block that differs")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this one)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    try:
        stale = check(root, write=not args.check)
    except DocTableError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for s in stale:
        where = _where(s.block.path, s.block.line, root)
        verb = "differs from its data" if args.check else "regenerated"
        print(f"{where}: table '{s.block.name}' {verb}\n{s.diff}\n")
    blocks = sum(len(parse_blocks(p, p.read_text(encoding="utf-8"), root)) for p in pages(root))
    if args.check:
        print(f"{len(stale)} of {blocks} generated tables differ from their data"
              + ("; run python scripts/doc_tables.py to regenerate them" if stale else ""))
        return 1 if stale else 0
    print(f"{len(stale)} of {blocks} generated tables regenerated")
    return 0


if __name__ == "__main__":
    sys.exit(main())

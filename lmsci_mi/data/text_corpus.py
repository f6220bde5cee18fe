"""An offline English text source: the Python standard library's docstrings and `pydoc_data`.

Covariance statistics (ROME/MEMIT) and other training steps need real text, and no corpus can be
downloaded here. Every Python installation carries about 2 M characters of prose written by
people: the docstrings of the standard library (read with `ast`, never imported) and the help
topics in `pydoc_data.topics`. The order is fixed (sorted paths, sorted topics), so the text and
its token chunks are reproducible.
"""

from __future__ import annotations

import ast
import functools
import os
import sys
import sysconfig
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from jaxtyping import Int
from torch import Tensor

from lmsci_mi.errors import UserInputError

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel

__all__ = ["STDLIB_TEXT_SOURCE", "TokenRows", "stdlib_documents", "text_chunks"]

STDLIB_TEXT_SOURCE = (
    f"python{sys.version_info.major}.{sys.version_info.minor}-stdlib-docstrings+pydoc_topics"
)
"""Name recorded in metadata for :func:`stdlib_documents`' text."""

@dataclass(frozen=True)
class TokenRows:
    """Token rows (each starting with the sink) split into training and held-out rows, and a
    description of where they come from (what SAEs and transcoders train and are measured on)."""

    train: list[list[int]]
    held_out: list[list[int]]
    source: str

    @property
    def n_train_tokens(self) -> int:
        """Training tokens, the sink excluded (it never enters what trains on them)."""
        return sum(len(r) - 1 for r in self.train)

    @property
    def n_held_out_tokens(self) -> int:
        return sum(len(r) - 1 for r in self.held_out)


# Tests and vendored or generated code hold little prose, and idlelib/turtledemo are apps.
_SKIP_DIRS = {
    "test",
    "tests",
    "site-packages",
    "dist-packages",
    "idlelib",
    "turtledemo",
    "__pycache__",
}
_MIN_CHARS = 80


# Both caches below hold for the life of the process (the standard library does not change under
# it): statistics, tuned lenses, SAE corpora and the test suite read the text many times.
_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
# The nodes that can hold a def: statements, and the except and case clauses between them.
_HOLDERS = (ast.stmt, ast.excepthandler, ast.match_case)


@functools.cache
def _docstrings(path: Path) -> tuple[str, ...]:
    """The long docstrings of one file, in `ast.walk`'s breadth-first order.

    The walk visits statements only: no def lies below an expression, so the defs come in the
    order a walk over every node gives (the text is what it was) at a third of the cost.
    """
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return ()
    found: list[str] = []
    queue: deque[ast.AST] = deque([tree])
    while queue:
        node = queue.popleft()
        if isinstance(node, _DOCUMENTED) and (doc := ast.get_docstring(node)) and len(doc) >= _MIN_CHARS:
            found.append(doc)
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                queue.extend(child for child in value if isinstance(child, _HOLDERS))
    return tuple(found)


@functools.cache
def _stdlib_files() -> tuple[Path, ...]:
    """The stdlib's .py files, sorted; the skipped folders are never listed (the base
    interpreter's site-packages alone holds some 11 k files)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    found: list[Path] = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [name for name in subfolders if name not in _SKIP_DIRS]
        found.extend(Path(folder) / name for name in names if name.endswith(".py"))
    return tuple(sorted(found))


def stdlib_documents() -> Iterator[str]:
    """Yield the standard library's docstrings, then the `pydoc_data` help topics, in fixed order.

    Modules are parsed, not imported, so nothing runs. Docstrings under 80 characters (one-line
    summaries such as "Return self.") are left out.

    >>> docs = stdlib_documents()
    >>> len(next(docs)) >= 80
    True
    """
    for path in _stdlib_files():
        yield from _docstrings(path)
    from pydoc_data.topics import topics

    for key in sorted(topics):
        yield topics[key]


def text_chunks(
    lm: LensModel,
    n_tokens: int,
    seq_len: int = 128,
    documents: Iterable[str] | None = None,
    name: str = "the stdlib text",
) -> Int[Tensor, "chunk seq_len"]:
    """Token sequences of the stdlib text, each starting with the model's sink token.

    Documents are tokenised, joined with the end-of-text token and cut into rows of
    ``seq_len - 1`` text tokens; every row then gets the attention sink in front, as every
    lmsci-mi prompt does, so activations are taken in the same regime as the edits use. A model
    loaded with ``sink=None`` gets rows of ``seq_len`` text tokens and no sink, as its prompts do.

    Args:
        lm: the model whose tokenizer to use.
        documents: the text, one string per document (default: :func:`stdlib_documents`);
            blank documents are skipped.
        name: what to call the text in errors.
        n_tokens: how many text tokens (sink excluded) to return at least; rounded up to whole rows.
        seq_len: row length including the sink (if the model has one).

    Returns:
        ``[chunk, seq_len]`` token ids on CPU.

    Raises:
        ValueError: more tokens asked for than the source holds (about half a million).

    >>> from lmsci_mi import load_model
    >>> text_chunks(load_model("toy-2l"), 500, seq_len=64).shape
    torch.Size([8, 64])
    """
    tokenizer = lm._require_tokenizer()
    if seq_len < 2:
        raise UserInputError("seq_len must be at least 2 (the sink and one token)")
    sink = lm.sink_token_id
    per_row = seq_len - 1 if sink is not None else seq_len
    n_rows = -(-n_tokens // per_row)
    needed = n_rows * per_row
    separator = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else lm.sink_token_id
    stream: list[int] = []
    for doc in stdlib_documents() if documents is None else documents:
        if not doc.strip():
            continue
        stream.extend(lm.continuation_ids(doc))
        if separator is not None:
            stream.append(separator)
        if len(stream) >= needed:
            break
    if len(stream) < needed:
        raise UserInputError(
            f"{name} holds {len(stream)} tokens for {lm.name}, fewer than the {needed} asked for; "
            "give more text or ask for fewer tokens"
        )
    rows = torch.tensor(stream[:needed], dtype=torch.long).view(n_rows, per_row)
    # No stand-in for a missing sink: a None sink once meant "the tokenizer adds its own BOS",
    # and putting the BOS in front dates from then; since sink=None means no sink at all, a
    # BOS here gave a sink-free model's statistics a sink its prompts never have.
    if sink is None:
        return rows
    return torch.cat([torch.full((n_rows, 1), sink, dtype=torch.long), rows], dim=1)

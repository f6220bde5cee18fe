"""Schema of the ICL tasks' shipped data files (``lmsci_mi/data/icl/*.json``), written by hand and
read by ``lmsci_mi.data.icl_tasks`` and by the renderers in doc_tables/icl_data.py (docs/icl.md)."""

from __future__ import annotations

from typing import TypedDict


class _ICLTaskFileBase(TypedDict):
    task: str
    kind: str
    """``"classification"`` or ``"pairs"``."""
    description: str
    source: str
    labelling: str
    items: list[list[str]]
    """``[input, output]`` or ``[input, output, group]``."""


class ICLTaskFile(_ICLTaskFileBase, total=False):
    """A classification task also has its labels and label-word sets (the first is the default)."""

    labels: list[str]
    label_words: list[list[str]]

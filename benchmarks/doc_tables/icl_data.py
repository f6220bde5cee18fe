"""Renderers of docs/icl.md's data section: the bundled ICL tasks, their counts and label words, and
each set's source and labelling rule, read from the shipped files ``lmsci_mi/data/icl/*.json``."""

from __future__ import annotations

from collections import Counter

from . import markdown, table
from .schemas.icl_data import ICLTaskFile


def _label_words(data: ICLTaskFile) -> str:
    sets = data.get("label_words", [])
    if not sets:
        return "(the answer; scored by its first token)"
    shown = [" / ".join(f"`{w}`" for w in words) for words in sets]
    return shown[0] + (f" (also {'; '.join(shown[1:])})" if len(shown) > 1 else "")


@table("icl_tasks")
def icl_tasks(files: dict[str, ICLTaskFile]) -> str:
    """One row per task file: what it asks, its size, per-label counts and label words."""
    rows = []
    for data in files.values():
        counts = Counter(item[1] for item in data["items"])
        per_label = ", ".join(f"{label} {counts[label]}" for label in data.get("labels", []))
        rows.append([f"`{data['task']}`", data["kind"], data["description"], str(len(data["items"])),
                     per_label or "—", _label_words(data)])
    return markdown(["task", "kind", "what", "items", "per label", "label words"], rows)


@table("icl_sources")
def icl_sources(files: dict[str, ICLTaskFile]) -> str:
    """Each task's source and how its labels were assigned, as a list."""
    return "\n".join(f"- `{data['task']}`: {data['source']}. Labels: {data['labelling']}."
                     for data in files.values())

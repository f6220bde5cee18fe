"""The composition of the two shipped fact sets, for docs/editing.md's fact-set tables.

    PYTHONPATH=. .venv/bin/python benchmarks/fact_sets.py             # counts from the shipped files
    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python benchmarks/fact_sets.py --rebuild   # and rebuild both
    PYTHONPATH=. python benchmarks/fact_sets.py --quick                # a check (counts only)

Reads ``lmsci_mi/data/facts.json`` (the causal-tracing and ROME/MEMIT fact set) and
``lmsci_mi/data/edit_facts.json`` (the editing fact set of issue 21) and writes
docs/data/fact_sets.json: candidates and kept facts, facts per relation, the messy-knowledge
probes with one example of each, drawn from the file itself. ``--rebuild`` also selects both sets
again on SmolLM2-135M (``--model``) into a temporary folder, times each selection (one torch
thread unless ``--threads``), counts the prompts that went through the model, and records whether
the rebuilt facts equal the shipped ones; without it the last rebuild's record in --out is kept.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import harness
import torch
from doc_tables.schemas.editing import (
    EditFacts,
    FactSetsData,
    KnownFacts,
    ProbeExamples,
    Rebuild,
    RebuiltSet,
    RelationCount,
)

from lmsci_mi import LensModel, load_model
from lmsci_mi.data.edit_facts import build_edit_fact_set
from lmsci_mi.data.facts import build_fact_set

SHIPPED = harness.ROOT / "lmsci_mi" / "data"

# What each relation asks, in the table's words; the relation's own neighbours unless said.
RELATION_WORDS = {
    "country_capital": "country → capital (neighbours: landmarks in that capital)",
    "country_language": "country → official language",
    "country_continent": "country → continent",
    "city_country": "city → country",
    "us_city_state": "US city → state",
    "landmark_city": "landmark → city",
    "company_country": "company → home country",
    "product_company": "product → maker",
    "club_country": "football club → country",
    "athlete_sport": "athlete → sport",
    "person_occupation": "person → occupation",
    "person_language": "person → mother tongue",
    "book_author": "book → author",
}


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rebuild", action="store_true", help="select both sets again, timed")
    parser.add_argument("--keep", type=Path, default=None, help="write the rebuilt files here")
    parser.add_argument("--model", default="smollm2-135m", help="--rebuild: the model that selects")


def relations(facts: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for fact in facts:
        counts[fact["relation"]] = counts.get(fact["relation"], 0) + 1
    return counts


def examples(facts: list[dict[str, Any]]) -> ProbeExamples:
    """The first fact of the file that carries each probe, with what the probe reads."""
    def first(key: str) -> dict[str, Any]:
        return next(f for f in facts if f[key])

    negated, reverse, two_hop, other = (
        first("negated_prompt"), first("reverse_prompt"), first("two_hop_prompt"),
        first("other_relation_prompts"),
    )
    return ProbeExamples(
        negated={"prompt": negated["negated_prompt"]},
        reverse={
            "prompt": reverse["reverse_prompt"],
            "unedited": reverse["reverse_target_true"],
            "reversed": reverse["reverse_target_new"],
        },
        two_hop={
            "prompt": two_hop["two_hop_prompt"],
            "unedited": two_hop["two_hop_target_true"],
            "edited": two_hop["two_hop_target_new"],
            "edit": two_hop["target_new"],
        },
        other_relation={
            "prompt": other["other_relation_prompts"][0],
            "relation": other["relation"],
        },
    )


def shipped(name: str) -> dict[str, Any]:
    return json.loads((SHIPPED / f"{name}.json").read_text(encoding="utf-8"))


def known_facts() -> KnownFacts:
    known = shipped("facts")
    return KnownFacts(file="lmsci_mi/data/facts.json", model=known["model"], rule=known["rule"],
                      n_candidates=known["n_candidates"], n_facts=len(known["facts"]),
                      relations=relations(known["facts"]))


def edit_facts() -> EditFacts:
    edit = shipped("edit_facts")
    facts = edit["facts"]
    counts = relations(facts)
    if counts != edit["relations"]:
        raise SystemExit("edit_facts.json's header counts disagree with its facts; rebuild it")
    return EditFacts(
        file="lmsci_mi/data/edit_facts.json", model=edit["model"], rule=edit["rule"],
        n_candidates=edit["n_candidates"], n_facts=len(facts),
        relations=[RelationCount(relation=name, words=RELATION_WORDS.get(name, name), facts=count)
                   for name, count in counts.items()],
        messy=edit["messy"], examples=examples(facts),
    )


def compare(shipped: list[dict[str, Any]], rebuilt: list[dict[str, Any]]) -> dict[str, Any]:
    """How the rebuilt facts differ from the shipped ones: facts only in one of them, and among the
    facts in both, which fields differ (``p_true`` apart: it is a rounded probability, so the
    largest difference is given instead)."""
    def key(fact: dict[str, Any]) -> tuple[str, str]:
        return fact["relation"], fact["subject"]

    old, new = {key(f): f for f in shipped}, {key(f): f for f in rebuilt}
    both = [k for k in old if k in new]
    fields: dict[str, int] = {}
    for k in both:
        for name in sorted(set(old[k]) | set(new[k])):
            if name != "p_true" and old[k].get(name) != new[k].get(name):
                fields[name] = fields.get(name, 0) + 1
    return {
        "equal_to_shipped": shipped == rebuilt,
        "only_shipped": sorted(" / ".join(k) for k in old if k not in new),
        "only_rebuilt": sorted(" / ".join(k) for k in new if k not in old),
        "fields_differing": fields,
        "max_p_true_difference": max(
            (abs(old[k]["p_true"] - new[k]["p_true"]) for k in both), default=0.0
        ),
    }


@contextlib.contextmanager
def counted_prompts(lm: LensModel) -> Iterator[list[int]]:
    """Count the prompts that go through the model's forward while the block runs (every
    selection batches its prompts through it): the yielded list's one item."""
    count = [0]
    forward = lm.model.forward

    def counting(tokens: Any, *args: Any, **kwargs: Any) -> Any:
        count[0] += int(tokens.shape[0]) if hasattr(tokens, "shape") else len(tokens)
        return forward(tokens, *args, **kwargs)

    lm.model.forward = counting
    try:
        yield count
    finally:
        del lm.model.forward  # back to the class's method


def rebuilt_set(lm: LensModel, name: str, build: Callable[[LensModel, Path], object], folder: Path,
                keep: Path | None) -> RebuiltSet:
    """Select one set again into ``folder``, timed, and compare it with the shipped file."""
    with counted_prompts(lm) as prompts:
        start, cpu = time.perf_counter(), time.process_time()
        build(lm, folder / f"{name}.json")
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    rebuilt = json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
    if keep is not None:
        (keep / f"{name}.json").write_text(json.dumps(rebuilt, indent=1, ensure_ascii=False))
    return RebuiltSet(seconds=round(seconds, 1), cpu_seconds=round(cpu_seconds, 1), prompts=prompts[0],
                      n_facts=len(rebuilt["facts"]), **compare(shipped(name)["facts"], rebuilt["facts"]))


def rebuild(run: harness.Run) -> Rebuild:
    """Both sets selected again on ``--model`` into a temporary folder (kept in ``--keep`` if
    given), each timed at the harness's ``--threads``."""
    with run.timed("load"):
        lm = load_model(run.args.model)
    sets = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, build in (("facts", build_fact_set), ("edit_facts", build_edit_fact_set)):
            with run.timed(name):
                sets[name] = rebuilt_set(lm, name, build, Path(folder), run.args.keep)
            r = sets[name]
            print(f"{name}: {r['n_facts']} facts, {r['prompts']} prompts in {r['seconds']} s; "
                  f"equal to the shipped file: {r['equal_to_shipped']}")
    return Rebuild(threads=torch.get_num_threads(), date=time.strftime("%Y-%m-%d"), **sets)


def main() -> None:
    run = harness.start(__doc__, __file__, threads=1, flags=add_flags)
    previous = harness.read_json(run.out, {})
    run.write(FactSetsData(known_facts=known_facts(), edit_facts=edit_facts(),
                           rebuild=rebuild(run) if run.args.rebuild else previous.get("rebuild")),
              ensure_ascii=False)


if __name__ == "__main__":
    main()

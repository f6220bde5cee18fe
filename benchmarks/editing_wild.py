"""WILD-EM beside the teacher-forced ES/PS/NS of the same edits, on SmolLM2-135M (issue 38, item 5).

    PYTHONPATH=. .venv/bin/python benchmarks/editing_wild.py --threads 1 --facts 30     # resumable
    PYTHONPATH=. .venv/bin/python benchmarks/editing_wild.py --facts 250                # the 250-fact table's facts
    PYTHONPATH=. python benchmarks/editing_wild.py --quick --model toy-2l               # a check

The first --facts facts of the editing table's order (editing.py --table: the editing fact set
shuffled with seed 0) are edited as the table edits them: ROME one fact at a time, restored in
between; MEMIT and AlphaEdit all facts in one edit, with the table's configs. Each edit is scored
twice on the same weights: teacher-forced (ES, PS, NS: lmsci_mi.editing.evaluate_edits's
scores) and by WILD-EM (lmsci_mi.editing.wild: greedy generation to ".", a newline or EOS, at
most 50 tokens; success when the normalised generation starts with the new target; locality when
a neighbour's generation equals the unedited model's). Every rate has a 95 % percentile-bootstrap
interval over facts, and the gaps ES − WILD rewrite and PS − WILD paraphrase a paired one. The
unedited generations are cached per prompt and shared by every method and run. ROME is cached per
fact, a batch method's edit once and its scores in chunks of 10 facts, so a stopped run resumes
(--max-seconds: start no item after that many seconds). Writes docs/data/editing_wild.json.

Along the sequential curves, WILD-EM is measured by sequential_editing.py, in the same sessions.
--quick: 4 facts, chunks of 2, 4 fit steps, 8 new tokens.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import harness
import torch
from doc_tables.editing_wild import editing_wild
from doc_tables.schemas.editing_wild import EditingWildData, Gap, WildRow
from editing import (
    CONFIGS,
    Setup,
    ordered_edit_facts,
    prepare,
    rome_edits,
    rome_fact_edit,
    saved_atomically,
)

from lmsci_mi.editing import PER_FACT, EditHandle, EditRequest, EvaluationConfig, WildConfig
from lmsci_mi.editing.methods import EDITING_METHODS
from lmsci_mi.editing.metrics import EvaluationPlan, edited_scores, plan_evaluation, unedited_scores
from lmsci_mi.editing.wild import (
    WILD_METRICS,
    WildFact,
    WildGeneration,
    score_facts,
    wild_facts,
    wild_generate,
)
from lmsci_mi.stats import bootstrap_interval, paired_bootstrap_interval
from lmsci_mi.weights import read_deltas

TEACHER_FORCED = ("ES", "PS", "NS")
GAPS = {"ES - rewrite": ("ES", "rewrite"), "PS - paraphrase": ("PS", "paraphrase")}
"""The WILD-vs-teacher-forcing gaps: a teacher-forced rate minus the WILD-EM rate of the same prompts."""
CHUNK = 10
QUICK = {"facts": 4, "chunk": 2, "max_new_tokens": 8}
NO_GE = EvaluationConfig(generation_tokens=0)
"""GE is the editing table's; here only ES/PS/NS are read, so no sampling."""


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--methods", nargs="+", default=["rome", "memit", "alphaedit"], choices=sorted(CONFIGS))
    parser.add_argument("--facts", type=int, default=30, help="the first N facts of the editing table's order")
    parser.add_argument("--rome-facts", type=int, default=None,
                        help="ROME on the first N of those facts only (default all; its row says how many)")
    parser.add_argument("--max-seconds", type=float, default=float("inf"),
                        help="start no item after this many seconds (run again to resume)")


# --- scoring one edit twice ------------------------------------------------------------------------


def scored(s: Setup, plan: EvaluationPlan, indices: list[int], deltas: dict[str, torch.Tensor],
           reference: dict[str, WildGeneration], wild: WildConfig) -> dict[str, Any]:
    """The facts' teacher-forced ES/PS/NS and WILD-EM outcomes on the unedited weights plus
    ``deltas`` (JSON: NaN as null)."""
    rows = edited_scores(s.lm, plan, [indices], deltas=deltas).scores
    columns = [PER_FACT.index(m) for m in TEACHER_FORCED]
    with EditHandle(s.lm, deltas, method=plan.method).apply():
        facts = wild_facts(s.lm, [plan.requests[i] for i in indices], [plan.neighbours[i] for i in indices],
                           reference, wild)
    return {"tf": [[None if v != v else v for v in row] for row in rows[:, columns].tolist()],
            "wild": [dataclasses.asdict(f) for f in facts]}


def rome_items(s: Setup, cache: harness.ItemCache, edits: harness.ItemCache, plan: EvaluationPlan,
               reference: dict, wild: WildConfig, deadline: float) -> list[dict] | None:
    """ROME one fact at a time, each fact an item (its edit, its scores, its seconds); None while
    some fact is not done."""
    def item(i: int) -> dict[str, Any]:
        deltas, seconds = rome_fact_edit(s, edits, plan.requests[i])  # shared with editing.py --table
        print(f"rome fact {i} ({plan.requests[i].subject}): edit {seconds:.1f} s", flush=True)
        return {**scored(s, plan, [i], deltas, reference, wild), "seconds": [seconds]}

    items = []
    for i in range(len(plan.requests)):
        name = f"rome-{i:04d}"
        if name not in cache and time.perf_counter() > deadline:
            return None
        items.append(cache.get(name, lambda i=i: item(i)))
    return items


def batch_items(s: Setup, cache: harness.ItemCache, plan: EvaluationPlan, reference: dict, wild: WildConfig,
                chunk: int, deadline: float) -> list[dict] | None:
    """A batch method's one edit of every fact (its deltas cached), scored ``chunk`` facts at a
    time (each chunk an item); None while some chunk is not done."""
    n, name = len(plan.requests), plan.method
    edit_path = cache.path(f"{name}-{n}.edit", ".safetensors")
    if not edit_path.is_file():
        if time.perf_counter() > deadline:
            return None
        begin = time.perf_counter()
        with EDITING_METHODS.get(name).function(s.lm, list(plan.requests), plan.config, stats=s.stats) as handle:
            seconds = time.perf_counter() - begin
            saved_atomically(lambda p: handle.save(p, {"seconds": repr(seconds)}), edit_path)
        print(f"{name}: one edit of {n} facts in {seconds:.0f} s", flush=True)
    deltas, metadata = read_deltas(edit_path)
    items = []
    for first in range(0, n, chunk):
        item = f"{name}-{n}.scores-{first:04d}"
        if item not in cache and time.perf_counter() > deadline:
            return None
        indices = list(range(first, min(n, first + chunk)))
        items.append(cache.get(item, lambda indices=indices: scored(s, plan, indices, deltas, reference, wild)))
    items[0] = {**items[0], "seconds": [float(metadata["seconds"])]}
    return items


# --- rows -------------------------------------------------------------------------------------------


def wild_fact(record: dict[str, Any]) -> WildFact:
    """A :class:`WildFact` back from its JSON record."""
    def generation(g: dict) -> WildGeneration:
        return WildGeneration(g["prompt"], tuple(g["tokens"]), g["text"])

    return WildFact(**{**record, "rewrite": generation(record["rewrite"]),
                       "paraphrases": tuple(generation(g) for g in record["paraphrases"]),
                       "neighbours": tuple(generation(g) for g in record["neighbours"]),
                       "neighbours_kept": tuple(record["neighbours_kept"])})


def percent_interval(values: torch.Tensor) -> list[float]:
    kept = values[~values.isnan()] * 100
    if len(kept) == 0:
        return [float("nan")] * 2
    return bootstrap_interval(kept, n_resamples=2000, seed=0).as_list()


def row(label: str, n_edits: int, seconds: Sequence[float], tf: torch.Tensor, facts: Sequence[WildFact]) -> WildRow:
    """One model's rates (percent, 95 % bootstrap intervals over facts) and its paired gaps."""
    wild = torch.tensor([f.scores() for f in facts], dtype=torch.float64)
    columns = {**{m: tf[:, i] for i, m in enumerate(TEACHER_FORCED)},
               **{m: wild[:, i] for i, m in enumerate(WILD_METRICS)}}
    gaps = {}
    for gap, (a, b) in GAPS.items():
        both = ~(columns[a].isnan() | columns[b].isnan())
        interval = paired_bootstrap_interval(columns[a][both] * 100, columns[b][both] * 100, n_resamples=2000, seed=0)
        gaps[gap] = Gap(estimate=interval.estimate, low=interval.low, high=interval.high, n=interval.n)
    return WildRow(
        model=label, n_facts=len(facts), n_edits=n_edits,
        seconds_per_edit=sum(seconds) / len(seconds) if seconds else None,
        metrics={m: float(torch.nanmean(v) * 100) for m, v in columns.items()},
        ci95={m: percent_interval(v) for m, v in columns.items()},
        gaps=gaps,
        prompts={"paraphrase": sum(len(f.paraphrases) for f in facts),
                 "neighbour": sum(len(f.neighbours) for f in facts)},
    )


def as_tensor(rows: Sequence[Sequence[float | None]]) -> torch.Tensor:
    return torch.tensor([[float("nan") if v is None else v for v in r] for r in rows], dtype=torch.float64)


def examples(before: Sequence[WildFact], after: Sequence[WildFact]) -> list[dict[str, Any]]:
    """Each fact's rewrite prompt, targets and generation before and after the edit."""
    return [{"subject": b.subject, "prompt": b.rewrite.prompt, "target_new": b.target_new,
             "target_true": b.target_true, "unedited": b.rewrite.text, "edited": a.rewrite.text}
            for b, a in zip(before, after, strict=True)]


# --- the single-edit run ------------------------------------------------------------------------------


def single(run: harness.Run, s: Setup, facts: list[EditRequest], wild: WildConfig) -> None:
    args, chunk = run.args, QUICK["chunk"] if run.quick else CHUNK
    # Items name their facts (ROME: its index in the fixed order; a batch edit: its fact count), so
    # runs on more facts reuse the items of fewer.
    cache = run.cache({"model": args.model, "quick": run.quick, "wild": wild.params(),
                       "configs": {name: s.configs[name].params() for name in sorted(CONFIGS)}})
    deadline = time.perf_counter() + args.max_seconds
    unedited_plan = plan_evaluation(s.lm, facts, s.configs["rome"], NO_GE)  # every neighbour, as ROME's
    every = [p for r in facts for p in (r.rewrite_prompt, *r.paraphrase_prompts, *r.neighborhood_prompts)]
    with run.timed("unedited"):
        reference = {g.prompt: g for g in wild_generate(s.lm, every, wild, use_cache=True)}
        before = score_facts(facts, unedited_plan.neighbours, reference, reference)
        tf_before = unedited_scores(s.lm, unedited_plan, range(len(facts)))[:, [PER_FACT.index(m) for m in TEACHER_FORCED]]
    rows, generations, configs = [row("unedited", 0, [], tf_before.double(), before)], {}, {}
    for name in args.methods:
        own = facts[: args.rome_facts] if name == "rome" else facts
        plan = plan_evaluation(s.lm, own, s.configs[name], NO_GE)
        with run.timed(name):
            items = (rome_items(s, cache, rome_edits(s, args.model), plan, reference, wild, deadline) if name == "rome"
                     else batch_items(s, cache, plan, reference, wild, chunk, deadline))
        if items is None:
            print(f"{name}: not done; run again to resume")
            return
        after = [wild_fact(f) for item in items for f in item["wild"]]
        seconds = [t for item in items for t in item.get("seconds", [])]
        tf = as_tensor([r for item in items for r in item["tf"]])
        rows.append(row(name, len(plan.batches), seconds, tf, after))
        generations[name], configs[name] = examples(before[: len(own)], after), s.configs[name].params()
        print(f"{name}: ES {rows[-1]['metrics']['ES']:.1f}, WILD rewrite {rows[-1]['metrics']['rewrite']:.1f}", flush=True)
    run.write(EditingWildData(
        model=args.model, facts="lmsci_mi/data/edit_facts.json", order="editing.py --table's: shuffled with seed 0",
        n_facts=len(facts), stats_tokens=s.stats.n_tokens, stats_source=s.stats.source, wild=wild.params(),
        judge="normalised exact match (WILD-EM): no LLM judge offline",
        interval="percentile bootstrap over facts, 2000 resamples, 95%; gaps: paired, same facts",
        shared_machine=True, configs=configs, rows=rows, generations=generations,
    ))
    print(editing_wild(harness.read_json(run.out)))
    print("done")


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags)
    args = run.args
    s = prepare(run)
    wild = WildConfig(max_new_tokens=QUICK["max_new_tokens"]) if run.quick else WildConfig()
    facts = ordered_edit_facts(QUICK["facts"] if run.quick else args.facts)
    single(run, s, facts, wild)


if __name__ == "__main__":
    main()

"""The IOI circuit on SmolLM2 over several prompt draws: how much the docs' one-seed figures move.

    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/ioi.py --seeds 0 1 2 3 4 5 6 7 8 9
    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/ioi.py --seeds 10 11    # add draws to the file
    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/ioi.py --tour           # (re)measure the tour's draw
    PYTHONPATH=. python benchmarks/ioi.py --quick --model toy-2l            # a check (seed 0)

Each seed is the docs' reproduction (``docs/ioi.md``): 24 prompts from the first 4 templates,
``IOIConfig(n_sender_candidates=6)``, a fresh draw of names, places and objects per seed. Per seed
it records the logit difference (mean and standard error over the prompts), the share of prompts
where it is positive, the circuit's faithfulness, the share the name movers remove, and the heads of
each class. The summary gives the mean and the standard deviation over seeds, and for each head how
many seeds put it in its class. Each seed also keeps every circuit head's evidence (DLA, attention
from END to IO and to S, the path-patching effect, the class's own score) and the heads outside the
circuit with the largest DLA, for the docs' head-classes table.

The data file keeps the seeds it holds (and the tour's draw) and adds the ones asked for; a seed
already in the file or in the per-seed cache is not run again (``--fresh`` runs them anew).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter

import harness
from doc_tables.schemas.circuits import (
    IOIData,
    IOIDraw,
    IOIHead,
    IOIRun,
    IOISpread,
    IOISummary,
    IOITour,
)

from lmsci_mi import LensModel, load_model
from lmsci_mi.circuits.heads import top_heads
from lmsci_mi.circuits.ioi import IOI_ROLES, CircuitHead, IOIConfig, find_ioi_circuit
from lmsci_mi.data.ioi import IOI_TEMPLATES, IOIDataset, ioi_dataset
from lmsci_mi.stats import standard_error

N_PROMPTS = 24
N_TEMPLATES = 4
CONFIG = IOIConfig(n_sender_candidates=6)
OUTSIDE = 3
"""Heads outside the circuit listed by DLA (the next candidates for a backup name mover)."""
# The draw `lmsci-mi tour` makes (lmsci_mi/cli/heads.py:tour_ioi_inputs; a test checks they agree).
TOUR_PROMPTS, TOUR_TEMPLATES, TOUR_CONFIG = 8, 1, IOIConfig(n_sender_candidates=3)


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tour", action="store_true",
                        help="also (re)measure the tour's own draw (8 prompts, one template) as 'tour'")


def tour_inputs(lm: LensModel) -> tuple[IOIDataset, IOIConfig]:
    """The tour's IOI draw and settings."""
    return ioi_dataset(lm, TOUR_PROMPTS, templates=IOI_TEMPLATES[:TOUR_TEMPLATES]), TOUR_CONFIG


def _head(h: CircuitHead) -> IOIHead:
    path = None if h.path_patching != h.path_patching else h.path_patching  # NaN: not measured
    return IOIHead(head=str(h.head), role=h.role, dla=h.dla, attn_end_io=h.attn_end_io,
                   attn_end_s=h.attn_end_s, path_patching=path, score=h.score)


def one_draw(lm: LensModel, data: IOIDataset, config: IOIConfig) -> IOIDraw:
    """The circuit found on one prompt draw, with every figure and head the docs quote."""
    began = time.perf_counter()
    circuit = find_ioi_circuit(lm, data, config)
    classes: dict[str, list[str]] = {}
    for h in circuit.heads:
        classes.setdefault(h.role, []).append(str(h.head))
    in_circuit = {h.head for h in circuit.heads}
    ranked = top_heads(circuit.values, len(in_circuit) + OUTSIDE)
    outside = [(str(head), dla) for head, dla in ranked if head not in in_circuit][:OUTSIDE]
    return IOIDraw(
        n_prompts=int(circuit.logit_diffs.numel()),
        logit_diff=circuit.logit_diff,
        logit_diff_se=float(standard_error(circuit.logit_diffs.float())),
        fraction_positive=circuit.fraction_positive,
        logit_diff_circuit=circuit.logit_diff_circuit,
        faithfulness=circuit.faithfulness,
        logit_diff_without_name_movers=circuit.logit_diff_without_name_movers,
        name_mover_removed=circuit.name_mover_removed,
        n_heads=len(circuit.heads),
        classes=classes,
        heads=[_head(h) for h in circuit.heads],
        top_dla_outside_circuit=outside,
        seconds=round(time.perf_counter() - began, 1),
    )


def one_seed(lm: LensModel, seed: int, n_prompts: int) -> IOIRun:
    data = ioi_dataset(lm, n_prompts, templates=IOI_TEMPLATES[:N_TEMPLATES], seed=seed)
    return IOIRun(seed=seed, **one_draw(lm, data, CONFIG))


def _spread(values: list[float]) -> IOISpread:
    """The spread over seeds (a description of the draws, not an interval)."""
    sd = statistics.stdev(values) if len(values) > 1 else None
    return IOISpread(mean=statistics.fmean(values), sd=sd, min=min(values), max=max(values))


def summarise(runs: list[IOIRun]) -> IOISummary:
    """Mean and standard deviation over seeds of each figure; per head, the seeds that class it."""
    by_class: dict[str, dict[str, int]] = {}
    for role in [role for role in IOI_ROLES if any(role in r["classes"] for r in runs)]:
        counts = Counter(head for r in runs for head in r["classes"].get(role, []))
        by_class[role] = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return IOISummary(
        n_seeds=len(runs),
        logit_diff=_spread([r["logit_diff"] for r in runs]),
        fraction_positive=_spread([r["fraction_positive"] for r in runs]),
        faithfulness=_spread([r["faithfulness"] for r in runs]),
        name_mover_removed=_spread([r["name_mover_removed"] for r in runs]),
        n_heads=_spread([r["n_heads"] for r in runs]),
        heads_by_class=by_class,
    )


def print_draw(label: str, r: IOIDraw) -> None:
    print(f"{label}: logit diff {r['logit_diff']:.2f} ± {r['logit_diff_se']:.2f}, faithfulness "
          f"{r['faithfulness']:.2f}, name movers remove {r['name_mover_removed']:.2f}, "
          f"{r['n_heads']} heads ({r['seconds']:.0f} s)", flush=True)


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags)
    args = run.args
    old = harness.read_json(run.out, default={})
    if old.get("model") not in (None, args.model):
        raise SystemExit(f"{run.out} holds {old['model']}; give another --out for {args.model}")
    n_prompts = 8 if run.quick else N_PROMPTS
    with run.timed("load"):
        lm = load_model(args.model)
    seeds = args.seeds[:1] if run.quick else args.seeds
    done = {} if args.fresh else {r["seed"]: r for r in old.get("runs", [])}
    cache = run.cache(exclude=["seeds", "tour"])
    for seed in seeds:
        if seed not in done:
            done[seed] = cache.get(f"seed-{seed}", lambda seed=seed: one_seed(lm, seed, n_prompts))
            print_draw(f"seed {seed}", done[seed])
    runs = [done[s] for s in sorted(done)]
    data = IOIData(model=args.model, n_layers=lm.cfg.n_layers, n_prompts=n_prompts,
                   templates=N_TEMPLATES, config=repr(CONFIG), runs=runs, summary=summarise(runs))
    if args.tour:
        data["tour"] = IOITour(config=repr(TOUR_CONFIG), templates=TOUR_TEMPLATES,
                               **one_draw(lm, *tour_inputs(lm)))
        print_draw("the tour's draw", data["tour"])
    elif "tour" in old:
        data["tour"] = old["tour"]
    run.write(data)


if __name__ == "__main__":
    main()

"""Knowledge neurons (Dai et al. 2022) on SmolLM2-135M: speed against the EleutherAI package's
scheme, the paper's suppress/enhance table under our measure and under Dai et al.'s, and the
refinement's sensitivity to the number of paraphrases.

    python benchmarks/knowledge_neurons.py --speed          # (a) one prompt, 30 layers x 1536, m=20
    python benchmarks/knowledge_neurons.py --table          # (b) resumable: run until it says done
    python benchmarks/knowledge_neurons.py --table --max-seconds 240   # one piece of a few minutes
    python benchmarks/knowledge_neurons.py --paraphrases    # (c) resumable, as (b)
    python benchmarks/knowledge_neurons.py --quick --model toy-2l --speed --table --paraphrases

(a) times ``integrated_gradients`` and, in the same run on the same inputs, the scheme of the
``knowledge-neurons`` package written here on our model: per layer, one forward for the baseline
activations, then the IG steps in batches of 10, each batch recomputing the whole sequence and
unembedding every position, with a backward pass to that layer. Both use our Riemann rule
(alpha = k/m), so their scores are compared too.

(b) finds each fact's knowledge neurons and measures p(answer) on each of the fact's 4 prompts
before and with four neuron sets suppressed (x0) and enhanced (x2): the knowledge neurons; as many
random neurons of the same layers; Dai et al.'s baseline (their refinement on the activations,
``activation_neurons``); and as many neurons as the knowledge neurons with the largest
activations (``top_activation_neurons``); and the knowledge neurons on 5 facts of other
relations. ``lmsci_mi.knowledge.summarise_change`` turns these into our measure (mean and median
over facts of the mean per-prompt ratio) and Dai et al.'s (ratio of means per relation, averaged
over relations), each with a bootstrap interval. Each fact is cached in the harness's per-item
cache, so a stopped run resumes; every piece rewrites the table of the facts done so far
("complete" says whether all are).

(c) on the 10 facts of ``lmsci_mi/data/kn_paraphrases.json`` (8 prompts each), refines the
knowledge neurons on the first 2, 3, 4, 6 and 8 prompts and measures each set on all 8 prompts.

Each part keeps the others' sections of docs/data/knowledge_neurons.json. --quick: 1 timed run,
2 facts, 4 prompts.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
from pathlib import Path

import harness
import torch
from doc_tables.knowledge import kn_paraphrases, kn_protocol, kn_speed, kn_table
from doc_tables.schemas.knowledge import (
    KnowledgeNeuronsData,
    MeanCI,
    NeuronsCells,
    NeuronsFact,
    NeuronsParaphrases,
    NeuronsProtocol,
    NeuronsSpeed,
    NeuronsTable,
    ParaphraseFact,
    ParaphraseSize,
    Probabilities,
    ProtocolRow,
    ScalingCell,
)

import lmsci_mi.data
from lmsci_mi import LensModel, load_model
from lmsci_mi.data import Fact, load_facts
from lmsci_mi.knowledge import (
    FactScaling,
    KnowledgeNeuronsConfig,
    ScaledProbabilities,
    activation_neurons,
    integrated_gradients,
    paraphrase_sensitivity,
    random_neurons_like,
    refine_neurons,
    scaled_probabilities,
    summarise_change,
    top_activation_neurons,
)
from lmsci_mi.sites import hook_name
from lmsci_mi.stats import bootstrap_interval

EIFFEL = ("The Eiffel Tower is located in the city of", " Paris")
N_OTHER = 5  # unrelated facts (other relations) each fact's neurons are tested on
QUICK_FACTS = 2
N_RESAMPLES = 10_000
PARAPHRASE_FILE = Path(lmsci_mi.data.__file__).parent / "kn_paraphrases.json"
PARAPHRASE_SIZES = (2, 3, 4, 6, 8)
GROUPS = ("knowledge", "random", "activation", "activation_top", "other_facts")


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--speed", action="store_true", help="(a) the timing against the package scheme")
    parser.add_argument("--table", action="store_true", help="(b) the suppress/enhance table")
    parser.add_argument("--repeats", type=int, default=3, help="(a) timed runs of ours (the best is shown)")
    parser.add_argument("--facts", type=int, default=30, help="(b) facts spread over the shipped set")
    parser.add_argument("--max-seconds", type=float, default=float("inf"),
                        help="(b) start no fact after this many seconds (run again to resume)")
    parser.add_argument("--paraphrases", action="store_true",
                        help="(c) the refinement's sensitivity to the number of paraphrases")
    parser.add_argument("--model", default="smollm2-135m")


# ----------------------------------------------------------------------------- (a) speed


def package_scheme(
    lm: LensModel, prompt: str, target: str, steps: int = 20, batch: int = 10
) -> torch.Tensor:
    """The EleutherAI ``knowledge-neurons`` scheme on our model: one layer at a time, steps in
    batches, the whole sequence recomputed (and every position unembedded) per batch."""
    tokens = lm.to_tokens(prompt)
    position, target_id = tokens.shape[1] - 1, lm.token_id(target)
    alphas = torch.arange(1, steps + 1, dtype=torch.float32) / steps
    rows = []
    for layer in range(lm.cfg.n_layers):
        name = hook_name("mlp_post", layer)
        with torch.no_grad(), lm.hooks.capture([name]) as cap:
            lm(tokens)  # the package's get_baseline_with_activations
        act = cap[name][0, position]
        total = torch.zeros_like(act)
        for start in range(0, steps, batch):
            x = (alphas[start : start + batch, None] * act).requires_grad_(True)

            def put(activation: torch.Tensor, hook: object, x: torch.Tensor = x) -> torch.Tensor:
                out = activation.clone()
                out[:, position] = x
                return out

            with lm.hooks.hooks(fwd=[(name, put)], label="package scheme"):
                logits = lm(tokens.expand(x.shape[0], -1))  # every position, as HF models do
            probs = logits[:, position].float().softmax(-1)[:, target_id]
            (grad,) = torch.autograd.grad(probs.sum(), x)
            total += grad.sum(0)
        rows.append(act * total / steps)
    return torch.stack(rows)


def speed(lm: LensModel, repeats: int) -> NeuronsSpeed:
    """``integrated_gradients`` (best of ``repeats``, after a warm-up) against the package's
    scheme on the same prompt, in the same run, and how far their scores differ."""
    prompt, target = EIFFEL
    integrated_gradients(lm, prompt, target)  # warm-up: first-call allocations
    ours = []
    for _ in range(repeats):
        start = time.perf_counter()
        res = integrated_gradients(lm, prompt, target)
        ours.append(time.perf_counter() - start)
    start = time.perf_counter()
    theirs = package_scheme(lm, prompt, target)
    package = time.perf_counter() - start
    diff = float((theirs - res.values).abs().max() / res.values.abs().max())
    print(f"speed-up {package / min(ours):.1f}x; max score difference {diff:.1e} of the largest score")
    return NeuronsSpeed(
        prompt=prompt, target=target, layers=lm.cfg.n_layers, neurons=int(lm.cfg.d_mlp or 0), steps=20,
        ours_s=ours, package_scheme_s=package, speedup=package / min(ours), max_relative_score_difference=diff,
        torch_threads=torch.get_num_threads(), top_neurons=[str(n) for n in res.top(10)],
    )


# ----------------------------------------------------------------------------- (b) the table


def fact_cases(fact: Fact) -> list[tuple[str, str]]:
    """The fact's prompt and paraphrases, each with its answer."""
    return [(p, fact.target_true) for p in (fact.rewrite_prompt, *fact.paraphrase_prompts)]


def single_token_facts(lm: LensModel) -> list[Fact]:
    """The shipped facts whose answer is one token: p(answer) is then the paper's measure, and
    the last prompt position is the last position run (where the neurons are scaled)."""
    return [f for f in load_facts("facts") if len(lm.continuation_ids(f.target_true)) == 1]


def chosen_facts(total: int, n: int) -> list[int]:
    """``n`` facts spread over ``total``, so every relation gets its share."""
    return sorted({round(i * total / n) for i in range(n)})


def others_of(facts: list[Fact], index: int, n: int) -> list[int]:
    """``n`` facts of other relations (Dai et al.'s unrelated facts), fixed per fact."""
    pool = [j for j, f in enumerate(facts) if f.relation != facts[index].relation]
    return random.Random(index).sample(pool, n)


def fact_neurons(lm: LensModel, cases: list[tuple[str, str]], cfg: KnowledgeNeuronsConfig, seed: int) -> dict:
    """The fact's knowledge neurons and its three control sets, from one attribution per prompt:
    random neurons of the same layers (drawn with ``seed``), Dai et al.'s activation baseline,
    and the same number of neurons with the largest activations."""
    attributions = [integrated_gradients(lm, prompt, answer, cfg) for prompt, answer in cases]
    kn = refine_neurons(attributions, cfg).neurons
    return {
        "knowledge": list(kn),
        "random": random_neurons_like(kn, int(lm.cfg.d_mlp or 0), seed=seed),
        "activation": list(activation_neurons(attributions, cfg).neurons),
        "activation_top": top_activation_neurons(attributions, len(kn)),
    }


def one_fact(lm: LensModel, facts: list[Fact], index: int, cfg: KnowledgeNeuronsConfig) -> NeuronsFact:
    """The fact's neuron sets, and p(answer) per prompt with each set scaled: on the fact's own
    prompts, and (the knowledge neurons) on facts of other relations."""
    fact = facts[index]
    cases = fact_cases(fact)
    start = time.perf_counter()
    sets = fact_neurons(lm, cases, cfg, seed=index)
    ig_s = time.perf_counter() - start
    other = [fact_cases(facts[j])[0] for j in others_of(facts, index, N_OTHER)]
    probabilities = {group: scaled_probabilities(lm, sets[group], cases)
                     for group in ("knowledge", "random", "activation", "activation_top")}
    probabilities["other_facts"] = scaled_probabilities(lm, sets["knowledge"], other)
    return NeuronsFact(
        index=index, subject=fact.subject, relation=fact.relation, target=fact.target_true,
        neurons=[list(n) for n in sets["knowledge"]], ig_seconds=ig_s,
        knowledge=probabilities["knowledge"].effect().as_dict(),
        random=probabilities["random"].effect().as_dict(),
        other_facts=probabilities["other_facts"].effect().as_dict(),
        activation_neurons=[list(n) for n in sets["activation"]],
        activation_top=[list(n) for n in sets["activation_top"]],
        probabilities={group: p.as_dict() for group, p in probabilities.items()},  # type: ignore[misc]
    )


def mean_ci(values: list[float]) -> MeanCI:
    """The mean over facts with its 95% percentile-bootstrap interval (10,000 resamples of the
    facts, seed 0); NaN with no facts."""
    if not values:
        return MeanCI(mean=math.nan, ci95=[math.nan, math.nan])
    interval = bootstrap_interval(values, n_resamples=10_000, seed=0)
    return MeanCI(mean=interval.estimate, ci95=interval.as_list())


def cells(rows: list[NeuronsFact]) -> NeuronsCells:
    """Each group's mean relative changes over the facts that have knowledge neurons."""
    with_neurons = [r for r in rows if r["neurons"]]
    return NeuronsCells(**{
        group: ScalingCell(suppress=mean_ci([r[group]["suppress"] for r in with_neurons]),
                           enhance=mean_ci([r[group]["enhance"] for r in with_neurons]))
        for group in ("knowledge", "random", "other_facts")
    })


def summarise(model: str, rows: list[NeuronsFact], cfg: KnowledgeNeuronsConfig, *, complete: bool) -> NeuronsTable:
    layers = [n[0] for r in rows for n in r["neurons"]]
    return NeuronsTable(
        model=model, complete=complete, n_facts=len(rows),
        n_facts_with_neurons=sum(1 for r in rows if r["neurons"]), prompts_per_fact=4,
        other_facts_per_fact=N_OTHER, config=cfg.params(), neurons_per_fact=[len(r["neurons"]) for r in rows],
        layer_histogram={str(layer): layers.count(layer) for layer in sorted(set(layers))},
        cells=cells(rows), ig_seconds_per_fact=statistics.fmean(r["ig_seconds"] for r in rows), facts=rows,
    )


def scalings(rows: list, group: str, sizes: list[int]) -> list[FactScaling]:
    """Each row's measurements of one neuron set (``row["probabilities"][group]``), with the
    set's size per row (an empty set is left out of our measure, kept in Dai et al.'s)."""
    out = []
    for r, size in zip(rows, sizes, strict=True):
        p: Probabilities = r["probabilities"][group]
        probs = ScaledProbabilities(tuple(p["before"]), tuple(p["suppress"]), tuple(p["enhance"]))
        out.append(FactScaling(r["relation"], size > 0, probs))
    return out


def cells_of(facts: list[FactScaling], n_resamples: int) -> dict:
    """``{"suppress", "enhance"}``: both measures of one neuron set."""
    return {op: summarise_change(facts, op, n_resamples=n_resamples).as_dict() for op in ("suppress", "enhance")}


def set_sizes(rows: list[NeuronsFact], group: str) -> list[int]:
    """Neurons per fact in one set (the other-facts row scales the knowledge neurons)."""
    key = {"knowledge": "neurons", "random": "neurons", "other_facts": "neurons",
           "activation": "activation_neurons", "activation_top": "activation_top"}[group]
    return [len(r[key]) for r in rows]  # type: ignore[literal-required]


def protocol(model: str, rows: list[NeuronsFact], *, complete: bool, n_resamples: int) -> NeuronsProtocol:
    """Every neuron set under both measures, over the facts done so far."""
    table_rows = [
        ProtocolRow(neurons=group, neurons_per_fact=set_sizes(rows, group),  # type: ignore[typeddict-item]
                    **cells_of(scalings(rows, group, set_sizes(rows, group)), n_resamples))
        for group in GROUPS
    ]
    relations = [r["relation"] for r in rows]
    return NeuronsProtocol(
        model=model, complete=complete, n_facts=len(rows), n_resamples=n_resamples,
        relations={rel: relations.count(rel) for rel in dict.fromkeys(relations)}, rows=table_rows,
    )


def table(run: harness.Run, lm: LensModel) -> list[NeuronsFact]:
    """Every chosen fact, each cached as it finishes; the summary of the facts done so far
    ("complete" says whether all are), or None when none is."""
    facts = single_token_facts(lm)
    cfg = KnowledgeNeuronsConfig()
    wanted = chosen_facts(len(facts), QUICK_FACTS if run.quick else run.args.facts)
    # protocol 2: per-prompt probabilities of every neuron set (issue 37); rows of the first
    # protocol lack them, so they sit in another cache folder.
    cache = run.cache({"model": run.args.model, "quick": run.quick, "protocol": 2})
    deadline = time.perf_counter() + run.args.max_seconds
    rows = []
    for index in wanted:
        item = f"fact{index:03d}"
        if item not in cache and time.perf_counter() > deadline:
            continue  # past --max-seconds: only the facts already cached (by any run) count
        with run.timed("facts"):
            row = cache.get(item, lambda index=index: one_fact(lm, facts, index, cfg))
        rows.append(row)
        print(f"fact {index} ({row['subject']}): {len(row['neurons'])} neurons, "
              f"suppress {row['knowledge']['suppress']:+.1%}, enhance {row['knowledge']['enhance']:+.1%}")
    if len(rows) < len(wanted):
        print(f"{len(rows)} of {len(wanted)} facts done: run again to resume")
    return rows


# ----------------------------------------------------------------------------- (c) paraphrases


def paraphrase_fact(lm: LensModel, fact: Fact, sizes: tuple[int, ...], cfg: KnowledgeNeuronsConfig) -> ParaphraseFact:
    """The fact's knowledge neurons refined on its first k prompts for each k, each set
    measured on all the fact's prompts."""
    cases = fact_cases(fact)
    start = time.perf_counter()
    attributions = [integrated_gradients(lm, prompt, answer, cfg) for prompt, answer in cases]
    ig_s = time.perf_counter() - start
    found = paraphrase_sensitivity(attributions, sizes, cfg)
    return ParaphraseFact(
        subject=fact.subject, relation=fact.relation, target=fact.target_true, prompts=len(cases),
        ig_seconds=ig_s, neurons={str(k): [list(n) for n in found.neurons[k]] for k in found.sizes},
        jaccard_to_largest={str(k): found.jaccard_to_largest[k] for k in found.sizes},
        probabilities={str(k): scaled_probabilities(lm, found.neurons[k], cases).as_dict()  # type: ignore[misc]
                       for k in found.sizes},
    )


def paraphrases(run: harness.Run, lm: LensModel) -> NeuronsParaphrases | None:
    """(c) every fact of the paraphrase file, each cached as it finishes; the summary per prompt
    count of the facts done so far, or None when none is."""
    facts = [f for f in load_facts(PARAPHRASE_FILE) if len(lm.continuation_ids(f.target_true)) == 1]
    facts = facts[:QUICK_FACTS] if run.quick else facts
    cfg = KnowledgeNeuronsConfig()
    cache = run.cache({"model": run.args.model, "quick": run.quick, "part": "paraphrases"})
    deadline = time.perf_counter() + run.args.max_seconds
    rows: list[ParaphraseFact] = []
    for i, fact in enumerate(facts):
        item = f"paraphrase{i:02d}"
        if item not in cache and time.perf_counter() > deadline:
            continue
        with run.timed("paraphrases"):
            rows.append(cache.get(item, lambda fact=fact: paraphrase_fact(lm, fact, PARAPHRASE_SIZES, cfg)))
        print(f"{fact.subject}: neurons per k " + ", ".join(f"{k}: {len(v)}" for k, v in rows[-1]["neurons"].items()))
    if len(rows) < len(facts):
        print(f"{len(rows)} of {len(facts)} facts done: run again to resume")
    if not rows:
        return None
    summary = []
    for k in PARAPHRASE_SIZES:
        sizes = [len(r["neurons"][str(k)]) for r in rows]
        summary.append(ParaphraseSize(
            k=k, neurons_per_fact=sizes, jaccard_to_largest=[r["jaccard_to_largest"][str(k)] for r in rows],
            **cells_of(scalings(rows, str(k), sizes), N_RESAMPLES)))  # type: ignore[typeddict-item]
    document = harness.read_json(PARAPHRASE_FILE, {})
    return NeuronsParaphrases(
        model=run.args.model, complete=len(rows) == len(facts), source=document["source"], n_facts=len(rows),
        sizes=list(PARAPHRASE_SIZES), evaluated_on=f"all {max(PARAPHRASE_SIZES)} prompts of each fact",
        sizes_summary=summary, facts=rows,
    )


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags)
    args = run.args
    with run.timed("load"):
        lm = load_model(args.model)
    document: KnowledgeNeuronsData = harness.read_json(run.out, {})
    document.pop("timings", None)  # this run's timings replace the last run's
    if args.speed:
        with run.timed("speed"):
            document["speed"] = speed(lm, 1 if run.quick else args.repeats)
    if args.table and (rows := table(run, lm)):
        # Every piece rewrites the summaries from the facts done so far.
        complete = len(rows) == len(chosen_facts(len(single_token_facts(lm)), QUICK_FACTS if run.quick else args.facts))
        document["table"] = summarise(args.model, rows, KnowledgeNeuronsConfig(), complete=complete)
        document["protocol"] = protocol(args.model, rows, complete=complete, n_resamples=N_RESAMPLES)
    if args.paraphrases and (found := paraphrases(run, lm)) is not None:
        document["paraphrases"] = found
    run.write(document)
    if "speed" in document:
        print(kn_speed(document))
    if "table" in document:
        print(kn_table(document))
    if "protocol" in document:
        print(kn_protocol(document))
    if "paraphrases" in document:
        print(kn_paraphrases(document))


if __name__ == "__main__":
    main()

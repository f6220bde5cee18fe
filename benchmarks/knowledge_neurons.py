"""Knowledge neurons (Dai et al. 2022) on SmolLM2-135M: speed against the EleutherAI package's
scheme, and the paper's suppress/enhance table with random-neuron and other-fact controls.

    python benchmarks/knowledge_neurons.py --speed          # (a) one prompt, 30 layers x 1536, m=20
    python benchmarks/knowledge_neurons.py --table          # (b) resumable: run until it says done
    python benchmarks/knowledge_neurons.py --table --max-seconds 240   # one piece of a few minutes

(a) times ``integrated_gradients`` and, in the same run on the same inputs, the scheme of the
``knowledge-neurons`` package written here on our model: per layer, one forward for the baseline
activations, then the IG steps in batches of 10, each batch recomputing the whole sequence and
unembedding every position, with a backward pass to that layer. Both use our Riemann rule
(alpha = k/m), so their scores are compared too.

(b) caches each fact's neurons and effects in ``--cache`` and resumes; when every fact is done it
writes ``docs/data/knowledge_neurons.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from lmsci_mi import load_model
from lmsci_mi.data.facts import load_fact_records
from lmsci_mi.knowledge.neurons import (
    KnowledgeNeuronsConfig,
    enhance_neurons,
    integrated_gradients,
    knowledge_neurons,
    suppress_neurons,
)
from lmsci_mi.model import LensModel
from lmsci_mi.sites import hook_name

EIFFEL = ("The Eiffel Tower is located in the city of", " Paris")
OUT = Path("docs/data/knowledge_neurons.json")
N_OTHER = 5  # unrelated facts (other relations) each fact's neurons are tested on


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


def speed(lm: LensModel, repeats: int) -> dict[str, object]:
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
    ratio = package / min(ours)
    print("| scheme | passes | wall s |\n|---|---|---|")
    print(
        f"| lmsci-mi integrated_gradients (best of {repeats}) | 1 forward + 1 backward | {min(ours):.2f} |"
    )
    print(
        f"| knowledge-neurons package scheme | {lm.cfg.n_layers} x (1 + 2 fwd/bwd) | {package:.2f} |"
    )
    print(f"speed-up {ratio:.1f}x; max score difference {diff:.1e} of the largest score")
    return {
        "prompt": prompt,
        "target": target,
        "layers": lm.cfg.n_layers,
        "neurons": int(lm.cfg.d_mlp or 0),
        "steps": 20,
        "ours_s": ours,
        "package_scheme_s": package,
        "speedup": ratio,
        "max_relative_score_difference": diff,
        "torch_threads": torch.get_num_threads(),
        "top_neurons": [str(n) for n in res.top(10)],
    }


# ----------------------------------------------------------------------------- (b) the table


@torch.no_grad()
def answer_prob(lm: LensModel, prompt: str, target: str) -> float:
    """p(first token of ``target``) after ``prompt`` under whatever hooks are active."""
    logits = lm(lm.to_tokens(prompt))[0, -1].float()
    return float(logits.softmax(-1)[lm.continuation_ids(target)[0]])


def relative_changes(
    lm: LensModel, neurons: list[tuple[int, int]], cases: list[tuple[str, str]]
) -> dict[str, float]:
    """Mean relative change of p(answer) over ``cases`` when ``neurons`` are suppressed/enhanced."""
    if not neurons:
        return {"suppress": 0.0, "enhance": 0.0}
    base = [answer_prob(lm, p, t) for p, t in cases]
    out = {}
    for kind, manager in (("suppress", suppress_neurons), ("enhance", enhance_neurons)):
        with manager(lm, neurons):
            after = [answer_prob(lm, p, t) for p, t in cases]
        out[kind] = statistics.fmean((a - b) / b for a, b in zip(after, base, strict=True))
    return out


def random_like(neurons: list[tuple[int, int]], d_mlp: int, seed: int) -> list[tuple[int, int]]:
    """As many random neurons, each from the layer of one knowledge neuron, none of them."""
    rng = random.Random(seed)
    taken = set(neurons)
    picked: list[tuple[int, int]] = []
    for layer, _ in neurons:
        while (cell := (layer, rng.randrange(d_mlp))) in taken:
            pass
        taken.add(cell)
        picked.append(cell)
    return picked


def fact_cases(fact: dict) -> list[tuple[str, str]]:
    prompts = [fact["prompt"].format(fact["subject"]), *fact["paraphrase_prompts"]]
    return [(p, fact["target_true"]) for p in prompts]


def single_token_facts(lm: LensModel) -> list[dict]:
    """The shipped facts whose answer is one token: p(answer) is then the paper's measure, and
    the last prompt position is the last position run (where the neurons are scaled)."""
    return [f for f in load_fact_records() if len(lm.continuation_ids(f["target_true"])) == 1]


def chosen_facts(total: int, n: int) -> list[int]:
    """``n`` facts spread over ``total``, so every relation gets its share."""
    return sorted({round(i * total / n) for i in range(n)})


def others_of(facts: list[dict], index: int, n: int) -> list[int]:
    """``n`` facts of other relations (Dai et al.'s unrelated facts), fixed per fact."""
    pool = [j for j, f in enumerate(facts) if f["relation"] != facts[index]["relation"]]
    return random.Random(index).sample(pool, n)


def one_fact(lm: LensModel, facts: list[dict], index: int, cfg: KnowledgeNeuronsConfig) -> dict:
    fact = facts[index]
    cases = fact_cases(fact)
    start = time.perf_counter()
    kn = knowledge_neurons(lm, [p for p, _ in cases], fact["target_true"], cfg)
    ig_s = time.perf_counter() - start
    neurons = [(int(layer), int(neuron)) for layer, neuron in kn.neurons]
    control = random_like(neurons, int(lm.cfg.d_mlp or 0), seed=index)
    other = [fact_cases(facts[j])[0] for j in others_of(facts, index, N_OTHER)]
    return {
        "index": index,
        "subject": fact["subject"],
        "relation": fact["relation"],
        "target": fact["target_true"],
        "neurons": [list(n) for n in neurons],
        "ig_seconds": ig_s,
        "knowledge": relative_changes(lm, neurons, cases),
        "random": relative_changes(lm, control, cases),
        "other_facts": relative_changes(lm, neurons, other),
    }


def bootstrap(values: list[float], seed: int = 0, draws: int = 10_000) -> list[float]:
    """95% percentile interval of the mean, resampling facts."""
    data = torch.tensor(values, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    means = data[torch.randint(len(values), (draws, len(values)), generator=gen)].mean(1)
    return [float(means.quantile(0.025)), float(means.quantile(0.975))]


def table(lm: LensModel, args: argparse.Namespace) -> bool:
    facts = single_token_facts(lm)
    cfg = KnowledgeNeuronsConfig()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    wanted = chosen_facts(len(facts), args.facts)
    for index in wanted:
        path = cache / f"fact{index:03d}.json"
        if path.exists():
            continue
        if time.perf_counter() - start > args.max_seconds:
            print(f"stopped after {args.max_seconds} s: run again to resume")
            break
        row = one_fact(lm, facts, index, cfg)
        path.write_text(json.dumps(row))
        print(
            f"fact {index} ({row['subject']}): {len(row['neurons'])} neurons, "
            f"suppress {row['knowledge']['suppress']:+.1%}, enhance {row['knowledge']['enhance']:+.1%}"
        )
    # Every piece rewrites the summary from the facts done so far; "complete" says if all are.
    done = [cache / f"fact{i:03d}.json" for i in wanted if (cache / f"fact{i:03d}.json").exists()]
    if done:
        rows = [json.loads(path.read_text()) for path in done]
        summarise(rows, cfg, complete=len(done) == len(wanted))
    return len(done) == len(wanted)


def summarise(rows: list[dict], cfg: KnowledgeNeuronsConfig, *, complete: bool) -> None:
    with_neurons = [r for r in rows if r["neurons"]]
    cells = {}
    print(
        f"\n{len(rows)} facts, {len(with_neurons)} with knowledge neurons "
        f"(mean {statistics.fmean(len(r['neurons']) for r in rows):.1f} per fact)"
    )
    print(
        "| neurons | prompts | suppress: mean rel. change [95% CI] | enhance |\n|---|---|---|---|"
    )
    for group, label in (
        ("knowledge", "knowledge neurons"),
        ("random", "random, same layers"),
        ("other_facts", "knowledge neurons"),
    ):
        entry = {}
        for kind in ("suppress", "enhance"):
            values = [r[group][kind] for r in with_neurons]
            entry[kind] = {"mean": statistics.fmean(values), "ci95": bootstrap(values)}
        cells[group] = entry
        prompts = "other facts" if group == "other_facts" else "the fact's 4 prompts"
        print(
            f"| {label} | {prompts} | "
            + " | ".join(
                f"{entry[k]['mean']:+.1%} [{entry[k]['ci95'][0]:+.1%}, {entry[k]['ci95'][1]:+.1%}]"
                for k in ("suppress", "enhance")
            )
            + " |"
        )
    layers = [n[0] for r in rows for n in r["neurons"]]
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    data["table"] = {
        "model": "smollm2-135m",
        "complete": complete,
        "n_facts": len(rows),
        "n_facts_with_neurons": len(with_neurons),
        "prompts_per_fact": 4,
        "other_facts_per_fact": N_OTHER,
        "config": cfg.params(),
        "neurons_per_fact": [len(r["neurons"]) for r in rows],
        "layer_histogram": {str(layer): layers.count(layer) for layer in sorted(set(layers))},
        "cells": cells,
        "ig_seconds_per_fact": statistics.fmean(r["ig_seconds"] for r in rows),
        "facts": rows,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(data, indent=1))
    print(f"wrote {OUT} (complete: {complete})")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "knowledge neurons").splitlines()[0])
    parser.add_argument(
        "--speed", action="store_true", help="(a) the timing against the package scheme"
    )
    parser.add_argument("--table", action="store_true", help="(b) the suppress/enhance table")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--facts", type=int, default=30, help="facts spread over the shipped set")
    parser.add_argument(
        "--max-seconds", type=float, default=float("inf"), help="stop a piece after this"
    )
    parser.add_argument("--cache", default="out/knowledge_neurons", help="per-fact results")
    args = parser.parse_args()
    lm = load_model("smollm2-135m")
    print(f"torch threads {torch.get_num_threads()}")
    if args.speed:
        result = speed(lm, args.repeats)
        data = json.loads(OUT.read_text()) if OUT.exists() else {}
        data["speed"] = result
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(data, indent=1))
    if args.table:
        table(lm, args)


if __name__ == "__main__":
    main()

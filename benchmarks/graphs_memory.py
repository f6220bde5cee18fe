"""Peak memory and time of an attribution graph against prompt length and batch size (issue 41),
on the CFG GPT with its shipped transcoders (docs/graphs.md).

    PYTHONPATH=. python benchmarks/graphs_memory.py --threads 1
    PYTHONPATH=. python benchmarks/graphs_memory.py --quick     # two short prompts, seconds

Each prompt is held-out grammar sentences joined by EOS, BOS first, cut at ``--lengths`` tokens
(longer than one sentence, which the GPT saw in training: a load, not a fair test of the graph).
Every (length, ``GraphConfig.batch_size``) pair runs once in this process with every feature node
(``max_feature_nodes`` None, circuit-tracer's default), after one warm-up graph: the peak resident
memory during the call (Linux's VmHWM, reset before it) and the increase over the memory before
it, the seconds, and the graph's size. The batch size is how many targets one backward pass
takes: the retained forward pass holds that many copies of the prompt's activations.
"""

from __future__ import annotations

import argparse
from typing import Any

import harness
from circuit_tracer_side import measured

from lmsci_mi.circuits.graphs import GraphConfig, attribution_graph
from lmsci_mi.data.cfg import CFGConfig, build_grammar
from lmsci_mi.probes.cfg.model import load_cfg_model
from lmsci_mi.transcoders import load_transcoders

PROMPT_SEED = 30_011


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lengths", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--quiet", action="store_true",
                        help="record that nothing else ran (default: the seconds are a shared machine's)")


def prompt_of(length: int) -> list[int]:
    """BOS and held-out sentences joined by EOS, cut at ``length`` tokens."""
    grammar = build_grammar(CFGConfig())
    tokens = [grammar.bos]
    for sentence in grammar.sample(64, seed=PROMPT_SEED).sequences():
        tokens += [*sentence, grammar.eos]
        if len(tokens) >= length:
            break
    return tokens[:length]


def one(lm: Any, tcs: Any, length: int, batch_size: int) -> dict[str, Any]:
    graph, cost = measured(lambda: attribution_graph(lm, tcs, prompt_of(length), GraphConfig(batch_size=batch_size)))
    peak, before = cost["peak_mb"], cost["rss_mb"]
    return {"length": length, "batch_size": batch_size, "seconds": round(cost["seconds"], 3),
            "peak_mb": None if peak is None else round(peak, 1),
            "extra_mb": None if peak is None or before is None else round(peak - before, 1),
            "feature_nodes": graph.layout.n_features, "nodes": graph.layout.n_nodes}


def main() -> None:
    run = harness.start(__doc__, __file__, threads=1, flags=add_flags, out=harness.DATA / "graphs_memory.json")
    lengths = [8, 16] if run.quick else run.args.lengths
    with run.timed("load"):
        lm = load_cfg_model(train=False)[0]
        tcs = load_transcoders(lm)
    attribution_graph(lm, tcs, prompt_of(8), GraphConfig(batch_size=64))  # warm-up
    rows = []
    with run.timed("graphs"):
        for length in lengths:
            for batch_size in run.args.batch_sizes:
                rows.append(one(lm, tcs, length, batch_size))
                print(rows[-1], flush=True)
    run.write({"model": lm.name, "transcoders": "the shipped cfg-gpt set", "prompt_seed": PROMPT_SEED,
               "max_feature_nodes": None, "shared_machine": not run.args.quiet, "rows": rows})


if __name__ == "__main__":
    main()

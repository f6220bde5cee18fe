"""Cached decoding speed on SmolLM2: TransformerLens's ``generate`` against the one sampler.

Run quiet, alone on the machine (the project's CPU lock), e.g.::

    OMP_NUM_THREADS=2 HF_HUB_OFFLINE=1 flock /tmp/lmsci-cpu.lock python benchmarks/generation.py
    PYTHONPATH=. python benchmarks/generation.py --quick --model toy-2l     # a check

Both paths decode greedily with the KV cache from the same prompts in the same run, at batch 1,
4 and 16 (batch 1 is the first prompt alone); each is timed ``--repeats`` times and the fastest run is
reported (the least disturbed by other processes). Prints a Markdown table:
seconds per decoding step at batch 1 and tokens per second at each batch size, and ratios, and
writes the figures to --out, docs/data/generation.json (README.md quotes it). --quick: 3 new
tokens, one run, batches 1 and 2.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import harness
import torch
from doc_tables.schemas.project import GenerationData

from lmsci_mi import LensModel, load_model
from lmsci_mi.generation import GenerationConfig, generate

PROMPTS = [
    "The quick brown fox jumps over the lazy dog and",
    "Once upon a time, in a small village by the sea,",
    "The capital of France is",
    "In 1969 the first humans landed on",
    "My favourite recipe for a rainy afternoon is",
    "The most important idea in physics",
    "She opened the door and saw",
    "Machine learning models are",
    "The history of the Roman Empire begins",
    "To make a good cup of coffee you need",
    "The weather tomorrow will be",
    "He picked up the guitar and",
    "Scientists recently discovered that",
    "The best way to learn a language is",
    "At the end of the long road there was",
    "Every morning the old man would",
]


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tokens", type=int, default=20, help="new tokens per prompt")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--json", type=Path, default=None, help="the old name of --out (README.md quotes it)")


def old_path(lm: LensModel, prompts: list[str], new_tokens: int) -> None:
    """TransformerLens's cached generate, one call per batch (prompts of equal token length,
    so no padding: each batch repeats the first prompt, as the old sampler took one prompt)."""
    tokens = lm.to_tokens([prompts[0]] * len(prompts))
    lm.model.generate(
        tokens,
        max_new_tokens=new_tokens,
        do_sample=False,
        use_past_kv_cache=True,
        verbose=False,
        stop_at_eos=False,
    )


def new_path(lm: LensModel, prompts: list[str], new_tokens: int) -> None:
    """The one sampler on the same batch (the first prompt repeated, as for the old path)."""
    config = GenerationConfig(max_new_tokens=new_tokens, temperature=0.0, batch_size=len(prompts))
    generate(lm, [prompts[0]] * len(prompts), config)


def mixed_path(lm: LensModel, prompts: list[str], new_tokens: int) -> None:
    """The one sampler on different prompts of different lengths in one ragged batch."""
    config = GenerationConfig(max_new_tokens=new_tokens, temperature=0.0, batch_size=len(prompts))
    generate(lm, prompts, config)


def fastest(run: Callable[..., None], *args: object, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(*args)
        times.append(time.perf_counter() - start)
    return min(times)


PATHS: dict[str, Callable[[LensModel, list[str], int], None]] = {
    "TransformerLens generate": old_path,
    "lmsci_mi.generate": new_path,
    "lmsci_mi.generate, ragged": mixed_path,
}


def per_step(lm: LensModel, batch: int, tokens: int, repeats: int) -> dict[str, float]:
    """Each path's decoding seconds per step at ``batch``: a full run minus the prefill (a run of
    one new token), fastest of ``repeats`` each, after a warm-up (first-call allocations)."""
    prompts = PROMPTS[:batch]
    for path in PATHS.values():
        path(lm, prompts, 2)
    return {name: (fastest(path, lm, prompts, tokens, repeats=repeats)
                   - fastest(path, lm, prompts, 1, repeats=repeats)) / (tokens - 1)
            for name, path in PATHS.items()}


def print_table(data: GenerationData, batches: list[int]) -> None:
    print(f"{data['model']}, {torch.get_num_threads()} threads, {data['new_tokens']} new tokens, greedy, "
          f"fastest of {data['repeats']}; a step decodes one token for each row of the batch\n")
    print("| path | s/step, batch 1 | " + " | ".join(f"tok/s, batch {b}" for b in batches)
          + f" | batch {batches[-1]} / batch 1 |")
    print("|---" * (len(batches) + 3) + "|")
    for name in PATHS:
        rates = [data["tokens_per_second"][name][str(b)] for b in batches]
        print(f"| {name} | {data['seconds_per_step'][name][str(batches[0])]:.4f} | "
              + " | ".join(f"{r:.1f}" for r in rates) + f" | {rates[-1] / rates[0]:.1f}x |")
    old, new = data["seconds_per_step"]["TransformerLens generate"], data["seconds_per_step"]["lmsci_mi.generate"]
    print("\nnew / old speed: " + ", ".join(f"batch {b}: {old[str(b)] / new[str(b)]:.2f}x" for b in batches))


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags)
    args = run.args
    if args.json is not None:
        args.out = args.json
    tokens, repeats, batches = (3, 1, [1, 2]) if run.quick else (args.tokens, args.repeats, args.batches)
    with run.timed("load"):
        lm = load_model(args.model)
    seconds: dict[str, dict[str, float]] = {name: {} for name in PATHS}
    for batch in batches:
        with run.timed(f"batch {batch}"):
            for name, value in per_step(lm, batch, tokens, repeats).items():
                seconds[name][str(batch)] = value
    data = GenerationData(
        model=args.model, new_tokens=tokens, repeats=repeats,
        statistic="fastest of repeats; decoding time = full run minus a one-token run",
        seconds_per_step=seconds,
        tokens_per_second={name: {b: int(b) / s for b, s in by_batch.items()} for name, by_batch in seconds.items()},
    )
    run.write(data)
    print_table(data, batches)


if __name__ == "__main__":
    with torch.no_grad():
        main()

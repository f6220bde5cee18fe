"""Cached decoding speed on SmolLM2: TransformerLens's ``generate`` against the one sampler.

Run quiet, alone on the machine (the project's CPU lock), e.g.::

    OMP_NUM_THREADS=2 HF_HUB_OFFLINE=1 flock /tmp/lmsci-cpu.lock python benchmarks/generation.py

Both paths decode greedily with the KV cache from the same prompts in the same run, at batch 1,
4 and 16 (batch 1 is the first prompt alone); each is timed ``--repeats`` times and the fastest run is
reported (the least disturbed by other processes). Prints a Markdown table:
seconds per decoding step at batch 1 and tokens per second at each batch size, and ratios.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from collections.abc import Callable

import torch

from lmsci_mi import load_model
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


def old_path(lm, prompts: list[str], new_tokens: int) -> None:
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


def new_path(lm, prompts: list[str], new_tokens: int) -> None:
    """The one sampler on the same batch (the first prompt repeated, as for the old path)."""
    config = GenerationConfig(max_new_tokens=new_tokens, temperature=0.0, batch_size=len(prompts))
    generate(lm, [prompts[0]] * len(prompts), config)


def mixed_path(lm, prompts: list[str], new_tokens: int) -> None:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tokens", type=int, default=20, help="new tokens per prompt")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--json", default=None, help="also write the figures here (docs/data/...)")
    args = parser.parse_args()
    lm = load_model(args.model)
    paths = {
        "TransformerLens generate": old_path,
        "lmsci_mi.generate": new_path,
        "lmsci_mi.generate, ragged": mixed_path,
    }
    per_token: dict[tuple[str, int], float] = {}
    for batch in args.batches:
        prompts = PROMPTS[:batch]
        for path in paths.values():
            path(lm, prompts, 2)  # warm up (first-call allocations)
        for name, path in paths.items():
            # Decoding time: a full run minus the prefill (a run of one new token).
            full = fastest(path, lm, prompts, args.tokens, repeats=args.repeats)
            prefill = fastest(path, lm, prompts, 1, repeats=args.repeats)
            per_token[name, batch] = (full - prefill) / (args.tokens - 1)
    print(
        f"{args.model}, {torch.get_num_threads()} threads, {args.tokens} new tokens, greedy, "
        f"fastest of {args.repeats}; a step decodes one token for each row of the batch\n"
    )
    header = "| path | s/step, batch 1 | " + " | ".join(f"tok/s, batch {b}" for b in args.batches)
    print(header + f" | batch {args.batches[-1]} / batch 1 |")
    print("|---" * (len(args.batches) + 3) + "|")
    for name in paths:
        rates = [b / per_token[name, b] for b in args.batches]
        cells = " | ".join(f"{r:.1f}" for r in rates)
        print(
            f"| {name} | {per_token[name, args.batches[0]]:.4f} | {cells} | "
            f"{rates[-1] / rates[0]:.1f}x |"
        )
    old, new = "TransformerLens generate", "lmsci_mi.generate"
    speedups = ", ".join(
        f"batch {b}: {per_token[old, b] / per_token[new, b]:.2f}x" for b in args.batches
    )
    print(f"\nnew / old speed: {speedups}")
    if args.json is not None:
        _write_json(args, per_token, list(paths))


def _write_json(args: argparse.Namespace, per_token: dict, names: list[str]) -> None:
    record = {
        "script": "benchmarks/generation.py",
        "date": datetime.date.today().isoformat(),
        "model": args.model,
        "threads": torch.get_num_threads(),
        "new_tokens": args.tokens,
        "repeats": args.repeats,
        "statistic": "fastest of repeats; decoding time = full run minus a one-token run",
        "seconds_per_step": {
            name: {str(b): per_token[name, b] for b in args.batches} for name in names
        },
        "tokens_per_second": {
            name: {str(b): b / per_token[name, b] for b in args.batches} for name in names
        },
    }
    with open(args.json, "w") as f:
        json.dump(record, f, indent=1)


if __name__ == "__main__":
    with torch.no_grad():
        main()

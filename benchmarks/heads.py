"""Head scores for every head of SmolLM2 (30 layers × 9 heads) over 20 repeated sequences:
one batched forward pass vs a per-prompt loop vs TransformerLens's `detect_head` loop.

All three score the very same token sequences: repeated space-prefixed words that TransformerLens's
own `to_tokens` turns back into exactly the drawn tokens. Prints and writes (docs/data/heads.json)
seconds (best of --repeats), the ratio to the batched run, forward passes and the largest score
difference.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/heads.py [--n-sequences 20] [--half-length 20]
    PYTHONPATH=. python benchmarks/heads.py --quick --model toy-2l     # a check (4 × 2 × 8 tokens)

Measured once on the shared 2-core machine at load ~10 (noisy; the lead re-runs it quietly):
batched 14.9 s (1 pass), per-prompt loop 54.0 s (3.6x, 20 passes), TransformerLens
detect_head loop 204.4 s (13.7x, 20 passes), max |diff| 3e-8.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import harness
import torch
from doc_tables.schemas.circuits import HeadsData, HeadsRow
from transformer_lens.head_detector import detect_head

from lmsci_mi import LensModel, load_model
from lmsci_mi.circuits.heads import HeadScoreConfig, head_scores


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n-sequences", type=int, default=20)
    parser.add_argument("--half-length", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--model", default="smollm2-135m")


def word_sequences(lm: LensModel, n: int, half: int, seed: int) -> list[str]:
    """Texts ' w1 … wn w1 … wn' whose TransformerLens tokenisation is exactly those words."""
    tok = lm.tokenizer
    generator = torch.Generator().manual_seed(seed)
    candidates = torch.randperm(9000, generator=generator) + 1000
    words = []
    for token in candidates.tolist():
        text = tok.decode([token])
        if text.startswith(" ") and text[1:].isalpha() and tok.encode(text) == [token]:
            words.append(text)
        if len(words) >= n * half:
            break
    return ["".join(words[i * half : (i + 1) * half] * 2) for i in range(n)]


def best_of(repeats: int, fn: Callable[[], torch.Tensor]) -> tuple[float, torch.Tensor]:
    """The least seconds over ``repeats`` calls, and the last call's scores."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def count_passes(lm: LensModel, fn: Callable[[], object]) -> int:
    """Forward passes ``fn`` makes (calls of the embedding hook)."""
    calls: list[int] = []
    with lm.hooks.hooks(fwd=[("hook_embed", lambda act, hook: calls.append(1))]):
        fn()
    return len(calls)


@torch.no_grad()
def compare(lm: LensModel, texts: list[str], tokens: torch.Tensor, repeats: int) -> list[HeadsRow]:
    tl_like = HeadScoreConfig(rows="all", batch_size=64)  # detect_head's normalisation
    methods: dict[str, Callable[[], torch.Tensor]] = {
        "lmsci-mi head_scores, batched": lambda: head_scores(lm, tokens, "induction", tl_like).values,
        "lmsci-mi, one prompt per pass": lambda: torch.stack(
            [head_scores(lm, tokens[i : i + 1], "induction", tl_like).values for i in range(len(texts))]
        ).mean(0),
        "TransformerLens detect_head loop": lambda: detect_head(lm.model, texts, "induction_head").float(),
    }
    timed = {name: best_of(repeats, fn) for name, fn in methods.items()}
    t_batched, ours = timed["lmsci-mi head_scores, batched"]
    return [
        HeadsRow(method=name, seconds=seconds, ratio_to_batched=seconds / t_batched,
                 # detect_head runs TransformerLens's own model, outside our hooks: one pass a text
                 passes=count_passes(lm, methods[name]) if name.startswith("lmsci") else len(texts),
                 max_abs_diff=float((values - ours).abs().max()))
        for name, (seconds, values) in timed.items()
    ]


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags)
    args = run.args
    n, half = (4, 8) if run.quick else (args.n_sequences, args.half_length)
    lm = load_model(args.model)
    texts = word_sequences(lm, n, half, seed=0)
    tokens = lm.model.to_tokens(texts)  # TL's tokenisation, as detect_head sees it
    # SmolLM2's tokenizer prepends nothing; a toy's TransformerLens config may prepend a BOS.
    bos = int(bool(lm.model.cfg.default_prepend_bos) and tokens.shape[1] == 2 * half + 1)
    assert tokens.shape == (n, 2 * half + bos), tokens.shape
    rows = compare(lm, texts, tokens, args.repeats)
    print(f"induction scores, {lm.cfg.n_layers} layers x {lm.cfg.n_heads} heads, "
          f"{n} sequences of {tokens.shape[1]} tokens, device {lm.device}")
    print(f"{'method':<36} {'seconds':>8} {'ratio':>7} {'passes':>7} {'max |diff|':>11}")
    for r in rows:
        print(f"{r['method']:<36} {r['seconds']:8.2f} {r['ratio_to_batched']:7.2f} {r['passes']:7d} "
              f"{r['max_abs_diff']:11.2e}")
    run.write(HeadsData(model=args.model, n_sequences=n, tokens=int(tokens.shape[1]),
                        repeats=args.repeats, rows=rows))


if __name__ == "__main__":
    main()

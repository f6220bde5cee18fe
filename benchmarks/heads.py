"""Head scores for every head of SmolLM2 (30 layers × 9 heads) over 20 repeated sequences:
one batched forward pass vs a per-prompt loop vs TransformerLens's `detect_head` loop.

All three score the very same token sequences: repeated space-prefixed words that TransformerLens's
own `to_tokens` turns back into exactly the drawn tokens. Prints seconds, the ratio to the batched
run and the largest score difference.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/heads.py [--n-sequences 20] [--half-length 20]

Measured once on the shared 2-core machine at load ~10 (noisy; the lead re-runs it quietly):
batched 14.9 s (1 pass), per-prompt loop 54.0 s (3.6x, 20 passes), TransformerLens
detect_head loop 204.4 s (13.7x, 20 passes), max |diff| 3e-8.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from transformer_lens.head_detector import detect_head

from lmsci_mi import load_model
from lmsci_mi.circuits.heads import HeadScoreConfig, head_scores


def word_sequences(lm, n: int, half: int, seed: int) -> list[str]:
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
    texts = []
    for i in range(n):
        half_words = words[i * half : (i + 1) * half]
        texts.append("".join(half_words * 2))
    return texts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n-sequences", type=int, default=20)
    parser.add_argument("--half-length", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()

    lm = load_model("smollm2-135m")
    texts = word_sequences(lm, args.n_sequences, args.half_length, seed=0)
    tokens = lm.model.to_tokens(texts)  # TL's tokenisation (no sink), as detect_head sees it
    assert tokens.shape == (args.n_sequences, 2 * args.half_length), tokens.shape
    passes = []
    with torch.no_grad():
        rows = []

        def timed(fn):
            best = float("inf")
            for _ in range(args.repeats):
                start = time.perf_counter()
                out = fn()
                best = min(best, time.perf_counter() - start)
            return best, out

        def count_passes(fn):
            calls = []
            with lm.hooks.hooks(fwd=[("hook_embed", lambda act, hook: calls.append(1))]):
                fn()
            passes.append(len(calls))

        tl_like = HeadScoreConfig(rows="all", batch_size=64)  # detect_head's normalisation
        batched = lambda: head_scores(lm, tokens, "induction", tl_like)  # noqa: E731
        per_prompt = (
            lambda: torch.stack(  # noqa: E731
                [
                    head_scores(lm, tokens[i : i + 1], "induction", tl_like).values
                    for i in range(len(texts))
                ]
            ).mean(0)
        )
        tl_loop = lambda: detect_head(lm.model, texts, "induction_head")  # noqa: E731

        t_batched, ours = timed(batched)
        t_loop, loop_values = timed(per_prompt)
        t_tl, tl_values = timed(tl_loop)
        count_passes(batched)
        count_passes(per_prompt)
        rows = [
            ("lmsci-mi head_scores, batched", t_batched, passes[0], 0.0),
            (
                "lmsci-mi, one prompt per pass",
                t_loop,
                passes[1],
                float((loop_values - ours.values).abs().max()),
            ),
            (
                "TransformerLens detect_head loop",
                t_tl,
                len(texts),
                float((tl_values.float() - ours.values).abs().max()),
            ),
        ]
    print(
        f"induction scores, {lm.cfg.n_layers} layers x {lm.cfg.n_heads} heads, "
        f"{args.n_sequences} sequences of {tokens.shape[1]} tokens, device {lm.device}"
    )
    print(f"{'method':<36} {'seconds':>8} {'ratio':>7} {'passes':>7} {'max |diff|':>11}")
    for name, seconds, n_passes, diff in rows:
        print(f"{name:<36} {seconds:8.2f} {seconds / t_batched:7.2f} {n_passes:7d} {diff:11.2e}")


if __name__ == "__main__":
    main()

"""Numerical parity with Hugging Face: lmsci-mi's model (TransformerLens weights converted from the
GGUF, layer norms folded) against the Hugging Face model loaded from the same GGUF file, on the
same token ids, in float32 and in bfloat16.

    PYTHONPATH=. .venv/bin/python benchmarks/parity.py --model smollm2-135m
    PYTHONPATH=. .venv/bin/python benchmarks/parity.py --model gemma3-270m

Writes docs/data/parity_<model>.json: per comparison, the largest and the mean |Δ log p| over every
position and vocabulary entry of every prompt, the share of positions whose top-1 token agrees,
and the mean KL(HF ‖ ours) per position; plus whether Hugging Face's tokenizer gives the same ids
as `lm.encode` (which adds the sink token first). TransformerLens users report drift of exactly
this kind (its issues #693, #828, #1625): logits that differ from Hugging Face's, a BOS added on
one code path and not another.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from lmsci_mi import load_model
from lmsci_mi.editing.requests import load_facts
from lmsci_mi.loading import _gemma3_file, _smollm2_file

OUT = Path(__file__).resolve().parents[1] / "docs" / "data"
GGUF = {"smollm2-135m": _smollm2_file, "gemma3-270m": _gemma3_file}
IOI = (
    "When Mary and John went to the store, John gave a drink to",
    "When Tom and Anna went to the park, Anna gave a ball to",
    "After Lisa and Mark arrived at the office, Mark handed a report to",
    "Then, Sarah and David had a long argument, and afterwards David said to",
    "While Kate and Paul were working at the school, Paul gave a book to",
    "Friends Emma and James found a bone at the garden. James gave it to",
)
TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "In 1969, Neil Armstrong became the first person to walk on the Moon.",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
)


def prompts() -> list[str]:
    """20 prompts: 10 facts of the small shipped set, 6 IOI sentences, 4 plain texts."""
    facts = [f.rewrite_prompt for f in load_facts()[:10]]
    return [*facts, *IOI, *TEXTS]


def _hf_model(name: str, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM

    path = GGUF[name]()
    return AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype).eval()


@torch.no_grad()
def _log_probs(run, token_lists: list[list[int]]) -> list[torch.Tensor]:
    return [run(torch.tensor([ids])).float().log_softmax(-1)[0] for ids in token_lists]


def compare(ours: list[torch.Tensor], theirs: list[torch.Tensor]) -> dict:
    """|Δ log p| (largest, mean), top-1 agreement and mean KL(theirs ‖ ours) over all positions."""
    diffs = torch.cat([(a - b).abs().flatten() for a, b in zip(ours, theirs, strict=True)])
    agree = torch.cat([a.argmax(-1) == b.argmax(-1) for a, b in zip(ours, theirs, strict=True)])
    kl = torch.cat([(b.exp() * (b - a)).sum(-1) for a, b in zip(ours, theirs, strict=True)])
    return {
        "max_abs_logprob_diff": float(diffs.max()),
        "mean_abs_logprob_diff": float(diffs.mean()),
        "top1_agreement": float(agree.float().mean()),
        "mean_kl": float(kl.mean()),
        "positions": int(agree.numel()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m", choices=sorted(GGUF))
    args = parser.parse_args()
    start = time.perf_counter()
    texts = prompts()
    lm32 = load_model(args.model)
    token_lists = [lm32.encode(t) for t in texts]
    hf32 = _hf_model(args.model, torch.float32)
    tokenizer = lm32.tokenizer
    hf_ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    same_tokens = all(ids[1:] == hf for ids, hf in zip(token_lists, hf_ids, strict=True))

    hf_run32 = lambda t: hf32(t).logits  # noqa: E731
    reference = _log_probs(hf_run32, token_lists)
    rows = {"float32: lmsci-mi vs Hugging Face": compare(_log_probs(lm32, token_lists), reference)}
    del lm32
    lm16 = load_model(args.model, dtype=torch.bfloat16)
    ours16 = _log_probs(lm16, token_lists)
    del lm16
    hf16 = _hf_model(args.model, torch.bfloat16)
    theirs16 = _log_probs(lambda t: hf16(t).logits, token_lists)
    rows["bfloat16: lmsci-mi vs Hugging Face"] = compare(ours16, theirs16)
    rows["bfloat16 lmsci-mi vs float32 Hugging Face"] = compare(ours16, reference)
    rows["bfloat16 Hugging Face vs float32 Hugging Face"] = compare(theirs16, reference)
    data = {
        "command": f"PYTHONPATH=. .venv/bin/python benchmarks/parity.py --model {args.model}",
        "model": args.model,
        "date": time.strftime("%Y-%m-%d"),
        "n_prompts": len(texts),
        "prompts": texts,
        "same_token_ids_as_hugging_face": same_tokens,
        "note": "the sink token lm.encode adds is fed to both models; Hugging Face's tokenizer is "
        "compared without it (add_special_tokens=False)",
        "comparisons": rows,
        "seconds": round(time.perf_counter() - start, 1),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"parity_{args.model}.json"
    path.write_text(json.dumps(data, indent=1))
    print(f"wrote {path}")
    print("| comparison | max abs Δ log p | mean abs Δ log p | top-1 agreement | mean KL |")
    print("|---|---|---|---|---|")
    for name, row in rows.items():
        print(f"| {name} | {row['max_abs_logprob_diff']:.2e} | {row['mean_abs_logprob_diff']:.2e} | "
              f"{row['top1_agreement']:.4f} | {row['mean_kl']:.2e} |")
    print(f"same token ids as Hugging Face's tokenizer: {same_tokens}")


if __name__ == "__main__":
    main()

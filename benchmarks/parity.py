"""Numerical parity with Hugging Face: lmsci-mi's model (TransformerLens weights converted from the
GGUF, layer norms folded) against the Hugging Face model loaded from the same GGUF file, on the
same token ids, in float32 and in bfloat16.

    PYTHONPATH=. .venv/bin/python benchmarks/parity.py --model smollm2-135m
    PYTHONPATH=. .venv/bin/python benchmarks/parity.py --model gemma3-270m
    PYTHONPATH=. python benchmarks/parity.py --quick          # a check: 3 prompts, float32 only

Writes docs/data/parity_<model>.json: per comparison, the largest and the mean |Δ log p| over every
position and vocabulary entry of every prompt, the share of positions whose top-1 token agrees,
and the mean KL(HF ‖ ours) per position; plus whether Hugging Face's tokenizer gives the same ids
as `lm.encode` (which adds the sink token first). TransformerLens users report drift of exactly
this kind (its issues #693, #828, #1625): logits that differ from Hugging Face's, a BOS added on
one code path and not another. Only the bundled models have a GGUF file to load both from.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import harness
import torch
from doc_tables.schemas.project import ParityComparison, ParityData

from lmsci_mi import load_model
from lmsci_mi.editing import load_facts
from lmsci_mi.loading import BUNDLED_MODELS, bundled_gguf_file

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
NOTE = ("the sink token lm.encode adds is fed to both models; Hugging Face's tokenizer is compared "
        "without it (add_special_tokens=False)")
Logits = Callable[[torch.Tensor], torch.Tensor]


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2-135m", choices=sorted(BUNDLED_MODELS))


def prompts(quick: bool) -> list[str]:
    """20 prompts: 10 facts of the small shipped set, 6 IOI sentences, 4 plain texts (--quick:
    one of each)."""
    if quick:
        return [load_facts()[0].rewrite_prompt, IOI[0], TEXTS[0]]
    return [*(f.rewrite_prompt for f in load_facts()[:10]), *IOI, *TEXTS]


def hugging_face(name: str, dtype: torch.dtype) -> Logits:
    """Hugging Face's model from the bundled GGUF file, as a function of token ids to logits."""
    from transformers import AutoModelForCausalLM

    path = bundled_gguf_file(name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype).eval()
    return lambda tokens: model(tokens).logits


@torch.no_grad()
def log_probs(run: Logits, token_lists: list[list[int]]) -> list[torch.Tensor]:
    return [run(torch.tensor([ids])).float().log_softmax(-1)[0] for ids in token_lists]


def compare(ours: list[torch.Tensor], theirs: list[torch.Tensor]) -> ParityComparison:
    """|Δ log p| (largest, mean), top-1 agreement and mean KL(theirs ‖ ours) over all positions."""
    diffs = torch.cat([(a - b).abs().flatten() for a, b in zip(ours, theirs, strict=True)])
    agree = torch.cat([a.argmax(-1) == b.argmax(-1) for a, b in zip(ours, theirs, strict=True)])
    kl = torch.cat([(b.exp() * (b - a)).sum(-1) for a, b in zip(ours, theirs, strict=True)])
    return ParityComparison(max_abs_logprob_diff=float(diffs.max()), mean_abs_logprob_diff=float(diffs.mean()),
                            top1_agreement=float(agree.float().mean()), mean_kl=float(kl.mean()),
                            positions=int(agree.numel()))


def bfloat16_rows(name: str, token_lists: list[list[int]], reference: list[torch.Tensor]
                  ) -> dict[str, ParityComparison]:
    """Both models in bfloat16, against each other and against float32 Hugging Face (one model in
    memory at a time)."""
    lm16 = load_model(name, dtype=torch.bfloat16)
    ours16 = log_probs(lm16, token_lists)
    del lm16
    theirs16 = log_probs(hugging_face(name, torch.bfloat16), token_lists)
    return {
        "bfloat16: lmsci-mi vs Hugging Face": compare(ours16, theirs16),
        "bfloat16 lmsci-mi vs float32 Hugging Face": compare(ours16, reference),
        "bfloat16 Hugging Face vs float32 Hugging Face": compare(theirs16, reference),
    }


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags,
                        out=harness.DATA / "parity_MODEL.json")
    name = run.args.model
    out = Path(str(run.out).replace("MODEL", name))  # the default names the model
    start = time.perf_counter()
    texts = prompts(run.quick)
    with run.timed("float32"):
        lm32 = load_model(name)
        token_lists = [lm32.encode(t) for t in texts]
        hf_ids = [lm32.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        reference = log_probs(hugging_face(name, torch.float32), token_lists)
        rows = {"float32: lmsci-mi vs Hugging Face": compare(log_probs(lm32, token_lists), reference)}
        del lm32
    if not run.quick:
        with run.timed("bfloat16"):
            rows |= bfloat16_rows(name, token_lists, reference)
    data = ParityData(model=name, n_prompts=len(texts), prompts=texts,
                      same_token_ids_as_hugging_face=all(ids[1:] == hf for ids, hf in zip(token_lists, hf_ids,
                                                                                            strict=True)),
                      note=NOTE, comparisons=rows, seconds=round(time.perf_counter() - start, 1))
    run.write(data, out)
    for comparison, row in rows.items():
        print(f"{comparison}: max |Δ log p| {row['max_abs_logprob_diff']:.2e}, mean "
              f"{row['mean_abs_logprob_diff']:.2e}, top-1 agrees {row['top1_agreement']:.4f}, KL {row['mean_kl']:.2e}")
    print(f"same token ids as Hugging Face's tokenizer: {data['same_token_ids_as_hugging_face']}")


if __name__ == "__main__":
    main()

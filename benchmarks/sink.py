"""The attention sink as a choice that changes results: the README's sink table, from one run.

On SmolLM2-135M, under each of three sinks (the default ``<|endoftext|>``, no sink, and the
declared chat BOS ``<|im_start|>``), on the same weights:

- the hand-written IOI prompt of the README ("While Sarah and Peter were cooking dinner, Peter
  passed the salt to"): logit(" Sarah") − logit(" Peter") at the last token, and the top token;
- the tour's IOI prompt ("When Mary and John went to the store, John gave a drink to"): logit(" Mary")
  − logit(" John");
- p(" Paris") after "The Eiffel Tower is located in the city of";
- so that the two single prompts are not the whole story: the logit difference IO − S over the
  24 IOI prompts of ``docs/ioi.md`` (4 templates, seed 0; the same names under every sink), its
  mean ± standard error over prompts and how many prompts are positive.

Writes docs/data/sink.json (a few seconds of compute after the model loads):

    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/sink.py
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from lmsci_mi import LensModel, load_model
from lmsci_mi.data.ioi import IOI_TEMPLATES, ioi_dataset

ROOT = Path(__file__).resolve().parent.parent
HAND = ("While Sarah and Peter were cooking dinner, Peter passed the salt to", " Sarah", " Peter")
TOUR = ("When Mary and John went to the store, John gave a drink to", " Mary", " John")
EIFFEL = ("The Eiffel Tower is located in the city of", " Paris")
SINKS = (("default", "default"), ("none", None), ("<|im_start|>", "<|im_start|>"))
N_PROMPTS, N_TEMPLATES, SEED = 24, 4, 0


@torch.no_grad()
def _last_logits(lm: LensModel, prompts: str | list[str]) -> torch.Tensor:
    return lm(lm.to_tokens(prompts))[:, -1].float().cpu()


def _pair(lm: LensModel, prompt: tuple[str, str, str]) -> dict:
    text, io, s = prompt
    logits = _last_logits(lm, text)[0]
    top = int(logits.argmax())
    return {"prompt": text, "io": io, "s": s,
            "logit_diff": float(logits[lm.token_id(io)] - logits[lm.token_id(s)]),
            "top_token": lm.tokenizer.decode([top])}


def _dataset(lm: LensModel, data) -> dict:
    diffs = []
    for batch in data.batches:
        logits = _last_logits(lm, list(batch.prompts))
        rows = torch.arange(len(batch.prompts))
        diffs.append(logits[rows, batch.io_token.cpu()] - logits[rows, batch.s_token.cpu()])
    d = torch.cat(diffs)
    return {"n": int(d.numel()), "mean": float(d.mean()), "se": float(d.std(unbiased=True) / d.numel() ** 0.5),
            "n_positive": int((d > 0).sum())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "data" / "sink.json")
    args = parser.parse_args()
    base = load_model("smollm2-135m")
    # The prompts are drawn once, with the default sink's tokenizer checks; every sink reads the
    # same texts and answer tokens.
    data = ioi_dataset(base, N_PROMPTS, templates=IOI_TEMPLATES[:N_TEMPLATES], seed=SEED)
    runs = {}
    for label, sink in SINKS:
        lm = base if sink == "default" else LensModel.wrap(base.model, "smollm2-135m", sink=sink)
        eiffel = _last_logits(lm, EIFFEL[0])[0].softmax(-1)
        runs[label] = {
            "sink": lm.sink,
            "hand_written": _pair(lm, HAND),
            "tour": _pair(lm, TOUR),
            "p_paris": float(eiffel[lm.token_id(EIFFEL[1])]),
            "ioi_prompts": _dataset(lm, data),
        }
        r = runs[label]
        print(f"sink {label!r:16} hand-written {r['hand_written']['logit_diff']:+.2f} "
              f"(top {r['hand_written']['top_token']!r}), tour {r['tour']['logit_diff']:+.2f}, "
              f"p(Paris) {r['p_paris']:.3f}, {N_PROMPTS} IOI prompts {r['ioi_prompts']['mean']:+.2f} "
              f"± {r['ioi_prompts']['se']:.2f} ({r['ioi_prompts']['n_positive']} positive)")
    args.out.write_text(json.dumps({
        "model": "smollm2-135m", "date": datetime.date.today().isoformat(),
        "ioi_prompts": {"n": N_PROMPTS, "templates": N_TEMPLATES, "seed": SEED},
        "runs": runs,
    }, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

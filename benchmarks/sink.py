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
    PYTHONPATH=. python benchmarks/sink.py --quick --model toy-2l     # a check (8 IOI prompts)
"""

from __future__ import annotations

import argparse

import harness
import torch
from doc_tables.schemas.circuits import SinkData, SinkPair, SinkPrompts, SinkRun

from lmsci_mi import LensModel, load_model
from lmsci_mi.data.ioi import IOI_TEMPLATES, IOIDataset, ioi_dataset
from lmsci_mi.stats import mean_se

HAND = ("While Sarah and Peter were cooking dinner, Peter passed the salt to", " Sarah", " Peter")
TOUR = ("When Mary and John went to the store, John gave a drink to", " Mary", " John")
EIFFEL = ("The Eiffel Tower is located in the city of", " Paris")
SINKS = (("default", "default"), ("none", None), ("<|im_start|>", "<|im_start|>"))
N_PROMPTS, N_TEMPLATES, SEED = 24, 4, 0


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2-135m")


@torch.no_grad()
def last_logits(lm: LensModel, prompts: str | list[str]) -> torch.Tensor:
    return lm(lm.to_tokens(prompts))[:, -1].float().cpu()


def one_prompt(lm: LensModel, prompt: tuple[str, str, str]) -> SinkPair:
    text, io, s = prompt
    logits = last_logits(lm, text)[0]
    return SinkPair(prompt=text, io=io, s=s,
                    logit_diff=float(logits[lm.token_id(io)] - logits[lm.token_id(s)]),
                    top_token=lm.tokenizer.decode([int(logits.argmax())]))


def over_prompts(lm: LensModel, data: IOIDataset) -> SinkPrompts:
    """logit(IO) − logit(S) on every prompt of the draw: mean ± s.e., and how many are positive."""
    diffs = []
    for batch in data.batches:
        logits = last_logits(lm, list(batch.prompts))
        rows = torch.arange(len(batch.prompts))
        diffs.append(logits[rows, batch.io_token.cpu()] - logits[rows, batch.s_token.cpu()])
    d = torch.cat(diffs)
    m = mean_se(d)
    return SinkPrompts(n=m.n, mean=m.mean, se=m.se, n_positive=int((d > 0).sum()))


def one_sink(lm: LensModel, data: IOIDataset) -> SinkRun:
    eiffel = last_logits(lm, EIFFEL[0])[0].softmax(-1)
    return SinkRun(sink=lm.sink, hand_written=one_prompt(lm, HAND), tour=one_prompt(lm, TOUR),
                   p_paris=float(eiffel[lm.token_id(EIFFEL[1])]), ioi_prompts=over_prompts(lm, data))


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags)
    n_prompts = 8 if run.quick else N_PROMPTS
    with run.timed("load"):
        base = load_model(run.args.model)
    # The prompts are drawn once, with the default sink's tokenizer checks; every sink reads the
    # same texts and answer tokens.
    data = ioi_dataset(base, n_prompts, templates=IOI_TEMPLATES[:N_TEMPLATES], seed=SEED)
    runs = {}
    for label, sink in SINKS:
        lm = base if sink == "default" else LensModel.wrap(base.model, run.args.model, sink=sink)
        r = runs[label] = one_sink(lm, data)
        print(f"sink {label!r:16} hand-written {r['hand_written']['logit_diff']:+.2f} "
              f"(top {r['hand_written']['top_token']!r}), tour {r['tour']['logit_diff']:+.2f}, "
              f"p(Paris) {r['p_paris']:.3f}, {n_prompts} IOI prompts {r['ioi_prompts']['mean']:+.2f} "
              f"± {r['ioi_prompts']['se']:.2f} ({r['ioi_prompts']['n_positive']} positive)")
    run.write(SinkData(model=run.args.model, ioi_prompts={"n": n_prompts, "templates": N_TEMPLATES, "seed": SEED},
                   runs=runs))


if __name__ == "__main__":
    main()

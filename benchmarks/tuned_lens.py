"""Tuned lens against logit lens on SmolLM2: held-out KL(final ‖ lens) at every layer.

Trains the default tuned lens on CPU (cached under the lmsci-mi cache, keyed by the weights
fingerprint and the config; the training time is stored with it), then measures the per-layer KL
of both lenses, with standard errors over tokens, on three held-out sets: stdlib docstrings the
lens never saw (the odd-numbered documents), the shipped fact prompts and the steering sentences.
Every set is one resumable piece (kept in the harness's per-item cache); `report` writes
docs/data/tuned_lens.json and prints the table.

    PYTHONPATH=. HF_HUB_OFFLINE=1 flock /tmp/lmsci-cpu.lock .venv/bin/python benchmarks/tuned_lens.py --piece train
    ... --piece docstrings; ... --piece facts; ... --piece steering; ... --piece report
    PYTHONPATH=. python benchmarks/tuned_lens.py --quick --model toy-2l      # a check (4 texts a set)

``--piece all`` runs whatever is missing, then the report.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import time

import harness
import torch
from doc_tables.knowledge import tuned_lens_kl
from doc_tables.schemas.knowledge import LensEiffel, LensSet, TunedLensData

from lmsci_mi import LensModel, load_model
from lmsci_mi.data import load_facts
from lmsci_mi.data.steering_texts import steering_texts
from lmsci_mi.lenses import LogitLensConfig, TunedLensConfig, logit_lens, tuned_lens, tuned_lens_for
from lmsci_mi.lenses.tuned_lens import heldout_documents, tuned_lens_path
from lmsci_mi.stats import standard_error

SETS = ("docstrings", "facts", "steering")
SIZES = {"docstrings": 10, "facts": 55, "steering": 40}
"""Texts per set: 10 held-out documents (first 240 characters each, about 550 tokens), every
other shipped fact prompt (about 550 tokens), every eighth steering sentence of both attributes
(about 600 tokens)."""
QUICK_SIZE = 4
LENS_CONFIG = LogitLensConfig(batch_size=8)
EIFFEL = "The Eiffel Tower is located in the city of"


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--piece", choices=["train", *SETS, "report", "all"], default="all")
    parser.add_argument("--model", default="smollm2-135m")


def texts(name: str, n: int) -> list[str]:
    """The first ``n`` texts of a held-out set."""
    if name == "docstrings":
        return [doc[:240] for doc in itertools.islice(heldout_documents(), n)]
    if name == "facts":
        return [fact.rewrite_prompt for fact in load_facts("facts")][::2][:n]
    return list(steering_texts(["sentiment", "topic"]).texts[::8][:n])


def kl_per_layer(kl: torch.Tensor) -> tuple[list[float], list[float], int]:
    """Mean and standard error over real tokens (sink and padding left out), per layer."""
    values = kl[:, :, 1:].permute(1, 0, 2).reshape(kl.shape[1], -1)  # [layer, token]
    values = values[:, ~values[0].isnan()].double()
    return values.mean(1).tolist(), standard_error(values, axis=1).tolist(), values.shape[1]


def kl_set(lm: LensModel, name: str, n: int) -> LensSet:
    """Both lenses' KL(final ‖ lens) per layer on one held-out set."""
    # Sorted by length, so a batch's rows pad little (the lens reads every padded position).
    chosen = sorted(texts(name, n), key=len)
    lens = tuned_lens_for(lm)
    start = time.perf_counter()
    logit = logit_lens(lm, chosen, config=LENS_CONFIG)
    logging.info("%s: logit lens done in %.0f s", name, time.perf_counter() - start)
    tuned = tuned_lens(lm, chosen, lens=lens, config=LENS_CONFIG)
    logit_mean, logit_se, n_tokens = kl_per_layer(logit.kl)
    tuned_mean, tuned_se, _ = kl_per_layer(tuned.kl)
    return LensSet(set=name, n_texts=len(chosen), n_tokens=n_tokens, logit_kl=logit_mean, logit_se=logit_se,
                   tuned_kl=tuned_mean, tuned_se=tuned_se, seconds=time.perf_counter() - start)


def eiffel(lm: LensModel) -> LensEiffel:
    """p(' Paris') and its rank at the last token, per layer, under both lenses."""
    out = {"prompt": EIFFEL, "answer": " Paris"}
    for name, result in (
        ("logit", logit_lens(lm, EIFFEL, " Paris")),
        ("tuned", tuned_lens(lm, EIFFEL, " Paris", lens=tuned_lens_for(lm))),
    ):
        last = len(result.tokens[0]) - 1
        out[f"{name}_prob"] = result.values[0, :, last].tolist()
        out[f"{name}_rank"] = result.rank[0, :, last].tolist()
        out[f"{name}_top"] = [row[last] for row in result.top_text[0]]
    return LensEiffel(**out)


def report(run: harness.Run, lm: LensModel, rows: list[LensSet]) -> None:
    lens = tuned_lens_for(lm)
    config = TunedLensConfig()
    data = TunedLensData(
        model=run.args.model, lens_config=config.params(), train_seconds=lens.train_seconds,
        train_text="stdlib docstrings, even-numbered documents (lmsci_mi.data.text_corpus)",
        metric="KL(final || lens) in nats per token, resid_post of each layer; sink excluded; "
               "standard error over tokens (tokens of one text are correlated, so it is optimistic)",
        sets=rows, eiffel=eiffel(lm),
        tuned_beats_logit_below_last={
            r["set"]: all(t < lo for t, lo in zip(r["tuned_kl"][:-1], r["logit_kl"][:-1], strict=True)) for r in rows},
    )
    run.write(data)
    print(f"tuned lens trained in {lens.train_seconds:.0f} s on this CPU ({config.n_tokens} tokens, "
          f"{config.steps} Adam steps)")
    print(tuned_lens_kl(data))
    print("\ntuned < logit at every layer below the last:", data["tuned_beats_logit_below_last"])
    e = data["eiffel"]
    print("\nEiffel prompt, p(' Paris') at the last token per layer:")
    for layer, (a, b) in enumerate(zip(e["logit_prob"], e["tuned_prob"], strict=True)):
        print(f"{layer:>3} logit {a:.3f} (rank {e['logit_rank'][layer]}, top {e['logit_top'][layer]!r})  "
              f"tuned {b:.3f} (rank {e['tuned_rank'][layer]})")


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags)
    piece = run.args.piece
    torch.set_grad_enabled(False)
    with run.timed("load"):
        lm = load_model(run.args.model)
    if piece in ("train", "all"):
        with torch.enable_grad(), run.timed("train"):
            lens = tuned_lens_for(lm)
        print(f"tuned lens at {tuned_lens_path(lm)}: trained in {lens.train_seconds:.1f} s")
    if piece == "train":
        return
    sizes = dict.fromkeys(SETS, QUICK_SIZE) if run.quick else SIZES
    # The sets' KL depends on the lens (its file names the weights and the config) and the sizes.
    cache = run.cache({"model": run.args.model, "lens": tuned_lens_path(lm).name, "sizes": sizes})
    rows = []
    for name in SETS if piece in ("report", "all") else [piece]:
        with run.timed(name):
            rows.append(cache.get(name, lambda name=name: kl_set(lm, name, sizes[name])))
        print(f"{name}: {rows[-1]['n_tokens']} tokens in {rows[-1]['seconds']:.0f} s")
    if piece in ("report", "all"):
        report(run, lm, rows)


if __name__ == "__main__":
    main()

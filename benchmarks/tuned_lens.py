"""Tuned lens against logit lens on SmolLM2: held-out KL(final ‖ lens) at every layer.

Trains the default tuned lens on CPU (cached under the lmsci-mi cache, keyed by the weights
fingerprint and the config; the training time is stored with it), then measures the per-layer KL
of both lenses, with standard errors over tokens, on three held-out sets: stdlib docstrings the
lens never saw (the odd-numbered documents), the shipped fact prompts and the steering sentences.
Every set is one resumable piece (cached under out/tuned_lens/); `report` writes
docs/data/tuned_lens.json and prints the table.

    PYTHONPATH=. HF_HUB_OFFLINE=1 flock /tmp/lmsci-cpu.lock .venv/bin/python benchmarks/tuned_lens.py --piece train
    ... --piece docstrings; ... --piece facts; ... --piece steering; ... --piece report

``--piece all`` runs whatever is missing, then the report.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import time
from pathlib import Path

import torch

from lmsci_mi import load_model
from lmsci_mi.cache import cache_key
from lmsci_mi.data.steering_texts import steering_texts
from lmsci_mi.lenses import LogitLensConfig, TunedLensConfig, logit_lens, tuned_lens, tuned_lens_for
from lmsci_mi.lenses.tuned_lens import heldout_documents, tuned_lens_path
from lmsci_mi.model import LensModel

MODEL = "smollm2-135m"
CACHE = Path("out/tuned_lens")
DATA = Path("docs/data/tuned_lens.json")
N_DOCSTRINGS = 10  # held-out documents, first 240 characters each (about 550 tokens)
N_STEERING = 40  # every eighth steering sentence, both attributes (about 600 tokens)
N_FACTS = 55  # every other shipped fact prompt (about 550 tokens)
LENS_CONFIG = LogitLensConfig(batch_size=8)


def _facts() -> list[str]:
    facts = json.loads(Path("lmsci_mi/data/facts.json").read_text(encoding="utf-8"))
    return [fact["prompt"].format(fact["subject"]) for fact in facts["facts"]]


def _texts(name: str) -> list[str]:
    if name == "docstrings":
        return [doc[:240] for doc in itertools.islice(heldout_documents(), N_DOCSTRINGS)]
    if name == "facts":
        return _facts()[::2][:N_FACTS]
    texts = steering_texts(["sentiment", "topic"]).texts
    return list(texts[::8][:N_STEERING])


def _kl_per_layer(kl: torch.Tensor) -> tuple[list[float], list[float], int]:
    """Mean and standard error over real tokens (sink and padding left out), per layer."""
    values = kl[:, :, 1:].permute(1, 0, 2).reshape(kl.shape[1], -1)  # [layer, token]
    keep = ~values[0].isnan()
    values = values[:, keep].double()
    n = values.shape[1]
    return values.mean(1).tolist(), (values.std(1) / math.sqrt(n)).tolist(), n


def _run_set(lm: LensModel, name: str, key: str) -> dict:
    path = CACHE / f"{name}-{key}.json"
    if path.is_file():
        return json.loads(path.read_text())
    # Sorted by length, so a batch's rows pad little (the lens reads every padded position).
    texts = sorted(_texts(name), key=len)
    lens = tuned_lens_for(lm)
    start = time.perf_counter()
    logit = logit_lens(lm, texts, config=LENS_CONFIG)
    logging.info("%s: logit lens done in %.0f s", name, time.perf_counter() - start)
    tuned = tuned_lens(lm, texts, lens=lens, config=LENS_CONFIG)
    logit_mean, logit_se, n = _kl_per_layer(logit.kl)
    tuned_mean, tuned_se, _ = _kl_per_layer(tuned.kl)
    row = {
        "set": name,
        "n_texts": len(texts),
        "n_tokens": n,
        "logit_kl": logit_mean,
        "logit_se": logit_se,
        "tuned_kl": tuned_mean,
        "tuned_se": tuned_se,
        "seconds": time.perf_counter() - start,
    }
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(row, indent=1))
    return row


EIFFEL = "The Eiffel Tower is located in the city of"


def _eiffel(lm: LensModel) -> dict:
    """p(' Paris') and its rank at the last token, per layer, under both lenses."""
    out: dict = {"prompt": EIFFEL, "answer": " Paris"}
    for name, result in (
        ("logit", logit_lens(lm, EIFFEL, " Paris")),
        ("tuned", tuned_lens(lm, EIFFEL, " Paris", lens=tuned_lens_for(lm))),
    ):
        last = len(result.tokens[0]) - 1
        out[f"{name}_prob"] = result.values[0, :, last].tolist()
        out[f"{name}_rank"] = result.rank[0, :, last].tolist()
        out[f"{name}_top"] = [row[last] for row in result.top_text[0]]
    return out


def _report(lm: LensModel, rows: list[dict]) -> None:
    lens = tuned_lens_for(lm)
    config = TunedLensConfig()
    document = {
        "command": "PYTHONPATH=. python benchmarks/tuned_lens.py --piece all",
        "model": MODEL,
        "lens_config": config.params(),
        "train_seconds": lens.train_seconds,
        "train_text": "stdlib docstrings, even-numbered documents (lmsci_mi.data.text_corpus)",
        "metric": "KL(final || lens) in nats per token, resid_post of each layer; sink excluded; "
        "standard error over tokens (tokens of one text are correlated, so it is optimistic)",
        "sets": rows,
        "eiffel": _eiffel(lm),
        "tuned_beats_logit_below_last": {
            r["set"]: all(
                t < lo for t, lo in zip(r["tuned_kl"][:-1], r["logit_kl"][:-1], strict=True)
            )
            for r in rows
        },
    }
    DATA.parent.mkdir(parents=True, exist_ok=True)
    DATA.write_text(json.dumps(document, indent=1))
    print(
        f"tuned lens trained in {lens.train_seconds:.0f} s on this CPU ({config.n_tokens} tokens, "
        f"{config.steps} Adam steps); wrote {DATA}"
    )
    for r in rows:
        print(f"\n{r['set']}: {r['n_texts']} texts, {r['n_tokens']} tokens")
        print(f"{'layer':>5} {'logit KL':>14} {'tuned KL':>14}")
        for layer, (a, sa, b, sb) in enumerate(
            zip(r["logit_kl"], r["logit_se"], r["tuned_kl"], r["tuned_se"], strict=True)
        ):
            print(f"{layer:>5} {a:>8.3f} ±{sa:.3f} {b:>8.3f} ±{sb:.3f}")
    print(
        "\ntuned < logit at every layer below the last:", document["tuned_beats_logit_below_last"]
    )
    eiffel = document["eiffel"]
    print("\nEiffel prompt, p(' Paris') at the last token per layer:")
    for layer, (a, b) in enumerate(zip(eiffel["logit_prob"], eiffel["tuned_prob"], strict=True)):
        print(
            f"{layer:>3} logit {a:.3f} (rank {eiffel['logit_rank'][layer]}, top "
            f"{eiffel['logit_top'][layer]!r})  tuned {b:.3f} (rank {eiffel['tuned_rank'][layer]})"
        )
    print("\n" + _markdown(rows))


def _markdown(rows: list[dict]) -> str:
    """The docs page's table: one row per layer, logit and tuned KL (± s.e.) per set."""
    head = "| layer | " + " | ".join(f"{r['set']}: logit | tuned" for r in rows) + " |"
    lines = [head, "|" + "---|" * (1 + 2 * len(rows))]
    for layer in range(len(rows[0]["logit_kl"])):
        cells = []
        for r in rows:
            cells.append(f"{r['logit_kl'][layer]:.3f} ± {r['logit_se'][layer]:.3f}")
            cells.append(f"{r['tuned_kl'][layer]:.3f} ± {r['tuned_se'][layer]:.3f}")
        lines.append(f"| {layer} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description="Tuned lens against logit lens on SmolLM2.")
    parser.add_argument(
        "--piece",
        choices=["train", "docstrings", "facts", "steering", "report", "all"],
        default="all",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_grad_enabled(False)
    lm = load_model(MODEL)
    key = cache_key(
        tuned_lens_path(lm).name,
        {"docstrings": N_DOCSTRINGS, "steering": N_STEERING, "facts": N_FACTS},
    )
    if args.piece == "train":
        with torch.enable_grad():
            lens = tuned_lens_for(lm)
        print(f"tuned lens at {tuned_lens_path(lm)}: trained in {lens.train_seconds:.1f} s")
        return
    sets = ["docstrings", "facts", "steering"]
    if args.piece in sets:
        row = _run_set(lm, args.piece, key)
        print(f"{args.piece}: {row['n_tokens']} tokens in {row['seconds']:.0f} s")
        return
    if args.piece == "all":
        with torch.enable_grad():
            tuned_lens_for(lm)
    _report(lm, [_run_set(lm, name, key) for name in sets])


if __name__ == "__main__":
    main()

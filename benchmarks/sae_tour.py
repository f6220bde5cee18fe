"""The tour's SAE step, measured: the figures docs/sae.md quotes for ``lmsci-mi tour``'s step ``sae``.

    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python benchmarks/sae_tour.py

Runs the very step the tour runs (``lmsci_mi.cli.sae.tour_steps()``: feature 212's card on the
standard library's prose, and its steering frequency on 6 neutral prompts) and writes
docs/data/sae_tour.json: the card's token count and the feature's density there, its top contexts,
the share of promoted tokens per condition with its standard error over the prompts and the
paired difference from the unsteered run, the random control feature and the pool it is drawn
from (the features alive in the SAE's ``stats.json``), and the step's seconds. About a minute.

Six prompts × 30 tokens are the tour's quick look; ``benchmarks/sae.py`` measures the same
feature on 30 prompts at two coefficients.
"""

from __future__ import annotations

import datetime
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from lmsci_mi import load_model
from lmsci_mi.cli.sae import TOUR_FEATURE, TOUR_PROMPTS, TOUR_TOKENS, tour_steps
from lmsci_mi.sae import FrequencyConfig, SAEStats, load_trained_sae

DATA = Path(__file__).resolve().parent.parent / "docs" / "data" / "sae_tour.json"


def main() -> None:
    lm = load_model("smollm2-135m")
    start = time.perf_counter()
    sae = load_trained_sae(lm)
    load_seconds = time.perf_counter() - start
    (step,) = [s for s in tour_steps() if s.name == "sae"]
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        output = step.run(lm, Path(folder))
        seconds = time.perf_counter() - start
    print(output.summary)
    cards = output.results["sae_feature_card"]
    frequency = output.results["sae_steering_frequency"]
    values = frequency.values.float()  # [condition, prompt]
    n = values.shape[1]

    def share(row: torch.Tensor) -> dict:
        return {"mean": float(row.mean()), "se": float(row.std() / n**0.5)}

    conditions = list(frequency.axis_labels(0))
    alive = SAEStats.load(Path(sae.source) / "stats.json").values > 0
    data = {
        "model": lm.name,
        "date": datetime.date.today().isoformat(),
        "torch_threads": torch.get_num_threads(),
        "feature": TOUR_FEATURE,
        "card": {
            "tokens_asked": TOUR_TOKENS,
            "n_tokens": int(cards.n_tokens),
            "density": float(cards.density[0]),
            "contexts": list(cards.context_texts(TOUR_FEATURE)),
        },
        "steering": {
            "prompts": TOUR_PROMPTS,
            "new_tokens": FrequencyConfig().new_tokens,  # the step uses the defaults
            "coefficient": frequency.coefficient,
            "conditions": conditions,
            "share": [share(row) for row in values],
            "minus_unsteered": [share(row - values[0]) for row in values[1:]],
            "control": frequency.control,
            "control_pool": int(alive.sum()),
            "token_set": list(frequency.token_set),
        },
        "load_seconds": load_seconds,
        "step_seconds": seconds,
    }
    DATA.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {DATA}")


if __name__ == "__main__":
    main()

"""Steer SmolLM2's sentiment with LM-Steer, end to end.

1. Train a sentiment steer (plus the dummy) on the bundled positive and negative texts. The model
   stays frozen: the final normalised states are collected once and the steer is trained against
   the frozen unembedding. With the default settings this loads the steer that ships with
   lmsci-mi (scripts/build_artefacts.py steer rebuilds it); `--steps N` trains a new one (about
   a second per step on two CPU cores; cached, so a rerun is instant).
2. Continue a few neutral prompts at steer values from -2 to +2 (continuous control; beyond
   about ±2 the text degenerates, see docs/steering.md).
3. List the words at both ends of the steer's top singular direction (the SVD probe).
4. Highlight the words of a review that carry its sentiment, as an offline HTML page.

    .venv/bin/python examples/steer_sentiment.py [--out out/steer_sentiment]

With LMSCI_MI_QUICK=1 four prompts are continued at three values.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from lmsci_mi import load_model
from lmsci_mi.config import quick_mode
from lmsci_mi.data.steering_texts import neutral_prompts, steering_texts
from lmsci_mi.generation import GenerationConfig
from lmsci_mi.steering import (
    HighlightConfig,
    LMSteerConfig,
    SteerTrainConfig,
    SVDConfig,
    generate_steered,
    highlight_keywords,
    steer_svd,
    train_steer,
)
from lmsci_mi.steering.evaluate import sentiment_scores


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("out/steer_sentiment"))
    quick = quick_mode()
    defaults = SteerTrainConfig()
    parser.add_argument(
        "--steps",
        type=int,
        default=defaults.steps,
        help="training steps (default: the shipped steer)",
    )
    parser.add_argument(
        "--batch-tokens", type=int, default=defaults.batch_tokens, help="targets per step"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    lm = load_model("smollm2-135m")
    steer, run = train_steer(
        lm,
        steering_texts("sentiment"),
        LMSteerConfig(),
        SteerTrainConfig(steps=args.steps, batch_tokens=args.batch_tokens),
    )
    print(
        f"{steer}: loss {run.unsteered_loss:.2f} -> {run.final_loss:.2f} "
        f"({run.collect_seconds + run.train_seconds:.0f} s when not cached)"
    )
    print(f"saved to {steer.save(args.out / 'sentiment.safetensors')}\n")

    prompts = list(neutral_prompts()[: 4 if quick else 16])
    sampling = GenerationConfig(max_new_tokens=20, top_p=0.9)  # T = 1, as the docs' curves
    for value in (-2.0, 0.0, 2.0) if quick else (-2.0, -1.0, 0.0, 1.0, 2.0):
        texts = generate_steered(lm, prompts, steer, {"sentiment": value}, sampling).texts
        mean = sum(sentiment_scores(texts)) / len(texts)
        print(f"sentiment {value:+5.1f}: mean VADER {mean:+.2f}  {prompts[0]}{texts[0]!r}")

    probe = steer_svd(lm, steer, SVDConfig(n_directions=1))
    print(f"\ntop singular direction raises:  {' '.join(probe.top_words[0])}")
    print(f"top singular direction lowers:  {' '.join(probe.bottom_words[0])}")

    review = "The hotel was lovely and the staff were friendly, but the food was awful."
    for value, name in ((5.0, "positive"), (-5.0, "negative")):
        result = highlight_keywords(lm, steer, review, HighlightConfig(value=value, max_spans=2))
        path = result.save_html(args.out / f"highlight_{name}.html")
        print(f"\n{name} spans: {result.span_texts()} ({path})")


if __name__ == "__main__":
    main()

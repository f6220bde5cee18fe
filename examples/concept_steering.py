"""Find a concept direction in SmolLM2 and steer with it, end to end.

1. Concept directions under the causal inner product (Park et al. 2024): male → female from the
   shipped word pairs; how far its held-out pairs project above random pairs; its cosines with
   other concepts, causal and Euclidean.
2. Representation reading (Zou et al. 2023): the sentiment reading vector per layer, the layer
   chosen on dev pairs, its held-out accuracy against the difference of means.
3. Steer with it: the difference of means between positive and negative remarks at a middle
   layer (mean difference, ActAdd-style), added with a coefficient over an explicit position scope, against the
   same prompts unsteered; then "steer the generation only" against "from the last prompt token".

    .venv/bin/python examples/concept_steering.py [--out out/concept_steering]

With LMSCI_MI_QUICK=1 fewer concepts, pairs and prompts are used.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from lmsci_mi import load_model
from lmsci_mi.config import quick_mode
from lmsci_mi.data.concepts import load_concept_pairs
from lmsci_mi.data.contrasts import contrast_pairs
from lmsci_mi.data.steering_texts import neutral_prompts
from lmsci_mi.generation import GenerationConfig, generate
from lmsci_mi.hooks import PositionScope
from lmsci_mi.representations import (
    ReadingConfig,
    causal_inner_product,
    concept_inner_products,
    concept_projections,
    representation_reading,
)
from lmsci_mi.steering import MeanDifferenceConfig, mean_difference_vector
from lmsci_mi.steering.evaluate import sentiment_scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("out/concept_steering"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    quick = quick_mode()
    lm = load_model("smollm2-135m")

    names = ["male_female", "verb_past", "english_french"] if quick else None
    concepts = load_concept_pairs(names)
    inner = causal_inner_product(lm)  # Cov(γ) over the vocabulary, once
    print(concept_projections(lm, concepts, inner_product=inner).summary())
    products = concept_inner_products(lm, concepts, inner_product=inner)
    print(products.summary())
    products.plot(args.out / "inner_products.png")

    pairs = contrast_pairs("sentiment", n_pairs=40 if quick else None)
    layers = tuple(range(0, lm.cfg.n_layers, 3)) if quick else None
    reading = representation_reading(lm, pairs, config=ReadingConfig(layers=layers))
    print(reading.summary())
    reading.plot(args.out / "reading.png")

    remarks = contrast_pairs("sentiment", template=False)
    vector = mean_difference_vector(
        lm, remarks.positive, remarks.negative, MeanDifferenceConfig(layer=6, read="mean")
    )
    print(vector.summary())
    prompts = list(neutral_prompts()[: 4 if quick else 16])
    sampling = GenerationConfig(max_new_tokens=20, top_p=0.9)
    plain = generate(lm, prompts, sampling).texts
    print(f"unsteered: mean VADER {sum(sentiment_scores(plain)) / len(plain):+.2f}  {prompts[0]}{plain[0]!r}")
    for coefficient in (2.0, 4.0):
        with vector.apply(lm, coefficient):  # every position but the sink
            texts = generate(lm, prompts, sampling).texts
        mean = sum(sentiment_scores(texts)) / len(texts)
        print(f"+{coefficient:g} x vector: mean VADER {mean:+.2f}  {prompts[0]}{texts[0]!r}")
    # The first new token's distribution comes from the last prompt position: "generated" leaves
    # it exactly as unsteered, "from_last_prompt" moves it.
    greedy = GenerationConfig(max_new_tokens=8, temperature=0)
    plain_first = generate(lm, prompts[:1], greedy, keep_logits=True).logits[0][0].softmax(-1)
    top = int(plain_first.argmax())
    for scope in (PositionScope.generated(), PositionScope.from_last_prompt()):
        with vector.apply(lm, 4.0, scope):
            out = generate(lm, prompts[:1], greedy, keep_logits=True)
        first = out.logits[0][0].softmax(-1)
        print(f"{scope.kind:>16}: p({lm.tokenizer.decode([top])!r}) first {float(plain_first[top]):.3f} -> "
              f"{float(first[top]):.3f}  {prompts[0]}{out.texts[0]!r}")
    vector.save(args.out / "sentiment_vector")


if __name__ == "__main__":
    main()

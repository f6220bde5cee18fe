"""Where is "the Eiffel Tower is in Paris" stored in SmolLM2? The knowledge tools, end to end.

1. The logit lens: at which layer does " Paris" become the prediction at the last token?
2. Direct logit attribution: which heads and MLPs write " Paris" into the final stream?
3. Sub-updates (Geva et al. 2022): which MLP neurons' value vectors push " Paris" up most?
4. Knowledge neurons (Dai et al. 2022): integrated gradients over three paraphrases, refined;
   suppressing and enhancing them moves p(" Paris"), and the top neuron's value vector is read
   in vocabulary space.

    .venv/bin/python examples/where_is_the_fact.py [--out out/where_is_the_fact]

With LMSCI_MI_QUICK=1 the integrated gradients use 8 steps instead of 20.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from lmsci_mi import load_model
from lmsci_mi.config import quick_mode
from lmsci_mi.knowledge import (
    KnowledgeNeuronsConfig,
    SubUpdateConfig,
    enhance_neurons,
    knowledge_neurons,
    sub_updates,
    suppress_neurons,
    value_vectors,
)
from lmsci_mi.lenses import direct_logit_attribution, logit_lens

PROMPTS = [
    "The Eiffel Tower is located in the city of",
    "The Eiffel Tower stands in the city of",
    "You can visit the Eiffel Tower in the city of",
]
ANSWER = " Paris"


@torch.no_grad()
def p_answer(lm, prompt: str) -> float:
    """p(answer) at the prompt's last token."""
    logits = lm(lm.to_tokens(prompt))[0, -1]
    return float(torch.softmax(logits.float(), -1)[lm.token_id(ANSWER)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/where_is_the_fact"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    lm = load_model("smollm2-135m")

    lens = logit_lens(lm, PROMPTS[0], ANSWER)
    print(lens.summary(rows=lm.cfg.n_layers))
    lens.plot(args.out / "logit_lens.png")

    dla = direct_logit_attribution(lm, PROMPTS[0], ANSWER)
    print(dla.summary())

    updates = sub_updates(lm, PROMPTS[0], SubUpdateConfig(target=ANSWER))
    print(updates.summary())

    steps = 8 if quick_mode() else 20
    neurons = knowledge_neurons(lm, PROMPTS, ANSWER, KnowledgeNeuronsConfig(steps=steps))
    print(neurons.summary())
    found = list(neurons.neurons)
    if found:
        base = p_answer(lm, PROMPTS[0])
        with suppress_neurons(lm, found):
            suppressed = p_answer(lm, PROMPTS[0])
        with enhance_neurons(lm, found):
            enhanced = p_answer(lm, PROMPTS[0])
        print(f"p({ANSWER!r}): {base:.3f}; neurons suppressed {suppressed:.3f}, enhanced {enhanced:.3f}")
        layer, neuron = found[0]
        print(value_vectors(lm, layer, neuron).summary())
    neurons.save(args.out / "knowledge_neurons.json")


if __name__ == "__main__":
    main()

"""Edit one fact in SmolLM2 with ROME and show generations before, during and after the edit.

    python examples/edit_fact.py

The first run computes the MLP key statistics for the edited layer (50 k tokens of the standard
library's docstrings, a few minutes on two CPU cores) and caches them; later runs take seconds.
With LMSCI_MI_QUICK=1 the generations are shorter (the edit itself is the same).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from lmsci_mi import load_model
from lmsci_mi.config import quick_mode
from lmsci_mi.editing import EditRequest, ROMEConfig, default_rome_layer, rome_edit, target_nll


def main() -> None:
    lm = load_model("smollm2-135m")
    n_tokens = 6 if quick_mode() else 12
    request = EditRequest(
        prompt="{} is located in the city of",
        subject="The Eiffel Tower",
        target_new=" Rome",
        target_true=" Paris",
        paraphrase_prompts=("The Eiffel Tower can be found in the city of",),
        neighborhood_prompts=("The Louvre is located in the city of",),
    )
    prompts = [request.rewrite_prompt, *request.paraphrase_prompts, *request.neighborhood_prompts]
    original = lm.model.blocks[default_rome_layer(lm)].mlp.W_out.detach().clone()

    def show(title: str) -> None:
        print(f"--- {title}")
        for prompt in prompts:
            p_new, p_true = (
                -target_nll(lm, [prompt, prompt], [request.target_new, request.target_true])
            ).exp()
            print(
                f"{prompt}{lm.generate(prompt, n_tokens)!r}   (p Rome {p_new:.2f}, p Paris {p_true:.2f})"
            )

    show("before")
    with rome_edit(lm, request, ROMEConfig(layer=default_rome_layer(lm))) as handle:
        show(f"after ROME at layer {handle.layers[0]} ({handle.seconds:.1f} s)")
    show("restored")
    assert torch.equal(lm.model.blocks[default_rome_layer(lm)].mlp.W_out, original)
    print("weights restored bit for bit")


if __name__ == "__main__":
    main()

"""The one-prompt causal trace of docs/circuits.md ("Measured: the Eiffel Tower on SmolLM2").

    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python benchmarks/causal_trace.py

Runs ``causal_trace`` with its defaults (Gaussian noise 3 × the embedding std, 10 seeded samples,
window 10) on "The Eiffel Tower is located in the city of" → " Paris", and writes
docs/data/causal_trace_eiffel.json (every restored value with its standard error over the noise
samples, and the summaries the docs quote) and docs/img/causal_trace_eiffel.png; then the MLP-only
trace that ``ROMEHyperParams(trace_layer=True)`` runs, over 4 noise seeds (its peak, effect and
standard error). About four minutes at one thread.

One prompt and 10 noise samples are a case study: the standard errors say how much of each value
is the noise draw, not how the fact set behaves (that is benchmarks/aie.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import time

import torch

from lmsci_mi import load_model
from lmsci_mi.circuits import TraceConfig, causal_trace

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "data" / "causal_trace_eiffel.json"
FIGURE = ROOT / "docs" / "img" / "causal_trace_eiffel.png"
MLP_SEEDS = 4
EDIT_SUBJECT = "The Eiffel Tower"  # the subject of the editing fact (tests/integration/test_editing_smollm2.py)
PROMPT, SUBJECT, TARGET = "The Eiffel Tower is located in the city of", "Eiffel Tower", " Paris"


def _best(values: torch.Tensor, errors: torch.Tensor, layers: range | None = None) -> dict:
    """The largest value of a per-layer curve, its layer and standard error."""
    layer = int(values.argmax()) if layers is None else layers[int(values[layers.start : layers.stop].argmax())]
    return {"layer": layer, "value": float(values[layer]), "se": float(errors[layer])}


def main() -> None:
    lm = load_model("smollm2-135m")
    start = time.perf_counter()
    trace = causal_trace(lm, PROMPT, SUBJECT, TraceConfig(target=TARGET))
    seconds = time.perf_counter() - start
    n = trace.sample_values.shape[-1]
    se = trace.sample_values.std(-1) / n**0.5  # [kind, layer, position]
    tokens = [lm.tokenizer.decode([t]) for t in lm.encode(PROMPT)]
    subject = list(trace.subject_positions)
    middle, last, final = subject[1], subject[-1], len(tokens) - 1
    kinds = list(trace.kinds)
    values = trace.values.float()

    def curve(kind: str, position: int) -> tuple[torch.Tensor, torch.Tensor]:
        k = kinds.index(kind)
        return values[k, :, position], se[k, :, position]

    resid_mid, resid_mid_se = curve("resid", middle)
    resid_last, resid_last_se = curve("resid", last)
    resid_final, _ = curve("resid", final)
    mlp_last, mlp_last_se = curve("mlp", last)
    mlp_mid, mlp_mid_se = curve("mlp", middle)
    attn_final, attn_final_se = curve("attn", final)
    # Where the last token starts to hold the fact: the first layer whose restoration gives back
    # half the clean probability.
    half = next((layer for layer, v in enumerate(resid_final.tolist()) if v >= trace.clean_prob / 2), None)
    corrupted = trace.corrupted_samples.float()
    data = {
        "model": "smollm2-135m",
        "prompt": PROMPT,
        "subject": SUBJECT,
        "target": TARGET,
        "tokens": tokens,
        "subject_positions": subject,
        "noise_scale": trace.noise_scale,
        "noise_samples": n,
        "window": trace.window,
        "kinds": kinds,
        "clean_prob": trace.clean_prob,
        "corrupted_prob": trace.corrupted_prob,
        "corrupted_se": float(corrupted.std() / n**0.5),
        "values": values.tolist(),
        "se": se.tolist(),
        "summary": {
            "resid_middle_subject": {"token": tokens[middle], **_best(resid_mid, resid_mid_se)},
            "resid_last_subject": {"token": tokens[last], **_best(resid_last, resid_last_se)},
            "resid_first_subject": {"token": tokens[subject[0]],
                                    **_best(*curve("resid", subject[0]))},
            "resid_last_token_half_from": half,
            "resid_last_token_top": {"token": tokens[final], **_best(*curve("resid", final))},
            "attn_last_token": {"token": tokens[final], **_best(attn_final, attn_final_se)},
            "mlp_last_subject": {"token": tokens[last], **_best(mlp_last, mlp_last_se)},
            "mlp_middle_subject": {"token": tokens[middle], **_best(mlp_mid, mlp_mid_se)},
        },
        "seconds": seconds,
        "torch_threads": torch.get_num_threads(),
    }
    # The MLP-only trace `traced_layer` runs (ROMEHyperParams(trace_layer=True)) for the editing
    # fact, whose subject is "The Eiffel Tower" (so "The" is noised too), over noise seeds: its
    # peak at the last subject token and whether it clears two standard errors.
    data["mlp_only_subject"] = EDIT_SUBJECT
    data["mlp_only"] = []
    for seed in range(MLP_SEEDS):
        mlp = causal_trace(lm, PROMPT, EDIT_SUBJECT, TraceConfig(kinds=("mlp",), seed=seed))
        layer, effect, error = mlp.peak_effect(kind="mlp")
        data["mlp_only"].append({"seed": seed, "layer": layer, "effect": effect, "se": error,
                                 "gap": mlp.clean_prob - mlp.corrupted_prob})
        print(f"MLP-only trace, seed {seed}: peak layer {layer}, effect {effect:.4f} ± {error:.4f}", flush=True)
    DATA.write_text(json.dumps(data, indent=1))
    trace.plot(FIGURE, title=f'Causal trace: "{PROMPT}" → "{TARGET.strip()}" (SmolLM2-135M)')
    s = data["summary"]
    print(f"clean {trace.clean_prob:.3f}, corrupted {trace.corrupted_prob:.3f} ± {data['corrupted_se']:.3f}")
    for name, row in s.items():
        print(f"{name}: {row}")
    print(f"wrote {DATA.relative_to(ROOT)} and {FIGURE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

"""The one-prompt causal trace of docs/circuits.md ("Measured: the Eiffel Tower on SmolLM2").

    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python benchmarks/causal_trace.py --threads 1
    PYTHONPATH=. python benchmarks/causal_trace.py --quick --model toy-2l     # a check

Runs ``causal_trace`` with its defaults (Gaussian noise 3 × the embedding std, 10 seeded samples,
window 10) on "The Eiffel Tower is located in the city of" → " Paris", and writes
docs/data/causal_trace_eiffel.json (every restored value with its standard error over the noise
samples, and the summaries the docs quote) and docs/img/causal_trace_eiffel.png (beside --out when
it is another file); then the MLP-only trace that ``ROMEConfig(trace_layer=True)`` runs, over
4 noise seeds (its peak, effect and standard error). About four minutes at one thread. --quick
takes 2 noise samples and one MLP-only seed.

One prompt and 10 noise samples are a case study: the standard errors say how much of each value
is the noise draw, not how the fact set behaves (that is benchmarks/aie.py).
"""

from __future__ import annotations

import argparse

import harness
import torch
from doc_tables import MODEL_NAMES
from doc_tables.schemas.circuits import CausalTraceData, MLPOnlyTrace, TracePeak, TraceSummary

from lmsci_mi import LensModel, load_model
from lmsci_mi.circuits import CausalTrace, TraceConfig, causal_trace
from lmsci_mi.stats import standard_error

DATA = harness.DATA / "causal_trace_eiffel.json"
FIGURE = harness.ROOT / "docs" / "img" / "causal_trace_eiffel.png"
MLP_SEEDS = 4
EDIT_SUBJECT = "The Eiffel Tower"  # the subject of the editing fact (tests/integration/test_editing_smollm2.py)
PROMPT, SUBJECT, TARGET = "The Eiffel Tower is located in the city of", "Eiffel Tower", " Paris"


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2-135m")


def summarise(trace: CausalTrace, tokens: list[str], se: torch.Tensor) -> TraceSummary:
    """The peaks the docs quote, each with its token, layer and standard error."""
    subject = list(trace.subject_positions)
    middle, last, final = subject[1], subject[-1], len(tokens) - 1
    values = trace.values.float()

    def peak(kind: str, position: int) -> TracePeak:
        k = list(trace.kinds).index(kind)
        layer = int(values[k, :, position].argmax())
        return TracePeak(token=tokens[position], layer=layer, value=float(values[k, layer, position]),
                         se=float(se[k, layer, position]))

    # Where the last token starts to hold the fact: the first layer whose restoration gives back
    # half the clean probability.
    resid_final = values[list(trace.kinds).index("resid"), :, final].tolist()
    half = next((layer for layer, v in enumerate(resid_final) if v >= trace.clean_prob / 2), None)
    return TraceSummary(
        resid_middle_subject=peak("resid", middle),
        resid_last_subject=peak("resid", last),
        resid_first_subject=peak("resid", subject[0]),
        resid_last_token_half_from=half,
        resid_last_token_top=peak("resid", final),
        attn_last_token=peak("attn", final),
        mlp_last_subject=peak("mlp", last),
        mlp_middle_subject=peak("mlp", middle),
    )


def mlp_only(lm: LensModel, seed: int) -> MLPOnlyTrace:
    """The MLP-only trace `traced_layer` runs (ROMEConfig(trace_layer=True)) for the editing
    fact, whose subject is "The Eiffel Tower" (so "The" is noised too): its peak at the last
    subject token."""
    trace = causal_trace(lm, PROMPT, EDIT_SUBJECT, TraceConfig(kinds=("mlp",), seed=seed))
    layer, effect, error = trace.peak_effect(kind="mlp")
    print(f"MLP-only trace, seed {seed}: peak layer {layer}, effect {effect:.4f} ± {error:.4f}", flush=True)
    return MLPOnlyTrace(seed=seed, layer=layer, effect=effect, se=error,
                        gap=trace.clean_prob - trace.corrupted_prob)


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags, out=DATA)
    lm = load_model(run.args.model)
    samples = 2 if run.quick else TraceConfig().n_samples
    with run.timed("trace") as timer:
        trace = causal_trace(lm, PROMPT, SUBJECT, TraceConfig(target=TARGET, n_samples=samples))
    tokens = [lm.tokenizer.decode([t]) for t in lm.encode(PROMPT)]
    se = standard_error(trace.sample_values, axis=-1)  # over the noise samples: [kind, layer, position]
    data = CausalTraceData(
        model=run.args.model, prompt=PROMPT, subject=SUBJECT, target=TARGET, tokens=tokens,
        subject_positions=list(trace.subject_positions), noise_scale=trace.noise_scale,
        noise_samples=trace.sample_values.shape[-1], window=trace.window, kinds=list(trace.kinds),
        clean_prob=trace.clean_prob, corrupted_prob=trace.corrupted_prob,
        corrupted_se=float(standard_error(trace.corrupted_samples.float())),
        values=trace.values.float().tolist(), se=se.tolist(), summary=summarise(trace, tokens, se),
        seconds=timer.seconds, mlp_only_subject=EDIT_SUBJECT,
        mlp_only=[mlp_only(lm, seed) for seed in range(1 if run.quick else MLP_SEEDS)],
    )
    run.write(data)
    figure = FIGURE if run.out == DATA else run.out.with_suffix(".png")
    trace.plot(figure, title=f'Causal trace: "{PROMPT}" → "{TARGET.strip()}" ({MODEL_NAMES.get(lm.name, lm.name)})')
    print(f"clean {trace.clean_prob:.3f}, corrupted {trace.corrupted_prob:.3f} ± {data['corrupted_se']:.3f}")
    for name, row in data["summary"].items():
        print(f"{name}: {row}")


if __name__ == "__main__":
    main()

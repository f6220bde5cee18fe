"""A small circuit-discovery session on SmolLM2: the IOI prompt pair, end to end.

1. Residual-stream patching over (layer, position): where does the information that the answer is
   " Mary" (not " John") live, and when does it move from the S2 token to the last token?
2. Attribution patching of every head (3 passes) to shortlist heads, then exact patching of every
   head to check the shortlist; the Spearman rank correlation says how far the cheap method can be
   trusted here.
3. Per-position patching of the top heads' outputs: at which position does each head matter?
4. (optional, ``--trace``) a causal trace of a fact, to compare with a factual-recall circuit.

    .venv/bin/python examples/circuit_discovery.py [--out out/circuit_discovery] [--trace]

With LMSCI_MI_QUICK=1 the residual sweep covers every third layer and step 3 the top two heads' layers.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from lmsci_mi import load_model
from lmsci_mi.circuits import (
    AttributionConfig,
    PatchingConfig,
    TraceConfig,
    attribution_patch,
    causal_trace,
    patch_activations,
)
from lmsci_mi.config import quick_mode
from lmsci_mi.data.pairs import PromptPairs
from lmsci_mi.sites import Head

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"


def main() -> None:
    parser = argparse.ArgumentParser(description="IOI circuit discovery on SmolLM2")
    parser.add_argument("--out", type=Path, default=Path("out/circuit_discovery"))
    parser.add_argument("--trace", action="store_true", help="also trace the Eiffel Tower fact")
    parser.add_argument("--model", default="smollm2-135m", help="bundled model (default SmolLM2)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    quick = quick_mode()
    lm = load_model(args.model)
    # One pair, scored by its logit difference logit(Mary) − logit(John) (the default metric).
    pairs = PromptPairs(CLEAN, CORRUPTED, answers=lm.token_id(" Mary"), wrongs=lm.token_id(" John"))
    tokens = lm.to_str_tokens(CLEAN)
    s2 = len(lm.encode("When Mary and John went to the store, John")) - 1
    print(f"clean:     {CLEAN!r}\ncorrupted: {CORRUPTED!r}  (S2 = position {s2}, {tokens[s2]!r})")

    # 1. Residual stream, every (layer, position).
    start = time.perf_counter()
    layers = tuple(range(0, lm.cfg.n_layers, 3)) if quick else None
    resid = patch_activations(lm, pairs,
                              config=PatchingConfig(site="resid_pre", layers=layers, normalise=True))
    print(
        f"\n[1] resid_pre sweep, {resid.values.numel()} patches in {time.perf_counter() - start:.1f} s; "
        f"logit diff clean {resid.clean_value:+.2f}, corrupted {resid.corrupted_value:+.2f}"
    )
    at_s2, at_end = resid.values[:, s2], resid.values[:, -1]
    swept = [int(layer) for layer in resid.axis_labels(0)]
    if (at_end > at_s2).any():
        handover = swept[int((at_end > at_s2).nonzero()[0])]
        print(f"    the answer is carried at S2 before layer {handover} and at END from layer {handover}")
    else:
        print("    the answer stays at S2 in every layer swept")
    resid.plot(args.out / "resid_pre.png")

    # 2. Heads: attribution shortlist, exact check.
    start = time.perf_counter()
    heads = attribution_patch(lm, pairs, config=AttributionConfig(normalise=True, compare_exact=True))
    print(
        f"\n[2] every head's output (z, all positions): attribution + exact in "
        f"{time.perf_counter() - start:.1f} s; Spearman(attribution, exact) = "
        f"{heads.rank_correlation:.2f}"
    )
    print("    top heads by attribution: " + ", ".join(f"{n} {v:+.2f}" for n, v in heads.top(6)))
    exact = heads.exact
    assert exact is not None
    print("    top heads by exact patching: " + ", ".join(f"{n} {v:+.2f}" for n, v in exact.top(6)))
    exact.plot(args.out / "heads_exact.png")
    heads.plot(args.out / "heads_attribution.png")

    # 3. Where each top head acts: per-position patching of its output at its layer.
    top_layers = sorted({Head.parse(head).layer for head, _ in exact.top(2 if quick else 4)})
    by_pos = patch_activations(lm, pairs,
                               config=PatchingConfig(site="z", layers=tuple(top_layers), normalise=True))
    print("\n[3] top heads by position:")
    for name, value in by_pos.top(6):
        print(f"    {name:28s} {value:+.2f}")
    by_pos.save(args.out / "heads_by_position.json")

    if args.trace:
        trace = causal_trace(lm, "The Eiffel Tower is located in the city of", "Eiffel Tower",
                             TraceConfig(target=" Paris"))
        trace.plot(args.out / "causal_trace_eiffel.png")
        print(
            f"\n[4] causal trace: p(Paris) clean {trace.clean_prob:.2f}, corrupted "
            f"{trace.corrupted_prob:.2f}, MLP peak at layer {trace.peak_layer('mlp')}"
        )
    print(f"\nfigures and results in {args.out}/")


if __name__ == "__main__":
    main()

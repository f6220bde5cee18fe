"""Find SmolLM2's induction and previous-token heads and save their attention as offline pages.

1. Score all 270 heads for induction on repeated random tokens (one batched forward pass).
2. Score them for attending to the previous token.
3. Save circuitsvis views of the top heads of each kind (script inlined: they open with no
   network) and the score heatmaps.

    .venv/bin/python examples/visualise_heads.py [--out out/heads]

The notebook heads.ipynb walks through the same steps and adds the toy model with a known answer.
With LMSCI_MI_QUICK=1 each score averages 4 sequences instead of 8.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from lmsci_mi import load_model
from lmsci_mi.circuits import HeadScoreConfig, induction_scores, previous_token_scores
from lmsci_mi.circuits.attention import save_attention_html
from lmsci_mi.config import quick_mode
from lmsci_mi.data.repeated_tokens import repeated_random_tokens

SENTENCE = "When Mary and John went to the store, John gave a drink to"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("out/heads"))
    parser.add_argument("--top", type=int, default=3, help="heads shown per view")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    lm = load_model("smollm2-135m")
    n_sequences = 4 if quick_mode() else 8

    induction = induction_scores(
        lm, config=HeadScoreConfig(n_sequences=n_sequences, half_length=12)
    )
    print("induction:      " + ", ".join(f"{h} {v:.2f}" for h, v in induction.top(args.top)))
    previous = previous_token_scores(
        lm, config=HeadScoreConfig(n_sequences=n_sequences, half_length=12, exclude_bos=True)
    )
    print("previous token: " + ", ".join(f"{h} {v:.2f}" for h, v in previous.top(args.top)))

    # Induction heads show their stripe on a repeated sequence; previous-token heads on any text.
    tokens = repeated_random_tokens(1, 12, vocab=(1000, 10000), sink_token_id=0, seed=3)[0]
    views = [
        save_attention_html(
            lm, tokens, [h for h, _ in induction.top(args.top)], args.out / "induction_heads.html"
        ),
        save_attention_html(
            lm,
            SENTENCE,
            [h for h, _ in previous.top(args.top)],
            args.out / "previous_token_heads.html",
        ),
    ]
    induction.plot(args.out / "induction_scores.png")
    previous.plot(args.out / "previous_token_scores.png")
    induction.save(args.out / "induction_scores.json")
    for view in views:
        print(f"wrote {view} ({view.stat().st_size / 1e6:.1f} MB, opens offline)")


if __name__ == "__main__":
    main()

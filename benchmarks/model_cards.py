"""The bundled models' cards: quantisation and instruct/base, as each GGUF file's metadata says.

Reads only the files' metadata (no weights are dequantised) and checks it against
``lmsci_mi.loading.MODEL_CARDS``, the cards the library declares; a disagreement is an error, so the
file never says more than the weights do. Every page that sets a measured figure beside a paper's
reads its "4-bit quantised model (..., dequantised to float32), instruct|base" from here.

    PYTHONPATH=. python benchmarks/model_cards.py          # writes docs/data/model_cards.json
"""

from __future__ import annotations

import dataclasses
import sys

import harness

from lmsci_mi.loading import BUNDLED_MODELS, MODEL_CARDS, bundled_gguf_file, read_model_card


def main() -> int:
    run = harness.start(__doc__, __file__, threads=1)
    models = {}
    for name in BUNDLED_MODELS:
        path = bundled_gguf_file(name)
        read = read_model_card(path)
        if read != MODEL_CARDS[name]:
            raise SystemExit(f"{name}: the file's metadata says {read}, MODEL_CARDS says {MODEL_CARDS[name]}")
        models[name] = {"file": path.name, **dataclasses.asdict(read), "framing": read.framing}
    run.write({
        "source": "GGUF metadata: general.file_type, general.name, general.finetune, "
                  "tokenizer.chat_template, <arch>.block_count, <arch>.attention.head_count",
        "models": models,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())

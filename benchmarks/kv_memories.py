"""FFN key-value memories on SmolLM2 and Gemma 3 (Geva et al. 2021, 2022): the key-value agreement
curve, three value vectors whose top tokens form a recognisable set, and the Eiffel fact's sub-updates.

    python benchmarks/kv_memories.py --model smollm2-135m --part agreement --layers 0-9
    python benchmarks/kv_memories.py --model smollm2-135m --part values --layers 0-29
    python benchmarks/kv_memories.py --model smollm2-135m --part eiffel
    python benchmarks/kv_memories.py --write        # gather the pieces into docs/data/kv_memories.json

Every piece caches its per-layer results under out/kv_memories/<model>/ and skips layers already
there, so a long run is a series of short ones. Models load with fold_ln=False, so the value
tables show both the normed projection (what the model applies) and the raw one.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from lmsci_mi import load_model
from lmsci_mi.knowledge import (
    AgreementConfig,
    SubUpdateConfig,
    TriggerConfig,
    ValueVectorConfig,
    key_value_agreement,
    neuron_label,
    sub_updates,
    trigger_examples,
    value_vectors,
)
from lmsci_mi.knowledge.values import decode_tokens, value_directions, vocab_projection
from lmsci_mi.model import LensModel

CACHE = Path("out/kv_memories")
OUT = Path("docs/data/kv_memories.json")
MODELS = ("smollm2-135m", "gemma3-270m")
EIFFEL = "The Eiffel Tower is located in the city of"

# Gemma 3 has a 262k vocabulary and 2048 neurons a layer: fewer tokens of text and fewer
# neurons scanned keep each piece within a few minutes on two CPU cores.
AGREEMENT = {
    "smollm2-135m": AgreementConfig(neurons_per_layer=128, n_triggers=5, top_k=10, n_tokens=32768),
    "gemma3-270m": AgreementConfig(neurons_per_layer=128, n_triggers=5, top_k=10, n_tokens=16384),
}
SCAN_NEURONS = {"smollm2-135m": 1536, "gemma3-270m": 256}  # neurons per layer searched for sets
SET_SIZE = 10
_VOCAB: dict[str, list[str]] = {}


def layer_range(text: str, n_layers: int) -> list[int]:
    if not text:
        return list(range(n_layers))
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def cached(model: str, name: str) -> Path:
    return CACHE / model / f"{name}.json"


def run_agreement(lm: LensModel, layers: list[int]) -> None:
    todo = [layer for layer in layers if not cached(lm.name, f"agreement_L{layer}").exists()]
    if not todo:
        return
    start = time.perf_counter()
    result = key_value_agreement(
        lm, config=AGREEMENT[lm.name].replace(layers=tuple(todo), progress=True)
    )
    seconds = (time.perf_counter() - start) / len(todo)
    print(result.summary())
    for i, layer in enumerate(todo):
        row = {
            "layer": layer,
            "agreement": float(result.values[0, i]),
            "agreement_se": float(result.stderr[0, i]),
            "shuffled": float(result.values[1, i]),
            "shuffled_se": float(result.stderr[1, i]),
            "n_pairs": int(result.n_pairs[i]),
            "seconds": seconds,
            "source": result.meta.data_source,
        }
        path = cached(lm.name, f"agreement_L{layer}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(row))


def coherence(lm: LensModel, ids: list[int]) -> float:
    """Mean pairwise cosine of the tokens' centred unembedding columns, over tokens that are distinct
    alphabetic words (so " city", "City", "cities" count once and code fragments not at all); 0
    when fewer than 7 of the ids are such words."""
    if lm.name not in _VOCAB:  # decoding once is ~100x faster than per set
        _VOCAB[lm.name] = decode_tokens(lm, range(lm.cfg.d_vocab))
    words: dict[str, int] = {}
    for token_id in ids:
        text = _VOCAB[lm.name][token_id]
        word = text.strip().lower()
        if len(word) >= 3 and word.isalpha() and word[:4] not in {w[:4] for w in words}:
            words[word] = token_id
    if len(words) < 7:
        return 0.0
    # Centred: unembedding columns share a large common direction (anisotropy), which would make
    # every set look coherent.
    unembed = lm.model.W_U.detach().float()
    columns = (unembed[:, list(words.values())] - unembed.mean(1, keepdim=True)).T
    columns = torch.nn.functional.normalize(columns, dim=-1)
    sims = columns @ columns.T
    n = sims.shape[0]
    return float((sims.sum() - n) / (n * (n - 1)))


def run_values(lm: LensModel, layers: list[int]) -> None:
    """Per layer, the most coherent value vectors (top tokens of the normed projection)."""
    for layer in layers:
        path = cached(lm.name, f"values_L{layer}")
        if path.exists():
            continue
        start = time.perf_counter()
        d_mlp = int(lm.cfg.d_mlp or 0)
        generator = torch.Generator().manual_seed(layer)
        neurons = sorted(
            torch.randperm(d_mlp, generator=generator)[: SCAN_NEURONS[lm.name]].tolist()
        )
        rows = []
        for begin in range(0, len(neurons), 128):
            chunk = neurons[begin : begin + 128]
            logits = vocab_projection(lm, value_directions(lm, layer, chunk))
            for side, largest in (("top", True), ("bottom", False)):
                ids = logits.topk(SET_SIZE, dim=-1, largest=largest).indices.tolist()
                rows += [
                    (coherence(lm, row), neuron, side)
                    for neuron, row in zip(chunk, ids, strict=True)
                ]
        rows.sort(reverse=True)
        best = [{"neuron": n, "side": s, "coherence": c} for c, n, s in rows[:5]]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                {
                    "layer": layer,
                    "best": best,
                    "scanned": len(neurons),
                    "seconds": time.perf_counter() - start,
                }
            )
        )
        print(
            f"L{layer}: "
            + ", ".join(f"N{b['neuron']}/{b['side']} {b['coherence']:.3f}" for b in best)
        )


def value_table(lm: LensModel) -> list[dict]:
    """The three most coherent sets from three different layers, with both projections and the
    neuron's top trigger examples."""
    found = [json.loads(p.read_text()) for p in sorted((CACHE / lm.name).glob("values_L*.json"))]
    candidates = sorted(
        ((b["coherence"], f["layer"], b["neuron"], b["side"]) for f in found for b in f["best"]),
        reverse=True,
    )
    chosen, used = [], set()
    for score, layer, neuron, side in candidates:
        if layer not in used and len(chosen) < 3:
            chosen.append((score, layer, neuron, side))
            used.add(layer)
    table = []
    for score, layer, neuron, side in chosen:
        vv = value_vectors(lm, layer, neuron, ValueVectorConfig(top_k=SET_SIZE))
        ex = trigger_examples(
            lm,
            layer,
            neuron,
            config=TriggerConfig(
                n_examples=5, n_tokens=16384, sign="negative" if side == "bottom" else "positive"
            ),
        )
        table.append(
            {
                "neuron": neuron_label(layer, neuron),
                "layer": layer,
                "index": neuron,
                "side": side,
                "coherence": score,
                "normed_top": vv.top_tokens(neuron, "top", "normed"),
                "normed_bottom": vv.top_tokens(neuron, "bottom", "normed"),
                "raw_top": vv.top_tokens(neuron, "top", "raw"),
                "raw_bottom": vv.top_tokens(neuron, "bottom", "raw"),
                "triggers": [
                    {
                        "coefficient": float(ex.values[0, r]),
                        "context": ex.contexts[r],
                        "next": ex.next_tokens[r],
                    }
                    for r in range(5)
                ],
            }
        )
    return table


def run_eiffel(lm: LensModel) -> None:
    path = cached(lm.name, "eiffel")
    if path.exists():
        return
    start = time.perf_counter()
    result = sub_updates(
        lm, EIFFEL, SubUpdateConfig(target=" Paris" if "smollm2" in lm.name else None)
    )
    print(result.summary())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "prompt": EIFFEL,
                "target": result.target,
                "logit": result.logit,
                "mlp_total": float(result.mlp_total.sum()),
                "top_k": result.top_k,
                "top_share": result.top_share,
                "mass_share": result.mass_share(),
                "mlp_total_by_layer": result.mlp_total.tolist(),
                "raise": [list(r) for r in result.top()],
                "lower": [list(r) for r in result.top(lower=True)],
                "seconds": time.perf_counter() - start,
            }
        )
    )


def write() -> None:
    data: dict = {"command": "python benchmarks/kv_memories.py (see its docstring)", "models": {}}
    for model in MODELS:
        folder = CACHE / model
        if not folder.exists():
            continue
        rows = sorted(
            (json.loads(p.read_text()) for p in folder.glob("agreement_L*.json")),
            key=lambda r: r["layer"],
        )
        entry: dict = {"agreement": rows, "agreement_config": AGREEMENT[model].params()}
        if (folder / "value_table.json").exists():
            entry["value_table"] = json.loads((folder / "value_table.json").read_text())
        if (folder / "eiffel.json").exists():
            entry["eiffel_subupdates"] = json.loads((folder / "eiffel.json").read_text())
        data["models"][model] = entry
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(data, indent=1, ensure_ascii=False))
    print(f"wrote {OUT}")
    print(markdown(data))


def markdown(data: dict) -> str:
    """The tables of docs/knowledge.md, from the data file."""
    out = []
    for model, entry in data["models"].items():
        out += [
            f"\n{model}: agreement (± binomial s.e.)\n",
            "| layer | agreement | shuffled | pairs |",
            "|---|---|---|---|",
        ]
        out += [
            f"| {r['layer']} | {r['agreement']:.3f} ± {r['agreement_se']:.3f} | "
            f"{r['shuffled']:.3f} ± {r['shuffled_se']:.3f} | {r['n_pairs']} |"
            for r in entry["agreement"]
        ]
        for row in entry.get("value_table", []):
            side = row["side"]
            out.append(
                f"\n{model} {row['neuron']} ({side} side, coherence {row['coherence']:.2f}): "
                f"normed {row[f'normed_{side}']}; raw {row[f'raw_{side}']}"
            )
            out += [
                f"    {t['coefficient']:+.2f} {t['context']!r} -> {t['next']!r}"
                for t in row["triggers"]
            ]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", choices=MODELS, default="smollm2-135m")
    parser.add_argument(
        "--part",
        choices=("agreement", "values", "table", "eiffel", "rest"),
        default=None,
        help="rest: values, table and eiffel in one run",
    )
    parser.add_argument("--layers", default="", help="a layer range, e.g. 0-9 (default: all)")
    parser.add_argument("--write", action="store_true", help="gather the cache into docs/data")
    args = parser.parse_args()
    if args.write:
        write()
        return
    lm = load_model(args.model, fold_ln=False)
    layers = layer_range(args.layers, lm.cfg.n_layers)
    if args.part == "agreement":
        run_agreement(lm, layers)
    if args.part in ("values", "rest"):
        run_values(lm, layers)
    if args.part in ("table", "rest"):
        table = value_table(lm)
        cached(lm.name, "value_table").write_text(json.dumps(table, ensure_ascii=False))
        for row in table:
            print(
                row["neuron"], row["side"], f"{row['coherence']:.3f}", row[f"normed_{row['side']}"]
            )
    if args.part in ("eiffel", "rest"):
        run_eiffel(lm)


if __name__ == "__main__":
    main()

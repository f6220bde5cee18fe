"""FFN key-value memories on SmolLM2 and Gemma 3 (Geva et al. 2021, 2022): the key-value agreement
curve, three value vectors whose top tokens form a recognisable set, and the Eiffel fact's sub-updates.

    python benchmarks/kv_memories.py --model smollm2-135m --part agreement --layers 0-9
    python benchmarks/kv_memories.py --model smollm2-135m --part values --layers 0-29
    python benchmarks/kv_memories.py --model smollm2-135m --part eiffel
    python benchmarks/kv_memories.py --write        # gather the pieces into docs/data/kv_memories.json
    python benchmarks/kv_memories.py --quick --model toy-2l --part agreement   # a check (then rest,
    python benchmarks/kv_memories.py --quick --model toy-2l --part rest        #  then --write)

Every piece caches its per-layer results in the harness's per-item cache (one folder per model)
and skips layers already there, so a long run is a series of short ones. Models load with
fold_ln=False, so the value tables show both the normed projection (what the model applies) and the
raw one. --quick scans 16 neurons a layer on 2,048 tokens, and --write then gathers --model only.
"""

from __future__ import annotations

import argparse
import time

import harness
import torch
from doc_tables.schemas.knowledge import (
    AgreementLayer,
    EiffelSubUpdates,
    KVMemoriesData,
    KVModel,
    Trigger,
    ValueVectorRow,
)

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
QUICK = {"neurons_per_layer": 16, "n_tokens": 2048, "scan": 32}
_VOCAB: dict[str, list[str]] = {}


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2-135m", help=f"{' or '.join(MODELS)} (or a toy, --quick)")
    parser.add_argument("--part", choices=("agreement", "values", "table", "eiffel", "rest"), default=None,
                        help="rest: values, table and eiffel in one run")
    parser.add_argument("--layers", default="", help="a layer range, e.g. 0-9 (default: all)")
    parser.add_argument("--write", action="store_true", help="gather the cached pieces into --out")


def layer_range(text: str, n_layers: int) -> list[int]:
    if not text:
        return list(range(n_layers))
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def agreement_config(model: str, quick: bool) -> AgreementConfig:
    """The model's agreement settings (a toy gets Gemma 3's); --quick scans fewer neurons on
    less text."""
    config = AGREEMENT.get(model, AGREEMENT["gemma3-270m"])
    return config.replace(neurons_per_layer=QUICK["neurons_per_layer"], n_tokens=QUICK["n_tokens"]) if quick else config


def model_cache(run: harness.Run, model: str) -> harness.ItemCache:
    """The model's pieces: every item names its part and layer."""
    return run.cache({"model": model, "quick": run.quick})


def run_agreement(run: harness.Run, lm: LensModel, cache: harness.ItemCache, layers: list[int]) -> None:
    """The agreement of every layer not cached yet, in one run over the text, cached per layer."""
    todo = [layer for layer in layers if f"agreement-L{layer}" not in cache]
    if not todo:
        return
    start = time.perf_counter()
    config = agreement_config(run.args.model, run.quick)
    result = key_value_agreement(lm, config=config.replace(layers=tuple(todo), progress=True))
    seconds = (time.perf_counter() - start) / len(todo)
    print(result.summary())
    for i, layer in enumerate(todo):
        harness.write_json(cache.path(f"agreement-L{layer}"), AgreementLayer(
            layer=layer, agreement=float(result.values[0, i]), agreement_se=float(result.stderr[0, i]),
            shuffled=float(result.values[1, i]), shuffled_se=float(result.stderr[1, i]),
            n_pairs=int(result.n_pairs[i]), seconds=seconds, source=result.meta.data_source,
        ))


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


def most_coherent(lm: LensModel, layer: int, neurons: list[int]) -> list[tuple[float, int, str]]:
    """(coherence, neuron, side) of both sides of every neuron's value vector, best first: the
    top tokens of its normed projection (side "top") and its bottom tokens ("bottom")."""
    rows = []
    for begin in range(0, len(neurons), 128):
        chunk = neurons[begin : begin + 128]
        logits = vocab_projection(lm, value_directions(lm, layer, chunk))
        for side, largest in (("top", True), ("bottom", False)):
            ids = logits.topk(SET_SIZE, dim=-1, largest=largest).indices.tolist()
            rows += [(coherence(lm, row), neuron, side) for neuron, row in zip(chunk, ids, strict=True)]
    return sorted(rows, reverse=True)


def run_values(run: harness.Run, lm: LensModel, cache: harness.ItemCache, layers: list[int]) -> None:
    """Per layer, the most coherent value vectors among a seeded draw of its neurons."""
    scan = QUICK["scan"] if run.quick else SCAN_NEURONS.get(run.args.model, 256)
    for layer in layers:
        if f"values-L{layer}" in cache:
            continue
        start = time.perf_counter()
        generator = torch.Generator().manual_seed(layer)
        neurons = sorted(torch.randperm(int(lm.cfg.d_mlp or 0), generator=generator)[:scan].tolist())
        best = [{"neuron": n, "side": s, "coherence": c} for c, n, s in most_coherent(lm, layer, neurons)[:5]]
        harness.write_json(cache.path(f"values-L{layer}"), {
            "layer": layer, "best": best, "scanned": len(neurons), "seconds": time.perf_counter() - start})
        print(f"L{layer}: " + ", ".join(f"N{b['neuron']}/{b['side']} {b['coherence']:.3f}" for b in best))


def value_row(lm: LensModel, layer: int, neuron: int, side: str, score: float, quick: bool) -> ValueVectorRow:
    """One value vector's both projections (top and bottom tokens) and its top trigger examples."""
    vv = value_vectors(lm, layer, neuron, ValueVectorConfig(top_k=SET_SIZE))
    ex = trigger_examples(lm, layer, neuron, config=TriggerConfig(
        n_examples=5, n_tokens=QUICK["n_tokens"] if quick else 16384,
        sign="negative" if side == "bottom" else "positive"))
    return ValueVectorRow(
        neuron=neuron_label(layer, neuron), layer=layer, index=neuron, side=side, coherence=score,
        normed_top=vv.top_tokens(neuron, "top", "normed"), normed_bottom=vv.top_tokens(neuron, "bottom", "normed"),
        raw_top=vv.top_tokens(neuron, "top", "raw"), raw_bottom=vv.top_tokens(neuron, "bottom", "raw"),
        triggers=[Trigger(coefficient=float(ex.values[0, r]), context=ex.contexts[r], next=ex.next_tokens[r])
                  for r in range(len(ex.contexts))],
    )


def value_table(run: harness.Run, lm: LensModel, cache: harness.ItemCache) -> list[ValueVectorRow]:
    """The three most coherent sets from three different layers, with both projections and the
    neuron's top trigger examples."""
    found = [harness.read_json(p) for p in sorted(cache.folder.glob("values-L*.json"))]
    candidates = sorted(
        ((b["coherence"], f["layer"], b["neuron"], b["side"]) for f in found for b in f["best"]), reverse=True)
    chosen, used = [], set()
    for score, layer, neuron, side in candidates:
        if layer not in used and len(chosen) < 3:
            chosen.append((score, layer, neuron, side))
            used.add(layer)
    return [value_row(lm, layer, neuron, side, score, run.quick) for score, layer, neuron, side in chosen]


def eiffel(lm: LensModel, model: str) -> EiffelSubUpdates:
    """The Eiffel fact's sub-updates (SmolLM2's target " Paris"; another model's own top token)."""
    start = time.perf_counter()
    result = sub_updates(lm, EIFFEL, SubUpdateConfig(target=" Paris" if "smollm2" in model else None))
    print(result.summary())
    return EiffelSubUpdates({
        "prompt": EIFFEL, "target": result.target, "logit": result.logit,
        "mlp_total": float(result.mlp_total.sum()), "top_k": result.top_k, "top_share": result.top_share,
        "mass_share": result.mass_share(), "mlp_total_by_layer": result.mlp_total.tolist(),
        "raise": [list(r) for r in result.top()], "lower": [list(r) for r in result.top(lower=True)],
        "seconds": time.perf_counter() - start,
    })


def gathered(run: harness.Run, model: str) -> KVModel | None:
    """Everything cached for ``model``, or None when nothing is."""
    cache = model_cache(run, model)
    rows = sorted((harness.read_json(p) for p in cache.folder.glob("agreement-L*.json")), key=lambda r: r["layer"])
    if not rows:
        return None
    entry = KVModel(agreement=rows, agreement_config=agreement_config(model, run.quick).params())
    if "value-table" in cache:
        entry["value_table"] = harness.read_json(cache.path("value-table"))
    if "eiffel" in cache:
        entry["eiffel_subupdates"] = harness.read_json(cache.path("eiffel"))
    return entry


def write(run: harness.Run) -> None:
    """The data file from every model's cached pieces (--quick: --model's)."""
    models = {}
    for model in [run.args.model] if run.quick else MODELS:
        if (entry := gathered(run, model)) is not None:
            models[model] = entry
    run.write(KVMemoriesData(models=models), ensure_ascii=False)
    for model, entry in models.items():
        print(f"{model}: agreement at {len(entry['agreement'])} layers, {len(entry.get('value_table', []))} "
              f"value vectors, Eiffel sub-updates {'yes' if 'eiffel_subupdates' in entry else 'no'}")


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags)
    args = run.args
    if args.write:
        write(run)
        return
    if args.part is None:
        raise SystemExit("give --part or --write")
    with run.timed("load"):
        lm = load_model(args.model, fold_ln=False)
    cache = model_cache(run, args.model)
    layers = layer_range(args.layers, lm.cfg.n_layers)
    with run.timed(args.part):
        if args.part == "agreement":
            run_agreement(run, lm, cache, layers)
        if args.part in ("values", "rest"):
            run_values(run, lm, cache, layers)
        if args.part in ("table", "rest"):
            table = value_table(run, lm, cache)
            harness.write_json(cache.path("value-table"), table)
            for row in table:
                print(row["neuron"], row["side"], f"{row['coherence']:.3f}", row[f"normed_{row['side']}"])
        if args.part in ("eiffel", "rest") and "eiffel" not in cache:
            harness.write_json(cache.path("eiffel"), eiffel(lm, args.model))


if __name__ == "__main__":
    main()

"""Tuned lens (Belrose et al.'s KL training) against Din et al.'s least-squares map and the logit
lens: held-out KL(final ‖ lens) and calibration per layer, on text of kinds no lens trained on.

Trains both lenses on the even-numbered stdlib docstrings (the default TunedLensConfig, and the
same with method="least_squares"), both at resid_pre (the stream entering each block, layer 0 the
embedding), cached under the lmsci-mi cache by the weights fingerprint and the config; the KL
training writes a checkpoint every step, so a killed `--piece train` resumes where it stopped.
Then, on the shipped fact prompts, IOI prompts and steering sentences, per text and layer: mean
KL(final ‖ lens) over the text's tokens (sink left out) and the calibration error, mean
|p_lens(model's top-1) − p_model(top-1)|; means over texts with percentile bootstrap intervals
over texts, and paired intervals of the tuned lens minus each other lens. Every set is one
resumable piece (the harness's per-item cache); `report` adds the Eiffel prompt and writes
docs/data/tuned_lens.json.

    PYTHONPATH=. flock /work/model.lock .venv/bin/python benchmarks/tuned_lens.py --piece train --threads 2
    PYTHONPATH=. flock /work/model.lock .venv/bin/python benchmarks/tuned_lens.py --piece all --threads 2
    PYTHONPATH=. python benchmarks/tuned_lens.py --quick --model toy-2l      # a check (4 texts a set)

``--piece all`` runs whatever is missing (training included), then the report.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import harness
import torch
from doc_tables.knowledge import tuned_lens_eiffel, tuned_lens_kl, tuned_lens_paired
from doc_tables.schemas.knowledge import LensCurve, LensEiffel, LensSet, LensTraining, TunedLensData

from lmsci_mi import LensModel, load_model
from lmsci_mi.data import load_facts
from lmsci_mi.data.ioi import ioi_dataset
from lmsci_mi.data.steering_texts import steering_texts
from lmsci_mi.lenses import LogitLensConfig, TunedLens, TunedLensConfig, logit_lens, tuned_lens
from lmsci_mi.lenses.logit_lens import lens_readout
from lmsci_mi.lenses.tuned_lens import tuned_lens_for, tuned_lens_path
from lmsci_mi.sites import hook_name
from lmsci_mi.stats import bootstrap_interval, paired_bootstrap_interval

SETS = ("facts", "ioi", "steering")
SIZES = {"facts": 55, "ioi": 40, "steering": 40}
"""Texts per set: every other shipped fact prompt, 40 IOI prompts (seed 0, every template), every
eighth steering sentence of both attributes; each set about 500 tokens."""
SOURCES = {
    "facts": "lmsci_mi/data/facts.json, every other rewrite prompt",
    "ioi": "lmsci_mi.data.ioi.ioi_dataset(lm, 40, seed=0), the clean prompts",
    "steering": "lmsci_mi.data.steering_texts (sentiment and topic), every eighth sentence",
}
QUICK_SIZE = 4
LENSES = ("logit", "least_squares", "tuned")
SITE = "resid_pre"
TUNED = TunedLensConfig()
LEAST_SQUARES = TunedLensConfig(method="least_squares")
EIFFEL = "The Eiffel Tower is located in the city of"
BATCH = 8


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--piece", choices=["train", *SETS, "report", "all"], default="all")
    parser.add_argument("--model", default="smollm2-135m")


def configs(quick: bool) -> dict[str, TunedLensConfig]:
    """The two trained lenses (a --quick run trains small ones)."""
    if not quick:
        return {"least_squares": LEAST_SQUARES, "tuned": TUNED}
    small = {"n_tokens": 256, "steps": 3, "tokens_per_step": 64, "seq_len": 32}
    return {"least_squares": dataclasses.replace(LEAST_SQUARES, **small),
            "tuned": dataclasses.replace(TUNED, **small)}


def texts(lm: LensModel, name: str, n: int) -> list[str]:
    """The first ``n`` texts of a held-out set."""
    if name == "facts":
        return [fact.rewrite_prompt for fact in load_facts("facts")][::2][:n]
    if name == "ioi":
        return list(ioi_dataset(lm, 40, seed=0).prompts[:n])
    return list(steering_texts(["sentiment", "topic"]).texts[::8][:n])


@torch.no_grad()
def per_text(lm: LensModel, chosen: list[str], lenses: dict[str, TunedLens | None]
             ) -> tuple[dict[str, dict[str, torch.Tensor]], int]:
    """``{lens: {"kl" | "calibration": [text, layer]}}`` (each text's mean over its tokens, the
    sink left out) and the number of tokens."""
    n_layers = lm.cfg.n_layers
    names = [hook_name(SITE, layer) for layer in range(n_layers)]
    out: dict[str, dict[str, list[torch.Tensor]]] = {k: {"kl": [], "calibration": []} for k in lenses}
    n_tokens = 0
    for start in range(0, len(chosen), BATCH):
        padded = lm.encode_batch(chosen[start:start + BATCH])
        with lm.hooks.capture(names) as cap:
            final = lm(padded.tokens).float()
        top = final.argmax(-1)
        p_model = final.softmax(-1).gather(-1, top[..., None])[..., 0]
        mask = padded.mask.clone()
        mask[:, 0] = False  # the sink
        weight = (mask / mask.sum(1, keepdim=True)).float()[:, None, :]  # [text, 1, pos]
        n_tokens += int(mask.sum())
        for name, lens in lenses.items():
            translate = None if lens is None else lens.translate
            stats = lens_readout(lm, [cap[n] for n in names], final, top, translate)
            calibration = (stats.prob - p_model[:, None]).abs()
            out[name]["kl"].append((stats.kl.nan_to_num(0) * weight).sum(-1).cpu())
            out[name]["calibration"].append((calibration.nan_to_num(0) * weight).sum(-1).cpu())
    return {k: {m: torch.cat(v).double() for m, v in d.items()} for k, d in out.items()}, n_tokens


def _curve(values: dict[str, torch.Tensor], other: dict[str, torch.Tensor] | None = None
           ) -> LensCurve:
    """Mean over texts per layer, with a bootstrap interval (paired with ``other`` if given)."""
    curve: dict[str, list] = {}
    for metric in ("kl", "calibration"):
        rows = []
        for layer in range(values[metric].shape[1]):
            a = values[metric][:, layer]
            rows.append(bootstrap_interval(a) if other is None
                        else paired_bootstrap_interval(a, other[metric][:, layer]))
        curve[metric] = [r.estimate for r in rows]
        curve[f"{metric}_ci"] = [r.as_list() for r in rows]
    return LensCurve(**curve)


def lens_set(lm: LensModel, name: str, n: int, trained: dict[str, TunedLens]) -> LensSet:
    """The three lenses' KL and calibration per layer on one held-out set."""
    start = time.perf_counter()
    chosen = sorted(texts(lm, name, n), key=len)  # a batch's rows pad little
    values, n_tokens = per_text(lm, chosen, {"logit": None, **trained})
    return LensSet(
        set=name, source=SOURCES[name], n_texts=len(chosen), n_tokens=n_tokens,
        lenses={k: _curve(values[k]) for k in LENSES},
        tuned_minus={k: _curve(values["tuned"], values[k]) for k in ("least_squares", "logit")},
        seconds=time.perf_counter() - start,
    )


def eiffel(lm: LensModel, trained: dict[str, TunedLens]) -> LensEiffel:
    """p(' Paris') and its rank at the last token, per layer, under each lens, and the model's."""
    out: dict[str, dict] = {"prob": {}, "rank": {}, "top": {}}
    for name in LENSES:
        result = (logit_lens(lm, EIFFEL, " Paris", config=LogitLensConfig(site=SITE))
                  if name == "logit" else tuned_lens(lm, EIFFEL, " Paris", lens=trained[name]))
        last = len(result.tokens[0]) - 1
        out["prob"][name] = result.values[0, :, last].tolist()
        out["rank"][name] = result.rank[0, :, last].tolist()
        out["top"][name] = [row[last] for row in result.top_text[0]]
    final = logit_lens(lm, EIFFEL, " Paris", config=LogitLensConfig(site="resid_post"))
    model_prob = float(final.values[0, -1, len(final.tokens[0]) - 1])
    return LensEiffel(prompt=EIFFEL, answer=" Paris", model_prob=model_prob, **out)


def training(lens: TunedLens) -> LensTraining:
    c = lens.config
    tokens = c.n_tokens if c.method == "least_squares" else c.steps * c.tokens_per_step
    return LensTraining(method=c.method, config=c.params(), train_seconds=lens.train_seconds,
                        train_tokens=tokens, losses=list(lens.losses))


def below_zero(rows: list[LensSet], metric: str) -> dict[str, list[int]]:
    """Per set, the layers whose paired interval (tuned minus least squares) lies below 0."""
    return {r["set"]: [layer for layer, (_, high) in
                       enumerate(r["tuned_minus"]["least_squares"][f"{metric}_ci"]) if high < 0]
            for r in rows}


def report(run: harness.Run, lm: LensModel, trained: dict[str, TunedLens], rows: list[LensSet]
           ) -> None:
    data = TunedLensData(
        model=run.args.model, site=SITE,
        train_text="stdlib docstrings, even-numbered documents (lmsci_mi.data.text_corpus)",
        training={k: training(v) for k, v in trained.items()},
        metric="KL(final || lens) in nats per token at resid_pre of each layer (layer 0: the "
               "embedding); the sink excluded; mean over texts of each text's mean over its "
               "tokens; 95 % percentile bootstrap over texts (1,000 resamples, seed 0)",
        calibration="mean over tokens of |p_lens(model's top-1) - p_model(top-1)|, averaged and "
                    "bootstrapped as the KL",
        sets=rows, eiffel=eiffel(lm, trained),
        tuned_below_least_squares=below_zero(rows, "kl"),
        calibration_below_least_squares=below_zero(rows, "calibration"),
    )
    run.write(data)
    for name, lens in trained.items():
        print(f"{name}: trained in {lens.train_seconds:.0f} s ({training(lens)['train_tokens']} tokens)")
    print(tuned_lens_kl(data))
    print(tuned_lens_paired(data))
    print(tuned_lens_eiffel(data))
    print("tuned below least squares (KL, paired interval < 0):", data["tuned_below_least_squares"])
    print("calibration below least squares:", data["calibration_below_least_squares"])


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags)
    piece = run.args.piece
    torch.set_grad_enabled(False)
    with run.timed("load"):
        lm = load_model(run.args.model)
    trained = {}
    for name, config in configs(run.quick).items():
        with torch.enable_grad(), run.timed(f"train {name}"):
            trained[name] = tuned_lens_for(lm, config)
        print(f"{name} lens at {tuned_lens_path(lm, config)}: trained in "
              f"{trained[name].train_seconds:.1f} s")
    if piece == "train":
        return
    sizes = dict.fromkeys(SETS, QUICK_SIZE) if run.quick else SIZES
    # The sets depend on the lenses (their file names hold the weights and the configs).
    lens_files = {k: tuned_lens_path(lm, c).name for k, c in configs(run.quick).items()}
    cache = run.cache({"model": run.args.model, "lenses": lens_files, "sizes": sizes})
    rows = []
    for name in SETS if piece in ("report", "all") else [piece]:
        with run.timed(name):
            rows.append(cache.get(name, lambda name=name: lens_set(lm, name, sizes[name], trained)))
        print(f"{name}: {rows[-1]['n_tokens']} tokens in {rows[-1]['seconds']:.0f} s")
    if piece in ("report", "all"):
        report(run, lm, trained, rows)


if __name__ == "__main__":
    main()

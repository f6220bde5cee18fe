"""Representation reading (Zou et al. 2023 LAT) on a model: per contrast, the reading vector's
accuracy per layer against the difference of means, a logistic probe and random directions.

For each bundled contrast (sentiment: 100 pairs, truth: 200 pairs, lmsci_mi/data/contrasts.py)
it reads ``resid_post`` at every layer at the last token, fits on 50% of the pairs, chooses the
layer on 25% (dev) and reports the other 25% (test) with 95% bootstrap intervals over test pairs.
It writes docs/data/reading_<model>.json, docs/img/reading_<model>.png, and each result (with the
reading vectors, for steering) under out/reading/<model>/.

Cost: one batched forward pass per contrast, 600 prompts and about 19,700 tokens in all with
SmolLM2's tokenizer (6,100 sentiment + 13,600 truth; the templates' shared openings are computed
once per batch), plus 2 x 30 layers of small probe fits. About a minute on the project's CPU.
Each contrast is cached as it finishes, so a stopped run resumes.

    PYTHONPATH=. HF_HUB_OFFLINE=1 OMP_NUM_THREADS=2 flock /tmp/lmsci-cpu.lock \\
        python benchmarks/reading.py --model smollm2-135m
    PYTHONPATH=. python benchmarks/reading.py --quick --model toy-2l     # a check, under out/quick/
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import harness
from doc_tables.schemas.representations import ReadingContrast, ReadingData, ReadingMethod

from lmsci_mi import LensModel, load_model
from lmsci_mi.data.contrasts import CONTRASTS, contrast_pairs
from lmsci_mi.representations import (
    READING_METHODS,
    READING_SCORES,
    ReadingConfig,
    RepresentationReading,
    representation_reading,
)

METHOD = ("LAT (Zou et al. 2023 §3.1): PC1 of the fit pairs' activation differences, a random half of the "
          "pairs swapped first; every direction oriented so that positive prompts project higher on the fit split")
METRICS = ("pairwise: share of pairs whose positive prompt projects higher (ties half); unpaired: single-prompt "
           "accuracy with the threshold chosen on the fit split; ci95: 95% percentile bootstrap over test pairs; "
           "random: mean over n_random directions; the layer is chosen per method on dev pairwise accuracy (ties: "
           "dev unpaired, then the earlier layer)")
LEGEND = {
    "pca": "reading vector (PC1)",
    "diff_of_means": "difference of means",
    "probe": "logistic probe",
    "random": "random (mean of {n})",
}


def rounded(values: object) -> object:
    """Accuracies to 4 decimals (float32 noise such as 0.5600000023841858 says nothing)."""
    if isinstance(values, list):
        return [rounded(v) for v in values]
    return round(float(values), 4)


def contrast_entry(reading: RepresentationReading, seconds: float, n_tokens: int) -> ReadingContrast:
    """One contrast's numbers: per method and layer, fit/dev/test accuracies and the test
    intervals; each method at its dev-chosen layer."""
    layers = reading.axis_labels(3)
    methods = {}
    for m, method in enumerate(READING_METHODS):
        curves: dict[str, list] = {}
        for split in ("fit", "dev", "test"):
            for score in READING_SCORES:
                curves[f"{split}_{score}"] = rounded(
                    reading.accuracy(method, split, score).tolist()
                )
        for s, score in enumerate(READING_SCORES):
            curves[f"test_{score}_ci95"] = rounded(reading.intervals[m, s].tolist())
        column = reading.chosen[m]
        methods[method] = ReadingMethod(
            chosen_layer=layers[column],
            **{
                f"chosen_{key}": value[column]
                for key, value in curves.items()
                if key.startswith(("dev", "test"))
            },
            per_layer=curves,
        )
    return ReadingContrast(
        n_pairs=len(reading.fit_pairs) + len(reading.dev_pairs) + len(reading.test_pairs),
        n_fit=len(reading.fit_pairs),
        n_dev=len(reading.dev_pairs),
        n_test=len(reading.test_pairs),
        n_random=reading.n_random,
        source=reading.meta.data_source,
        layers=layers,
        explained_by_pc1=rounded(reading.explained.tolist()),
        methods=methods,
        forward_tokens=n_tokens,
        seconds=round(seconds, 1),
    )


def figure(readings: dict[str, RepresentationReading], model: str, path: Path) -> None:
    """One panel per contrast: test pairwise accuracy per layer, one line per method, the
    reading vector's 95% interval shaded and its dev-chosen layer marked."""
    from matplotlib.figure import Figure

    from lmsci_mi.viz.plots import save_figure

    fig = Figure(figsize=(6 * len(readings), 4))
    axes = fig.subplots(1, len(readings), squeeze=False)[0]
    styles = {"pca": "o-", "diff_of_means": "--", "probe": "--", "random": ":"}
    for ax, (name, reading) in zip(axes, readings.items(), strict=True):
        x = range(len(reading.axis_labels(3)))
        for method in READING_METHODS:
            label = LEGEND[method].format(n=reading.n_random)
            values = reading.accuracy(method, "test").numpy()
            ax.plot(x, values, styles[method], markersize=3, label=label)
        low, high = reading.intervals[0, 0, :, 0].numpy(), reading.intervals[0, 0, :, 1].numpy()
        ax.fill_between(x, low, high, alpha=0.2, label="PC1 95% bootstrap interval")
        ax.axvline(
            reading.chosen[0],
            color="black",
            linewidth=0.8,
            linestyle="-.",
            label=f"chosen on dev: layer {reading.chosen_layer()}",
        )
        ax.axhline(0.5, color="grey", linewidth=0.5)
        ax.set_ylim(0, 1.02)
        step = max(1, len(x) // 15)
        ax.set_xticks(list(x)[::step], reading.axis_labels(3)[::step])
        ax.set_xlabel(f"layer ({reading.site}, last token)")
        ax.set_ylabel("test pairwise accuracy")
        ax.set_title(f"{name}: {len(reading.test_pairs)} test pairs", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"Representation reading (LAT, Zou et al. 2023) — {model}", fontsize=11)
    fig.tight_layout()
    save_figure(fig, path)


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--contrasts", default=",".join(CONTRASTS))
    parser.add_argument("--img-dir", type=Path, default=Path("docs/img"), help="where the figure goes")
    parser.add_argument("--results", type=Path, default=Path("out/reading"),
                        help="where each result (with its reading vectors) is saved")
    parser.add_argument("--autocast", default=None, choices=("bfloat16", "float16"))


def data_file(args: argparse.Namespace) -> Path:
    return harness.DATA / f"reading_{args.model}.json"


def read_contrast(lm: LensModel, name: str, config: ReadingConfig,
                  cache: harness.ItemCache) -> tuple[RepresentationReading, ReadingContrast]:
    """One contrast's reading and its figures, each cached as it finishes."""
    pairs = contrast_pairs(name)
    n_tokens = sum(len(lm.encode(t)) for t in (*pairs.positive, *pairs.negative))
    began = time.perf_counter()
    reading = cache.result(name, lambda: representation_reading(lm, pairs, config=config))
    entry = cache.get(f"{name}-figures", lambda: contrast_entry(reading, time.perf_counter() - began, n_tokens))
    print(f"\n{reading.summary()}\n({len(pairs)} pairs, {n_tokens} tokens, {entry['seconds']:.1f} s)")
    return reading, entry


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags, out=data_file)
    args = run.args
    lm = load_model(args.model)
    config = ReadingConfig(autocast=args.autocast)
    cache = run.cache(exclude=["contrasts", "img_dir", "results"])
    readings: dict[str, RepresentationReading] = {}
    entries: dict[str, ReadingContrast] = {}
    for name in args.contrasts.split(","):
        readings[name], entries[name] = read_contrast(lm, name, config, cache)
        readings[name].save(args.results / args.model / f"{name}.json")
    run.write(ReadingData(model=args.model, method=METHOD, metrics=METRICS, config=config.params(),
                          contrasts=entries))
    image = (harness.QUICK if run.quick else args.img_dir) / f"reading_{args.model}.png"
    figure(readings, args.model, image)
    print(f"drew {image}")


if __name__ == "__main__":
    main()

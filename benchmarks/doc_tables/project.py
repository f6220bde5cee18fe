"""Renderers of README.md and docs/report.md: parity, the tour's timings and the test suite's."""

from __future__ import annotations

from . import MODEL_NAMES, MODEL_SHORT, markdown, table
from .schemas.project import LoadingData, ModelCardsData, ParityData, SuiteTimeData, TourData


def framing(cards: ModelCardsData, model: str = "smollm2-135m") -> str:
    """"4-bit quantised model (Q4_1 GGUF, dequantised to float32), instruct", from the card."""
    return cards["models"][model]["framing"]


@table("model_cards")
def model_cards(data: ModelCardsData) -> str:
    """benchmarks/model_cards.py: what the bundled models' weights are, from the GGUF metadata."""
    rows = []
    for name, card in data["models"].items():
        said = (f"`general.finetune` {card['finetune']}" if card["finetune"] else
                "no `general.finetune`" + ("" if card["variant"] == "instruct" else ", no chat template"))
        rows.append([f"{MODEL_NAMES.get(name, name)} (`{name}`)", f"`{card['file']}`", card["framing"],
                     f"{card['variant']} ({said})", f"{card['n_layers']} × {card['n_heads']}"])
    return markdown(["model", "GGUF file", "weights every measured figure here ran on", "instruct or base "
                     "(GGUF metadata)", "layers × query heads"], rows)


@table("parity")
def parity(data: dict[str, ParityData]) -> str:
    """benchmarks/parity.py: lmsci-mi against Hugging Face per model and precision."""
    rows = []
    for doc in data.values():
        for name, r in doc["comparisons"].items():
            rows.append([
                MODEL_SHORT.get(doc["model"], doc["model"]), name, f"{r['max_abs_logprob_diff']:.1e}",
                f"{r['mean_abs_logprob_diff']:.1e}", f"{100 * r['top1_agreement']:.1f} %",
                # float32's KL is float noise either side of 0 (-5e-9 on SmolLM2).
                "< 1e-7" if abs(r["mean_kl"]) < 1e-7 else f"{r['mean_kl']:.1e}",
                f"{doc['n_prompts']} / {r['positions']}",
            ])
    return markdown(
        ["model", "comparison", "largest abs Δ log p", "mean abs Δ log p", "top-1 agrees",
         "mean KL", "prompts / positions"],
        rows,
    )


@table("tour")
def tour(data: TourData) -> str:
    """benchmarks/tour.py: the tour's wall time, warm, --quick and from a fresh clone."""
    rows = []
    for run in data["runs"].values():
        rows.append([
            run["run"], f"{run['wall_s']:.0f} s", f"{run['steps_s']:.0f} s ({run['n_steps']} steps)",
            f"{run['before_steps_s']:.0f} s", f"{run['report_bytes'] / 1e6:.1f} MB", run["date"],
        ])
    return markdown(
        ["run (one each)", "wall", "of which steps", "before the first step", "report", "measured"],
        rows,
    )


@table("tour_steps")
def tour_steps(data: TourData) -> str:
    """benchmarks/tour.py: each step of the tour, its estimate and its measured seconds."""
    runs = data["runs"]

    def seconds(run: str, title: str) -> str:
        value = runs.get(run, {}).get("step_seconds", {}).get(title)
        return "not measured" if value is None else f"{value:.1f} s"

    rows = [
        [step["name"], "yes" if step["quick"] else "", f"{step['estimate_s']} s",
         seconds("warm", step["title"]), seconds("fresh", step["title"]), step["title"]]
        for step in data["steps"]
    ]
    return markdown(["step", "quick", "estimate", "warm", "fresh caches", "what it shows"], rows)


@table("test_suite")
def test_suite(data: SuiteTimeData) -> str:
    """benchmarks/suite_time.py: the README's test command, fast part and whole suite."""
    rows = []
    for run in data["runs"].values():
        counts = ", ".join(f"{n:,} {kind}" for kind, n in run["counts"].items())
        minutes = f" ({run['pytest_s'] / 60:.1f} min)" if run["pytest_s"] >= 600 else ""
        rows.append([run["run"], counts, f"{run['pytest_s']:.0f} s{minutes}", f"{run['wall_s']:.0f} s",
                     run["date"]])
    return markdown(["command", "tests", "pytest's time", "wall", "measured"], rows)


@table("loading")
def loading(data: LoadingData) -> str:
    """benchmarks/loading.py --write: load_model's first load into an empty cache and its cached
    load, each in a fresh process, fastest and slowest of the repeats."""
    def spread(values: list[float]) -> str:
        low, high = min(values), max(values)
        return f"{low:.2f} s" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}–{high:.2f} s"

    names = {"smollm2-135m": "SmolLM2-135M", "gemma3-270m": "Gemma 3 270M"}
    rows = [
        [f"`{model}` ({names.get(model, model)})", spread(run["cold_s"]), spread(run["cached_s"]),
         f"{min(run['cold_s']) / min(run['cached_s']):.0f}×"]
        for model, run in data["models"].items()
    ]
    return markdown(
        ["model", f"first load, empty cache ({data['repeats']} runs)", "cached load", "best over best"],
        rows,
    )

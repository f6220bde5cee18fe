"""Renderers of docs/probes.md and docs/sae.md: probe accuracy and the SAE's held-out statistics."""

from __future__ import annotations

from . import bold, markdown, minus, num, table


def _by_selectivity(data: dict) -> list[tuple[str, dict]]:
    """The probing tasks, most selective first (the order the page discusses them in)."""
    return sorted(data["tasks"].items(), key=lambda kv: -kv[1]["selectivity"])


@table("probes")
def probes(data: dict) -> str:
    """benchmarks/probes.py --skip-speed: each probing task's peak layer, accuracy and selectivity."""
    rows = []
    for name, t in _by_selectivity(data):
        selective = t["selectivity"] > 0
        rows.append([
            f"`{name}`", str(t["peak_layer"]),
            f"{bold(num(t['accuracy'], 3), selective)} [{num(t['ci95'][0], 3)}, {num(t['ci95'][1], 3)}]",
            num(t["control"], 3), bold(minus(f"{t['selectivity']:+.3f}"), selective), num(t["majority"], 3),
            f"{t['n_train']}/{t['n_val']}/{t['n_test']}", f"{t['seconds']:.0f}",
        ])
    return markdown(
        ["task", "peak layer", "test accuracy [95% CI]", "control accuracy", "selectivity",
         "majority class", "train/val/test", "seconds (one torch thread, not quiet)" if data["threads"] == 1 else "seconds (not quiet)"],
        rows,
    )


@table("probes_layers")
def probes_layers(data: dict) -> str:
    """benchmarks/probes.py --skip-speed: accuracy per layer and the control task's, as text."""
    lines = ["```"]
    for name, t in _by_selectivity(data):
        lines.append(f"{name:<15} " + " ".join(f"{v:.2f}" for v in t["per_layer"]))
        lines.append(f"{'  control':<15} " + " ".join(f"{v:.2f}" for v in t["control_per_layer"]))
    lines.append("```")
    return "\n".join(lines)


# What each task reads, where its labels come from and how it is split: the task's definition in
# lmsci_mi.probes and lmsci_mi.data.probing, not a measurement. Its example counts come from the data.
PROBE_TASK_WORDS = {
    "country": (
        "`country` (semantic)", "a city's country, at the city's last token",
        "`lmsci_mi/data/probing/cities.json`: 264 cities of 12 countries (22 each), written by the "
        "project from general knowledge; four neutral sentence templates that never name a country",
        "by city: every sentence about a city is in one split, so test cities are unseen",
    ),
    "subject_number": (
        "`subject_number` (syntactic)",
        "the grammatical number of the subject of \"The *keys* near the *cabinet*\", read at the last "
        "token (the attractor noun)",
        "`lmsci_mi/data/probing/nouns.json`: 110 nouns with their plurals and 10 prepositions, written "
        "by the project; subject, attractor and both numbers drawn independently (seed 0)",
        "random",
    ),
    "bracket_depth": (
        "`bracket_depth` (syntactic)",
        "how many brackets are open at an identifier of a generated code expression",
        "counted by the generator `lmsci_mi.data.probing.bracket_depth_dataset` (seed 0), depth 1–4",
        "random",
    ),
}


@table("probes_tasks")
def probes_tasks(data: dict) -> str:
    """benchmarks/probes.py --skip-speed: each task's definition and its examples per split."""
    rows = []
    tasks = data["tasks"]
    for name in [n for n in PROBE_TASK_WORDS if n in tasks] + [n for n in tasks if n not in PROBE_TASK_WORDS]:
        t = tasks[name]
        label, read, labels, split = PROBE_TASK_WORDS.get(name, (f"`{name}`", "", "", ""))
        n = t["n_train"] + t["n_val"] + t["n_test"]
        rows.append([label, read, labels, f"{n:,} ({t['n_train']:,} / {t['n_val']:,} / {t['n_test']:,})",
                     split])
    return markdown(["task", "what is read, where", "labels from", "examples (train / val / test)",
                     "split"], rows)


@table("probes_speed")
def probes_speed(data: dict) -> str:
    """benchmarks/probes.py --skip-tasks: collection and fit seconds, float32 and bfloat16."""
    runs = data["speed"]["runs"]
    labels = {"float32": "float32 (default)", "bfloat16": '`autocast="bfloat16"` (`--autocast bfloat16`)'}
    fastest = min(r["total_s"] for r in runs.values())
    return markdown(
        ["collection", "collect", "fit", "total"],
        [[labels.get(k, k), f"{r['collect_s']:.1f} s", f"{r['fit_s']:.1f} s",
          bold(f"{r['total_s']:.1f} s", r["total_s"] == fastest)] for k, r in runs.items()],
    )


@table("sae_heldout")
def sae_heldout(data: dict) -> str:
    """benchmarks/sae_massive_activations.py: the SAE's explained variance on held-out tokens."""
    m = data["massive"]
    rows = []
    for key, label in [
        ("without_massive", f"explained variance without the {m['n_tokens']} massive-activation tokens (see below)"),
        ("all", f"explained variance, sae-lens's definition, all tokens (the {m['n_tokens']} massive-activation "
                f"tokens hold {100 * m['variance_share']:.1f}% of the variance)"),
    ]:
        r = data[key]
        value = f"{r['explained_variance']:.3f} [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]"
        rows.append([label, bold(value, key == "without_massive"), f"{r['n_tokens']:,} / {r['n_texts']}"])
    b = data["bootstrap"]
    return markdown(
        ["held-out statistic", f"value [95% CI, {b['resamples']:,} resamples of the texts]", "tokens / texts"], rows
    )

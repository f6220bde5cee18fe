"""Renderers of docs/probes.md and docs/sae.md: probe accuracy, the SAE's held-out statistics and its steering frequency table."""

from __future__ import annotations

from . import bold, markdown, minus, num, pm, table
from .schemas.probes import ProbesData, ProbeTask
from .schemas.sae import SAEHeldoutData, SAEShippedData, SAESteeringData, SAETourData


def _by_selectivity(data: ProbesData) -> list[tuple[str, ProbeTask]]:
    """The probing tasks, most selective first (the order the page discusses them in)."""
    return sorted(data["tasks"].items(), key=lambda kv: -kv[1]["selectivity"])


@table("probes")
def probes(data: ProbesData) -> str:
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
def probes_layers(data: ProbesData) -> str:
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
def probes_tasks(data: ProbesData) -> str:
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
def probes_speed(data: ProbesData) -> str:
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
def sae_heldout(data: SAEHeldoutData) -> str:
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


@table("sae_heldout_other")
def sae_heldout_other(data: dict[str, SAEHeldoutData | SAESteeringData]) -> str:
    """benchmarks/sae_massive_activations.py and benchmarks/sae.py: the SAE's other statistics,
    measured on the cached SAE beside the training run's own record."""
    held: SAEHeldoutData = data["sae_heldout"]  # type: ignore[assignment]
    steering: SAESteeringData = data["sae_steering"]  # type: ignore[assignment]
    cards = steering["cards"]
    o, r = held["other"], held["training_record"]
    ev = o["explained_variance_bfloat16"]
    dead_in_window = int(r["costs"]["train_dead_features"])
    rows = [
        ["explained variance, all tokens, on a bfloat16 harvest (the autocast's effect)",
         f"{ev['value']:.3f} [{ev['ci95'][0]:.3f}, {ev['ci95'][1]:.3f}]", num(r["explained_variance_bfloat16"], 3)],
        ["L0", num(o["l0"], 1), num(r["l0"], 1)],
        ["dead fraction (never fires on the held-out tokens)",
         f"{o['dead_fraction']:.3f} ({o['dead_features']:,} of {held['sae']['d_sae']:,})",
         f"{r['dead_fraction']:.3f} ({dead_in_window:,} dead in the trainer's last window)"],
        [f"features that fire on the {cards['n_tokens']:,} card tokens (`benchmarks/sae.py`)",
         f"{cards['features_firing']:,} / {cards['features']:,}", "—"],
    ]
    if "loss" not in o:  # written with --no-losses: the training record alone
        rows += [
            ["next-token loss: clean / SAE spliced in / site zero-ablated", "not re-measured",
             f"{r['loss']['clean']:.3f} / {r['loss']['sae']:.3f} / {r['loss']['zero']:.3f}"],
            ["loss increase (share of the zero-ablation loss recovered)", "not re-measured",
             f"**{r['loss']['increase']:+.3f} nats** ({100 * r['loss']['fraction_recovered']:.1f}%)"],
        ]
    else:
        loss = o["loss"]
        rows += [
            ["next-token loss: clean / SAE spliced in / site zero-ablated",
             f"{loss['clean']:.3f} / {loss['sae']:.3f} / {loss['zero']:.3f}",
             f"{r['loss']['clean']:.3f} / {r['loss']['sae']:.3f} / {r['loss']['zero']:.3f}"],
            ["loss increase (share of the zero-ablation loss recovered)",
             f"**{loss['increase']:+.3f} nats [{loss['increase_ci95'][0]:+.3f}, {loss['increase_ci95'][1]:+.3f}]** "
             f"({100 * loss['fraction_recovered']:.1f}% [{100 * loss['fraction_recovered_ci95'][0]:.1f}, "
             f"{100 * loss['fraction_recovered_ci95'][1]:.1f}])",
             f"{r['loss']['increase']:+.3f} nats ({100 * r['loss']['fraction_recovered']:.1f}%)"],
        ]
    b = held["bootstrap"]
    return markdown(
        ["other statistic",
         f"shipped SAE, {held['other']['n_tokens']:,} held-out tokens / {held['other']['n_texts']} texts "
         f"[95% CI, {b['resamples']:,} resamples of the texts]",
         "training run's record (float32 SAE, `stats.json`)"],
        rows,
    )


@table("sae_shipped")
def sae_shipped(data: SAEShippedData) -> str:
    """benchmarks/sae_shipped.py: an SAE's compact form, expanded, against its float32 original."""
    rows = []
    for r in data["rows"]:
        original = r["sae"].startswith("original")
        tokens = r["tokens"].replace("..", "–")
        if tokens.startswith("training rows"):
            tokens += ", not used to pick the live set"
        label = "original float32" if original else "compact form, expanded"
        rows.append([f"{tokens} ({r['n_tokens']:,})", label, f"{r['explained_variance']:.4f}",
                     num(r["l0"], 1), "—" if original else f"{100 * r['active_set_differs']:.2f}%",
                     "—" if original else f"{r['reconstruction_gap']:.3f}"])
    return markdown(["tokens", "SAE", "explained variance", "L0", "tokens whose active features differ",
                     "‖x̂ − x̂₀‖ / ‖x̂₀ − x‖"], rows)


@table("sae_training_cost")
def sae_training_cost(data: SAEHeldoutData) -> str:
    """benchmarks/sae_massive_activations.py: the training run's own cost record (``costs`` in the
    shipped stats.json, copied into the data file), and the statistics run's own seconds."""
    c = data["training_record"]["costs"]
    both = c["harvest_seconds"] + c["train_seconds"]
    rows = [
        ["text (tokenising the corpus, 64 cached generations)", f"{c['text_seconds']:,.0f}"],
        [f"harvest of {c['n_train_tokens'] / 1e3:,.0f}k activations (16 blocks, bfloat16 autocast)",
         f"{c['harvest_seconds']:,.0f}"],
        ["training (sae-lens `SAETrainer`)", f"{c['train_seconds']:,.0f}"],
        ["harvest + training", f"{both:,.0f} ({both / 60:.0f} min)"],
    ]
    if "loss" in data["other"]:
        rows.append(["held-out statistics (`benchmarks/sae_massive_activations.py`: 2 harvests, 3 loss "
                     f"passes, model load; {data['provenance']['date']})", f"{data['seconds']:,.0f}"])
    return markdown(["step", "seconds"], rows)


@table("sae_steering_frequency")
def sae_steering_frequency(data: SAESteeringData) -> str:
    """benchmarks/sae.py: the share of generated tokens in the feature's promoted set, per
    condition and coefficient, ± standard error over prompts, and the paired difference from
    the unsteered samples."""
    coefficients = data["coefficients"]
    labels = {"unsteered": "unsteered",
              "feature": f"feature {data['feature']['index']}",
              "control": f"random live feature {data['control']['index']}, same coefficient"}
    rows = []
    for key, label in labels.items():
        cells = [label]
        for c in coefficients:
            cond = c["conditions"][key]
            cells.append(bold(pm(cond["share"], cond["se"], 3), key == "feature"))
            cells.append("—" if key == "unsteered"
                         else minus(f"{cond['minus_unsteered']:+.3f} ± {cond['minus_unsteered_se']:.3f}"))
        rows.append(cells)
    header = ["condition"]
    for c in coefficients:
        k = f"{c['coefficient']:g}"
        header += [f"coefficient {k}: share ± s.e.", f"coefficient {k}: − unsteered ± s.e. (paired)"]
    return markdown(header, rows)


@table("sae_artefact")
def sae_artefact(data: dict) -> str:
    """scripts/build_artefacts.py sae: the shipped SAE's files and the small seeded rebuild's
    figures, as the artefact manifest records them (the slow test reruns the rebuild against them)."""
    sae = data["sae"]
    weights = next(f for f in sae["files"] if f["path"].endswith(".safetensors") and "live" in f["path"])
    total = sum(f["bytes"] for f in sae["files"])
    small = sae["small"]["figures"]
    live = sae["params"]["figures"]["live_features"]
    d_sae = sae["params"]["train.d_sae"]
    rows = [
        ["live features shipped", f"{live:,.0f} of {d_sae:,}"],
        ["shipped files (weights)", f"{total / 1e6:.2f} MB ({weights['bytes'] / 1e6:.2f} MB)"],
        ["small rebuild: explained variance", f"{small['explained_variance']:.4f}"],
        ["small rebuild: L0", num(small["l0"], 1)],
        ["small rebuild: live fraction", f"{small['live_fraction']:.4f}"],
        ["small rebuild: weight checksum (sum of absolute weights)", f"{small['weight_abs_sum']:,.2f}"],
    ]
    return markdown(["recorded in the manifest", "value"], rows)


@table("sae_tour")
def sae_tour(data: SAETourData) -> str:
    """benchmarks/sae_tour.py: the tour's SAE step (feature card and steering frequency), shares
    with standard errors over its prompts, differences paired prompt by prompt."""
    card, steer = data["card"], data["steering"]
    c, feature = steer["coefficient"], data["feature"]
    shares, diffs = steer["share"], steer["minus_unsteered"]

    def steered(k: int) -> str:
        d = minus(f"{diffs[k - 1]['mean']:+.3f}")
        return f"{pm(shares[k]['mean'], shares[k]['se'], 3)} ({d} ± {diffs[k - 1]['se']:.3f} paired)"

    rows = [
        [f"feature {feature}'s card", f"fires on {100 * card['density']:.1f}% of {card['n_tokens']:,} prose tokens"],
        [f"promoted-set share, unsteered ({steer['prompts']} prompts × {steer['new_tokens']} tokens)",
         pm(shares[0]["mean"], shares[0]["se"], 3)],
        [f"… steered ×{c:g} with feature {feature}", steered(1)],
        [f"… steered ×{c:g} with random live feature {steer['control']} (drawn among the "
         f"{steer['control_pool']:,} alive in `stats.json`)", steered(2)],
        [f"the step's time ({data['provenance']['threads']} threads, SAE already expanded)", f"{data['step_seconds']:.1f} s"],
    ]
    return markdown(["tour step `sae`", "value ± s.e."], rows)

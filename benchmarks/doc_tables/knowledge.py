"""Renderers of docs/knowledge.md: key-value memories, knowledge neurons and lenses."""

from __future__ import annotations

import statistics

from . import MODEL_SHORT, Renderer, ci, markdown, minus, num, pm, table
from .schemas.knowledge import (
    EiffelSubUpdates,
    EstimateCI,
    KnowledgeNeuronsData,
    KVMemoriesData,
    Trigger,
    TunedLensData,
)


def _agreement(model: str) -> Renderer:
    def render(data: KVMemoriesData) -> str:
        rows = data["models"][model]["agreement"]
        return markdown(
            ["layer", "agreement", "shuffled"],
            [[r["layer"], pm(r["agreement"], r["agreement_se"], 3),
              pm(r["shuffled"], r["shuffled_se"], 3)] for r in rows],
        )

    render.__doc__ = f"benchmarks/kv_memories.py: {model}'s key-value agreement per layer, ± s.e."
    return render


table("kv_agreement_smollm2")(_agreement("smollm2-135m"))
table("kv_agreement_gemma3")(_agreement("gemma3-270m"))


def _share(x: float) -> str:
    """A share in per cent: one decimal below 100 %, whole per cent above."""
    return f"{100 * x:.1f} %" if x < 1 else f"{100 * x:.0f} %"


@table("kv_eiffel")
def kv_eiffel(data: KVMemoriesData) -> str:
    """benchmarks/kv_memories.py --part eiffel: the Eiffel fact's sub-updates, one column a model."""
    models = [m for m, entry in data["models"].items() if "eiffel_subupdates" in entry]
    runs = [data["models"][m]["eiffel_subupdates"] for m in models]
    first = runs[0]

    def neurons(run: EiffelSubUpdates, key: str) -> str:
        return ", ".join(minus(f"{name} {effect:+.2f}") for name, effect, _ in run[key][:3])

    rows = [
        [f'logit of "{first["target"]}"', *(num(r["logit"], 2) for r in runs)],
        ["MLPs' net direct contribution", *(minus(f"{r['mlp_total']:+.2f}") for r in runs)],
        [f"{first['top_k']} most raising neurons, share of that net",
         *(_share(r["top_share"]) for r in runs)],
        [f"{first['top_k']} largest either way, share of all sub-updates' absolute size",
         *(_share(r["mass_share"]) for r in runs)],
        ["neurons that raise it most", *(neurons(r, "raise") for r in runs)],
        ["neurons that lower it most", *(neurons(r, "lower") for r in runs)],
    ]
    return markdown(["", *(MODEL_SHORT.get(m, m) for m in models)], rows)


@table("kn_speed")
def kn_speed(data: KnowledgeNeuronsData) -> str:
    """benchmarks/knowledge_neurons.py --speed: integrated gradients against the package's scheme."""
    speed = data["speed"]
    ours = speed["ours_s"]
    runs = ", ".join(num(s, 2) for s in ours)
    return markdown(
        ["scheme", "wall s"],
        [[f"`integrated_gradients` (best of {len(ours)})", f"{num(min(ours), 2)} (runs: {runs})"],
         ["package scheme", num(speed["package_scheme_s"], 1)]],
    )


def _relative(x: float) -> str:
    return minus(f"{100 * x:+.1f}")


@table("kn_table")
def kn_table(data: KnowledgeNeuronsData) -> str:
    """benchmarks/knowledge_neurons.py --table: mean relative change of p(answer), 95 % intervals."""
    t = data["table"]
    own = f"the fact's {t['prompts_per_fact']} prompts"
    labels = {
        "knowledge": ("knowledge neurons", own),
        "random": ("random neurons, same layers and number", own),
        "other_facts": ("knowledge neurons", f"{t['other_facts_per_fact']} facts of other relations"),
    }
    rows = []
    for key, cell in t["cells"].items():
        rows.append([*labels[key], *(
            f"{_relative(cell[op]['mean'])} % [{_relative(cell[op]['ci95'][0])}, "
            f"{_relative(cell[op]['ci95'][1])}]"
            for op in ("suppress", "enhance")
        )])
    return markdown(["neurons scaled", "prompts measured", "suppress (×0)", "enhance (×2)"], rows)



LENS_NAMES = {"logit": "logit", "least_squares": "least squares", "tuned": "tuned"}


def _lens_table(data: TunedLensData, metric: str, digits: int) -> str:
    """Per layer and held-out set, each lens's ``metric`` with its bootstrap interval."""
    sets = data["sets"]
    header, rows = ["layer"], []
    for s in sets:
        header += [f"{s['set']}: {name}" if i == 0 else name
                   for i, name in enumerate(LENS_NAMES.values())]
    for layer in range(len(sets[0]["lenses"]["logit"][metric])):
        cells: list[object] = [layer]
        for s in sets:
            for lens in LENS_NAMES:
                curve = s["lenses"][lens]
                cells.append(ci(curve[metric][layer], *curve[f"{metric}_ci"][layer], digits))
        rows.append(cells)
    return markdown(header, rows)


def _interval(cell: EstimateCI) -> str:
    """``−80.9 % [−87.6, −73.7]``; a dash when no fact has the set."""
    if cell["n"] == 0 or cell["estimate"] != cell["estimate"]:
        return "–"
    low, high = cell["ci95"]
    return f"{_relative(cell['estimate'])} % [{_relative(low)}, {_relative(high)}]"


def _sizes(sizes: list[int]) -> str:
    """Neurons per fact: mean, median, and how many facts have none."""
    empty = sum(1 for n in sizes if n == 0)
    return f"{statistics.fmean(sizes):.1f} (median {statistics.median(sizes):g}; none for {empty})"


def _not_run(flag: str) -> str:
    """The table of a part the data file does not hold yet."""
    return markdown(["measured"], [[f"not yet: `python benchmarks/knowledge_neurons.py {flag}`"]])


PROTOCOL_LABELS = {
    "knowledge": ("knowledge neurons (integrated gradients)", "own"),
    "random": ("random neurons, same layers and number", "own"),
    "activation": ("Dai et al.'s baseline: the refinement on activations (0.5 × max)", "own"),
    "activation_top": ("largest mean activations, as many as the knowledge neurons", "own"),
    "other_facts": ("knowledge neurons", "other"),
}


@table("kn_protocol")
def kn_protocol(data: KnowledgeNeuronsData) -> str:
    """benchmarks/knowledge_neurons.py --table: each neuron set under our measure (mean and median
    over facts of the mean per-prompt ratio) and Dai et al.'s (ratio of means per relation,
    averaged over relations), 95 % bootstrap intervals."""
    if "protocol" not in data:
        return _not_run("--table")
    t = data["protocol"]
    prompts = {"own": "the fact's 4 prompts", "other": f"{OTHER_FACTS} facts of other relations"}
    rows = []
    for row in t["rows"]:
        label, where = PROTOCOL_LABELS[row["neurons"]]
        cells = []
        for op in ("suppress", "enhance"):
            c = row[op]
            cells += [_interval(c["mean"]), _interval(c["median"]), _interval(c["dai"])]
        rows.append([label, prompts[where], _sizes(row["neurons_per_fact"]), *cells])
    return markdown(
        ["neurons scaled", "prompts measured", "neurons per fact", "suppress: ours, mean",
         "ours, median", "Dai et al.", "enhance: ours, mean", "ours, median", "Dai et al."],
        rows,
    )


OTHER_FACTS = 5
"""Facts of other relations each fact's neurons are tested on (benchmarks/knowledge_neurons.py)."""


@table("kn_paraphrases")
def kn_paraphrases(data: KnowledgeNeuronsData) -> str:
    """benchmarks/knowledge_neurons.py --paraphrases: the knowledge neurons refined on the first k
    prompts of each fact, measured on all its prompts, 95 % bootstrap intervals over facts."""
    if "paraphrases" not in data:
        return _not_run("--paraphrases")
    t = data["paraphrases"]
    largest = max(t["sizes"])
    rows = []
    for size in t["sizes_summary"]:
        jaccard = size["jaccard_to_largest"]
        rows.append([
            size["k"], _sizes(size["neurons_per_fact"]), f"{sum(jaccard) / len(jaccard):.2f}",
            _interval(size["suppress"]["mean"]), _interval(size["suppress"]["median"]),
            _interval(size["suppress"]["dai"]), _interval(size["enhance"]["mean"]),
            _interval(size["enhance"]["dai"]),
        ])
    return markdown(
        ["prompts refined on", "neurons per fact", f"overlap with k = {largest} (Jaccard, mean)",
         "suppress: ours, mean", "ours, median", "Dai et al.", "enhance: ours, mean", "Dai et al."],
        rows,
    )


@table("tuned_lens_kl")
def tuned_lens_kl(data: TunedLensData) -> str:
    """benchmarks/tuned_lens.py: KL(final ‖ lens) per layer, logit, least-squares and tuned lens,
    per held-out set, with bootstrap intervals over texts."""
    return _lens_table(data, "kl", 2)


@table("tuned_lens_calibration")
def tuned_lens_calibration(data: TunedLensData) -> str:
    """benchmarks/tuned_lens.py: mean |p_lens(model's top-1) − p_model(top-1)| per layer."""
    return _lens_table(data, "calibration", 3)


@table("tuned_lens_paired")
def tuned_lens_paired(data: TunedLensData) -> str:
    """benchmarks/tuned_lens.py: tuned minus least-squares KL and calibration per layer, paired
    bootstrap intervals over texts (negative: the tuned lens is closer to the model)."""
    sets = data["sets"]
    header = ["layer"]
    for s in sets:
        header += [f"{s['set']}: KL", "calibration"]
    rows = []
    for layer in range(len(sets[0]["tuned_minus"]["least_squares"]["kl"])):
        cells: list[object] = [layer]
        for s in sets:
            d = s["tuned_minus"]["least_squares"]
            cells += [minus(ci(d["kl"][layer], *d["kl_ci"][layer], 2)),
                      minus(ci(d["calibration"][layer], *d["calibration_ci"][layer], 3))]
        rows.append(cells)
    return markdown(header, rows)


@table("tuned_lens_eiffel")
def tuned_lens_eiffel(data: TunedLensData) -> str:
    """benchmarks/tuned_lens.py: p(' Paris') at the Eiffel prompt's last token, the last seven
    layers (23 on for SmolLM2's 30, as issue 37 reads them)."""
    e = data["eiffel"]
    n = len(e["prob"]["logit"])
    rows = [[layer, *(f"{e['prob'][lens][layer]:.3f} ({e['top'][lens][layer]!r})"
                      for lens in LENS_NAMES)] for layer in range(max(0, n - 7), n)]
    rows.append(["model", f"{e['model_prob']:.3f}", "", ""])
    return markdown(["layer", *LENS_NAMES.values()], rows)


def _below(s: dict, other: str, metric: str, *, above: bool = False) -> int:
    """Layers where the tuned lens's paired interval against ``other`` lies below 0 (or above)."""
    return sum(low > 0 if above else high < 0
               for low, high in s["tuned_minus"][other][f"{metric}_ci"])


@table("tuned_lens_summary")
def tuned_lens_summary(data: TunedLensData) -> str:
    """benchmarks/tuned_lens.py: what each lens cost, how often the tuned lens is below the others
    (paired intervals), and the Eiffel prompt at the six layers before the last (23-28 for SmolLM2)."""
    tuned, shortcut = data["training"]["tuned"], data["training"]["least_squares"]
    c = tuned["config"]
    lines = [
        f"- Tuned lens: {c['steps']} SGD steps of {c['tokens_per_step']} tokens "
        f"({tuned['train_tokens']:,} tokens; the paper's code: 250 × 262,144 = 65,536,000), "
        f"**{tuned['train_seconds'] / 60:.0f} min** on this CPU; training KL (mean over layers) "
        f"{tuned['losses'][0]:.2f} at the first step, {tuned['losses'][-1]:.2f} at the last.",
        f"- Least-squares map: {shortcut['train_tokens']:,} tokens, "
        f"{shortcut['train_seconds']:.0f} s.",
    ]
    for s in data["sets"]:
        n = len(s["lenses"]["tuned"]["kl"])
        lines.append(
            f"- {s['set']} ({s['n_texts']} texts, {s['n_tokens']} tokens): tuned KL below the "
            f"least-squares map's at **{_below(s, 'least_squares', 'kl')} of {n}** layers and below "
            f"the logit lens's at {_below(s, 'logit', 'kl')} of {n}; calibration error below the "
            f"least-squares map's at **{_below(s, 'least_squares', 'calibration')} of {n}** and "
            f"above it at {_below(s, 'least_squares', 'calibration', above=True)} (paired 95 % "
            "intervals below or above 0)."
        )
    e = data["eiffel"]
    n = len(e["prob"]["tuned"])
    upper = range(max(0, n - 7), n - 1)
    if upper:
        spans = {k: (min(e["prob"][k][i] for i in upper), max(e["prob"][k][i] for i in upper))
                 for k in LENS_NAMES}
        close = all(abs(e["prob"]["tuned"][i] - e["model_prob"]) <= 0.15 for i in upper)
        lines.append(
            f"- Eiffel prompt, p(' Paris') at layers {upper[0]}–{upper[-1]}: tuned "
            f"{spans['tuned'][0]:.2f}–{spans['tuned'][1]:.2f}, least squares "
            f"{spans['least_squares'][0]:.2f}–{spans['least_squares'][1]:.2f}, logit "
            f"{spans['logit'][0]:.2f}–{spans['logit'][1]:.2f}; the model {e['model_prob']:.2f}. "
            f"Tuned within 0.15 of the model at every one of these layers: **{'yes' if close else 'no'}**."
        )
    return "\n".join(lines)


def _words(tokens: list[str]) -> str:
    """The distinct alphabetic words of a token list, first spelling kept, case folded."""
    seen: dict[str, str] = {}
    for token in tokens:
        word = token.strip()
        if word.isalpha() and word.lower() not in seen:
            seen[word.lower()] = word
    return ", ".join(seen.values())


def _code(text: str) -> str:
    """Inline code that may itself hold backticks."""
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _trigger(trigger: Trigger) -> str:
    """A trigger as ``the last words[ key token]`` -> next token (coefficient)."""
    text = trigger["context"].lstrip("…")
    key = text.rfind("[")
    context = " ".join(text[:key].split()[-2:]) + text[key:]
    context = context.replace("|", "\\|")  # a pipe would end the table cell
    coefficient = minus(f"{trigger['coefficient']:+.2f}")
    return f"{_code(context)} -> {trigger['next'].strip()} ({coefficient})"


@table("kv_value_table")
def kv_value_table(data: KVMemoriesData) -> str:
    """benchmarks/kv_memories.py: per model, the most coherent value vectors (three layers), the
    alphabetic words of their normed projection's side, and their two strongest triggers."""
    rows = []
    for model, run in data["models"].items():
        for v in run["value_table"]:
            rows.append([
                MODEL_SHORT[model], v["neuron"], v["side"], num(v["coherence"], 2),
                _words(v[f"normed_{v['side']}"]), "; ".join(_trigger(t) for t in v["triggers"][:2]),
            ])
    return markdown(["model", "neuron", "side", "coherence", "words among the 10 tokens (normed projection)",
                     "two strongest triggers (coefficient)"], rows)


_LENS_NOT_RUN = markdown(["measured"], [["not yet: `python benchmarks/tuned_lens.py --piece report`"]])


def _mean_gap(s: dict) -> float:
    gap = s["tuned_minus"]["least_squares"]["kl"]
    return sum(gap) / len(gap)


def _clip_label(run: dict) -> str:
    rows = "shuffled rows" if run.get("shuffle") else "rows in document order"
    per_step = run.get("tokens_per_step", run["train_tokens"] // run["steps"])
    start = "least-squares start" if run.get("init") == "least_squares" else "identity start"
    return (f"{start}, {run['clip'].replace('_', '-')} clip, {run['steps']} steps of {per_step}, "
            f"{rows}")


@table("tuned_lens_diagnostic")
def tuned_lens_diagnostic(data: TunedLensData) -> str:
    """benchmarks/tuned_lens.py: per layer, on held-out docstrings (the training kind), the KL of
    the logit lens, the least-squares map and each KL-trained lens (tuned minus least squares,
    paired); how far each lens's translator moved from the identity (‖A‖_F), and the gradient
    norm at the first step."""
    runs = data.get("clip_runs", [])
    if not runs:
        return _LENS_NOT_RUN
    first = runs[0]["in_domain"]["lenses"]
    header = ["layer", "logit KL", "least-squares KL"]
    for run in runs:
        label = _clip_label(run)
        header += [f"{label}: KL", "minus least squares", "‖A‖"]
    header.append("first-step gradient norm")
    norms = next((r["first_grad_norms"] for r in runs if r["first_grad_norms"]), [])
    rows = []
    for layer in range(len(first["logit"]["kl"])):
        cells: list[object] = [layer, ci(first["logit"]["kl"][layer], *first["logit"]["kl_ci"][layer], 2),
                               ci(first["least_squares"]["kl"][layer],
                                  *first["least_squares"]["kl_ci"][layer], 2)]
        for run in runs:
            tuned = run["in_domain"]["lenses"]["tuned"]
            paired = run["in_domain"]["tuned_minus"]["least_squares"]
            cells += [ci(tuned["kl"][layer], *tuned["kl_ci"][layer], 2),
                      minus(ci(paired["kl"][layer], *paired["kl_ci"][layer], 2)),
                      f"{run['translator_norm'][layer]:.1f}"]
        cells.append(f"{norms[layer]:.3g}" if norms else "–")
        rows.append(cells)
    return markdown(header, rows)


@table("tuned_lens_diagnostic_summary")
def tuned_lens_diagnostic_summary(data: TunedLensData) -> str:
    """benchmarks/tuned_lens.py: each KL-trained lens's cost, its training curve in 25-step
    windows and how often it is below the least-squares map on held-out docstrings."""
    lines = []
    for run in data.get("clip_runs", []):
        s = run["in_domain"]
        n = len(s["lenses"]["tuned"]["kl"])
        windows = ", ".join(f"{x:.2f}" for x in run["loss_windows"])
        lines.append(
            f"- {_clip_label(run)} ({run['train_tokens']:,} tokens, "
            f"{run['train_seconds'] / 60:.0f} min): training KL by 25-step window {windows}; on "
            f"held-out docstrings ({s['n_texts']} rows, {s['n_tokens']} tokens) below the "
            f"least-squares map at **{_below(s, 'least_squares', 'kl')} of {n}** layers, above it "
            f"at {_below(s, 'least_squares', 'kl', above=True)} (tuned minus least squares "
            f"{_mean_gap(s):.2f} nats, mean over layers); ‖A‖_F median over layers "
            f"{statistics.median(run['translator_norm']):.1f}."
        )
        for other in run.get("held_out", []):
            lines.append(
                f"  {other['set']} ({other['n_texts']} texts): below the least-squares map at "
                f"{_below(other, 'least_squares', 'kl')} of {n} layers, above it at "
                f"{_below(other, 'least_squares', 'kl', above=True)}; tuned minus least squares "
                f"{_mean_gap(other):.2f} nats, mean over layers."
            )
        norms = run["first_grad_norms"]
        if norms:
            total = sum(x * x for x in norms) ** 0.5
            lines.append(
                f"  First step: gradient norm {total:.3g} over all layers (the paper's clip scales "
                f"it by {1 / max(total, 1):.2g}); layer 0 holds {norms[0] ** 2 / total ** 2:.0%} of "
                f"its square; median layer {statistics.median(norms):.3g}."
            )
    return "\n".join(lines) if lines else _LENS_NOT_RUN


@table("tuned_lens_lr_probes")
def tuned_lens_lr_probes(data: TunedLensData) -> str:
    """benchmarks/tuned_lens.py --piece probes: the default loop for a few steps on a few layers
    at each learning rate; held-out KL per layer (the identity's beside it) and ‖A‖_F."""
    probes = data.get("lr_probes", [])
    if not probes:
        return _LENS_NOT_RUN
    layers = probes[0]["layers"]
    header = ["lr", *(f"layer {x}: KL" for x in layers), "mean", "‖A‖_F per layer",
              "training KL, last 5 steps"]
    rows: list[list[object]] = [["identity (logit lens)",
                                 *(f"{x:.2f}" for x in probes[0]["heldout_kl_identity"]),
                                 f"{statistics.mean(probes[0]['heldout_kl_identity']):.2f}", "0", ""]]
    for p in probes:
        rows.append([f"{p['lr']:g}", *(f"{x:.2f}" for x in p["heldout_kl"]),
                     f"{statistics.mean(p['heldout_kl']):.2f}",
                     ", ".join(f"{x:.1f}" for x in p["translator_norm"]),
                     f"{statistics.mean(p['losses'][-5:]):.2f}"])
    return markdown(header, rows)

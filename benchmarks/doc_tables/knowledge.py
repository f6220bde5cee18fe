"""Renderers of docs/knowledge.md: key-value memories, knowledge neurons and lenses."""

from __future__ import annotations

from . import MODEL_SHORT, Renderer, markdown, minus, num, pm, table
from .schemas.knowledge import (
    EiffelSubUpdates,
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



@table("tuned_lens_kl")
def tuned_lens_kl(data: TunedLensData) -> str:
    """benchmarks/tuned_lens.py: KL(final ‖ lens) per layer, logit and tuned lens, per held-out set."""
    sets = data["sets"]
    rows = []
    for layer in range(len(sets[0]["logit_kl"])):
        cells = []
        for s in sets:
            cells += [pm(s["logit_kl"][layer], s["logit_se"][layer], 3),
                      pm(s["tuned_kl"][layer], s["tuned_se"][layer], 3)]
        rows.append([layer, *cells])
    header = ["layer"]
    for s in sets:
        header += [f"{s['set']}: logit", "tuned"]
    return markdown(header, rows)


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

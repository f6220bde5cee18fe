"""Renderers of docs/representations.md: concept directions, reading and the steering comparison."""

from __future__ import annotations

from . import MODEL_NAMES, ci, markdown, minus, num, pm, strength, table
from .schemas.representations import ConceptsData, ReadingData
from .schemas.steering import SteeringCompareData


@table("concepts_cosines")
def concepts_cosines(data: dict[str, ConceptsData]) -> str:
    """benchmarks/concepts.py: the mean |cosine| between concepts, one row a model's file."""
    rows = []
    for doc in data.values():
        c = doc["inner_products"]["mean_abs_cosine_between_concepts"]
        rows.append([
            MODEL_NAMES.get(doc["model"], doc["model"]), f"{doc['n_vocabulary_tokens']:,}",
            ci(c["causal"], *c["causal_ci95"], 3), ci(c["euclidean"], *c["euclidean_ci95"], 3),
            num(c["random_directions"], 3), num(c["shared_word_floor_mean_abs"], 3),
        ])
    return markdown(
        ["model", "vocabulary tokens", "mean abs cosine, causal [95% CI]", "Euclidean [95% CI]",
         "random directions", "shared-word floor"],
        rows,
    )


@table("concepts_table")
def concepts_table(data: dict[str, ConceptsData]) -> str:
    """benchmarks/concepts.py: per concept, one row a model: held-out projections, intervention."""
    docs = list(data.values())
    rows = []
    for concept in docs[0]["concepts"]:
        for doc in docs:
            r = next((r for r in doc["concepts"] if r["concept"] == concept["concept"]), None)
            if r is None:  # a concept the model's tokenizer left out
                continue
            rows.append([
                r["label"], doc["model"].split("-")[0],
                f"{r['n_pairs_single_token']} / {r['n_pairs_listed']}", r["n_heldout"],
                ci(r["heldout_projection_mean"], *r["heldout_projection_ci95"], 2),
                pm(r["random_projection_mean"], r["random_projection_sd"], 2),
                num(r["heldout_above_random_p95"], 2),
                ci(r["intervention_own_change"], *r["intervention_own_ci95"], 1),
                num(r["intervention_mean_abs_change_on_others"], 2),
            ])
    return markdown(
        ["concept", "model", "pairs (single-token / listed)", "held-out",
         "held-out projection [95% CI]", "random pairs mean ± s.d.", "share > random p95",
         "own Δ logit gap [95% CI]", "others' mean abs Δ"],
        rows,
    )


@table("reading")
def reading(data: ReadingData) -> str:
    """benchmarks/reading.py: each method's layer chosen on dev and its test accuracies."""
    rows = []
    for contrast, c in data["contrasts"].items():
        for method, m in c["methods"].items():
            rows.append([
                contrast, method, m["chosen_layer"],
                ci(m["chosen_test_pairwise"], *m["chosen_test_pairwise_ci95"], 2),
                ci(m["chosen_test_unpaired"], *m["chosen_test_unpaired_ci95"], 2),
                c["n_test"],
            ])
    return markdown(
        ["contrast", "method", "layer (chosen on dev)", "test pairwise [95% CI]",
         "test unpaired [95% CI]", "test pairs"],
        rows,
    )


STEERING_ORDER = ("lm_steer", "mean_difference", "sae")


def _steering_label(data: SteeringCompareData, method: str) -> str:
    if method == "lm_steer":
        return "LM-Steer (the shipped steer)"
    if method == "mean_difference":
        return f"mean difference, ActAdd-style (layer {data['mean_difference']['layer']}, × mean difference)"
    if method == "sae":
        return f"SAE feature {data['sae']['feature']} (× typical max)"
    return method


@table("steering_compare")
def steering_compare(data: SteeringCompareData) -> str:
    """benchmarks/steering_compare.py: each method at its largest strength within the budget."""
    base = next(iter(data["curves"].values()))
    # ControlCurve's columns: sentiment, topic, perplexity, distinct-1, -2, -3.
    unsteered, errors = base["unsteered"], base["unsteered_se"]
    rows = [["unsteered", "", pm(unsteered[0], errors[0], 3), "", pm(unsteered[2], errors[2], 1),
             num(unsteered[4], 3)]]
    for method in STEERING_ORDER:
        b = data["at_budget"][method]
        rows.append([
            _steering_label(data, method), strength(b["strength"]),
            pm(b["sentiment"], b["sentiment_se"], 3), f"{b['gain']:+.3f}",
            pm(b["perplexity"], b["perplexity_se"], 1), num(b["distinct_2"], 3),
        ])
    return markdown(
        ["method", "strength within budget", "sentiment ± s.e.", "gain over unsteered",
         "perplexity ± s.e.", "distinct-2"],
        rows,
    )


@table("steering_compare_curves")
def steering_compare_curves(data: SteeringCompareData) -> str:
    """benchmarks/steering_compare.py: each method's whole curve, sentiment (perplexity)."""
    rows = []
    for method in STEERING_ORDER:
        c = data["curves"][method]
        points = zip(c["strengths"], c["sentiment"], c["perplexity"], strict=True)
        rows.append([
            _steering_label(data, method),
            ", ".join(f"{strength(s)}: {num(y, 2)} ({num(p, 1)})" for s, y, p in points),
        ])
    return markdown(["method", "strengths → sentiment (perplexity)"], rows)


@table("steering_compare_verdict")
def steering_compare_verdict(data: SteeringCompareData) -> str:
    """benchmarks/steering_compare.py: the verdict, every method's gain with its perplexity and
    distinct-2 cost (not only the winner's effect), ranked by gain within the budget."""
    base = next(iter(data["curves"].values()))
    unsteered = base["unsteered"]
    budget = data["at_budget"][STEERING_ORDER[0]]["budget_perplexity"]
    ranked = sorted(STEERING_ORDER, key=lambda m: -data["at_budget"][m]["gain"])
    lines = [
        f"Within the budget (perplexity at most {num(budget, 1)}, 1.5× the unsteered "
        f"{num(unsteered[2], 1)}; unsteered distinct-2 {num(unsteered[4], 3)}), ranked by the gain "
        "in mean sentiment over the unsteered model:",
        "",
    ]
    for rank, method in enumerate(ranked, 1):
        b, c = data["at_budget"][method], data["curves"][method]
        zero = c["perplexity"][c["strengths"].index(0.0)] if 0.0 in c["strengths"] else None
        over = (f"; at strength 0 it is already at perplexity {num(zero, 1)}, over the budget"
                if zero is not None and zero > budget else "")
        gain, diversity = minus(f"{b['gain']:+.3f}"), minus(f"{b['distinct_2'] - unsteered[4]:+.3f}")
        lines.append(
            f"{rank}. {_steering_label(data, method)}: gain {gain} (sentiment "
            f"{minus(pm(b['sentiment'], b['sentiment_se'], 3))}) at strength {strength(b['strength'])}, "
            f"perplexity {pm(b['perplexity'], b['perplexity_se'], 1)}, distinct-2 "
            f"{num(b['distinct_2'], 3)} ({diversity} against "
            f"the unsteered model){over}."
        )
    return "\n".join(lines)

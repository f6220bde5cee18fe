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

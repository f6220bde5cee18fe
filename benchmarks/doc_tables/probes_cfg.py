"""Renderers of docs/probes_cfg.md: the CFG GPT's training run, its DP-feature probes (best layer
and per layer, with bootstrap intervals over held-out strings), the random-weights baselines of
the deeper grammar, the attention transitions and the costs. Data: benchmarks/cfg_probes.py."""

from __future__ import annotations

from . import bold, markdown, minus, table
from .schemas.probes import CFGCell, CFGProbesData


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _pct_ci(x: float, interval: list[float]) -> str:
    return f"{_pct(x)} [{_pct(interval[0])}, {_pct(interval[1])}]"


def _points(x: float) -> str:
    """A difference of two accuracies in points, signed."""
    return minus(f"{100 * x:+.1f}")


def _points_ci(x: float, interval: list[float]) -> str:
    return minus(f"{100 * x:+.1f} [{100 * interval[0]:+.1f}, {100 * interval[1]:+.1f}]")


def _layer(data: CFGProbesData, index: int) -> str:
    """A layer as the tables' headers name it: embed, L0, L1, ..."""
    return data["probes"]["layers"][index].replace("after ", "")


def _grammar(data: CFGProbesData) -> str:
    return "`(" + ", ".join(str(n) for n in data["grammar"]["nts_per_level"]) + ")`"


def _size(cell: CFGCell) -> str:
    return f"{cell['n_test_tokens']:,} / {cell['n_test_strings']}"


@table("cfg_training")
def cfg_training(data: CFGProbesData) -> str:
    """benchmarks/cfg_probes.py: the trained GPT's run and how well it learned the grammar."""
    t, ev, g = data["training"], data["evaluation"], data["grammar"]
    minutes = t["seconds"] / 60
    return markdown(
        ["grammar", "strings (mean)", "steps", "training", "tokens", "final train loss",
         "held-out loss (floor)", "next-token acc.", "validity (T = 1) [95% CI]", "distinct valid"],
        [[
            _grammar(data), f"{g['length_range'][0]}–{g['length_range'][1]} ({g['mean_length']:.1f})",
            f"{data['model']['steps']:,}",
            f"{t['seconds']:.0f} s ({minutes:.1f} min, {t['cpu_seconds']:.0f} CPU-s, {t['threads']} threads)",
            f"{t['tokens'] / 1e6:.2f}M", f"{t['final_loss']:.3f}",
            f"{ev['loss']:.3f} ({g['loss_floor']:.3f})", f"{_pct(ev['next_token_accuracy'])}%",
            f"{_pct_ci(ev['validity'], ev['validity_ci95'])}% of {ev['n_samples']}",
            f"{_pct(ev['distinct'])}%",
        ]],
    )


@table("cfg_probes_best")
def cfg_probes_best(data: CFGProbesData) -> str:
    """benchmarks/cfg_probes.py: best-layer test accuracy per (level, target), trained and random
    weights, with 95% intervals over the held-out strings; gaps ≥ 20 points in bold."""
    rows = []
    for c in data["probes"]["cells"]:
        tr, rnd, gap = c["linear_trained"], c["linear_random"], c["gap"]
        mh_tr, mh_rnd = max(c["multihead_trained"]["per_layer"]), max(c["multihead_random"]["per_layer"])
        rows.append([
            str(c["level"]), c["target"], _size(c), _pct(c["majority"]), _pct(c["bayes"]),
            f"{_pct_ci(tr['best'], tr['ci95'])} ({_layer(data, tr['best_layer'])})",
            f"{_pct_ci(rnd['best'], rnd['ci95'])} ({_layer(data, rnd['best_layer'])})",
            _points_ci(gap["accuracy"], gap["ci95"]),
            f"{_pct(tr['balanced'])} / {_pct(rnd['balanced'])}",
            bold(_points_ci(gap["balanced"], gap["balanced_ci95"]), gap["balanced"] >= 0.2),
            f"{_pct(mh_tr)} / {_pct(mh_rnd)}",
        ])
    return markdown(
        ["level", "target", "test tokens / strings", "majority", "Bayes", "linear, trained [95% CI] (layer)",
         "linear, random [95% CI] (layer)", "trained − random", "balanced, trained / random",
         "balanced, trained − random", "multi-head, trained / random"],
        rows,
    )


@table("cfg_probes_layers")
def cfg_probes_layers(data: CFGProbesData) -> str:
    """benchmarks/cfg_probes.py: the linear probe on the trained model at every layer, ± the
    bootstrap standard error over held-out strings."""
    rows = []
    for c in data["probes"]["cells"]:
        tr = c["linear_trained"]
        rows.append([
            str(c["level"]), c["target"],
            *(f"{_pct(v)} ± {_pct(se)}" for v, se in zip(tr["per_layer"], tr["per_layer_se"], strict=True)),
            _size(c),
        ])
    layers = [_layer(data, i) for i in range(len(data["probes"]["layers"]))]
    return markdown(["level", "target", *layers, "test tokens / strings"], rows)


@table("cfg_random_baselines")
def cfg_random_baselines(data: dict[str, CFGProbesData]) -> str:
    """benchmarks/cfg_probes.py --random-only: the random-weights baselines of two depths on one
    grammar, side by side (the data files in the block's order, fewest layers first)."""
    runs = list(data.values())
    first = runs[0]["probes"]["cells"]
    rows = []
    for i, c in enumerate(first):
        cells = [run["probes"]["cells"][i] for run in runs]
        if any((d["level"], d["target"]) != (c["level"], c["target"]) for d in cells):
            raise ValueError("the random-baseline files list different cells")
        rows.append([
            str(c["level"]), c["target"], _size(c), _pct(c["majority"]), _pct(c["bayes"]),
            *(
                f"{_pct_ci(d['linear_random']['best'], d['linear_random']['ci95'])} "
                f"({_layer(run, d['linear_random']['best_layer'])})"
                for run, d in zip(runs, cells, strict=True)
            ),
            " / ".join(_pct(d["linear_random"]["balanced"]) for d in cells),
        ])
    depths = [f"{run['model']['n_layers']} layers" for run in runs]
    return markdown(
        ["level", "target", "test tokens / strings", "majority", "Bayes",
         *(f"linear, random, {d} [95% CI] (layer)" for d in depths),
         "balanced, " + " / ".join(depths)],
        rows,
    )


@table("cfg_attention")
def cfg_attention(data: CFGProbesData) -> str:
    """benchmarks/cfg_probes.py: bias-removed attention from NT ends to the last earlier NT end,
    mean over heads [best head], and the pairs averaged per cell."""
    att = data["attention"]
    levels = att["levels"]
    rows = []
    for name in ("trained", "random"):
        for a, level in enumerate(levels):
            rows.append([
                f"{name}, {level}",
                *(minus(f"{att[name]['mean'][a][b]:+.3f} [{att[name]['best_head'][a][b]:+.3f}]")
                  for b in range(len(levels))),
                " / ".join(f"{int(n):,}" for n in att["pairs"][a]),
            ])
    return markdown(["from \\ to", *levels, "pairs, to " + " / ".join(levels)], rows)


@table("cfg_costs")
def cfg_costs(data: dict[str, CFGProbesData]) -> str:
    """benchmarks/cfg_probes.py on the default grammar and on the deeper one (a full run, or
    --random-only, which trains nothing): what each step cost, wall seconds."""
    runs = list(data.values())
    default, deep = runs[0], runs[1]
    steps = {r["model"]["steps"] for r in (default, deep) if r.get("training")}

    def probe(run: CFGProbesData) -> str:
        s = run["seconds"]
        if run["models"] != ["trained", "random"]:
            return "not re-run"
        n = run["provenance"]["threads"]
        threads = f"{n} thread" + ("s" if n > 1 else "")
        return f"{s['probe_evaluate_attention']:.0f} s ({s['probe_evaluate_attention_cpu']:.0f} CPU-s, {threads})"

    def train(run: CFGProbesData) -> str:
        if not run.get("training"):
            return "not re-run"
        t = run["training"]
        return (f"{t['seconds']:.0f} s ({t['seconds'] / 60:.1f} min, {t['cpu_seconds']:.0f} CPU-s, "
                f"{t['threads']} threads), {t['tokens'] / 1e6:.2f}M tokens")

    return markdown(
        ["step", f"default {_grammar(default)}", f"deeper {_grammar(deep)}"],
        [
            ["sample 10,000 strings with labels", *(f"{r['seconds']['sample_10000']:.2f} s" for r in (default, deep))],
            ["parse 1,000 strings (span DP)", *(f"{r['seconds']['parse_1000']:.2f} s" for r in (default, deep))],
            [f"train the GPT ({' / '.join(f'{s:,}' for s in sorted(steps))} steps)", train(default), train(deep)],
            ["probe both models (linear + multi-head, every level, target and layer), evaluate "
             f"({default['evaluation']['n_samples']} samples), attention", probe(default), probe(deep)],
        ],
    )

"""DP-feature probes on a GPT trained on a synthetic CFG (Allen-Zhu & Li, Physics of LMs Part 1).

Trains the default CFG GPT (cached under the lmsci-mi cache folder, keyed by grammar, model and
training settings), then probes it and the same architecture with random weights at every level
and layer, with plain linear probes and the paper's multi-head linear probe. Prints the training
cost, next-token accuracy, generation validity (the DP parser's verdict on the model's samples),
the per-level table, the attention-transition numbers and the acceptance checks, saves the
result as ``--result`` (out/cfg_probes.json, git-ignored), and writes the figures that
docs/probes_cfg.md's tables are rendered from to ``docs/data/cfg_probes*.json`` (named by the
run: see ``data_file``): every linear probe's test accuracy with a 95% bootstrap interval over
the held-out *strings* (the test tokens of one string are not independent, so strings are
resampled, not tokens), the paired intervals of trained minus random and of trained minus the
Bayes ceiling (``lmsci_mi.probes.cfg.bayes.bayes_hits``, token by token), and the sample sizes.

    HF_HUB_OFFLINE=1 python benchmarks/cfg_probes.py --threads 1
    HF_HUB_OFFLINE=1 python benchmarks/cfg_probes.py --threads 2 --nts-per-level 1,3,3,3 --steps 1700
    HF_HUB_OFFLINE=1 python benchmarks/cfg_probes.py --threads 1 --nts-per-level 1,3,3,3 --random-only
    PYTHONPATH=. python benchmarks/cfg_probes.py --quick      # 30 training steps, 60 strings (out/quick/)

``--retrain`` trains even when cached; ``--plot PATH`` draws the per-layer curves.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import harness
import torch
from doc_tables.schemas.probes import (
    BelowBayes,
    CFGAttention,
    CFGCell,
    CFGEvaluationInfo,
    CFGGrammarInfo,
    CFGProbeFigures,
    CFGProbesData,
    Gap,
    LinearProbeCell,
)

from lmsci_mi.data.cfg import CFGConfig, CFGSample, Grammar, build_grammar, cfg_accepts
from lmsci_mi.model import LensModel
from lmsci_mi.probes.cfg import CFGModelConfig, CFGProbeConfig, load_cfg_model, run_cfg_probes
from lmsci_mi.probes.cfg.bayes import bayes_hits
from lmsci_mi.probes.cfg.model import random_cfg_model
from lmsci_mi.probes.cfg.probing import (
    MODELS,
    TARGETS,
    CFGProbeTable,
    cfg_hidden_states,
    cfg_probe_table,
)
from lmsci_mi.probes.linear import ProbeConfig, Split, fit_probes
from lmsci_mi.stats import (
    bootstrap_standard_error,
    percentile_bounds,
    resample_counts,
    wilson_interval,
)

NEAR_LEAVES = 2  # the acceptance looks at the two levels nearest the leaves


def _pct(x: float) -> str:
    return f"{100 * x:5.1f}"


def print_table(table: CFGProbeTable) -> None:
    levels, layers = table.axis_labels(0), table.axis_labels(1)
    targets = table.axis_labels(4)
    header = (
        f"{'level':8} {'target':19} {'major':>5} {'bayes':>5} | {'lin tr':>6} {'@':>8} {'lin rnd':>7} | "
        f"{'mh tr':>6} {'mh rnd':>6} | {'bal lin tr':>10} {'bal lin rnd':>11}"
    )
    print(header)
    print("-" * len(header))
    for a, level in enumerate(levels):
        for t, target in enumerate(targets):
            best_layer = int(table.values[a, :, 0, 0, t].argmax())
            row = [
                f"{level:8} {target:19} {_pct(float(table.majority[a, t]))}",
                f"{_pct(float(table.ceiling[a, t]))} |",
                f"{_pct(float(table.values[a, :, 0, 0, t].max())):>6}",
                f"{layers[best_layer]:>8}",
                f"{_pct(float(table.values[a, :, 1, 0, t].max())):>7} |",
                f"{_pct(float(table.values[a, :, 0, 1, t].nan_to_num(-1).max())):>6}",
                f"{_pct(float(table.values[a, :, 1, 1, t].nan_to_num(-1).max())):>6} |",
                f"{_pct(float(table.balanced[a, :, 0, 0, t].max())):>10}",
                f"{_pct(float(table.balanced[a, :, 1, 0, t].max())):>11}",
            ]
            print(" ".join(row))
    print(
        "(best layer for each cell; major = majority-class test accuracy; bayes = the exact causal\n"
        " posterior's accuracy, which no probe of a causal model beats; bal = balanced accuracy)"
    )


def print_layers(table: CFGProbeTable) -> None:
    """The full curve of the linear probes on the trained model."""
    layers = table.axis_labels(1)
    print(f"{'level':8} {'target':19} " + " ".join(f"{name:>8}" for name in layers))
    for a, level in enumerate(table.axis_labels(0)):
        for t, target in enumerate(table.axis_labels(4)):
            cells = " ".join(f"{_pct(float(v)):>8}" for v in table.values[a, :, 0, 0, t])
            print(f"{level:8} {target:19} {cells}")


def print_attention(table: CFGProbeTable) -> None:
    if table.attention is None or table.attention_random is None:
        return
    labels = table.attention.axis_labels(0)
    for name, result in (("trained", table.attention), ("random", table.attention_random)):
        print(f"{name}: mean over layers and heads (best head in brackets), from (rows) -> to")
        print(" " * 10 + " ".join(f"{label:>17}" for label in labels))
        best = result.best_head
        for a, label in enumerate(labels):
            cells = " ".join(
                f"{float(result.values[a, b]):+8.4f} [{float(best[a, b]):+.3f}]"
                for b in range(len(labels))
            )
            print(f"{label:10}{cells}")


def acceptance(table: CFGProbeTable) -> list[tuple[str, bool]]:
    checks = []
    n_levels = table.values.shape[0]
    for a in range(n_levels - NEAR_LEAVES, n_levels):
        level = table.axis_labels(0)[a]
        for t, target in enumerate(table.axis_labels(4)):
            if target == "ancestor at NT end":
                continue
            trained = float(table.values[a, :, 0, 0, t].max())
            random = float(table.values[a, :, 1, 0, t].max())
            bal_trained = float(table.balanced[a, :, 0, 0, t].max())
            bal_random = float(table.balanced[a, :, 1, 0, t].max())
            checks.append((f"{level} {target}: linear >= 90% ({_pct(trained)})", trained >= 0.9))
            checks.append(
                (
                    f"{level} {target}: >= 20 points over random, accuracy "
                    f"({_pct(trained - random)}), balanced accuracy ({_pct(bal_trained - bal_random)})",
                    bal_trained - bal_random >= 0.2,
                )
            )
    if table.evaluation is not None:
        validity = table.evaluation.validity
        checks.append((f"validity >= 90% ({_pct(validity)})", validity >= 0.9))
    if table.training is not None:
        minutes = table.training.seconds / 60
        checks.append((f"training <= 20 min ({minutes:.1f} min)", minutes <= 20))
    return checks


# ---------------------------------------------------------------- the doc figures (docs/data)

BOOTSTRAP = 1000
"""Resamples of the held-out strings behind every interval."""
BOOTSTRAP_SEED = 0


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--retrain", action="store_true", help="train even when cached")
    parser.add_argument("--nts-per-level", default="1,3,3",
                        help="the grammar's NTs per level, root first (default 1,3,3; 1,3,3,3 is one level deeper)")
    parser.add_argument("--steps", type=int, default=CFGModelConfig().steps,
                        help="training steps (default: the config's)")
    parser.add_argument("--layers", type=int, default=CFGModelConfig().n_layers,
                        help="transformer layers (default: the config's)")
    parser.add_argument("--result", type=Path, default=Path("out") / "cfg_probes.json",
                        help="where to save the full result")
    parser.add_argument("--plot", type=Path, default=None, help="draw the per-layer curves here")
    parser.add_argument("--random-only", action="store_true",
                        help="probe only the random-weights model (no training; linear probes, no evaluation)")


def levels_of(args: argparse.Namespace) -> tuple[int, ...]:
    return tuple(int(n) for n in args.nts_per_level.split(","))


def data_file(args: argparse.Namespace) -> Path:
    """docs/data/cfg_probes.json for the default run; the deeper grammar and other budgets get
    their own file: cfg_probes_deep.json, cfg_probes_deep_1700steps.json, ..."""
    levels, name = levels_of(args), "cfg_probes"
    if levels != CFGConfig().nts_per_level:
        name += "_deep" if levels == (1, 3, 3, 3) else "_" + "-".join(map(str, levels))
    if args.steps != CFGModelConfig().steps:
        name += f"_{args.steps}steps"
    if args.layers != CFGModelConfig().n_layers:
        name += f"_{args.layers}layers"
    if args.random_only:
        name += "_random"
    return harness.DATA / f"{name}.json"


def weighted(hit: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Accuracy and balanced accuracy (mean per-class recall) of ``hit`` under each row of
    ``weights`` ``[B, token]``; a class missing from a resample is left out of its mean."""
    hit = hit.double()
    accuracy = (weights * hit).sum(-1) / weights.sum(-1)
    recalls = []
    for c in labels.unique():
        in_class = (labels == c).double()
        total = (weights * in_class).sum(-1)
        recalls.append(torch.where(total > 0, (weights * hit * in_class).sum(-1) / total.clamp(min=1e-12), torch.nan))
    return accuracy, torch.stack(recalls).nanmean(0)


def interval(replicates: torch.Tensor) -> list[float]:
    return percentile_bounds(replicates).tolist()


@dataclass(frozen=True)
class Design:
    """The probes' strings and split, and the bootstrap over the held-out strings."""

    sample: CFGSample
    tokens: torch.Tensor
    ancestors: torch.Tensor
    boundaries: torch.Tensor
    mask: torch.Tensor
    split: Split
    """By string."""
    test_rows: torch.Tensor
    string_weights: torch.Tensor
    """``[BOOTSTRAP, string]``: how often each resample draws each held-out string (0 elsewhere)."""
    bayes: dict[str, list[torch.Tensor]]
    """The Bayes reader's hits on the held-out tokens, by target and level."""


def design(grammar: Grammar, config: CFGProbeConfig) -> Design:
    """The sample, split and seeds :func:`run_cfg_probes` uses, and one set of resampled strings
    for every interval (so that all of them are paired)."""
    sample = grammar.sample(config.n_sequences, seed=config.seed)
    tokens, ancestors, boundaries, mask = sample.padded(bos=grammar.bos, pad=grammar.eos)
    split = Split.random(config.n_sequences, seed=config.seed)
    test_rows = split.test.sort().values
    weights = torch.zeros(BOOTSTRAP, config.n_sequences, dtype=torch.float64)
    weights[:, test_rows] = resample_counts(len(test_rows), BOOTSTRAP, seed=BOOTSTRAP_SEED)
    return Design(sample, tokens, ancestors, boundaries, mask, split, test_rows, weights,
                  bayes_hits(grammar, sample, test_rows))


@dataclass(frozen=True)
class Cell:
    """One (level, target): the tokens that carry its label and their split by string."""

    a: int
    level: int
    t: int
    target: str
    carries: torch.Tensor
    y_all: torch.Tensor
    split: Split
    rows: torch.Tensor
    """Each carrying token's string."""

    @property
    def y(self) -> torch.Tensor:
        return self.y_all[self.split.test]


def cell_of(d: Design, a: int, level: int, t: int, target: str) -> Cell:
    carries = d.boundaries[..., level] & d.mask if target == "ancestor at NT end" else d.mask
    y_all = (d.boundaries[..., level].long() if target == "boundary" else d.ancestors[..., level])[carries]
    rows = torch.nonzero(carries)[:, 0]
    split = Split(*(torch.nonzero(torch.isin(rows, part)).flatten() for part in (d.split.train, d.split.val, d.split.test)))
    return Cell(a, level, t, target, carries, y_all, split, rows)


def probe_hits(table: CFGProbeTable, hidden: torch.Tensor, cell: Cell, m: int, config: CFGProbeConfig) -> list[torch.Tensor]:
    """Per layer, whether the linear probe is right on each held-out token: the probes refitted
    exactly as :func:`run_cfg_probes` fits them (same sample, split, grid and seed; L-BFGS is
    deterministic), each refitted accuracy checked against the table's."""
    probe_config = ProbeConfig(control=False, bootstrap=0, l2_grid=config.l2_grid, seed=config.seed)
    flat = hidden[:, cell.carries]
    fits, _ = fit_probes(flat, cell.y_all, cell.split, probe_config)
    hits = []
    for layer, fit in enumerate(fits):
        hit = torch.tensor(fit.probe.classes)[fit.probe.decision(flat[layer, cell.split.test]).argmax(-1)] == cell.y
        if abs(float(hit.double().mean()) - float(table.values[cell.a, layer, m, 0, cell.t])) > 1e-6:
            raise RuntimeError(f"refitted probe disagrees with the table: {cell.level} {cell.target} {MODELS[m]} "
                               f"layer {layer}")
        hits.append(hit)
    return hits


def linear_cell(table: CFGProbeTable, cell: Cell, m: int, hits: list[torch.Tensor],
                weights: torch.Tensor) -> tuple[LinearProbeCell, tuple[torch.Tensor, torch.Tensor]]:
    """One model's linear probes on one cell, and the bootstrap replicates of its best layers
    (accuracy and balanced accuracy each its own best layer, as ``table.best()`` picks them)."""
    accuracy, balanced = table.values[cell.a, :, m, 0, cell.t], table.balanced[cell.a, :, m, 0, cell.t]
    best, best_balanced = int(accuracy.argmax()), int(balanced.argmax())
    per_layer = [weighted(hit, cell.y, weights) for hit in hits]
    boot = (per_layer[best][0], per_layer[best_balanced][1])
    return LinearProbeCell(
        per_layer=accuracy.tolist(),
        per_layer_se=[float(bootstrap_standard_error(acc)) for acc, _ in per_layer],
        balanced_per_layer=balanced.tolist(), best_layer=best, best=float(accuracy[best]), ci95=interval(boot[0]),
        balanced_best_layer=best_balanced, balanced=float(balanced[best_balanced]), balanced_ci95=interval(boot[1]),
    ), boot


def figures_of_cell(table: CFGProbeTable, d: Design, cell: Cell, hidden: dict[str, torch.Tensor],
                    config: CFGProbeConfig, names: tuple[str, ...]) -> CFGCell:
    """Every model's probes on one cell and, with both models, the paired gaps."""
    bayes_hit = d.bayes[cell.target][cell.level]
    if len(bayes_hit) != len(cell.y) or abs(float(bayes_hit.double().mean()) - float(table.ceiling[cell.a, cell.t])) > 1e-6:
        raise RuntimeError(f"per-token Bayes reader disagrees with the table: {cell.level} {cell.target}")
    weights = d.string_weights[:, cell.rows[cell.split.test]]
    out = CFGCell(level=cell.level, target=cell.target, n_test_tokens=len(cell.y),
                  n_test_strings=len(cell.rows[cell.split.test].unique()), n_train_tokens=len(cell.split.train),
                  n_val_tokens=len(cell.split.val), majority=float(table.majority[cell.a, cell.t]),
                  bayes=float(table.ceiling[cell.a, cell.t]))
    boot = {}
    for name in names:
        m = MODELS.index(name)
        out[f"linear_{name}"], boot[name] = linear_cell(table, cell, m, probe_hits(table, hidden[name], cell, m, config),
                                                        weights)
        if config.multihead:
            out[f"multihead_{name}"] = {"per_layer": table.values[cell.a, :, m, 1, cell.t].tolist(),
                                        "balanced_per_layer": table.balanced[cell.a, :, m, 1, cell.t].tolist()}
    if names == MODELS:
        trained, random = out["linear_trained"], out["linear_random"]
        out["gap"] = Gap(accuracy=trained["best"] - random["best"], ci95=interval(boot["trained"][0] - boot["random"][0]),
                         balanced=trained["balanced"] - random["balanced"],
                         balanced_ci95=interval(boot["trained"][1] - boot["random"][1]))
        out["below_bayes"] = BelowBayes(accuracy=out["bayes"] - trained["best"],
                                        ci95=interval(weighted(bayes_hit, cell.y, weights)[0] - boot["trained"][0]))
    return out


def probe_figures(table: CFGProbeTable, models: dict[str, LensModel], grammar: Grammar, config: CFGProbeConfig,
                  names: tuple[str, ...] = MODELS) -> CFGProbeFigures:
    """Every (level, target) cell: the linear probes per layer and at the best layer, with 95%
    intervals from a bootstrap over the held-out strings, paired across layers, models and the
    Bayes reader (the same resampled strings for all), and the multi-head probes' points."""
    d = design(grammar, config)
    hidden = {name: cfg_hidden_states(models[name], d.tokens, d.mask) for name in names}
    cells = [figures_of_cell(table, d, cell_of(d, a, level, t, target), hidden, config, names)
             for a, level in enumerate(range(1, grammar.n_levels)) for t, target in enumerate(TARGETS)]
    return CFGProbeFigures(n_strings=config.n_sequences, split="60/20/20 by string", seed=config.seed,
                           n_test_strings=len(d.test_rows), bootstrap=BOOTSTRAP, layers=list(table.axis_labels(1)),
                           cells=cells)


def loss_floor(grammar: Grammar, n_documents: int = 500, seed: int = 12345) -> dict[str, float]:
    """The grammar's entropy per predicted token (terminals and EOS) on the evaluation's held-out
    documents (its seed and size): every NT node picks one of its rules uniformly, so a string
    carries the sum of ln(rules) over its nodes (for an unambiguous grammar), spread over its
    len + 1 predicted tokens. This is the held-out loss of the grammar itself."""
    sample = grammar.sample(n_documents, seed=seed)
    nats = 0.0
    for level in range(grammar.n_levels):
        rules = torch.tensor([len(r) for r in grammar.rules[level]], dtype=torch.float64)
        ends = sample.boundaries[:, level]  # one end per node
        nats += float(rules[sample.ancestors[ends, level]].log().sum())
    predicted = len(sample.tokens) + len(sample)
    return {
        "loss_floor": nats / predicted,
        "nodes_per_string": float(sample.boundaries.sum()) / len(sample),
        "predicted_per_string": predicted / len(sample),
    }


def cost_figures(grammar: Grammar) -> dict[str, float]:
    """Seconds to sample 10,000 labelled strings and to parse 1,000 (median of 3)."""
    def median(fn) -> float:
        times = []
        for _ in range(3):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return sorted(times)[1]

    strings = grammar.sample(1000, seed=1).sequences()
    return {
        "sample_10000": median(lambda: grammar.sample(10_000, seed=0)),
        "parse_1000": median(lambda: cfg_accepts(grammar, strings)),
    }


def grammar_info(grammar: Grammar) -> CFGGrammarInfo:
    sample = grammar.sample(10_000, seed=0)
    return CFGGrammarInfo(nts_per_level=list(grammar.config.nts_per_level), length_range=list(grammar.length_range),
                          mean_length=float(sample.lengths.double().mean()), rules=str(grammar),
                          **loss_floor(grammar))


def evaluation_info(table: CFGProbeTable) -> CFGEvaluationInfo:
    """The trained GPT's next-token accuracy, loss and generation validity (with its Wilson
    interval over the samples)."""
    ev = table.evaluation
    n_valid = round(ev.validity * ev.n_samples)
    return CFGEvaluationInfo(next_token_accuracy=ev.next_token_accuracy, loss=ev.loss, validity=ev.validity,
                             validity_ci95=wilson_interval(n_valid, ev.n_samples).as_list(),
                             n_samples=ev.n_samples, distinct=ev.distinct)


def attention_info(table: CFGProbeTable) -> CFGAttention:
    return CFGAttention(
        levels=list(table.attention.axis_labels(0)), pairs=table.attention.counts.tolist(),
        **{name: {"mean": result.values.tolist(), "best_head": result.best_head.tolist(),
                  "per_head": result.per_head.tolist()}
           for name, result in (("trained", table.attention), ("random", table.attention_random))},
    )


def doc_figures(table: CFGProbeTable, models: dict[str, LensModel], grammar: Grammar, config: CFGProbeConfig,
                model_config: CFGModelConfig, seconds: dict[str, float], names: tuple[str, ...] = MODELS) -> CFGProbesData:
    """Everything docs/probes_cfg.md shows about one run, as plain data."""
    data = CFGProbesData(
        grammar=grammar_info(grammar), model=dict(model_config.params()),
        training=None if table.training is None else dict(table.training.__dict__),
        models=list(names), seconds={**seconds, **cost_figures(grammar)},
    )
    if table.evaluation is not None:
        data["evaluation"] = evaluation_info(table)
    data["probes"] = probe_figures(table, models, grammar, config, names)
    if table.attention is not None and table.attention_random is not None:
        data["attention"] = attention_info(table)
    return data


# ---------------------------------------------------------------- the run


def models_for(args: argparse.Namespace, grammar_config: CFGConfig,
               model_config: CFGModelConfig) -> tuple[dict[str, LensModel], tuple[str, ...]]:
    """The trained GPT (trained first when not cached, so that the probing's cost is its own) and
    its random-weights twin; with --random-only the twin alone (the baseline needs no training)."""
    if args.random_only:
        random = random_cfg_model(grammar_config, model_config)
        return {"trained": random, "random": random}, ("random",)
    trained, _ = load_cfg_model(grammar_config, model_config, train=True, retrain=args.retrain, progress=True)
    return {"trained": trained, "random": random_cfg_model(grammar_config, model_config, device=trained.device)}, MODELS


def probe_table(args: argparse.Namespace, models: dict[str, LensModel], grammar: Grammar, grammar_config: CFGConfig,
                model_config: CFGModelConfig, probe_config: CFGProbeConfig) -> CFGProbeTable:
    if args.random_only:
        return cfg_probe_table(models["random"], models["random"], grammar, probe_config, progress=True)
    return run_cfg_probes(probe_config, grammar_config=grammar_config, model_config=model_config, train=False,
                          progress=True)


def report(table: CFGProbeTable, random_only: bool) -> None:
    """The training run, the evaluation, the tables and (with training) the acceptance checks."""
    if table.training is not None:
        t = table.training
        print(f"\ntraining: {t.seconds:.0f} s wall ({t.seconds / 60:.1f} min), {t.cpu_seconds:.0f} CPU-s on "
              f"{t.threads} threads, {t.tokens / 1e6:.2f}M tokens, final loss {t.final_loss:.3f} nats")
    if table.evaluation is not None:
        ev = table.evaluation
        print(f"next-token accuracy {_pct(ev.next_token_accuracy)}%, held-out loss {ev.loss:.3f}; validity "
              f"{_pct(ev.validity)}% of {ev.n_samples} samples ({_pct(ev.distinct)}% of valid ones distinct)")
    if random_only:
        print("(random-only: the 'trained' columns below are the random-weights model too)")
    print_table(table)
    print("\nlinear probe on the trained model, per layer:")
    print_layers(table)
    print("\nattention transitions (bias-removed attention from NT ends to the last earlier NT end):")
    print_attention(table)
    if not random_only:
        print("\nacceptance (the two levels nearest the leaves; linear probes):")
        for text, ok in acceptance(table):
            print(f"  [{'ok' if ok else 'FAIL'}] {text}")


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags, out=data_file)
    args = run.args
    grammar_config = CFGConfig(nts_per_level=levels_of(args))
    model_config = CFGModelConfig(steps=30 if run.quick else args.steps, n_layers=args.layers)
    probe_config = (CFGProbeConfig(n_sequences=60, multihead_steps=20, n_samples=20) if run.quick
                    else CFGProbeConfig())
    if args.random_only:
        probe_config = CFGProbeConfig(n_sequences=probe_config.n_sequences, multihead=False, attention=False,
                                      evaluate=False)
    grammar = build_grammar(grammar_config)
    print(f"grammar ({grammar.n_levels} NT levels, strings of {grammar.length_range} terminals):\n{grammar}")
    models, names = models_for(args, grammar_config, model_config)
    start, cpu_start = time.perf_counter(), time.process_time()
    table = probe_table(args, models, grammar, grammar_config, model_config, probe_config)
    seconds = {"probe_evaluate_attention": time.perf_counter() - start,
               "probe_evaluate_attention_cpu": time.process_time() - cpu_start}
    print(f"probing + evaluation + attention: {seconds['probe_evaluate_attention']:.0f} s")
    report(table, args.random_only)
    print(f"\nsaved {table.save(harness.QUICK / 'cfg_probes_result.json' if run.quick else args.result)}")
    if args.plot is not None:
        table.plot(args.plot)
    run.write(doc_figures(table, models, grammar, probe_config, model_config, seconds, names))


if __name__ == "__main__":
    main()

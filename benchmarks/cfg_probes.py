"""DP-feature probes on a GPT trained on a synthetic CFG (Allen-Zhu & Li, Physics of LMs Part 1).

Trains the default CFG GPT (cached under the lmsci-mi cache folder, keyed by grammar, model and
training settings), then probes it and the same architecture with random weights at every level
and layer, with plain linear probes and the paper's multi-head linear probe. Prints the training
cost, next-token accuracy, generation validity (the DP parser's verdict on the model's samples),
the per-level table, the attention-transition numbers and the acceptance checks, saves the
result as ``out/cfg_probes.json`` (git-ignored), and writes the figures that docs/probes_cfg.md's
tables are rendered from to ``docs/data/cfg_probes*.json`` (see ``data_path``): every linear
probe's test accuracy with a 95% bootstrap interval over the held-out *strings* (the test tokens
of one string are not independent, so strings are resampled, not tokens), the paired intervals
of trained minus random and of trained minus the Bayes ceiling, and the sample sizes.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/cfg_probes.py --threads 1
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/cfg_probes.py --threads 1 --nts-per-level 1,3,3,3 --steps 1700

Flags: ``--retrain`` trains even when cached; ``--out PATH`` saves the full result elsewhere;
``--data PATH`` the doc figures; ``--plot PATH`` draws the per-layer curves; ``--threads N`` sets
torch's threads (training and probing).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import time
from pathlib import Path

import torch

from lmsci_mi.data.cfg import CFGConfig, Grammar, build_grammar, cfg_accepts
from lmsci_mi.model import LensModel
from lmsci_mi.probes.cfg import CFGModelConfig, CFGProbeConfig, load_cfg_model, run_cfg_probes
from lmsci_mi.probes.cfg.bayes import _filter, grammar_chain
from lmsci_mi.probes.cfg.model import random_cfg_model
from lmsci_mi.probes.cfg.probing import (
    MODELS,
    TARGETS,
    CFGProbeTable,
    cfg_hidden_states,
    cfg_probe_table,
)
from lmsci_mi.probes.linear import ProbeConfig, Split, fit_probes

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


def data_path(levels: tuple[int, ...], steps: int, layers: int, *, random_only: bool = False) -> Path:
    """docs/data/cfg_probes.json for the default run; the deeper grammar and other budgets get
    their own file: cfg_probes_deep.json, cfg_probes_deep_1700steps.json, ..."""
    name = "cfg_probes"
    if levels != CFGConfig().nts_per_level:
        name += "_deep" if levels == (1, 3, 3, 3) else "_" + "-".join(map(str, levels))
    if steps != CFGModelConfig().steps:
        name += f"_{steps}steps"
    if layers != CFGModelConfig().n_layers:
        name += f"_{layers}layers"
    if random_only:
        name += "_random"
    return Path("docs") / "data" / f"{name}.json"


def _bayes_hits(grammar: Grammar, sample, rows: torch.Tensor) -> dict[tuple[int, str], torch.Tensor]:
    """Per test token, whether the exact causal posterior's argmax is right: the per-token form
    of :func:`lmsci_mi.probes.cfg.bayes.bayes_accuracy` (same filter, same decisions), with the
    tokens in the probes' order (test strings ascending, positions ascending)."""
    chain = grammar_chain(grammar)
    tokens, ancestors, boundaries, mask = (x[rows] for x in sample.padded(bos=None))
    posterior = _filter(chain, tokens, mask)[mask]
    ancestors, boundaries = ancestors[mask], boundaries[mask]
    hits = {}
    for level in range(1, grammar.n_levels):
        n_nts = int(chain.ancestors[:, level].max()) + 1
        by_nt = torch.nn.functional.one_hot(chain.ancestors[:, level], n_nts).double()
        truth, at_end = ancestors[:, level], boundaries[:, level]
        hits[level, "ancestor"] = (posterior @ by_nt).argmax(-1) == truth
        end_posterior = (posterior * chain.ends[:, level]) @ by_nt
        hits[level, "ancestor at NT end"] = end_posterior[at_end].argmax(-1) == truth[at_end]
        guess = posterior @ chain.ends[:, level].double() > 0.5
        hits[level, "boundary"] = guess == at_end
    return hits


def _weighted(hit: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
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


def _interval(samples: torch.Tensor) -> list[float]:
    low, high = torch.quantile(samples.float(), torch.tensor([0.025, 0.975])).tolist()
    return [low, high]


def probe_figures(
    table: CFGProbeTable,
    models: dict[str, LensModel],
    grammar: Grammar,
    config: CFGProbeConfig,
    names: tuple[str, ...] = MODELS,
) -> dict:
    """Every (level, target) cell: the linear probes per layer and at the best layer, with 95%
    intervals from a bootstrap over the held-out strings, paired across layers, models and the
    Bayes reader (the same resampled strings for all), and the multi-head probes' points.

    The linear probes are refitted here exactly as :func:`run_cfg_probes` fits them (same sample,
    split, grid and seed; L-BFGS is deterministic) to keep each test token's hit, and each
    refitted accuracy is checked against the table's.
    """
    sample = grammar.sample(config.n_sequences, seed=config.seed)
    tokens, ancestors, boundaries, mask = sample.padded(bos=grammar.bos, pad=grammar.eos)
    seq_split = Split.random(config.n_sequences, seed=config.seed)
    test_rows = seq_split.test.sort().values
    probe_config = ProbeConfig(control=False, bootstrap=0, l2_grid=config.l2_grid, seed=config.seed)
    bayes = _bayes_hits(grammar, sample, test_rows)
    generator = torch.Generator().manual_seed(BOOTSTRAP_SEED)
    draws = torch.randint(len(test_rows), (BOOTSTRAP, len(test_rows)), generator=generator)
    string_weights = torch.zeros(BOOTSTRAP, config.n_sequences, dtype=torch.float64)
    string_weights.scatter_add_(1, test_rows[draws], torch.ones_like(draws, dtype=torch.float64))

    hidden = {name: cfg_hidden_states(models[name], tokens, mask) for name in names}
    cells = []
    for a, level in enumerate(range(1, grammar.n_levels)):
        for t, target in enumerate(TARGETS):
            carries = boundaries[..., level] & mask if target == "ancestor at NT end" else mask
            y_all = (boundaries[..., level].long() if target == "boundary" else ancestors[..., level])[carries]
            rows = torch.nonzero(carries)[:, 0]
            split = Split(*(torch.nonzero(torch.isin(rows, part)).flatten()
                            for part in (seq_split.train, seq_split.val, seq_split.test)))
            y = y_all[split.test]
            weights = string_weights[:, rows[split.test]]
            hits = {}
            for name in names:
                m = MODELS.index(name)
                flat = hidden[name][:, carries]
                fits, _ = fit_probes(flat, y_all, split, probe_config)
                per_layer = []
                for layer, fit in enumerate(fits):
                    guess = torch.tensor(fit.probe.classes)[fit.probe.decision(flat[layer, split.test]).argmax(-1)]
                    hit = guess == y
                    if abs(float(hit.double().mean()) - float(table.values[a, layer, m, 0, t])) > 1e-6:
                        raise RuntimeError(f"refitted probe disagrees with the table: {level} {target} {name} layer {layer}")
                    per_layer.append(hit)
                hits[name] = per_layer
            bayes_hit = bayes[level, target]
            if len(bayes_hit) != len(y) or abs(float(bayes_hit.double().mean()) - float(table.ceiling[a, t])) > 1e-6:
                raise RuntimeError(f"per-token Bayes reader disagrees with the table: {level} {target}")
            cell: dict = {
                "level": level, "target": target,
                "n_test_tokens": len(y), "n_test_strings": len(rows[split.test].unique()),
                "n_train_tokens": len(split.train), "n_val_tokens": len(split.val),
                "majority": float(table.majority[a, t]), "bayes": float(table.ceiling[a, t]),
            }
            boot = {}
            for name in names:
                m = MODELS.index(name)
                accuracy = table.values[a, :, m, 0, t]
                balanced = table.balanced[a, :, m, 0, t]
                # the best layers on the test split, as table.best() picks them (accuracy and
                # balanced accuracy each its own); the interval is that layer's
                best, best_balanced = int(accuracy.argmax()), int(balanced.argmax())
                per_layer_boot = [_weighted(hit, y, weights) for hit in hits[name]]
                boot[name] = (per_layer_boot[best][0], per_layer_boot[best_balanced][1])
                cell[f"linear_{name}"] = {
                    "per_layer": accuracy.tolist(),
                    "per_layer_se": [float(acc.std()) for acc, _ in per_layer_boot],
                    "balanced_per_layer": balanced.tolist(),
                    "best_layer": best,
                    "best": float(accuracy[best]), "ci95": _interval(boot[name][0]),
                    "balanced_best_layer": best_balanced,
                    "balanced": float(balanced[best_balanced]), "balanced_ci95": _interval(boot[name][1]),
                }
                if config.multihead:
                    cell[f"multihead_{name}"] = {
                        "per_layer": table.values[a, :, m, 1, t].tolist(),
                        "balanced_per_layer": table.balanced[a, :, m, 1, t].tolist(),
                    }
            if names != MODELS:
                cells.append(cell)
                continue
            trained, random = cell["linear_trained"], cell["linear_random"]
            cell["gap"] = {
                "accuracy": trained["best"] - random["best"],
                "ci95": _interval(boot["trained"][0] - boot["random"][0]),
                "balanced": trained["balanced"] - random["balanced"],
                "balanced_ci95": _interval(boot["trained"][1] - boot["random"][1]),
            }
            bayes_boot = _weighted(bayes_hit, y, weights)[0]
            cell["below_bayes"] = {
                "accuracy": cell["bayes"] - trained["best"],
                "ci95": _interval(bayes_boot - boot["trained"][0]),
            }
            cells.append(cell)
    return {
        "n_strings": config.n_sequences, "split": "60/20/20 by string", "seed": config.seed,
        "n_test_strings": len(test_rows), "bootstrap": BOOTSTRAP,
        "layers": list(table.axis_labels(1)), "cells": cells,
    }


def _wilson(successes: int, n: int) -> list[float]:
    """The 95% Wilson interval of a binomial proportion."""
    z, p = 1.959964, successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [centre - half, centre + half]


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


def cost_figures(grammar: Grammar) -> dict:
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


def doc_figures(
    table: CFGProbeTable,
    models: dict[str, LensModel],
    grammar: Grammar,
    config: CFGProbeConfig,
    model_config: CFGModelConfig,
    command: str,
    seconds: dict[str, float],
    names: tuple[str, ...] = MODELS,
) -> dict:
    """Everything docs/probes_cfg.md shows about one run, as plain data."""
    sample = grammar.sample(10_000, seed=0)
    data: dict = {
        "command": command,
        "date": datetime.date.today().isoformat(),
        "threads": torch.get_num_threads(),
        "grammar": {
            "nts_per_level": list(grammar.config.nts_per_level),
            "length_range": list(grammar.length_range),
            "mean_length": float(sample.lengths.double().mean()),
            "rules": str(grammar),
            **loss_floor(grammar),
        },
        "model": {k: v for k, v in model_config.params().items()},
        "training": None if table.training is None else dict(table.training.__dict__),
        "models": list(names),
        "seconds": {**seconds, **cost_figures(grammar)},
    }
    if table.evaluation is not None:
        ev = table.evaluation
        n_valid = round(ev.validity * ev.n_samples)
        data["evaluation"] = {
            "next_token_accuracy": ev.next_token_accuracy, "loss": ev.loss,
            "validity": ev.validity, "validity_ci95": _wilson(n_valid, ev.n_samples),
            "n_samples": ev.n_samples, "distinct": ev.distinct,
        }
    data["probes"] = probe_figures(table, models, grammar, config, names)
    if table.attention is not None and table.attention_random is not None:
        data["attention"] = {
            "levels": list(table.attention.axis_labels(0)),
            "pairs": table.attention.counts.tolist(),
            **{
                name: {
                    "mean": result.values.tolist(), "best_head": result.best_head.tolist(),
                    "per_head": result.per_head.tolist(),
                }
                for name, result in (("trained", table.attention), ("random", table.attention_random))
            },
        }
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--retrain", action="store_true", help="train even when cached")
    parser.add_argument(
        "--nts-per-level",
        default="1,3,3",
        help="the grammar's NTs per level, root first (default 1,3,3; 1,3,3,3 is one level deeper)",
    )
    parser.add_argument(
        "--steps", type=int, default=CFGModelConfig().steps, help="training steps (default: the config's)"
    )
    parser.add_argument(
        "--layers", type=int, default=CFGModelConfig().n_layers, help="transformer layers (default: the config's)"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("out") / "cfg_probes.json", help="where to save the result"
    )
    parser.add_argument(
        "--data", type=Path, default=None,
        help="where to write the doc figures (default: docs/data/cfg_probes*.json, named by the run)",
    )
    parser.add_argument("--plot", type=Path, default=None, help="draw the per-layer curves here")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument(
        "--random-only", action="store_true",
        help="probe only the random-weights model (no training; linear probes, no evaluation)",
    )
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    levels = tuple(int(n) for n in args.nts_per_level.split(","))
    grammar_config = CFGConfig(nts_per_level=levels)
    model_config, probe_config = CFGModelConfig(steps=args.steps, n_layers=args.layers), CFGProbeConfig()
    grammar = build_grammar(grammar_config)
    print(f"grammar ({grammar.n_levels} NT levels, strings of {grammar.length_range} terminals):")
    print(grammar)
    print(f"torch threads: {torch.get_num_threads()}")
    flags = [] if args.threads is None else [f"--threads {args.threads}"]
    if levels != CFGConfig().nts_per_level:
        flags.append(f"--nts-per-level {args.nts_per_level}")
    if args.steps != CFGModelConfig().steps:
        flags.append(f"--steps {args.steps}")
    if args.layers != CFGModelConfig().n_layers:
        flags.append(f"--layers {args.layers}")
    if args.random_only:
        flags.append("--random-only")
    command = " ".join(["HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/cfg_probes.py", *flags])
    data_file = args.data if args.data is not None else data_path(
        levels, args.steps, args.layers, random_only=args.random_only
    )

    if args.random_only:
        # The baseline needs no training: probe the seeded random-weights model alone.
        random = random_cfg_model(grammar_config, model_config)
        models = {"trained": random, "random": random}
        probe_config = CFGProbeConfig(multihead=False, attention=False, evaluate=False)
        start, cpu_start = time.perf_counter(), time.process_time()
        table = cfg_probe_table(random, random, grammar, probe_config, progress=True)
        names: tuple[str, ...] = ("random",)
    else:
        # Train (or load) first, so the probing cost below is the probing's alone.
        trained, _ = load_cfg_model(
            grammar_config, model_config, train=True, retrain=args.retrain, progress=True
        )
        models = {"trained": trained, "random": random_cfg_model(grammar_config, model_config, device=trained.device)}
        start, cpu_start = time.perf_counter(), time.process_time()
        table = run_cfg_probes(
            probe_config,
            grammar_config=grammar_config,
            model_config=model_config,
            train=False,
            progress=True,
        )
        names = MODELS
    probe_seconds = time.perf_counter() - start
    probe_cpu_seconds = time.process_time() - cpu_start
    training = table.training
    if training is not None:
        print(
            f"\ntraining: {training.seconds:.0f} s wall ({training.seconds / 60:.1f} min), "
            f"{training.cpu_seconds:.0f} CPU-s on {training.threads} threads, "
            f"{training.tokens / 1e6:.2f}M tokens, final loss {training.final_loss:.3f} nats"
        )
    if table.evaluation is not None:
        ev = table.evaluation
        print(
            f"next-token accuracy {_pct(ev.next_token_accuracy)}%, held-out loss {ev.loss:.3f}; "
            f"validity {_pct(ev.validity)}% of {ev.n_samples} samples "
            f"({_pct(ev.distinct)}% of valid ones distinct)"
        )
    print(f"probing + evaluation + attention: {probe_seconds:.0f} s, {probe_cpu_seconds:.0f} CPU-s\n")
    if args.random_only:
        print("(random-only: the 'trained' columns below are the random-weights model too)")
    print_table(table)
    print("\nlinear probe on the trained model, per layer:")
    print_layers(table)
    print(
        "\nattention transitions (bias-removed attention from NT ends to the last earlier NT end):"
    )
    print_attention(table)
    if not args.random_only:
        print("\nacceptance (the two levels nearest the leaves; linear probes):")
        for text, ok in acceptance(table):
            print(f"  [{'ok' if ok else 'FAIL'}] {text}")
    path = table.save(args.out)
    print(f"\nsaved {path}")
    if args.plot is not None:
        table.plot(args.plot)
        print(f"drew {args.plot}")
    data = doc_figures(
        table, models, grammar, probe_config, model_config, command,
        {"probe_evaluate_attention": probe_seconds, "probe_evaluate_attention_cpu": probe_cpu_seconds},
        names,
    )
    data_file.parent.mkdir(parents=True, exist_ok=True)
    data_file.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {data_file}")

if __name__ == "__main__":
    main()

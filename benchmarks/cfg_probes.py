"""DP-feature probes on a GPT trained on a synthetic CFG (Allen-Zhu & Li, Physics of LMs Part 1).

Trains the default CFG GPT (cached under the lmsci-mi cache folder, keyed by grammar, model and
training settings), then probes it and the same architecture with random weights at every level
and layer, with plain linear probes and the paper's multi-head linear probe. Prints the training
cost, next-token accuracy, generation validity (the DP parser's verdict on the model's samples),
the per-level table, the attention-transition numbers and the acceptance checks, and saves the
result as ``out/cfg_probes.json`` (git-ignored).

    flock /tmp/lmsci-heavy.lock env HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/cfg_probes.py

Flags: ``--retrain`` trains even when cached; ``--out PATH`` saves the result elsewhere.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from lmsci_mi.data.cfg import CFGConfig, build_grammar
from lmsci_mi.probes.cfg import CFGModelConfig, CFGProbeConfig, load_cfg_model, run_cfg_probes
from lmsci_mi.probes.cfg.probing import CFGProbeTable

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
    args = parser.parse_args()
    levels = tuple(int(n) for n in args.nts_per_level.split(","))
    grammar_config = CFGConfig(nts_per_level=levels)
    model_config, probe_config = CFGModelConfig(steps=args.steps, n_layers=args.layers), CFGProbeConfig()
    grammar = build_grammar(grammar_config)
    print(f"grammar ({grammar.n_levels} NT levels, strings of {grammar.length_range} terminals):")
    print(grammar)
    print(f"torch threads: {torch.get_num_threads()}")
    if args.retrain:
        load_cfg_model(grammar_config, model_config, retrain=True, progress=True)
    start = time.perf_counter()
    table = run_cfg_probes(
        probe_config,
        grammar_config=grammar_config,
        model_config=model_config,
        train=True,
        progress=True,
    )
    training = table.training
    probe_seconds = time.perf_counter() - start - (training.seconds if training is not None else 0)
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
    print(f"probing + evaluation + attention: {probe_seconds:.0f} s (model load included)\n")
    print_table(table)
    print("\nlinear probe on the trained model, per layer:")
    print_layers(table)
    print(
        "\nattention transitions (bias-removed attention from NT ends to the last earlier NT end):"
    )
    print_attention(table)
    print("\nacceptance (the two levels nearest the leaves; linear probes):")
    for text, ok in acceptance(table):
        print(f"  [{'ok' if ok else 'FAIL'}] {text}")
    path = table.save(args.out)
    print(f"\nsaved {path}")


if __name__ == "__main__":
    main()

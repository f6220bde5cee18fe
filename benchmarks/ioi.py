"""The IOI circuit on SmolLM2 over several prompt draws: how much the docs' one-seed figures move.

    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/ioi.py                 # seeds 0-2, docs/data/ioi.json
    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/ioi.py --seeds 3 4     # add draws

Each seed is the docs' reproduction (``docs/ioi.md``): 24 prompts from the first 4 templates,
``IOIConfig(n_sender_candidates=6)``, a fresh draw of names, places and objects per seed. Per seed
it records the logit difference (mean and standard error over the prompts), the share of prompts
where it is positive, the circuit's faithfulness, the share the name movers remove, and the heads of
each class. The summary gives the mean and the standard deviation over seeds, and for each head how
many seeds put it in its class. Each seed also keeps every circuit head's evidence (DLA, attention
from END to IO and to S, the path-patching effect, the class's own score) and the heads outside the
circuit with the largest DLA, for the docs' head-classes table. A seed already in the data file is
not run again (``--redo``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from lmsci_mi import load_model
from lmsci_mi.circuits.heads import top_heads
from lmsci_mi.circuits.ioi import IOI_ROLES, IOIConfig, find_ioi_circuit
from lmsci_mi.data.ioi import IOI_TEMPLATES, ioi_dataset

ROOT = Path(__file__).resolve().parent.parent
N_PROMPTS = 24
N_TEMPLATES = 4
FIGURES = ("logit_diff", "fraction_positive", "faithfulness", "name_mover_removed", "n_heads")
OUTSIDE = 3
"""Heads outside the circuit listed by DLA (the next candidates for a backup name mover)."""


def _number(x: float) -> float | None:
    """A float for JSON; NaN (path patching not measured) as null."""
    return None if x != x else x


def one_seed(lm, seed: int) -> dict:
    data = ioi_dataset(lm, N_PROMPTS, templates=IOI_TEMPLATES[:N_TEMPLATES], seed=seed)
    return {"seed": seed, **one_draw(lm, data, IOIConfig(n_sender_candidates=6))}


def one_draw(lm, data, config: IOIConfig) -> dict:
    """The circuit found on one prompt draw, with every figure and head the docs quote."""
    began = time.perf_counter()
    circuit = find_ioi_circuit(lm, data, config)
    diffs = circuit.logit_diffs.float()
    classes: dict[str, list[str]] = {}
    for h in circuit.heads:
        classes.setdefault(h.role, []).append(str(h.head))
    in_circuit = {h.head for h in circuit.heads}
    ranked = top_heads(circuit.values, len(in_circuit) + OUTSIDE)
    outside = [(str(head), dla) for head, dla in ranked if head not in in_circuit][:OUTSIDE]
    return {
        "n_prompts": int(diffs.numel()),
        "logit_diff": circuit.logit_diff,
        "logit_diff_se": float(diffs.std(unbiased=True) / diffs.numel() ** 0.5),
        "fraction_positive": circuit.fraction_positive,
        "logit_diff_circuit": circuit.logit_diff_circuit,
        "faithfulness": circuit.faithfulness,
        "logit_diff_without_name_movers": circuit.logit_diff_without_name_movers,
        "name_mover_removed": circuit.name_mover_removed,
        "n_heads": len(circuit.heads),
        "classes": classes,
        "heads": [
            {"head": str(h.head), "role": h.role, "dla": h.dla, "attn_end_io": h.attn_end_io,
             "attn_end_s": h.attn_end_s, "path_patching": _number(h.path_patching), "score": h.score}
            for h in circuit.heads
        ],
        "top_dla_outside_circuit": outside,
        "seconds": round(time.perf_counter() - began, 1),
    }


def summarise(runs: list[dict]) -> dict:
    """Mean and standard deviation over seeds of each figure; per head, the seeds that class it."""
    out: dict = {"n_seeds": len(runs)}
    for key in FIGURES:
        values = [r[key] for r in runs]
        out[key] = {
            "mean": statistics.fmean(values),
            "sd": statistics.stdev(values) if len(values) > 1 else None,
            "min": min(values),
            "max": max(values),
        }
    stable: dict[str, dict[str, int]] = {}
    for role in [role for role in IOI_ROLES if any(role in r["classes"] for r in runs)]:
        counts = Counter(head for r in runs for head in r["classes"].get(role, []))
        stable[role] = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    out["heads_by_class"] = stable
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "data" / "ioi.json")
    parser.add_argument("--redo", action="store_true", help="run seeds already in the file again")
    parser.add_argument("--tour", action="store_true",
                        help="also (re)measure the tour's own draw (8 prompts, one template) as 'tour'")
    args = parser.parse_args()
    data = json.loads(args.out.read_text()) if args.out.exists() else {}
    if data.get("model") not in (None, args.model):
        raise SystemExit(f"{args.out} holds {data['model']}; give another --out for {args.model}")
    runs = {r["seed"]: r for r in data.get("runs", [])}
    lm = load_model(args.model)
    if data.get("n_layers") != lm.cfg.n_layers:  # for relative depths (docs/ioi.md)
        data["n_layers"] = lm.cfg.n_layers
        write(args.out, data)
    if args.tour:
        from lmsci_mi.cli.heads import tour_ioi_inputs  # the very draw `lmsci-mi tour` makes

        data["tour"] = {"config": "IOIConfig(n_sender_candidates=3)", "templates": 1,
                        **one_draw(lm, *tour_ioi_inputs(lm))}
        t = data["tour"]
        print(f"tour's draw: logit diff {t['logit_diff']:.2f} ± {t['logit_diff_se']:.2f}, faithfulness "
              f"{t['faithfulness']:.2f}, name movers remove {t['name_mover_removed']:.2f}", flush=True)
        write(args.out, data)
    for seed in args.seeds:
        if seed in runs and not args.redo:
            print(f"seed {seed}: in {args.out}, skipped")
            continue
        runs[seed] = one_seed(lm, seed)
        r = runs[seed]
        print(
            f"seed {seed}: logit diff {r['logit_diff']:.2f} ± {r['logit_diff_se']:.2f}, "
            f"faithfulness {r['faithfulness']:.2f}, name movers remove {r['name_mover_removed']:.2f}, "
            f"{r['n_heads']} heads ({r['seconds']:.0f} s)",
            flush=True,
        )
        ordered = [runs[s] for s in sorted(runs)]
        data = {
            **({"tour": data["tour"]} if "tour" in data else {}),
            "model": args.model,
            "n_layers": lm.cfg.n_layers,
            "n_prompts": N_PROMPTS,
            "templates": N_TEMPLATES,
            "config": "IOIConfig(n_sender_candidates=6)",
            "date": datetime.date.today().isoformat(),
            "commit": subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
            ).stdout.strip(),
            "runs": ordered,
            "summary": summarise(ordered),
        }
        write(args.out, data)


def write(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)  # never a half-written data file


if __name__ == "__main__":
    main()

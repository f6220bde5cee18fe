"""Outlier anatomy of one model (issue 40): Sun et al.'s massive activations, Yu et al.'s super
weights, attention-sink heads, and their causal role against random controls; what the massive
activations do to the SAE's explained variance and the logit lens's KL.

    PYTHONPATH=. OMP_NUM_THREADS=1 python benchmarks/outliers_anatomy.py --model smollm2-135m --threads 1
    PYTHONPATH=. OMP_NUM_THREADS=1 python benchmarks/outliers_anatomy.py --model gemma3-270m --threads 1
    PYTHONPATH=. python benchmarks/outliers_anatomy.py --quick          # toy-2l, seconds (out/quick/)

Writes docs/data/outliers_anatomy_<model>.json and docs/img/outliers_{massive,super_weights,
ablations}_<model>.png. The text is the standard library's prose (``lmsci_mi.data.text_corpus``):
chunks 0..n_texts-1 of --seq-len tokens find the massive activations, chunks from --text-start on
are the ablations' held-out text; every chunk starts with the model's sink token where it has one
(the data file says in how many texts position 0 is the sink).

Pieces, each cached as soon as it is done (``run.cache``), so a killed run resumes at the next:

1. massive activations on --n-texts chunks by the paper's rule (|a| > 100 and >= 1,000 x the
   median); when no entry meets it, the ratio alone (said so in the file, never silently);
2. super-weight candidates by Yu et al.'s one-pass search (|input| and |output| > 50), else by the
   ratio rule (said so);
3. ablations on held-out text, perplexity ratio with a paired bootstrap and fact / IOI accuracy with
   Wilson intervals, each beside random controls: zero the massive activations (together and each
   alone) vs as many random dimensions of the same layers; zero each super-weight candidate vs random
   weights of equal magnitude; remove the top super weight and restore its super activation; Yu et
   al.'s scale sweep of the top candidate; three groups, three items;
4. sink heads with and without the sink token, and masking attention to the first token for the
   top sink heads, as many random heads and every head of the model;
5. consequences: the logit lens's KL per layer, and (SmolLM2 only: its SAE is cached) the SAE's
   explained variance, over every position and without the massive activations' positions.

Sizes (flags) are set for about 20 minutes per model at one thread: each ablation condition is one
pass over --eval-texts x --eval-seq-len tokens plus the 109 facts and --n-ioi IOI prompts (about
3,800 tokens), and the defaults run about 38 conditions; at the roughly 145 tokens/s of a SmolLM2
forward pass at one thread on this CPU (benchmarks/icl_kernel.py's figure) that is about 17
minutes, plus about 3 for the rest. The script prints its own estimate once the first pass is
timed.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness
import torch
from doc_tables.schemas.outliers import (
    AblationSection,
    ExclusionSection,
    MassiveRow,
    MassiveSection,
    OutliersAnatomyData,
    SinkSection,
    SuperWeightSection,
)

from lmsci_mi import LensModel, load_model
from lmsci_mi.data.text_corpus import STDLIB_TEXT_SOURCE, text_chunks
from lmsci_mi.errors import UserInputError
from lmsci_mi.outliers import (
    ExclusionEffect,
    ExclusionEffectConfig,
    FirstTokenMaskConfig,
    MassiveActivationAblation,
    MassiveActivations,
    MassiveConfig,
    MassiveCoordinate,
    OutlierAblationConfig,
    OutlierAblations,
    OutlierPositions,
    SinkScoreConfig,
    SuperWeightCandidates,
    SuperWeightConfig,
    SuperWeightCoordinate,
    SuperWeightRestoreActivation,
    SuperWeightScaling,
    find_massive_activations,
    find_super_weights,
    first_token_mask_effect,
    lens_kl_without,
    outlier_ablations,
    sae_explained_variance_without,
    sensitivity_interventions,
    sink_heads,
)
from lmsci_mi.positions import Exclude

PIECES = ("massive", "super_weights", "ablations", "sinks", "consequences")
QUICK = {
    "model": "toy-2l", "n_texts": 8, "seq_len": 32, "massive_threshold": 0.5, "massive_ratio": 5.0,
    "sw_threshold": 1.0, "sw_candidates": 2, "sw_ablate": 1, "eval_texts": 4, "text_start": 8,
    "eval_seq_len": 16, "n_control_draws": 1, "scales": [0.0, 2.0], "n_ioi": 4, "n_facts": 8, "sink_texts": 4,
    "sink_seq_len": 16, "sink_heads": 2, "mask_draws": 1, "lens_texts": 2, "n_resamples": 50,
}
"""--quick: the toy, small sizes, and rules low enough that the toy's random weights meet them (so
every piece runs; nothing of it says anything about a trained model)."""
SAE_MODEL = "smollm2-135m"


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2-135m",
                        help="a registered model name (load_model's): smollm2-135m, gemma3-270m, a toy")
    parser.add_argument("--pieces", nargs="+", default=list(PIECES), choices=PIECES,
                        help="pieces to run; the others keep what the data file has")
    parser.add_argument("--img-dir", type=Path, default=Path("docs/img"), help="where the figures go")
    parser.add_argument("--n-texts", type=int, default=32, help="chunks searched for massive activations")
    parser.add_argument("--seq-len", type=int, default=128, help="tokens per chunk, the sink included")
    parser.add_argument("--massive-threshold", type=float, default=100.0, help="the paper's |a| > threshold")
    parser.add_argument("--massive-ratio", type=float, default=1000.0, help="the paper's |a| >= ratio x median")
    parser.add_argument("--max-massive", type=int, default=3, help="massive dimensions ablated (largest first)")
    parser.add_argument("--sw-threshold", type=float, default=50.0, help="Yu et al.'s spike threshold")
    parser.add_argument("--sw-ratio", type=float, default=100.0, help="the ratio rule's spike / median")
    parser.add_argument("--sw-candidates", type=int, default=4, help="super-weight candidates searched for")
    parser.add_argument("--sw-ablate", type=int, default=2, help="candidates zeroed one by one")
    parser.add_argument("--eval-texts", type=int, default=16, help="held-out chunks of the ablations")
    parser.add_argument("--eval-seq-len", type=int, default=128, help="tokens per held-out chunk")
    parser.add_argument("--text-start", type=int, default=256, help="the first held-out chunk")
    parser.add_argument("--n-control-draws", type=int, default=2, help="random control draws per ablation")
    parser.add_argument("--sweep-draws", type=int, default=1, help="random control draws per sweep scale")
    parser.add_argument("--scales", type=float, nargs="+", default=[0.0, 0.2, 0.5, 0.8, 1.5, 2.0, 3.0],
                        help="Yu et al.'s sweep less 1 (the clean model)")
    parser.add_argument("--n-facts", type=int, default=None, help="facts (default: all 109)")
    parser.add_argument("--n-ioi", type=int, default=40, help="IOI prompts")
    parser.add_argument("--n-resamples", type=int, default=1000, help="bootstrap resamples over texts")
    parser.add_argument("--sink-k", type=int, default=1, help="first tokens scored and masked (1: the sink)")
    parser.add_argument("--sink-texts", type=int, default=16, help="rows for the sink scores, and again for the mask")
    parser.add_argument("--sink-seq-len", type=int, default=64, help="tokens per sink row")
    parser.add_argument("--sink-heads", type=int, default=4, help="top sink heads masked")
    parser.add_argument("--mask-draws", type=int, default=3, help="random head sets of the mask's control")
    parser.add_argument("--lens-texts", type=int, default=16, help="held-out texts of the lens's KL")
    parser.add_argument("--sae-rows", type=int, default=32, help="held-out SAE rows (SmolLM2)")


def data_file(args: argparse.Namespace) -> Path:
    return harness.DATA / f"outliers_anatomy_{QUICK['model'] if args.quick else args.model}.json"


def settings(args: argparse.Namespace, quick: dict[str, Any] = QUICK) -> argparse.Namespace:
    """``args`` with ``--quick``'s toy and sizes (``quick``) in place of the defaults."""
    if args.quick:
        for key, value in quick.items():
            setattr(args, key, value)
    return args


def figure_path(run: harness.Run, stem: str, model: str) -> Path:
    return (harness.QUICK if run.quick else run.args.img_dir) / f"outliers_{stem}_{model}.png"


def shown(path: Path) -> str:
    """``path`` relative to the repository where it is inside it (the data file names its figures)."""
    path = path.resolve()
    return str(path.relative_to(harness.ROOT)) if path.is_relative_to(harness.ROOT) else str(path)


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by None (JSON has no NaN; one control draw
    has no standard deviation)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


# ----------------------------------------------------------------------------- massive activations


def massive_config(args: argparse.Namespace) -> MassiveConfig:
    return MassiveConfig(threshold=args.massive_threshold, ratio=args.massive_ratio)


def rule_used(found: MassiveActivations) -> str:
    """The paper's rule when any entry meets it, else the ratio alone, else none."""
    if found.selected("paper"):
        return "paper"
    return "ratio" if found.entries else "none"


def massive_coordinates(found: MassiveActivations, rule: str, n: int) -> list[MassiveCoordinate]:
    """Up to ``n`` dimensions, each at the first layer where it meets ``rule`` (Sun et al. zero them
    where they appear), the largest |value| first."""
    if rule == "none":
        return []
    first: dict[int, tuple[int, float]] = {}
    for e in found.selected("paper" if rule == "paper" else "ratio"):
        layer, size = first.get(e.dim, (e.layer, 0.0))
        first[e.dim] = (min(layer, e.layer), max(size, abs(e.value)))
    ranked = sorted(first.items(), key=lambda item: -item[1][1])[:n]
    return [MassiveCoordinate(layer, dim) for dim, (layer, _) in ranked]


def massive_exclude(found: MassiveActivations, rule: str) -> Exclude:
    return Exclude(sink=False) if rule == "none" else found.exclude("paper" if rule == "paper" else "ratio")


def massive_rows(found: MassiveActivations, rule: str, limit: int = 12) -> list[MassiveRow]:
    """One row per (dimension, kind of position): its layers, its peak layer's mean value and ratio."""
    groups: dict[tuple[int, str], list[Any]] = defaultdict(list)
    for e in found.selected("paper" if rule == "paper" else "ratio") if rule != "none" else ():
        groups[(e.dim, e.role)].append(e)
    rows = []
    for (dim, role), entries in groups.items():
        by_layer: dict[int, list[Any]] = defaultdict(list)
        for e in entries:
            by_layer[e.layer].append(e)
        peak = max(by_layer, key=lambda layer: max(e.ratio for e in by_layer[layer]))
        at_peak = by_layer[peak]
        tokens = Counter(e.token for e in entries)
        having = found.role_texts.get(role, found.n_texts)
        rows.append(MassiveRow(
            dim=dim, role=role, token=tokens.most_common(1)[0][0], n_tokens=len(tokens),
            layers=sorted(by_layer), peak_layer=peak, value=sum(e.value for e in at_peak) / len(at_peak),
            ratio=max(e.ratio for e in at_peak), n_texts=len({e.text for e in at_peak}), n_role_texts=having))
    return sorted(rows, key=lambda r: -r["ratio"])[:limit]


def massive_section(found: MassiveActivations, args: argparse.Namespace) -> MassiveSection:
    rule = rule_used(found)
    frame = found.layer_frame()
    n_top = len(found.labels[1]) - 1
    largest = max(found.entries, key=lambda e: e.ratio, default=None)
    coords = massive_coordinates(found, rule, args.max_massive)
    return MassiveSection(
        config=found.meta.params, text_source=f"{STDLIB_TEXT_SOURCE}, chunks 0..{args.n_texts - 1} of {args.seq_len} tokens",
        n_texts=found.n_texts, seq_len=args.seq_len, sink=found.meta.sink, sink_at_zero=sum(found.sink_at_zero),
        n_paper=len(found.selected("paper")), n_ratio_only=len(found.entries) - len(found.selected("paper")),
        n_absolute_only=int(found.absolute_only.sum()), rule_used=rule,
        roles={role: list(c) for role, c in found.role_counts("paper" if rule == "paper" else "ratio").items()},
        layers=[{"layer": int(r["layer"]), "top": [float(r[f"top-{i + 1}"]) for i in range(n_top)],
                 "median": float(r["median"]), "n_paper": int(r["n_paper"]), "n_ratio_only": int(r["n_ratio_only"])}
                for r in frame.to_dict("records")],
        rows=massive_rows(found, rule),
        largest={} if largest is None else {k: getattr(largest, k) for k in
                                            ("layer", "dim", "token", "role", "value", "ratio", "rule")},
        ablated=[[c.layer, c.dim] for c in coords],
        positions=OutlierPositions.from_exclude(massive_exclude(found, rule)).describe() if coords else "",
        exclude=massive_exclude(found, rule).describe(),
    )


# ----------------------------------------------------------------------------- super weights


def super_weights(lm: LensModel, args: argparse.Namespace, cache: harness.ItemCache) -> SuperWeightCandidates:
    """Yu et al.'s rule; the ratio rule only when theirs finds nothing (recorded in ``rule``)."""
    config = SuperWeightConfig(threshold=args.sw_threshold, ratio=args.sw_ratio, max_candidates=args.sw_candidates)
    found = cache.result("super-weights", lambda: find_super_weights(lm, config))
    if found.candidates:
        return found
    ratio = dataclasses.replace(config, rule="ratio")
    return cache.result("super-weights-ratio", lambda: find_super_weights(lm, ratio))


def super_weight_section(found: SuperWeightCandidates) -> SuperWeightSection:
    rule = found.rule if found.candidates else "none"
    return SuperWeightSection(
        prompt=found.meta.prompts[0], rule_used=rule, threshold=found.threshold, ratio=found.ratio,
        stop_reason=found.stop_reason, candidates=[dataclasses.asdict(c) for c in found.candidates],
        layers=[{"layer": int(label), "input": float(found.values[i, 0]), "output": float(found.values[i, 1])}
                for i, label in enumerate(found.axis_labels(0))],
    )


# ----------------------------------------------------------------------------- ablations


def ablation_config(args: argparse.Namespace, draws: int) -> OutlierAblationConfig:
    return OutlierAblationConfig(
        n_texts=args.eval_texts, seq_len=args.eval_seq_len, text_start=args.text_start,
        n_reference_texts=min(16, args.text_start), n_control_draws=draws, n_facts=args.n_facts,
        n_ioi=args.n_ioi, n_resamples=args.n_resamples)


def restore_positions(lm: LensModel, found: SuperWeightCandidates) -> OutlierPositions:
    """Where the top candidate's super activation is restored: its position in Yu et al.'s prompt
    when that is the sink or the first token (fixed positions), else every occurrence of its token."""
    top = found.candidates[0]
    if top.position <= 1:
        return OutlierPositions(positions=(top.position,))
    token = int(lm.to_tokens(found.meta.prompts[0])[0, top.position])
    return OutlierPositions(positions=(), token_ids=(token,))


def ablation_groups(
    lm: LensModel, found: MassiveActivations, weights: SuperWeightCandidates, args: argparse.Namespace
) -> dict[str, tuple[dict[str, Any], OutlierAblationConfig]]:
    """The three groups of interventions, each with its config (the sweep has fewer control draws)."""
    groups: dict[str, tuple[dict[str, Any], OutlierAblationConfig]] = {}
    rule = rule_used(found)
    coords = massive_coordinates(found, rule, args.max_massive)
    if coords:
        positions = OutlierPositions.from_exclude(massive_exclude(found, rule))
        massive = {f"zero {len(coords)} massive": MassiveActivationAblation(tuple(coords), positions)}
        if len(coords) > 1:
            massive |= {f"zero {c}": MassiveActivationAblation((c,), positions) for c in coords}
        groups["massive"] = (massive, ablation_config(args, args.n_control_draws))
    if weights.candidates:
        coords_w = [SuperWeightCoordinate(*c) for c in weights.coordinates()]
        chosen = {f"zero SW {sw_name(c)}": SuperWeightScaling((c,), 0.0) for c in coords_w[: args.sw_ablate]}
        chosen[f"zero SW {sw_name(coords_w[0])}, restore SA"] = SuperWeightRestoreActivation(
            coords_w[0], restore_positions(lm, weights))
        groups["super weights"] = (chosen, ablation_config(args, args.n_control_draws))
        sweep = sensitivity_interventions([coords_w[0]], [s for s in args.scales if s != 1.0])
        groups["scale sweep"] = ({name.replace("super weights", f"SW {sw_name(coords_w[0])}"): spec
                                  for name, spec in sweep.items()}, ablation_config(args, args.sweep_draws))
    return groups


def sw_name(c: SuperWeightCoordinate) -> str:
    """Yu et al.'s (layer, row, col)."""
    return f"({c.layer}, {c.row}, {c.col})"


def merge_ablations(parts: list[OutlierAblations]) -> OutlierAblations:
    """One result of several runs: the first run's clean condition, then every run's others."""
    first = parts[0]
    keep = [(p, i) for p in parts for i, kind in enumerate(p.kinds) if kind != "clean"]
    rows = [(first, 0), *keep]

    def stack(name: str) -> torch.Tensor:
        return torch.stack([getattr(p, name)[i] for p, i in rows])

    return dataclasses.replace(
        first, values=stack("values"), labels=(tuple(p.conditions[i] for p, i in rows), ()),
        fact_correct=stack("fact_correct"), ioi_logit_diff=stack("ioi_logit_diff"),
        kinds=tuple(p.kinds[i] for p, i in rows), parents=tuple(p.parents[i] for p, i in rows),
        descriptions=tuple(p.descriptions[i] for p, i in rows))


def ablation_section(merged: OutlierAblations, group_of: dict[str, str], args: argparse.Namespace) -> AblationSection:
    config = merged.meta.params
    rows = [{"group": group_of[e.intervention], **e.to_dict()} for e in merged.report()]
    return AblationSection(
        config=config, text_source=merged.meta.data_source,
        clean={"perplexity": merged.perplexity().as_dict(), "fact_accuracy": merged.fact_accuracy().as_dict(),
               "ioi_accuracy": merged.ioi_accuracy().as_dict()},
        rows=rows, n_texts=int(merged.values.shape[1]), seq_len=args.eval_seq_len,
        n_facts=int(merged.fact_correct.shape[1]), n_ioi=int(merged.ioi_logit_diff.shape[1]))


def run_ablations(
    lm: LensModel, found: MassiveActivations, weights: SuperWeightCandidates, run: harness.Run,
    cache: harness.ItemCache, seconds_per_token: float,
) -> tuple[AblationSection | None, OutlierAblations | None]:
    args = run.args
    groups = ablation_groups(lm, found, weights, args)
    if not groups:
        return None, None
    tokens = args.eval_texts * args.eval_seq_len + (args.n_facts or 109) * 12 + args.n_ioi * 16
    conditions = sum(1 + len(named) * (1 + config.n_control_draws) for named, config in groups.values())
    print(f"ablations: {conditions} conditions of about {tokens} tokens: about "
          f"{conditions * tokens * seconds_per_token / 60:.1f} min at this run's pace (0 when cached)")
    parts, group_of = [], {}
    for group, (named, config) in groups.items():
        item = "ablate-" + group.replace(" ", "-")
        parts.append(cache.result(item, lambda named=named, config=config: outlier_ablations(lm, named, config)))
        group_of |= {name: group for name in named}
    merged = merge_ablations(parts)
    return ablation_section(merged, group_of, args), merged


# ----------------------------------------------------------------------------- sinks, consequences


def sink_section(lm: LensModel, args: argparse.Namespace, cache: harness.ItemCache) -> SinkSection:
    scores = SinkScoreConfig(k=args.sink_k, n_texts=args.sink_texts, seq_len=args.sink_seq_len)
    heads = cache.result("sink-heads", lambda: sink_heads(lm, scores))
    top = heads.top(args.sink_heads)
    mask_config = FirstTokenMaskConfig(k=args.sink_k, n_texts=args.sink_texts, seq_len=args.sink_seq_len,
                                       skip_texts=args.sink_texts, n_random_draws=args.mask_draws,
                                       n_resamples=args.n_resamples)
    effect = cache.result("first-token-mask", lambda: first_token_mask_effect(lm, [h for h, _ in top], mask_config))
    return SinkSection(
        k=args.sink_k, n_texts=heads.n_texts, seq_len=args.sink_seq_len, sink=heads.meta.sink,
        top=[{"head": h.label, "with_sink": s, "without_sink": float(heads.values[1, h.layer, h.head]),
              "difference": float(heads.difference[h.layer, h.head]),
              "se": float(heads.difference_standard_error[h.layer, h.head])} for h, s in top],
        mask={"heads": [h.label for h in effect.heads], "clean": effect.clean.as_dict(),
              "each_head": {h.label: i.as_dict() for h, i in zip(effect.heads, effect.each_head, strict=True)},
              "together": effect.together.as_dict(), "random": effect.random.as_dict(),
              "together_minus_random": effect.together_minus_random.as_dict(),
              "every_head": None if effect.every_head is None else effect.every_head.as_dict(),
              "random_heads": [[h.label for h in draw] for draw in effect.random_heads],
              "n_texts": effect.clean.n})


def exclusion_section(effect: ExclusionEffect) -> ExclusionSection:
    return ExclusionSection(
        metric=effect.metric, excluded=effect.excluded, n_positions=list(effect.n_positions), n_texts=effect.n_texts,
        rows=[{"item": label, "all": a.as_dict(), "kept": k.as_dict(), "difference": d.as_dict()}
              for label, a, k, d in zip(effect.axis_labels(1), effect.all, effect.kept, effect.difference, strict=True)])


def sae_effect(lm: LensModel, exclude: Exclude, args: argparse.Namespace) -> ExclusionEffect | None:
    """The cached SAE's explained variance with and without ``exclude`` (None: no SAE for the model)."""
    from lmsci_mi.sae import LensSAE, SAEDataConfig, SAETrainConfig, cached_sae_path, sae_corpus
    from lmsci_mi.sae.shipped import restore_shipped_sae

    folder = cached_sae_path(lm, SAEDataConfig(), SAETrainConfig())
    if not restore_shipped_sae(folder):
        return None
    sae = LensSAE.load(folder, lm.device)
    rows = sae_corpus(lm, SAEDataConfig(), fingerprint=sae.model_fingerprint).held_out[: args.sae_rows]
    config = ExclusionEffectConfig(n_resamples=args.n_resamples)
    return sae_explained_variance_without(lm, sae, rows, exclude, config)


def consequences(
    lm: LensModel, found: MassiveActivations, args: argparse.Namespace, cache: harness.ItemCache
) -> dict[str, ExclusionSection]:
    rule = rule_used(found)
    if rule == "none":
        reason = "no massive activation was found, so there is nothing to leave out"
        return {"lens": ExclusionSection(not_run=reason), "sae": ExclusionSection(not_run=reason)}
    exclude = massive_exclude(found, rule)
    config = ExclusionEffectConfig(n_texts=args.lens_texts, n_resamples=args.n_resamples)
    try:
        out = {"lens": exclusion_section(cache.result("lens-kl", lambda: lens_kl_without(lm, exclude, config=config)))}
    except UserInputError as refused:
        # Massive activations at (nearly) every position leave no token to compare: say so.
        left_out = len(set(exclude.positions) | ({0} if exclude.sink else set()))
        reason = (f"nothing to compare: the massive activations' positions ({left_out} positions, each holding "
                  f"one in at least half the texts) and tokens ({len(exclude.token_ids)}) cover every token "
                  f"of every text ({str(refused).split(' have ')[0]})")
        return {"lens": ExclusionSection(not_run=reason), "sae": ExclusionSection(not_run=reason)}
    if lm.name != SAE_MODEL:
        out["sae"] = ExclusionSection(not_run=f"the cached SAE is {SAE_MODEL}'s (layer 15); none for {lm.name}")
        return out
    path = cache.path("sae-ev")
    effect = ExclusionEffect.load(path) if path.is_file() else sae_effect(lm, exclude, args)
    if effect is None:
        out["sae"] = ExclusionSection(not_run="no SAE in the cache and none shipped")
    else:
        effect.save(path)
        out["sae"] = exclusion_section(effect)
    return out


# ----------------------------------------------------------------------------- main


def timed_piece(run: harness.Run, seconds: dict[str, float], name: str, compute: Callable[[], Any]) -> Any:
    began = time.perf_counter()
    with run.timed(name):
        value = compute()
    seconds[name] = round(time.perf_counter() - began, 1)
    return value


def main() -> None:
    run = harness.start(__doc__, __file__, threads=1, flags=add_flags, out=data_file)
    args = settings(run.args)
    if args.n_texts > args.text_start:
        raise SystemExit(f"--n-texts ({args.n_texts}) must be <= --text-start ({args.text_start}): "
                         "the held-out chunks come after the ones searched")
    lm = load_model(args.model)
    cache = run.cache(exclude=["pieces", "img_dir"])
    data: dict[str, Any] = harness.read_json(run.out, {})
    if data.get("model") != lm.name:
        data = {}
    seconds: dict[str, float] = dict(data.get("seconds", {}))
    figures: dict[str, str] = dict(data.get("figures", {}))
    rows = text_chunks(lm, args.n_texts * (args.seq_len - (lm.sink_token_id is not None)), args.seq_len)
    began = time.perf_counter()
    found = cache.result("massive", lambda: find_massive_activations(lm, rows[: args.n_texts], massive_config(args)))
    per_token = max(time.perf_counter() - began, 1e-3) / (args.n_texts * args.seq_len)
    weights = super_weights(lm, args, cache)
    if "massive" in args.pieces:
        data["massive"] = massive_section(found, args)
        found.plot(figure_path(run, "massive", lm.name))
        figures["massive"] = shown(figure_path(run, "massive", lm.name))
    if "super_weights" in args.pieces:
        data["super_weights"] = super_weight_section(weights)
        weights.plot(figure_path(run, "super_weights", lm.name))
        figures["super_weights"] = shown(figure_path(run, "super_weights", lm.name))
    if "ablations" in args.pieces:
        section, merged = timed_piece(run, seconds, "ablations",
                                      lambda: run_ablations(lm, found, weights, run, cache, per_token))
        if section is not None:
            data["ablations"] = section
            merged.plot(figure_path(run, "ablations", lm.name),
                        title=f"{lm.name}: each ablation and its random controls")
            figures["ablations"] = shown(figure_path(run, "ablations", lm.name))
    if "sinks" in args.pieces:
        data["sinks"] = timed_piece(run, seconds, "sinks", lambda: sink_section(lm, args, cache))
    if "consequences" in args.pieces:
        data["consequences"] = timed_piece(run, seconds, "consequences", lambda: consequences(lm, found, args, cache))
    sizes = {k: v for k, v in vars(args).items() if k not in (*harness.HARNESS_FLAGS, "pieces", "img_dir")}
    run.write(finite(OutliersAnatomyData(model=lm.name, sink=found.meta.sink, sizes=sizes, figures=figures,
                                         seconds=seconds, **{k: data[k] for k in PIECES if k in data})),
              ensure_ascii=False)


if __name__ == "__main__":
    main()

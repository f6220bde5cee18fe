"""The CFG GPT's attribution graphs (issue 41): their replacement and completeness scores over
held-out grammar sentences, and whether the graphs' features follow the grammar's non-terminals,
the targets the CFG probes read (docs/graphs.md).

    PYTHONPATH=. python benchmarks/graphs_cfg.py --threads 1    # the shipped GPT and its transcoders
    PYTHONPATH=. python benchmarks/graphs_cfg.py --quick        # small transcoders trained here, seconds

**Scores.** ``--n-graphs`` sentences drawn with their own seed (``GRAPH_SEED``; the transcoders
trained and were measured on other draws), each without its last token, BOS first: one graph per
prefix at circuit-tracer's defaults (``GraphConfig``, batch 64 here), pruned at its thresholds.
The replacement and completeness scores: the mean over sentences and a 95 % percentile-bootstrap
interval over them.

**Alignment.** Every transcoder feature's activation on every token of ``--n-label-sentences``
other held-out sentences (``LABEL_SEED``) is scored against each non-terminal target of the
probes (``lmsci_mi.probes.cfg``): the token's ancestor at level ℓ is v (each level below the root,
each of its NTs), and the token ends its level-ℓ NT (the boundary targets). A feature's
selectivity is its best AUROC over the targets (ties share ranks), and its purity: the share of
the tokens it fires on that carry one target (a feature that fires on one NT's tokens only, however
few of them, is pure; its AUROC is low when it covers few of them); a feature counts as pure at
≥ 0.9 on 20 tokens or more. Compared: the distinct features kept in the pruned graphs against every
live feature of the model (one that fires on the label sentences): the shares selective each way
(Wilson intervals), and per target the best of a graph feature and of any live feature, beside
the control: how pure the token's identity alone is (the best of the grammar's terminals).

Each graph and the alignment are cached, so a killed run resumes.
"""

from __future__ import annotations

import argparse
from typing import Any

import harness
import numpy as np
import torch

from lmsci_mi import LensModel
from lmsci_mi.circuits.graphs import GraphConfig, attribution_graph
from lmsci_mi.data.cfg import CFGConfig, build_grammar
from lmsci_mi.probes.cfg.model import load_cfg_model
from lmsci_mi.stats import bootstrap_interval, wilson_interval
from lmsci_mi.transcoders import TranscoderSet, load_transcoders, train_transcoders
from lmsci_mi.transcoders.data import harvest_pairs
from lmsci_mi.transcoders.presets import TRANSCODER_PRESETS
from lmsci_mi.transcoders.shipped import SMALL_CFG_TRANSCODERS
from lmsci_mi.transcoders.train import TranscoderTrainConfig

GRAPH_SEED = 10_007
LABEL_SEED = 20_011
GRAPH_CONFIG = GraphConfig(batch_size=64)


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n-graphs", type=int, default=40, help="sentences with a graph each")
    parser.add_argument("--n-label-sentences", type=int, default=400, help="sentences the features are scored on")
    parser.add_argument("--auroc", type=float, default=0.9, help="a feature is selective at or above this AUROC")
    parser.add_argument("--resamples", type=int, default=2000)


def transcoders(lm: LensModel, quick: bool) -> TranscoderSet:
    if not quick:
        return load_transcoders(lm)
    data = TRANSCODER_PRESETS["cfg-gpt"].data.replace(train_tokens=5_000)
    return train_transcoders(lm, data, TranscoderTrainConfig(**SMALL_CFG_TRANSCODERS))[0]


def graph_item(lm: LensModel, tcs: TranscoderSet, prompt: list[int]) -> dict[str, Any]:
    """One sentence's graph: its scores, its size and the features pruning keeps."""
    graph = attribution_graph(lm, tcs, prompt, GRAPH_CONFIG)
    scores, pruning = graph.scores(), graph.prune()
    kept = pruning.node_mask[: graph.layout.n_features].nonzero()[:, 0]
    features = graph.features[kept].long()
    return {"replacement": scores.replacement, "completeness": scores.completeness,
            "n_features": graph.layout.n_features, "n_active": graph.n_active,
            "kept": [[int(layer), int(feature)] for layer, feature in features[:, [0, 2]].tolist()]}


def targets(sample: Any, n_levels: int) -> dict[str, np.ndarray]:
    """The probes' targets per token: ancestor at level ℓ is v, and boundary at level ℓ."""
    ancestors, boundaries = sample.ancestors.numpy(), sample.boundaries.numpy()
    found: dict[str, np.ndarray] = {}
    for level in range(1, n_levels):
        for value in np.unique(ancestors[:, level]):
            found[f"ancestor L{level} = NT{int(value)}"] = ancestors[:, level] == value
        found[f"boundary L{level}"] = boundaries[:, level]
    return found


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n down each column, tied values sharing their mean rank."""
    order = np.argsort(values, axis=0, kind="stable")
    ranks = np.empty(values.shape)
    for j in range(values.shape[1]):
        ordered = values[order[:, j], j]
        # each run of equal values gets the mean of the positions it spans
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        ends = np.r_[starts[1:], len(ordered)]
        ranks[order[:, j], j] = np.repeat((starts + ends + 1) / 2, ends - starts)
    return ranks


def aurocs(acts: np.ndarray, labels: dict[str, np.ndarray]) -> np.ndarray:
    """``[feature, target]`` AUROC of each feature's activation for each target (average ranks)."""
    ranks = average_ranks(acts)  # [token, feature]
    out = np.empty((acts.shape[1], len(labels)))
    for j, positive in enumerate(labels.values()):
        n_pos, n_neg = int(positive.sum()), int((~positive).sum())
        out[:, j] = (ranks[positive].sum(0) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
    return out


def purities(acts: np.ndarray, labels: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``[feature, target]`` share of the tokens a feature fires on that carry the target, and
    ``[feature]`` how many tokens it fires on."""
    fires = acts > 0
    support = fires.sum(0)
    hits = np.stack([(fires & positive[:, None]).sum(0) for positive in labels.values()], axis=1)
    return hits / np.maximum(support, 1)[:, None], support


def alignment(lm: LensModel, tcs: TranscoderSet, n_sentences: int) -> dict[str, Any]:
    """Every live feature's AUROC and purity per target on held-out sentences, per layer."""
    grammar = build_grammar(CFGConfig())
    sample = grammar.sample(n_sentences, seed=LABEL_SEED)
    rows = [[grammar.bos, *s] for s in sample.sequences()]
    labels = targets(sample, grammar.n_levels)
    pairs = harvest_pairs(lm, rows, sorted(tcs))
    layers = {}
    for layer, (x, _) in pairs.items():
        with torch.no_grad():
            acts = tcs[layer].encode(x.to(lm.device).float()).cpu().numpy()
        live = np.nonzero((acts > 0).any(0))[0]
        purity, support = purities(acts[:, live], labels)
        layers[str(layer)] = {"live": live.tolist(), "auroc": aurocs(acts[:, live], labels).round(4).tolist(),
                              "purity": purity.round(4).tolist(), "support": support.tolist()}
    tokens = sample.tokens.numpy()
    # The control: how pure the token's identity alone is for each target (the best terminal).
    identity = {name: max(float(positive[tokens == t].mean()) for t in np.unique(tokens))
                for name, positive in labels.items()}
    return {"targets": list(labels), "n_tokens": len(sample.tokens), "layers": layers, "token_identity": identity}


def compare(aligned: dict[str, Any], graphs: list[dict[str, Any]], threshold: float,
            purity: float = 0.9, min_support: int = 20) -> dict[str, Any]:
    """Graph features against all live features: the shares selective by AUROC and by purity
    (firing on ``min_support`` tokens or more, ``purity`` of them one target's), and per target
    the best of each."""
    best: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, int]] = {}
    for layer, entry in aligned["layers"].items():
        rows = zip(entry["live"], entry["auroc"], entry["purity"], entry["support"], strict=True)
        for feature, auroc, pure, support in rows:
            best[(int(layer), feature)] = (np.asarray(auroc), np.asarray(pure), int(support))
    in_graphs = sorted({(layer, feature) for g in graphs for layer, feature in g["kept"]})
    in_graphs = [key for key in in_graphs if key in best]  # a feature silent on the label sentences is left out

    def share(keys: list[tuple[int, int]], hit: Any) -> dict[str, Any]:
        hits = sum(int(hit(best[k])) for k in keys)
        return {"selective": hits, "n": len(keys), "share": wilson_interval(hits, len(keys)).as_dict()}

    def by_auroc(b: tuple[np.ndarray, np.ndarray, int]) -> bool:
        return bool(b[0].max() >= threshold)

    def by_purity(b: tuple[np.ndarray, np.ndarray, int]) -> bool:
        return b[2] >= min_support and bool(b[1].max() >= purity)

    per_target = []
    for j, name in enumerate(aligned["targets"]):
        pure = [float(b[1][j]) for b in best.values() if b[2] >= min_support]
        pure_graph = [float(best[k][1][j]) for k in in_graphs if best[k][2] >= min_support]
        per_target.append({"target": name, "best_graph_feature": max((float(best[k][0][j]) for k in in_graphs),
                                                                     default=float("nan")),
                           "best_live_feature": max(float(b[0][j]) for b in best.values()),
                           "purest_graph_feature": max(pure_graph, default=float("nan")),
                           "purest_live_feature": max(pure, default=float("nan")),
                           "purest_terminal": aligned["token_identity"][name]})
    return {"graph_features": share(in_graphs, by_auroc), "live_features": share(list(best), by_auroc),
            "graph_features_pure": share(in_graphs, by_purity), "live_features_pure": share(list(best), by_purity),
            "purity": purity, "min_support": min_support, "per_target": per_target}


def main() -> None:
    run = harness.start(__doc__, __file__, threads=1, flags=add_flags,
                        out=harness.DATA / "graphs_cfg.json")
    args = run.args
    n_graphs, n_labels = (3, 40) if run.quick else (args.n_graphs, args.n_label_sentences)
    with run.timed("load"):
        lm = load_cfg_model(train=False)[0]
        tcs = transcoders(lm, run.quick)
    cache = run.cache(exclude=["auroc", "resamples"])
    grammar = build_grammar(CFGConfig())
    sentences = grammar.sample(n_graphs, seed=GRAPH_SEED).sequences()
    with run.timed("graphs"):
        graphs = [cache.get(f"graph-{i:03d}", lambda s=s: graph_item(lm, tcs, [grammar.bos, *s[:-1]]))
                  for i, s in enumerate(sentences)]
    with run.timed("alignment"):
        aligned = cache.get(f"alignment-v3-{n_labels}", lambda: alignment(lm, tcs, n_labels))
    scores = {name: bootstrap_interval(torch.tensor([g[name] for g in graphs]), n_resamples=args.resamples,
                                       seed=0).as_dict() for name in ("replacement", "completeness")}
    run.write({
        "model": lm.name, "transcoders": "small, trained here (--quick)" if run.quick else "the cfg-gpt preset",
        "graph_config": GRAPH_CONFIG.params(), "n_graphs": n_graphs, "graph_seed": GRAPH_SEED,
        "n_label_sentences": n_labels, "label_seed": LABEL_SEED, "n_label_tokens": aligned["n_tokens"],
        "auroc_threshold": args.auroc, "scores": scores,
        "graph_size": {k: float(np.mean([g[k] for g in graphs])) for k in ("n_features", "n_active")},
        "kept_per_graph": float(np.mean([len(g["kept"]) for g in graphs])),
        "alignment": compare(aligned, graphs, args.auroc),
    })


if __name__ == "__main__":
    main()

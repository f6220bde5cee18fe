"""AlphaEdit on SmolLM2-135M, a first look (issue 21 goes further): the null space the default
threshold leaves per layer, the share of the edit's keys the projection keeps, and whether one
batch of facts installs.

    PYTHONPATH=. .venv/bin/python benchmarks/alphaedit.py [--facts 5]   # docs/data/alphaedit.json
    PYTHONPATH=. .venv/bin/python benchmarks/alphaedit.py --token-sweep   # null space vs tokens
    PYTHONPATH=. python benchmarks/alphaedit.py --quick --model toy-2l     # a check (2 facts)

The key statistics are MEMIT's (read from the cache when there). --token-sweep computes the
statistics afresh from the first 2k, 5k, 10k and 20k tokens of the same text (the 50k default from
the cache) and writes, per layer, the null-space dimension at the default threshold to
alphaedit_tokens.json beside --out: the projector is only as good as C. --quick uses 2 facts, 4 fit steps,
2,048 statistics tokens and a sweep of 512 and 1,024 tokens.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import harness
import torch
from doc_tables.schemas.editing import AlphaEditData, AlphaEditTokensData, Spectrum

from lmsci_mi import LensModel, load_model
from lmsci_mi.editing import (
    AlphaEditConfig,
    EditRequest,
    KeyStatistics,
    StatsConfig,
    alphaedit_edit,
    default_memit_layers,
    key_statistics,
    load_facts,
)
from lmsci_mi.editing.alphaedit import null_space_projector

SWEEP = (2_000, 5_000, 10_000, 20_000)
QUICK_SWEEP = (512, 1_024)
QUICK_STATS_TOKENS = 2_048
QUICK_FIT = {"steps": 4, "n_contexts": 2}
"""--quick's fit: a check of the script, not of the method."""


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--facts", type=int, default=5, help="the first N shipped facts, one batch")
    parser.add_argument("--token-sweep", action="store_true", help="null space against the token count")
    parser.add_argument("--model", default="smollm2-135m")


@torch.no_grad()
def p_new(lm: LensModel, requests: list[EditRequest]) -> list[float]:
    """p(target_new's first token) after each rewrite prompt."""
    out = []
    for r in requests:
        logits = lm(lm.encode_batch([r.rewrite_prompt]).tokens)[0, -1]
        out.append(float(logits.softmax(-1)[lm.continuation_ids(r.target_new)[0]]))
    return out


def null_space_dims(stats: KeyStatistics, layers: list[int], threshold: float) -> dict[str, int]:
    """Per layer, the dimension of the null space the threshold leaves in the key covariance."""
    return {str(layer): null_space_projector(stats.for_layer(layer), threshold)[1] for layer in layers}


def token_sweep(run: harness.Run, lm: LensModel, stats_tokens: int) -> None:
    """The null-space dimension per layer against the statistics' token count; the default
    budget (the largest) comes from the statistics cache, the smaller ones are computed afresh."""
    hp = AlphaEditConfig()
    layers = list(default_memit_layers(lm))
    rows = {}
    with tempfile.TemporaryDirectory() as scratch:
        for n_tokens in (*(QUICK_SWEEP if run.quick else SWEEP), stats_tokens):
            fresh = n_tokens != stats_tokens
            with run.timed("statistics"):
                stats = key_statistics(lm, layers, StatsConfig(n_tokens=n_tokens), use_cache=not fresh,
                                       cache_dir=Path(scratch) if fresh else None)
            rows[str(stats.n_tokens)] = null_space_dims(stats, layers, hp.nullspace_threshold)
            print(f"{stats.n_tokens} tokens of {stats.source}: null-space dims {rows[str(stats.n_tokens)]}")
    run.write(AlphaEditTokensData(model=lm.name, threshold=hp.nullspace_threshold, d_mlp=int(lm.cfg.d_mlp or 0),
                                  source=stats.source, null_space_dims_by_tokens=rows),
              run.out.with_name("alphaedit_tokens.json"))


def spectra(stats: KeyStatistics, layers: list[int]) -> dict[str, Spectrum]:
    """Each layer's largest, median and smallest eigenvalue of C (``stats.spectra()`` is sorted
    from the largest down)."""
    return {str(layer): Spectrum(max=float(s[0]), median=float(s[len(s) // 2]), min=float(s[-1]))
            for layer, s in zip(layers, stats.spectra(), strict=True)}


def one_batch(run: harness.Run, lm: LensModel, n_facts: int, stats_tokens: int) -> None:
    """Edit the first facts in one batch: p(new) before and after, the null space per layer."""
    hp = AlphaEditConfig(stats_tokens=stats_tokens, **(QUICK_FIT if run.quick else {}))
    layers = list(default_memit_layers(lm))
    with run.timed("statistics"):
        stats = key_statistics(lm, layers, StatsConfig(n_tokens=hp.stats_tokens))
    facts = load_facts()[:n_facts]
    before = p_new(lm, facts)
    with run.timed("edit") as edit:
        handle = alphaedit_edit(lm, facts, hp, stats=stats)
    after = p_new(lm, facts)
    handle.restore()
    data = AlphaEditData(
        model=lm.name, layers=layers, config=hp.params(), stats_tokens=stats.n_tokens,
        stats_source=stats.source, d_mlp=int(lm.cfg.d_mlp or 0), eigenvalues=spectra(stats, layers),
        null_space_dims={str(k): v for k, v in handle.details["null_space_dims"].items()},
        key_share_kept={str(k): v for k, v in handle.details["key_share_kept"].items()},
        facts=[f.subject for f in facts], p_new_before=before, p_new_after=after, seconds=edit.seconds,
    )
    run.write(data)
    print(f"null-space dims {data['null_space_dims']}, keys kept {data['key_share_kept']}, {edit.seconds:.1f} s")
    print("p(new) before", [round(x, 3) for x in before], "after", [round(x, 3) for x in after])


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags)
    stats_tokens = QUICK_STATS_TOKENS if run.quick else AlphaEditConfig().stats_tokens
    with run.timed("load"):
        lm = load_model(run.args.model)
    if run.args.token_sweep:
        token_sweep(run, lm, stats_tokens)
    else:
        one_batch(run, lm, 2 if run.quick else run.args.facts, stats_tokens)


if __name__ == "__main__":
    main()

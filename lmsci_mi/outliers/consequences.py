"""What massive activations do to the other tools' figures: the SAE's explained variance and the
lenses' KL, each over its usual positions and again without the positions an
:class:`~lmsci_mi.positions.Exclude` names (the massive-activation tokens of Sun et al. 2024, the
first token and the first newline), with paired bootstrap intervals over texts.

Uses the public API of the SAE package (:func:`~lmsci_mi.sae.stats.feature_summary`'s explained
variance, on activations collected as :func:`~lmsci_mi.sae.stats.sae_stats` collects them) and of
the lenses (:class:`~lmsci_mi.lenses.logit_lens.LogitLens`'s ``kl_per_prompt(exclude)``), in that
one direction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float, Int
from torch import Tensor

from lmsci_mi.collect import CollectConfig, collect_activations
from lmsci_mi.config import Config, config
from lmsci_mi.data.text_corpus import STDLIB_TEXT_SOURCE, text_chunks
from lmsci_mi.errors import UserInputError
from lmsci_mi.lenses.logit_lens import LENS_SITES, LogitLensConfig, logit_lens
from lmsci_mi.lenses.tuned_lens import TunedLens, heldout_documents, tuned_lens
from lmsci_mi.model import LensModel
from lmsci_mi.positions import Exclude
from lmsci_mi.results import Result, result_type
from lmsci_mi.stats import (
    Interval,
    bootstrap_interval,
    paired_bootstrap_interval,
    percentile_bounds,
    resample_counts,
)

if TYPE_CHECKING:
    from lmsci_mi.sae.core import LensSAE

__all__ = [
    "ExclusionEffect",
    "ExclusionEffectConfig",
    "heldout_texts",
    "lens_kl_without",
    "sae_explained_variance_without",
]


@config
class ExclusionEffectConfig(Config):
    """Settings of the with/without comparisons: the lens's text and the bootstrap."""

    n_texts: int = dataclasses.field(
        default=16, metadata={"help": "rows of held-out text (the lens; the SAE takes its rows)", "ge": 2}
    )
    seq_len: int = dataclasses.field(default=64, metadata={"help": "tokens per row of text", "ge": 2})
    site: str = dataclasses.field(
        default="resid_post", metadata={"help": "the logit lens's site", "choices": LENS_SITES}
    )
    batch_size: int = dataclasses.field(default=8, metadata={"help": "texts per forward pass", "ge": 1})
    n_resamples: int = dataclasses.field(
        default=1000, metadata={"help": "bootstrap resamples of the texts", "ge": 1}
    )
    level: float = dataclasses.field(default=0.95, metadata={"help": "interval coverage", "gt": 0, "lt": 1})
    seed: int = dataclasses.field(default=0, metadata={"help": "seed of the bootstrap"})


_DEFAULT = ExclusionEffectConfig()


@result_type
class ExclusionEffect(Result):
    """A tool's figure over its usual positions (``"all"``) and over those ``exclude`` keeps.

    ``values`` is ``[positions, item]``: the two estimates per item (the SAE: one; a lens: one
    per layer). Intervals are percentile bootstraps over texts; ``difference`` (kept − all)
    resamples the same texts on both sides.

    Attributes:
        metric: what was measured.
        exclude: the positions left out in ``"kept"``; ``excluded``: it in words.
        all, kept, difference: per item, the interval of each.
        n_positions: positions counted in ``"all"`` and in ``"kept"``.
        n_texts: texts resampled.
    """

    metric: str
    exclude: Exclude
    excluded: str
    all: tuple[Interval, ...]
    kept: tuple[Interval, ...]
    difference: tuple[Interval, ...]
    n_positions: tuple[int, int]
    n_texts: int

    def summary(self, rows: int = 40) -> str:
        """One line per item: all, kept and the difference, each with its interval."""
        lines = [f"{self.metric} on {self.meta.model} (sink {self.meta.sink!r}), {self.n_texts} texts: over "
                 f"all {self.n_positions[0]} positions, and without {self.excluded} "
                 f"({self.n_positions[1]} kept) [{self.all[0].level:.0%} CI]"]
        for label, a, k, d in list(zip(self.axis_labels(1), self.all, self.kept, self.difference,
                                       strict=True))[:rows]:
            lines.append(f"{label:>20}  all {a}  kept {k}  difference {d}")
        return "\n".join(lines)


def _interval(replicates: Tensor, config: ExclusionEffectConfig, n: int) -> Interval:
    """Row 0 is the estimate (every text once), the rest the bootstrap replicates."""
    low, high = percentile_bounds(replicates[1:], config.level).tolist()
    return Interval(float(replicates[0]), low, high, config.level, n, "percentile bootstrap over texts")


# --------------------------------------------------------------------------- the SAE


@torch.no_grad()
def _per_text_sums(
    sae: LensSAE, x: Float[Tensor, "row d_model"], text: Int[Tensor, " row"], n_texts: int
) -> list[Tensor]:
    """Per text: rows, squared reconstruction error, squared norm and the sum of the rows."""
    x = x.float()
    error = torch.cat([(part - sae.decode(sae.encode(part))).pow(2).sum(-1) for part in x.split(4096)])
    sums = []
    for value in (torch.ones(len(x)), error, x.pow(2).sum(-1), x):
        out = torch.zeros((n_texts, *value.shape[1:]), dtype=torch.float64)
        sums.append(out.index_add_(0, text, value.double().cpu()))
    return sums


def _explained(weights: Tensor, sums: list[Tensor]) -> Tensor:
    """sae-lens's explained variance ``1 − E‖x − x̂‖² / (E‖x‖² − ‖E x‖²)`` (as
    :func:`~lmsci_mi.sae.stats.feature_summary`) of the texts weighted by each row of ``weights``
    (``[resample, text]`` counts): a ratio of sums, so texts are resampled whole."""
    rows, error, square, total = (weights @ s for s in sums)
    mean = total / rows[:, None]
    return 1 - (error / rows) / (square / rows - mean.pow(2).sum(-1))


def sae_explained_variance_without(
    lm: LensModel,
    sae: LensSAE,
    rows: Sequence[Sequence[int]],
    exclude: Exclude,
    config: ExclusionEffectConfig = _DEFAULT,
) -> ExclusionEffect:
    """The SAE's explained variance on ``rows``, over every position it reads and without the
    positions ``exclude`` leaves out, with a paired bootstrap over the texts.

    "All" is :func:`~lmsci_mi.sae.stats.sae_stats`'s default: every position but the sink, which
    the SAE never saw; "kept" leaves out ``exclude``'s positions too (the same figure as
    ``sae_stats(..., exclude=Exclude().union(exclude))``). Massive activations hold most of the
    variance where they occur, so explained variance over all tokens mostly measures them. Reads
    the model only.

    Args:
        lm: the model the SAE was trained on (checked).
        sae: the SAE.
        rows: held-out token rows, each starting with the sink (e.g. ``sae_corpus(...).held_out``).
        exclude: the positions to leave out (e.g. the massive-activation tokens).
        config: the bootstrap (``n_texts``/``seq_len``/``site`` are the lens's, unused here).

    Raises:
        UserInputError: fewer than two rows, or no position left once ``exclude`` is applied.
    """
    sae.check(lm)
    if len(rows) < 2:
        raise UserInputError(f"{len(rows)} row given: the bootstrap over texts needs at least two")
    acts = collect_activations(lm, list(rows), [sae.hook], positions="all", config=CollectConfig(progress=False))
    kept = exclude.keep_at(acts.position, acts.token)
    if not bool(kept.any()):
        raise UserInputError(f"no position is left once {exclude.describe()} is left out: exclude less")
    n = len(rows)
    x = acts.acts[sae.hook]
    every = _per_text_sums(sae, x, acts.example, n)
    without = _per_text_sums(sae, x[kept], acts.example[kept], n)
    weights = torch.cat([torch.ones(1, n, dtype=torch.float64),
                         resample_counts(n, config.n_resamples, seed=config.seed)])
    ev_all, ev_kept = _explained(weights, every), _explained(weights, without)
    return ExclusionEffect(
        values=torch.stack([ev_all[:1], ev_kept[:1]]).float(),
        axes=("positions", "sae"),
        labels=(("all", "kept"), (sae.hook,)),
        meta=lm.meta(data_source=f"{n} token rows given", seed=config.seed,
                     params={**config.params(), "sae": sae.source or sae.hook, "exclude": exclude.params()}),
        metric="SAE explained variance",
        exclude=exclude,
        excluded=exclude.describe(),
        all=(_interval(ev_all, config, n),),
        kept=(_interval(ev_kept, config, n),),
        difference=(_interval(ev_kept - ev_all, config, n),),
        n_positions=(len(x), int(kept.sum())),
        n_texts=n,
    )


# --------------------------------------------------------------------------- the lenses


def heldout_texts(lm: LensModel, config: ExclusionEffectConfig = _DEFAULT) -> list[str]:
    """``config.n_texts`` texts of about ``config.seq_len`` tokens of the standard library's
    prose that no tuned lens trains on (:func:`~lmsci_mi.lenses.tuned_lens.heldout_documents`),
    decoded from their token rows (a lens tokenises them again, the sink first)."""
    per_row = config.seq_len - 1 if lm.sink_token_id is not None else config.seq_len
    rows = text_chunks(lm, config.n_texts * per_row, config.seq_len, documents=heldout_documents())
    first = 1 if lm.sink_token_id is not None else 0
    return [lm.tokenizer.decode(row[first:].tolist()) for row in rows[: config.n_texts]]


def lens_kl_without(
    lm: LensModel,
    exclude: Exclude,
    texts: Sequence[str] | None = None,
    *,
    lens: TunedLens | None = None,
    config: ExclusionEffectConfig = _DEFAULT,
) -> ExclusionEffect:
    """KL(final ‖ lens) per layer, over every token and without the positions ``exclude`` leaves
    out, with paired bootstrap intervals over texts.

    Each text's mean KL over its tokens, averaged over texts ("all": every token, the sink
    included, as :meth:`~lmsci_mi.lenses.logit_lens.LogitLens.mean_kl` counts them; "kept":
    :meth:`~lmsci_mi.lenses.logit_lens.LogitLens.kl_per_prompt` with ``exclude``). The logit lens
    at ``config.site`` by default; a trained tuned lens at its own site when ``lens`` is given.
    Reads the model only.

    Args:
        lm: the model.
        exclude: the positions to leave out (e.g. the massive-activation tokens).
        texts: the texts (default: :func:`heldout_texts`, held-out stdlib prose).
        lens: a tuned lens (None: the logit lens).
        config: the text, the site and the bootstrap.

    Raises:
        UserInputError: fewer than two texts, or a text with no token left once ``exclude`` is
            applied.

    >>> from lmsci_mi import load_model
    >>> cfg = ExclusionEffectConfig(n_texts=2, seq_len=16, n_resamples=20)
    >>> effect = lens_kl_without(load_model("toy-2l"), Exclude(), config=cfg)
    >>> effect.values.shape, effect.excluded
    (torch.Size([2, 2]), 'the sink')
    """
    chosen = heldout_texts(lm, config) if texts is None else list(texts)
    if len(chosen) < 2:
        raise UserInputError(f"{len(chosen)} text given: the bootstrap over texts needs at least two")
    if lens is None:
        result = logit_lens(lm, chosen, config=LogitLensConfig(site=config.site, batch_size=config.batch_size))
    else:
        site_config = LogitLensConfig(site=lens.site, batch_size=config.batch_size)
        result = tuned_lens(lm, chosen, lens=lens, config=site_config)
    every, kept = result.kl_per_prompt(), result.kl_per_prompt(exclude)
    empty = kept.isnan().any(-1).nonzero()[:, 0].tolist()
    if empty:
        raise UserInputError(f"texts {empty} have no token left once {exclude.describe()} is left out")
    boot = {"n_resamples": config.n_resamples, "level": config.level, "seed": config.seed}
    layers = range(every.shape[1])
    assert result.token_ids is not None  # a lens run now keeps its token ids
    real = ~result.kl[:, 0].isnan()  # [text, position]: NaN only at padding
    counted = int((real & exclude.keep(result.token_ids)).sum())
    return ExclusionEffect(
        values=torch.stack([every.mean(0), kept.mean(0)]).float(),
        axes=("positions", "layer"),
        labels=(("all", "kept"), result.labels[1]),
        meta=lm.meta(chosen, seed=config.seed, data_source=STDLIB_TEXT_SOURCE if texts is None else "given texts",
                     params={**config.params(), "lens": result.lens, "site": result.site,
                             "exclude": exclude.params()}),
        metric=f"KL(final ‖ {result.lens} lens) at {result.site}, nats",
        exclude=exclude,
        excluded=exclude.describe(),
        all=tuple(bootstrap_interval(every[:, i].double(), **boot) for i in layers),
        kept=tuple(bootstrap_interval(kept[:, i].double(), **boot) for i in layers),
        difference=tuple(paired_bootstrap_interval(kept[:, i].double(), every[:, i].double(), **boot)
                         for i in layers),
        n_positions=(int(real.sum()), counted),
        n_texts=len(chosen),
    )

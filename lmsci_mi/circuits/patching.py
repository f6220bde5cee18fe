"""Activation patching: clean activations patched into a corrupted run, scored by a metric.

Exact patching as in Vig et al. 2020 / Meng et al. 2022 / Wang et al. 2022 (IOI) and
TransformerLens's ``patching`` module. This module is a planner: every patch configuration
(layer × position × head) becomes a row of interventions, and the sweep engine
(:mod:`lmsci_mi.sweep`) runs them all against the cached corrupted run, resuming each row at its
layer and computing only the positions from its first change on.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import torch
from jaxtyping import Int
from torch import Tensor

from lmsci_mi.circuits.metrics import KLToClean, Metric, Normalised, pair_metric
from lmsci_mi.config import Config, config
from lmsci_mi.data.pairs import PairsArg, PromptPairs, TokenisedPairs, accepts_pairs, as_pairs
from lmsci_mi.errors import UserInputError
from lmsci_mi.hooks import selection_mask
from lmsci_mi.positions import Exclude
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import SITES, Head, hook_name, site
from lmsci_mi.sweep import BaseRun, Intervention, Row, SweepConfig, SweepStats, run_rows

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel

__all__ = [
    "PATCH_SITES",
    "AlignedPairs",
    "PatchingConfig",
    "PatchingResult",
    "PromptPairs",
    "align_pairs",
    "patch_activations",
    "prepare_pairs",
]

PATCH_SITES: tuple[str, ...] = tuple(name for name, s in SITES.items() if s.per_layer)
"""Sites that can be patched: every per-layer site of the site table."""

TokensArg = str | Sequence[str] | Int[Tensor, "pair pos"]
"""Deprecated: one side of the loose ``clean, corrupted`` form (give :class:`PromptPairs`)."""
AlignArg = Mapping[str, tuple[int | Sequence[int], int | Sequence[int]]]


@config
class PatchingConfig(Config):
    """What an activation-patching (or attribution) sweep patches and how it scores."""

    site: str = field(
        default="resid_pre",
        metadata={"help": f"site to patch: {', '.join(PATCH_SITES)}", "choices": PATCH_SITES},
    )
    positions: Literal["each", "all"] = field(
        default="each", metadata={"help": "patch one position at a time, or all at once"})
    layers: tuple[int, ...] | None = field(
        default=None, metadata={"help": "layers (default all)", "min_length": 1}
    )
    normalise: bool = field(default=False, metadata={"help": "0 = corrupted run, 1 = clean run"})
    answer_position: int = field(default=-1, metadata={"help": "position whose logits are scored"})
    sweep: SweepConfig = field(default_factory=SweepConfig, metadata={"cli": False})
    # None patches every position: the sink is the same token in both runs, so its cells already
    # equal the corrupted run and cost nothing; exclude leaves chosen positions (the sink,
    # massive-activation tokens) unpatched too: their cells keep the corrupted run's value.
    exclude: Exclude | None = field(
        default=None, metadata={"help": "positions never patched (None: none)", "cli": False}
    )

    def layer_list(self, n_layers: int) -> list[int]:
        """The layers to sweep on a model of ``n_layers`` layers (checked)."""
        layers = list(range(n_layers)) if self.layers is None else [int(x) for x in self.layers]
        bad = [x for x in layers if not 0 <= x < n_layers]
        if bad:
            raise UserInputError(f"layers {bad} out of range for a model with {n_layers} layers")
        return layers


@result_type
class PatchingResult(Result):
    """An activation-patching sweep: the metric with each (layer, position[, head]) patched.

    ``axes`` is ``("layer", "position")`` for per-position sweeps of whole-vector sites,
    ``("layer", "position", "head")`` for per-position head sweeps, ``("layer", "head")`` for head
    sweeps over all positions at once, and ``("layer",)`` for whole-vector sites over all positions.
    Values are the metric averaged over prompt pairs (normalised when ``normalised`` is true).

    Attributes:
        site: the patched site (a key of :data:`lmsci_mi.sites.SITES`).
        clean_value / corrupted_value: the metric on the unpatched clean and corrupted runs
            (in the metric's own units, before normalisation), pair-averaged.
        normalised: whether ``values`` are normalised (0 = corrupted, 1 = clean).
        metric: a description of the metric.
        work: what the sweep engine ran (passes, block calls, token-layers computed and the
            least any schedule needs).
    """

    site: str
    clean_value: float
    corrupted_value: float
    normalised: bool
    metric: str
    work: SweepStats

    def top(self, k: int = 10) -> tuple[tuple[Head | str, float], ...]:
        """The ``k`` largest cells as ``(key, value)``, best first: the key is a
        :class:`~lmsci_mi.sites.Head` when the cell is one head (``Head('L9.H6')``, as on every
        head result), else the cell's label (``"L3 @5:John"``, ``"L9.H6 @END"``)."""
        return top_cells(self, k)


def top_cells(result: Result, k: int) -> tuple[tuple[Head | str, float], ...]:
    """The ``k`` largest cells of a (layer[, position][, head]) sweep (see PatchingResult.top)."""
    if k < 1:
        raise UserInputError(f"k must be at least 1, not {k}")
    flat = result.values.flatten()
    out: list[tuple[Head | str, float]] = []
    for index in flat.argsort(descending=True)[:k].tolist():
        coords = torch.unravel_index(torch.tensor(index), result.values.shape)
        named = {ax: result.axis_labels(a)[int(c)] for a, (ax, c) in enumerate(zip(result.axes, coords, strict=True))}
        head = Head.from_axis_labels(named["layer"], named["head"]) if "head" in named else None
        key: Head | str = head if head is not None else f"L{named['layer']}"
        if "position" in named:
            key = f"{key} @{named['position']}"
        out.append((key, float(flat[index])))
    return tuple(out)


@dataclass(frozen=True)
class AlignedPairs:
    """Tokenised clean/corrupted prompt pairs and the positions that correspond between them:
    what an activation-patching sweep plans its rows over.

    ``clean_positions[i, pair]`` and ``corrupted_positions[i, pair]`` are the i-th named (or
    every) position in each prompt of the pair; ``clean_answers`` and ``corrupted_answers`` the
    positions each prompt's metric reads.
    """

    clean: Int[Tensor, "pair clean_pos"]
    corrupted: Int[Tensor, "pair pos"]
    position_names: tuple[str, ...]
    clean_positions: Int[Tensor, "name pair"]
    corrupted_positions: Int[Tensor, "name pair"]
    prompts: tuple[str, ...]
    aligned: bool
    clean_answers: Int[Tensor, " pair"]
    corrupted_answers: Int[Tensor, " pair"]
    source: str = "user prompts"


def _per_pair(value: int | Sequence[int], n_pairs: int, length: int, what: str) -> list[int]:
    values = [int(value)] * n_pairs if isinstance(value, int) else [int(v) for v in value]
    if len(values) != n_pairs:
        raise UserInputError(f"{what}: {len(values)} positions for {n_pairs} prompt pairs")
    bad = [v for v in values if not -length <= v < length]
    if bad:
        raise UserInputError(f"{what}: positions {bad} out of range for {length} tokens")
    return [v % length for v in values]


def _named_positions(align: AlignArg, n_pairs: int, n_clean: int, n_corr: int) -> tuple[Tensor, Tensor]:
    if not align:
        raise UserInputError("align is empty: name at least one position, e.g. {'END': (-1, -1)}")
    clean_rows, corr_rows = [], []
    for name, (c_pos, k_pos) in align.items():
        clean_rows.append(_per_pair(c_pos, n_pairs, n_clean, f"align[{name!r}] clean"))
        corr_rows.append(_per_pair(k_pos, n_pairs, n_corr, f"align[{name!r}] corrupted"))
    return torch.tensor(clean_rows, dtype=torch.long), torch.tensor(corr_rows, dtype=torch.long)


def _unpadded(tok: TokenisedPairs) -> None:
    """Raise unless every prompt of a side has that side's length: patching compares positions
    across prompts, so padding would shift them."""
    corrupted_texts = tok.pairs.corrupted if tok.pairs is not None else ()
    for side, lengths, texts in (("clean", tok.clean_lengths, tok.prompts),
                                 ("corrupted", tok.corrupted_lengths, corrupted_texts)):  # fmt: skip
        if bool((lengths != lengths[0]).any()):
            listing = "; ".join(f"{int(n)} tokens: {t!r}" for n, t in zip(lengths, texts, strict=False))
            raise UserInputError(
                f"{side} prompts tokenise to different lengths, so their positions do not line up"
                f" ({listing or lengths.tolist()}). Use prompts of equal token length (e.g. "
                "single-token names), or align them by named positions."
            )


def align_pairs(lm: LensModel, pairs: PairsArg, align: AlignArg | None = None,
                answer_position: int = -1) -> AlignedPairs:
    """Tokenise and check prompt pairs for patching; resolve named positions when given.

    The metric reads each pair's own answer positions when the pairs carry them
    (``PromptPairs.answer_positions``), else ``answer_position`` (negative: from the end) in
    every prompt.

    Raises:
        UserInputError: prompts of one side with different token lengths, clean and corrupted
            prompts of different lengths without ``align``, bad positions.
    """
    tok = pairs.tokenise(lm)
    _unpadded(tok)
    if tok.pairs is None or tok.pairs.answer_positions is None:
        tok = tok.with_answer_positions(answer_position)
    n_pairs, n_corr = tok.corrupted.shape
    n_clean = tok.clean.shape[1]
    if align is not None:
        names = tuple(align)
        clean_pos, corr_pos = _named_positions(align, n_pairs, n_clean, n_corr)
    elif n_clean != n_corr:
        raise UserInputError(
            f"clean prompts are {n_clean} tokens but corrupted prompts are {n_corr}, so their "
            "positions do not line up. Use a corruption with the same token length (e.g. swap "
            "single-token names), or pass align={'S2': (clean_pos, corrupted_pos), 'END': (-1, -1)} "
            "to patch by named positions.")
    else:
        names = tuple(str(i) for i in range(n_corr))
        if tok.pairs is not None and n_pairs == 1:  # labelled by the clean prompt's tokens
            names = tuple(f"{i}:{t}" for i, t in enumerate(lm.to_str_tokens(tok.clean[0])))
        clean_pos = corr_pos = torch.arange(n_corr)[:, None].expand(n_corr, n_pairs)
    texts = tok.pairs.clean + tok.pairs.corrupted if tok.pairs is not None else ()
    return AlignedPairs(tok.clean, tok.corrupted, names, clean_pos, corr_pos, texts, align is not None,
                        tok.answer_positions, tok.corrupted_answer_positions, tok.source)  # fmt: skip


def prepare_pairs(lm: LensModel, clean: TokensArg, corrupted: TokensArg, align: AlignArg | None) -> AlignedPairs:
    """Deprecated: :func:`align_pairs` of ``PromptPairs(clean, corrupted)``
    (:func:`lmsci_mi.data.pairs.as_pairs`, which also takes token ids)."""
    return align_pairs(lm, as_pairs(clean, corrupted), align)


def aligned_source(pairs: AlignedPairs, site_name: str, clean_act: Tensor, corrupted_act: Tensor) -> Tensor:
    """The clean activation moved onto the corrupted run's positions (itself when aligned)."""
    if clean_act.shape == corrupted_act.shape and torch.equal(pairs.clean_positions, pairs.corrupted_positions):
        return clean_act
    if site(site_name).layout.position_axis != 1:
        raise UserInputError(
            f"{site_name!r} cannot be patched between prompts of different token lengths (its key "
            "axis differs); patch 'z', 'q', 'k' or 'v' instead")
    source = corrupted_act.clone()
    pair_index = torch.arange(source.shape[0], device=source.device)
    for c_pos, k_pos in zip(pairs.clean_positions, pairs.corrupted_positions, strict=True):
        source[pair_index, k_pos.to(source.device)] = clean_act[pair_index, c_pos.to(source.device)]
    return source


def resolve_metric(metric: Metric | Literal["kl"], clean_logits: Tensor) -> Metric:
    """A metric callable; ``"kl"`` becomes KL to the clean run's distribution."""
    if isinstance(metric, str):
        if metric != "kl":
            raise UserInputError(f"metric must be a callable or 'kl', not {metric!r}")
        return KLToClean(clean_logits)
    return metric


def position_groups(pairs: AlignedPairs, positions: str) -> Tensor:
    """``[group, pair, pos]`` masks of the corrupted positions patched together in each row."""
    n_pairs, n_pos = pairs.corrupted.shape
    one_hot = torch.zeros(len(pairs.position_names), n_pairs, n_pos, dtype=torch.bool)
    for i, row in enumerate(pairs.corrupted_positions):
        one_hot[i, torch.arange(n_pairs), row] = True
    if positions == "each":
        return one_hot
    return one_hot.any(0, keepdim=True) if pairs.aligned else torch.ones(1, n_pairs, n_pos, dtype=torch.bool)


def sweep_axes(pairs: AlignedPairs, cfg: PatchingConfig, layers: Sequence[int], n_heads: int
               ) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """Axis names and labels of a sweep's result (shared by exact and attribution patching)."""
    layer_labels = tuple(str(layer) for layer in layers)
    axes: list[str] = ["layer"]
    labels: list[tuple[str, ...]] = [layer_labels]
    if cfg.positions == "each":
        axes.append("position")
        labels.append(pairs.position_names)
    if site(cfg.site).per_head:
        axes.append("head")
        labels.append(Head.axis_labels(n_heads))
    return tuple(axes), tuple(labels)


def answer_rows(resid: Tensor, positions: Tensor) -> Tensor:
    """Each pair's residual vector at its answer position, ``[pair, d_model]``."""
    rows = torch.arange(resid.shape[0], device=resid.device)
    return resid[rows, positions.to(resid.device)]


@torch.no_grad()
def _runs(lm: LensModel, pairs: AlignedPairs, hooks: list[str]) -> tuple[dict[str, Tensor], Tensor, BaseRun]:
    """The clean activations and logits, and the corrupted base run the rows resume from."""
    with lm.hooks.capture(hooks) as clean_cap:
        resid = lm.model(pairs.clean, stop_at_layer=lm.cfg.n_layers)
    clean_logits = lm.unembed(answer_rows(resid, pairs.clean_answers))
    base = BaseRun.record(lm, pairs.corrupted, answer_positions=pairs.corrupted_answers, capture=hooks)
    return {h: clean_cap[h] for h in hooks}, clean_logits, base


def _patch_rows(pairs: AlignedPairs, cfg: PatchingConfig, layers: Sequence[int],
                clean: Mapping[str, Tensor], base: BaseRun) -> tuple[list[Row], int]:
    """One row per (layer, position group, head): the planner's whole job. Returns the heads."""
    groups = position_groups(pairs, cfg.positions).to(base.tokens.device)
    if cfg.exclude is not None:  # a group's excluded positions are left out of its patch
        groups = groups & cfg.exclude.keep(pairs.corrupted).to(groups.device)[None]
    layout = site(cfg.site).layout
    first = base.acts[hook_name(cfg.site, layers[0])]
    n_heads = first.shape[layout.head_axis] if layout.head_axis is not None else 0
    heads: list[list[int] | None] = [[h] for h in range(n_heads)] if n_heads else [None]
    rows = []
    for layer in layers:
        name = hook_name(cfg.site, layer)
        source = aligned_source(pairs, cfg.site, clean[name], base.acts[name])
        for group, head in itertools.product(groups, heads):
            mask = selection_mask(base.acts[name], name, group, head)
            rows.append(Row((Intervention(name, source, mask),)))
    return rows, n_heads


@accepts_pairs(1)
def patch_activations(
    lm: LensModel,
    pairs: PairsArg,
    metric: Metric | Literal["kl"] | None = None,
    config: PatchingConfig | None = None,
    *,
    align: AlignArg | None = None,
) -> PatchingResult:
    """Patch clean activations into the corrupted run, one (layer, position[, head]) at a time.

    Reads the model only; every hook is removed on return or error.

    Args:
        lm: the model.
        pairs: the prompt pairs (:class:`~lmsci_mi.data.pairs.PromptPairs`, or token ids as
            :class:`~lmsci_mi.data.pairs.TokenisedPairs`); each side's prompts of one token
            length. The deprecated form ``patch_activations(lm, clean, corrupted, metric, ...)``
            still works for one release.
        metric: scores the logits at the answer position, ``[*config, pair, vocab] ->
            [*config, pair]`` (see :mod:`lmsci_mi.circuits.metrics`), averaged over pairs; or
            ``"kl"`` for KL to the clean run; None (default) for each pair's logit difference
            of its answer over its wrong token (``LogitDiff.of_pairs``).
        config: the site, positions (``"each"`` or ``"all"``), layers, normalisation, answer
            position (the pairs' own ``answer_positions`` win) and batching
            (:class:`PatchingConfig`; k/v have the model's key/value heads).
        align: named positions for prompts of different lengths, ``{name: (clean_pos,
            corrupted_pos)}`` with an int or one int per pair; the position axis then lists the
            names (e.g. ``{"S2": (10, 11), "END": (-1, -1)}``).

    Returns:
        A :class:`PatchingResult` (see its axes).

    Raises:
        ValueError: unknown site, mismatched lengths without ``align``, bad positions.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> pairs = PromptPairs("Mary and John: John gave it to", "Mary and John: Mary gave it to",
    ...                     answers=lm.token_id(" Mary"), wrongs=lm.token_id(" John"))
    >>> res = patch_activations(lm, pairs, config=PatchingConfig(site="z", positions="all"))
    >>> res.axes, tuple(res.values.shape)
    (('layer', 'head'), (2, 4))
    """
    cfg = config or PatchingConfig()
    layers = cfg.layer_list(lm.cfg.n_layers)
    aligned = align_pairs(lm, pairs, align, cfg.answer_position)
    hooks = lm.hooks.resolve([hook_name(cfg.site, layer) for layer in layers])  # fail before running
    clean_acts, clean_logits, base = _runs(lm, aligned, hooks)
    raw_metric = resolve_metric(pair_metric(metric, pairs), clean_logits)
    scorer = Normalised(raw_metric, clean_logits, base.logits) if cfg.normalise else raw_metric
    rows, n_heads = _patch_rows(aligned, cfg, layers, clean_acts, base)
    out = run_rows(lm, base, rows, lambda logits: scorer(logits).float(), cfg.sweep)
    axes, labels = sweep_axes(aligned, cfg, layers, n_heads)
    shape = [len(labels[i]) for i in range(len(axes))]
    return PatchingResult(
        values=out.values.mean(-1).cpu().reshape(shape),
        axes=axes,
        labels=labels,
        meta=lm.meta(aligned.prompts, data_source=aligned.source,
                     params={**cfg.params(), "aligned": aligned.aligned}),
        site=cfg.site,
        clean_value=float(raw_metric(clean_logits).float().mean()),
        corrupted_value=float(raw_metric(base.logits).float().mean()),
        normalised=cfg.normalise,
        metric=repr(raw_metric),
        work=out.stats,
    )


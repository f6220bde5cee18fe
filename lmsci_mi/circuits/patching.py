"""Activation patching: clean activations patched into a corrupted run, scored by a metric.

Exact patching as in Vig et al. 2020 / Meng et al. 2022 / Wang et al. 2022 (IOI) and
TransformerLens's ``patching`` module, but batched: every patch configuration of one layer
(position × head × prompt pair) is a row of one forward pass, and that pass resumes at the patched
layer from the corrupted run's residual stream instead of recomputing the layers below it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch
from jaxtyping import Bool, Int
from torch import Tensor

from lmsci_mi.circuits._batching import answer_logits, chunks, default_chunk_rows, run_from_layer
from lmsci_mi.circuits.metrics import KLToClean, Metric, Normalised
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import layout_of as site_layout

if TYPE_CHECKING:
    from transformer_lens.hook_points import HookPoint

    from lmsci_mi.model import LensModel

__all__ = ["HEAD_SITES", "SITES", "PatchingResult", "patch_activations", "site_hook_name"]

logger = logging.getLogger(__name__)

SITES: Mapping[str, str] = {
    "resid_pre": "blocks.{}.hook_resid_pre",
    "resid_mid": "blocks.{}.hook_resid_mid",
    "resid_post": "blocks.{}.hook_resid_post",
    "attn_out": "blocks.{}.hook_attn_out",
    "mlp_out": "blocks.{}.hook_mlp_out",
    "z": "blocks.{}.attn.hook_z",
    "q": "blocks.{}.attn.hook_q",
    "k": "blocks.{}.attn.hook_k",
    "v": "blocks.{}.attn.hook_v",
    "pattern": "blocks.{}.attn.hook_pattern",
}
"""Patchable sites and their hook names (``z`` is the per-head output before ``W_O``)."""

MIN_BATCH_ROWS = 64
"""Sequences per merged forward pass (see ``patch_activations``): enough to amortise per-pass cost."""

MAX_MERGED_SPAN = 8
"""At most this many layers between the lowest and highest layer merged into one pass."""

HEAD_SITES = frozenset({"z", "q", "k", "v", "pattern"})
"""Sites with a head axis: patched one head at a time."""

PositionsArg = Literal["each", "all"]
TokensArg = str | Sequence[str] | Int[Tensor, "pair pos"]
AlignArg = Mapping[str, tuple[int | Sequence[int], int | Sequence[int]]]


def site_hook_name(site: str, layer: int) -> str:
    """Hook name of ``site`` at ``layer``.

    Raises:
        ValueError: unknown site; the message lists the valid ones.

    >>> site_hook_name("z", 3)
    'blocks.3.attn.hook_z'
    """
    if site not in SITES:
        raise ValueError(f"unknown site {site!r}; choose one of {sorted(SITES)}")
    return SITES[site].format(layer)


@result_type
class PatchingResult(Result):
    """An activation-patching sweep: the metric with each (layer, position[, head]) patched.

    ``axes`` is ``("layer", "position")`` for per-position sweeps of whole-vector sites,
    ``("layer", "position", "head")`` for per-position head sweeps, ``("layer", "head")`` for head
    sweeps over all positions at once, and ``("layer",)`` for whole-vector sites over all positions.
    Values are the metric averaged over prompt pairs (normalised when ``normalised`` is true).

    Attributes:
        site: the patched site (a key of ``SITES``).
        clean_value / corrupted_value: the metric on the unpatched clean and corrupted runs
            (in the metric's own units, before normalisation), pair-averaged.
        normalised: whether ``values`` are normalised (0 = corrupted, 1 = clean).
        metric: a description of the metric.
        n_forward_rows: sequences run through the model (patched rows, counted once each).
    """

    site: str
    clean_value: float
    corrupted_value: float
    normalised: bool
    metric: str
    n_forward_rows: int

    def top(self, k: int = 10) -> tuple[tuple[str, float], ...]:
        """The ``k`` cells with the largest value, as (label, value), e.g. ``("L9.H6", 0.41)``."""
        flat = self.values.flatten()
        order = flat.argsort(descending=True)[:k]
        out = []
        for index in order.tolist():
            coords = torch.unravel_index(torch.tensor(index), self.values.shape)
            named = {
                ax: self.axis_labels(a)[int(c)]
                for a, (ax, c) in enumerate(zip(self.axes, coords, strict=True))
            }
            label = f"L{named['layer']}"
            if "head" in named:
                label += f".{named['head']}"
            if "position" in named:
                label += f" @{named['position']}"
            out.append((label, float(flat[index])))
        return tuple(out)


@dataclass(frozen=True)
class _Pairs:
    clean: Int[Tensor, "pair clean_pos"]
    corrupted: Int[Tensor, "pair pos"]
    # For each named (or every) position: clean and corrupted position of each pair.
    position_names: tuple[str, ...]
    clean_positions: Int[Tensor, "name pair"]
    corrupted_positions: Int[Tensor, "name pair"]
    prompts: tuple[str, ...]


def _tokens(lm: LensModel, prompts: TokensArg) -> tuple[Tensor, tuple[str, ...]]:
    if isinstance(prompts, Tensor):
        tokens = prompts if prompts.ndim == 2 else prompts[None]
        return tokens.to(lm.device), ()
    batch = [prompts] if isinstance(prompts, str) else list(prompts)
    return lm.to_tokens(batch), tuple(batch)


def _per_pair(value: int | Sequence[int], n_pairs: int, length: int, what: str) -> list[int]:
    values = [int(value)] * n_pairs if isinstance(value, int) else [int(v) for v in value]
    if len(values) != n_pairs:
        raise ValueError(f"{what}: {len(values)} positions for {n_pairs} prompt pairs")
    bad = [v for v in values if not -length <= v < length]
    if bad:
        raise ValueError(f"{what}: positions {bad} out of range for {length} tokens")
    return [v % length for v in values]


def prepare_pairs(
    lm: LensModel, clean: TokensArg, corrupted: TokensArg, align: AlignArg | None
) -> _Pairs:
    """Tokenise and check the prompt pairs; resolve named positions when given."""
    clean_tokens, clean_prompts = _tokens(lm, clean)
    corrupted_tokens, corrupted_prompts = _tokens(lm, corrupted)
    n_pairs = corrupted_tokens.shape[0]
    if clean_tokens.shape[0] != n_pairs:
        raise ValueError(
            f"{clean_tokens.shape[0]} clean prompts but {n_pairs} corrupted prompts: give one "
            "corrupted prompt per clean prompt"
        )
    n_clean, n_corr = clean_tokens.shape[1], corrupted_tokens.shape[1]
    if align is None:
        if n_clean != n_corr:
            raise ValueError(
                f"clean prompts are {n_clean} tokens but corrupted prompts are {n_corr}, so their "
                "positions do not line up. Use a corruption with the same token length (e.g. "
                "swap single-token names), or pass align={'S2': (clean_pos, corrupted_pos), "
                "'END': (-1, -1)} to patch by named positions."
            )
        names = tuple(str(i) for i in range(n_corr))
        if clean_prompts and n_pairs == 1:
            tokens = lm.to_str_tokens(clean_tokens[0])  # labelled by the clean prompt
            names = tuple(f"{i}:{tok}" for i, tok in enumerate(tokens))
        grid = torch.arange(n_corr)[:, None].expand(n_corr, n_pairs)
        clean_pos = corr_pos = grid
    else:
        if not align:
            raise ValueError("align is empty: name at least one position, e.g. {'END': (-1, -1)}")
        names = tuple(align)
        clean_rows, corr_rows = [], []
        for name, (c_pos, k_pos) in align.items():
            clean_rows.append(_per_pair(c_pos, n_pairs, n_clean, f"align[{name!r}] clean"))
            corr_rows.append(_per_pair(k_pos, n_pairs, n_corr, f"align[{name!r}] corrupted"))
        clean_pos = torch.tensor(clean_rows, dtype=torch.long)
        corr_pos = torch.tensor(corr_rows, dtype=torch.long)
    return _Pairs(
        clean=clean_tokens,
        corrupted=corrupted_tokens,
        position_names=names,
        clean_positions=clean_pos,
        corrupted_positions=corr_pos,
        prompts=clean_prompts + corrupted_prompts,
    )


def aligned_source(pairs: _Pairs, site: str, clean_act: Tensor, corrupted_act: Tensor) -> Tensor:
    """The clean activation moved onto the corrupted run's positions (identity when aligned)."""
    if clean_act.shape == corrupted_act.shape and torch.equal(
        pairs.clean_positions, pairs.corrupted_positions
    ):
        return clean_act
    if site == "pattern":
        raise ValueError(
            "the attention pattern cannot be patched between prompts of different token lengths "
            "(its key axis differs); patch 'z', 'q', 'k' or 'v' instead"
        )
    source = corrupted_act.clone()
    pair_index = torch.arange(source.shape[0], device=source.device)
    for c_pos, k_pos in zip(pairs.clean_positions, pairs.corrupted_positions, strict=True):
        source[pair_index, k_pos.to(source.device)] = clean_act[pair_index, c_pos.to(source.device)]
    return source


def _row_mask(
    site: str,
    pos_mask: Bool[Tensor, "row pair pos"],
    head_mask: Bool[Tensor, "row head"] | None,
) -> Tensor:
    """Mask broadcastable to the site's activation over ``row * pair`` sequences."""
    rows, n_pairs = pos_mask.shape[:2]
    layout = site_layout(site_hook_name(site, 0))
    if layout.head_axis is None:
        mask = pos_mask[..., None]  # [row, pair, pos, 1]
    elif layout.position_axis == 1:  # [b, pos, head, d]
        mask = pos_mask[:, :, :, None, None]
        if head_mask is not None:
            mask = mask & head_mask[:, None, None, :, None]
    else:  # pattern: [b, head, query, key]
        mask = pos_mask[:, :, None, :, None]
        if head_mask is not None:
            mask = mask & head_mask[:, None, :, None, None]
    return mask.reshape(rows * n_pairs, *mask.shape[2:])


def sweep_layers(
    lm: LensModel, site: str, positions: str, layers: Sequence[int] | None
) -> list[int]:
    """Validate a sweep's site and positions mode; the layers to sweep (all when None)."""
    if site not in SITES:
        raise ValueError(f"unknown site {site!r}; choose one of {sorted(SITES)}")
    if positions not in ("each", "all"):
        raise ValueError(f"positions must be 'each' or 'all', not {positions!r}")
    n_layers = lm.cfg.n_layers
    layer_list = list(range(n_layers)) if layers is None else [int(x) for x in layers]
    bad_layers = [x for x in layer_list if not 0 <= x < n_layers]
    if bad_layers or not layer_list:
        raise ValueError(f"layers {bad_layers or '[]'} out of range for {n_layers} layers")
    return layer_list


def resolve_metric(metric: Metric | Literal["kl"], clean_logits: Tensor) -> Metric:
    """A metric callable; ``"kl"`` becomes KL to the clean run's distribution."""
    if isinstance(metric, str):
        if metric != "kl":
            raise ValueError(f"metric must be a callable or 'kl', not {metric!r}")
        return KLToClean(clean_logits)
    return metric


def patch_activations(
    lm: LensModel,
    clean: TokensArg,
    corrupted: TokensArg,
    metric: Metric | Literal["kl"],
    *,
    site: str = "resid_pre",
    positions: PositionsArg = "each",
    layers: Sequence[int] | None = None,
    align: AlignArg | None = None,
    normalise: bool = False,
    answer_position: int = -1,
    chunk_size: int | None = None,
) -> PatchingResult:
    """Patch clean activations into the corrupted run, one (layer, position[, head]) at a time.

    Reads the model only; every hook is removed on return or error.

    Args:
        lm: the model.
        clean, corrupted: prompts (one or a list of pairs) or token tensors ``[pair, pos]``.
        metric: scores the logits at ``answer_position``, ``[*config, pair, vocab] ->
            [*config, pair]`` (see :mod:`lmsci_mi.circuits.metrics`), averaged over pairs; or
            ``"kl"`` for KL to the clean run.
        site: one of ``SITES``: ``resid_pre|resid_mid|resid_post|attn_out|mlp_out`` or the
            per-head ``z|q|k|v|pattern`` (k/v have the model's number of key/value heads).
        positions: ``"each"`` patches one position at a time (for ``pattern``, one query
            position); ``"all"`` patches every position (or every named position) at once.
        layers: layers to sweep (default all).
        align: named positions for prompts of different lengths, ``{name: (clean_pos,
            corrupted_pos)}`` with an int or one int per pair; the position axis then lists the
            names (e.g. ``{"S2": (10, 11), "END": (-1, -1)}``).
        normalise: report ``(m - m_corrupted) / (m_clean - m_corrupted)``.
        answer_position: the position whose logits the metric reads (default last).
        chunk_size: sequences per forward pass (default: about 4k tokens per pass).

    Returns:
        A :class:`PatchingResult` (see its axes).

    Raises:
        ValueError: unknown site, mismatched lengths without ``align``, bad positions.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.circuits.metrics import LogitDiff
    >>> lm = load_model("toy-2l")
    >>> metric = LogitDiff(lm.token_id(" Mary"), lm.token_id(" John"))
    >>> res = patch_activations(lm, "Mary and John: John gave it to", "Mary and John: Mary gave it to",
    ...                         metric, site="z", positions="all")
    >>> res.axes, tuple(res.values.shape)
    (('layer', 'head'), (2, 4))
    """
    layer_list = sweep_layers(lm, site, positions, layers)
    n_layers = lm.cfg.n_layers
    pairs = prepare_pairs(lm, clean, corrupted, align)
    n_pairs, n_pos = pairs.corrupted.shape
    hook_names = [site_hook_name(site, layer) for layer in layer_list]
    lm.hooks.resolve(hook_names)  # unknown hook (e.g. resid_mid on a parallel block): fail early

    with torch.no_grad():
        resid_names = [f"blocks.{layer}.hook_resid_pre" for layer in layer_list]
        with lm.hooks.capture(hook_names) as clean_cap:
            clean_logits = answer_logits(
                lm, lm.model(pairs.clean, stop_at_layer=n_layers), answer_position
            )
        with lm.hooks.capture(hook_names + resid_names) as corr_cap:
            corrupted_logits = answer_logits(
                lm, lm.model(pairs.corrupted, stop_at_layer=n_layers), answer_position
            )
        raw_metric = resolve_metric(metric, clean_logits)
        metric = raw_metric
        clean_value = float(raw_metric(clean_logits).float().mean())
        corrupted_value = float(raw_metric(corrupted_logits).float().mean())
        if normalise:
            metric = Normalised(raw_metric, clean_logits, corrupted_logits)

        # Position groups (one per patched position, or one for all) and head groups.
        n_names = len(pairs.position_names)
        one_hot = torch.zeros(n_names, n_pairs, n_pos, dtype=torch.bool)
        for i, row in enumerate(pairs.corrupted_positions):
            one_hot[i, torch.arange(n_pairs), row] = True
        if positions == "each":
            pos_groups = one_hot
        elif align is None:
            pos_groups = torch.ones(1, n_pairs, n_pos, dtype=torch.bool)
        else:
            pos_groups = one_hot.any(0, keepdim=True)
        pos_groups = pos_groups.to(lm.device)
        sample = corr_cap[hook_names[0]]
        layout = site_layout(hook_names[0])
        n_heads = sample.shape[layout.head_axis] if layout.head_axis is not None else 0
        head_groups = (
            torch.eye(n_heads, dtype=torch.bool, device=lm.device) if site in HEAD_SITES else None
        )
        n_pg = pos_groups.shape[0]
        n_hg = n_heads if head_groups is not None else 1
        n_rows = n_pg * n_hg
        chunk_rows = max(1, (chunk_size or default_chunk_rows(n_pos)) // n_pairs)

        values = torch.empty(len(layer_list), n_rows)
        # Work items: (layer index, rows). Items of neighbouring layers are merged into one
        # forward pass until it holds ~MIN_BATCH_ROWS sequences: a pass has a fixed per-layer
        # cost that small batches (9 heads, 15 positions) do not amortise. A merged pass starts
        # at its lowest layer; rows patched higher up just recompute a few corrupted layers.
        items = [(li, rows) for li in range(len(layer_list)) for rows in chunks(n_rows, chunk_rows)]
        target = max(1, min(chunk_rows, MIN_BATCH_ROWS // n_pairs))
        groups: list[list[tuple[int, slice]]] = []
        for item in items:
            if groups:
                last = groups[-1]
                total = sum(r.stop - r.start for _, r in last)
                span = layer_list[item[0]] - min(layer_list[i] for i, _ in last)
                size = item[1].stop - item[1].start
                if total < target and total + size <= chunk_rows and 0 <= span <= MAX_MERGED_SPAN:
                    last.append(item)
                    continue
            groups.append([item])
        sources = {}
        for group in groups:
            start_layer = min(layer_list[li] for li, _ in group)
            total = sum(r.stop - r.start for _, r in group)
            hooks = []
            offset = 0
            for li, rows in group:
                name = hook_names[li]
                if name not in sources:
                    sources[name] = aligned_source(pairs, site, clean_cap[name], corr_cap[name])
                source = sources[name]
                row_ids = torch.arange(rows.start, rows.stop, device=lm.device)
                pos_mask = pos_groups[row_ids // n_hg]
                head_mask = head_groups[row_ids % n_hg] if head_groups is not None else None
                mask = _row_mask(site, pos_mask, head_mask)
                n = row_ids.numel()
                if len(group) > 1:
                    full = torch.zeros(
                        (total * n_pairs, *mask.shape[1:]), dtype=torch.bool, device=mask.device
                    )
                    full[offset * n_pairs : (offset + n) * n_pairs] = mask
                    mask = full
                src = source.unsqueeze(0).expand(mask.shape[0] // n_pairs, *source.shape)
                src = src.reshape(mask.shape[0], *source.shape[1:])

                def patch(
                    act: Tensor, hook: HookPoint, mask: Tensor = mask, src: Tensor = src
                ) -> Tensor:
                    return torch.where(mask, src, act)

                hooks.append((name, patch))
                offset += n
            start = corr_cap[f"blocks.{start_layer}.hook_resid_pre"]
            batch_start = (
                start.unsqueeze(0)
                .expand(total, *start.shape)
                .reshape(total * n_pairs, *start.shape[1:])
            )
            logits = run_from_layer(
                lm,
                batch_start,
                start_layer,
                hooks,
                answer_position=answer_position,
                label=f"patch {site}",
            )
            scores = metric(logits.reshape(total, n_pairs, -1)).float().mean(-1).cpu()
            offset = 0
            for li, rows in group:
                n = rows.stop - rows.start
                values[li, rows] = scores[offset : offset + n]
                offset += n
            logger.debug(
                "patched %s at layers %s", site, sorted({layer_list[li] for li, _ in group})
            )

    head_labels = tuple(f"H{h}" for h in range(n_heads))
    layer_labels = tuple(str(layer) for layer in layer_list)
    if site in HEAD_SITES:
        if positions == "each":
            shaped = values.reshape(len(layer_list), n_pg, n_hg)
            axes: tuple[str, ...] = ("layer", "position", "head")
            labels: tuple[tuple[str, ...], ...] = (layer_labels, pairs.position_names, head_labels)
        else:
            shaped = values.reshape(len(layer_list), n_hg)
            axes, labels = ("layer", "head"), (layer_labels, head_labels)
    elif positions == "each":
        shaped = values.reshape(len(layer_list), n_pg)
        axes, labels = ("layer", "position"), (layer_labels, pairs.position_names)
    else:
        shaped = values.reshape(len(layer_list))
        axes, labels = ("layer",), (layer_labels,)
    return PatchingResult(
        values=shaped,
        axes=axes,
        labels=labels,
        meta=lm.meta(
            pairs.prompts,
            data_source="user prompts",
            params={
                "site": site,
                "positions": positions,
                "aligned": align is not None,
                "normalise": normalise,
                "answer_position": answer_position,
                "chunk_size": chunk_rows * n_pairs,
            },
        ),
        site=site,
        clean_value=clean_value,
        corrupted_value=corrupted_value,
        normalised=normalise,
        metric=repr(raw_metric),
        n_forward_rows=len(layer_list) * n_rows * n_pairs,
    )

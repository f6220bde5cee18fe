"""Attention as DP transitions (Allen-Zhu & Li, Physics of LMs Part 1, Section 5): from each NT-end
token of level l, the attention paid to the most recent earlier NT-end of level l', minus the mean
attention the same head pays at that distance, averaged into one number per level pair (l -> l').
A positive number means the heads look from boundary to boundary, as the parsing DP combines
adjacent spans, beyond what their position bias explains.
"""

from __future__ import annotations

from dataclasses import field

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from lmsci_mi.config import Config, config
from lmsci_mi.data.cfg import Grammar
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import hook_name

__all__ = ["AttentionTransitionConfig", "CFGAttentionTransitions", "cfg_attention_transitions"]


@config
class AttentionTransitionConfig(Config):
    """Which strings the attention statistics are taken over."""

    n_sequences: int = field(default=300, metadata={"help": "sampled strings", "ge": 1})
    seed: int = field(default=2024, metadata={"help": "seed of the sampled strings"})
    batch_size: int = field(default=100, metadata={"help": "strings per forward pass", "ge": 1})


@result_type
class CFGAttentionTransitions(Result):
    """``values[l, l']``: mean over layers and heads of the bias-removed attention from level-l
    NT-ends to the most recent earlier level-l' NT-end (axes ``("from_level", "to_level")``).

    Attributes:
        per_head: ``[layer, head, from_level, to_level]`` the same number for each head.
        counts: ``[from_level, to_level]`` how many (NT-end, earlier NT-end) pairs were averaged.
    """

    per_head: Tensor = field(default_factory=lambda: torch.zeros(0))
    counts: Tensor = field(default_factory=lambda: torch.zeros(0))

    @property
    def best_head(self) -> Tensor:
        """``[from_level, to_level]``: the largest per-head number over all layers and heads."""
        return self.per_head.flatten(0, 1).amax(0)


@torch.no_grad()
def _patterns(lm: LensModel, tokens: Tensor) -> Float[Tensor, "layer batch head dst src"]:
    names = [hook_name("pattern", layer) for layer in range(lm.cfg.n_layers)]
    with lm.hooks.capture(names) as captured:
        lm.model(tokens.to(lm.device), return_type=None)
    return torch.stack([captured[name].float().cpu() for name in names])


def _bias_removed(
    patterns: Float[Tensor, "layer batch head dst src"], mask: Bool[Tensor, "batch pos"]
) -> Float[Tensor, "layer batch head dst src"]:
    """Each attention weight minus its head's mean weight at the same distance (over real tokens).

    Only pairs of real terminals count toward the mean: attention to the BOS sink is large and
    would otherwise dominate short distances.
    """
    n_pos = patterns.shape[-1]
    distance = (torch.arange(n_pos)[:, None] - torch.arange(n_pos)[None, :]).clamp_min(-1)
    pair = mask[:, :, None] & mask[:, None, :] & (distance >= 0)  # [batch, dst, src]
    weights = (patterns * pair[None, :, None]).sum(1).flatten(2)  # [layer, head, dst * src]
    index = distance.clamp_min(0).flatten()
    sums = torch.zeros(*weights.shape[:2], n_pos).index_add_(2, index, weights)
    counts = torch.zeros(n_pos).index_add_(0, index, pair.sum(0).flatten().float())
    mean = sums / counts.clamp_min(1)  # [layer, head, distance]
    return patterns - mean[:, :, distance.clamp_min(0)][:, None]


def cfg_attention_transitions(
    lm: LensModel, grammar: Grammar, config: AttentionTransitionConfig | None = None
) -> CFGAttentionTransitions:
    """Bias-removed attention from NT-ends to the most recent earlier NT-ends, per level pair.

    Levels are the grammar's NT levels below the root (1 .. n_levels - 1). Reads the model only.

    >>> from lmsci_mi.data.cfg import CFGConfig, build_grammar
    >>> from lmsci_mi.probes.cfg.model import random_cfg_model
    >>> result = cfg_attention_transitions(random_cfg_model(), build_grammar(CFGConfig()),
    ...                                    AttentionTransitionConfig(n_sequences=8))
    >>> result.values.shape, result.axes
    (torch.Size([2, 2]), ('from_level', 'to_level'))
    """
    config = config if config is not None else AttentionTransitionConfig()
    levels = list(range(1, grammar.n_levels))
    n_levels = len(levels)
    total = torch.zeros(lm.cfg.n_layers, lm.cfg.n_heads, n_levels, n_levels)
    counts = torch.zeros(n_levels, n_levels)
    sample = grammar.sample(config.n_sequences, seed=config.seed)
    tokens, _, boundaries, mask = sample.padded(bos=grammar.bos, pad=grammar.eos)
    for start in range(0, len(sample), config.batch_size):
        rows = slice(start, start + config.batch_size)
        width = int(mask[rows].sum(1).max()) + 1
        batch_mask, batch_ends = mask[rows, :width], boundaries[rows, :width]
        excess = _bias_removed(_patterns(lm, tokens[rows, :width]), batch_mask)
        n_pos = width
        positions = torch.arange(n_pos)
        for a, level_from in enumerate(levels):
            ends_from = batch_ends[..., level_from] & batch_mask
            for b, level_to in enumerate(levels):
                ends_to = batch_ends[..., level_to] & batch_mask
                # the most recent level_to end strictly before each position: a running max
                marked = torch.where(ends_to, positions, torch.full_like(positions, -1))
                latest = torch.cummax(marked, dim=1).values
                previous = torch.cat([torch.full_like(latest[:, :1], -1), latest[:, :-1]], dim=1)
                chosen = ends_from & (previous >= 0)
                batch_index, dst = torch.nonzero(chosen, as_tuple=True)
                src = previous[batch_index, dst]
                # advanced indices split by a slice go first: [pairs, layer, head]
                values = excess[:, batch_index, :, dst, src]
                total[:, :, a, b] += values.sum(0)
                counts[a, b] += len(dst)
    per_head = total / counts.clamp_min(1)
    labels = tuple(f"level {level}" for level in levels)
    return CFGAttentionTransitions(
        values=per_head.mean((0, 1)),
        axes=("from_level", "to_level"),
        labels=(labels, labels),
        meta=lm.meta(data_source="cfg sampler", seed=config.seed, params=config.params()),
        per_head=per_head,
        counts=counts,
    )

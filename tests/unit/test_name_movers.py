"""name_movers_by_dla: the heads with the largest mean DLA to IO − S, averaged over prompts of
different lengths exactly as one prompt at a time would give it."""

from __future__ import annotations

import torch

from lmsci_mi import LensModel
from lmsci_mi.circuits.ioi import name_movers_by_dla
from lmsci_mi.data.ioi import TextPairs, ioi_str_pairs
from lmsci_mi.lenses import direct_logit_attribution
from lmsci_mi.sites import Head


def _one_at_a_time(lm: LensModel, pairs: TextPairs) -> torch.Tensor:
    """Each head's DLA averaged over the prompts, each prompt run alone (no padding)."""
    decode = lm.tokenizer.decode
    per_prompt = [
        direct_logit_attribution(lm, clean, decode([io]), decode([s])).heads()
        for clean, io, s in zip(pairs.clean, pairs.answers, pairs.wrongs, strict=True)
    ]
    return torch.stack(per_prompt).mean(0)


def test_name_movers_are_the_top_heads_of_the_per_prompt_mean(tiny: LensModel) -> None:
    pairs = ioi_str_pairs(tiny, 4, seed=1)
    assert len({len(tiny.encode(p)) for p in pairs.clean}) > 1  # padding is exercised
    expected = _one_at_a_time(tiny, pairs)
    movers = name_movers_by_dla(tiny, pairs, k=3)
    assert len(movers) == 3 and all(isinstance(h, Head) for h, _ in movers)
    order = expected.flatten().argsort(descending=True)[:3].tolist()
    n = tiny.cfg.n_heads
    assert [(h.layer, h.head) for h, _ in movers] == [(i // n, i % n) for i in order]
    for head, value in movers:
        assert abs(value - float(expected[head.layer, head.head])) < 1e-4

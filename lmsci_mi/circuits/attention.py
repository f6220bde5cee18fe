"""Where attention heads look: per head, the mean attention to the sink, the previous token and
the token itself on one prompt.

A first look at a model's heads before any causal analysis, as in the attention-pattern surveys
of Elhage et al. (2021) and Xiao et al. (2023, "attention sinks").
"""

from __future__ import annotations

import torch

from lmsci_mi.model import LensModel
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import hook_name

__all__ = ["AttentionSummary", "attention_summary"]


@result_type
class AttentionSummary(Result):
    """Per head, on one prompt: mean attention to the sink, to the previous token, to itself.

    ``values`` is ``[measure, layer, head]`` with measures ``sink``, ``previous``, ``self``.
    "Sink" is position 0: the sink token under the default policy, the first word when the model
    was loaded with ``sink=None`` (``meta.sink`` says which).
    """


@torch.no_grad()
def attention_summary(lm: LensModel, prompt: str) -> AttentionSummary:
    """Where each head looks on ``prompt``, averaged over query positions after the first.

    Reads the model only.

    >>> from lmsci_mi import load_model
    >>> summary = attention_summary(load_model("toy-2l"), "The cat sat on the mat")
    >>> summary.values.shape, summary.labels[0]
    (torch.Size([3, 2, 4]), ('sink', 'previous', 'self'))
    """
    tokens = lm.to_tokens(prompt)
    if tokens.shape[1] < 2:
        raise ValueError(f"{prompt!r} is one token: the summary needs a query after position 0")
    names = [hook_name("pattern", layer) for layer in range(lm.cfg.n_layers)]
    with lm.hooks.capture(names) as cap:
        lm(tokens)
    rows = []
    for name in names:
        pattern = cap[name][0]  # [head, query, key]
        queries = torch.arange(1, pattern.shape[-1], device=pattern.device)
        sink = pattern[:, queries, 0].mean(-1)
        previous = pattern[:, queries, queries - 1].mean(-1)
        own = pattern[:, queries, queries].mean(-1)
        rows.append(torch.stack([sink, previous, own]))
    values = torch.stack(rows, dim=1).float().cpu()  # [measure, layer, head]
    return AttentionSummary(
        values=values,
        axes=("measure", "layer", "head"),
        labels=(("sink", "previous", "self"), (), ()),
        meta=lm.meta([prompt]),
    )

"""Where attention heads look: per head, the mean attention to the sink, the previous token and
the token itself on one prompt; the patterns of chosen heads, and their circuitsvis view inline in
a notebook cell or saved as offline HTML.

A first look at a model's heads before any causal analysis, as in the attention-pattern surveys
of Elhage et al. (2021) and Xiao et al. (2023, "attention sinks"). The drawing itself is
:func:`lmsci_mi.viz.attention.attention_patterns_html`; this module runs the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from jaxtyping import Float, Int
from torch import Tensor

from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import Head, hook_name
from lmsci_mi.viz.attention import attention_patterns_html
from lmsci_mi.viz.circuitsvis_inline import CircuitsView

__all__ = [
    "AttentionSummary",
    "attention_html",
    "attention_summary",
    "attention_view",
    "head_patterns",
    "parse_heads",
    "save_attention_html",
]


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
        raise UserInputError(f"{prompt!r} is one token: the summary needs a query after position 0")
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


def parse_heads(spec: str) -> list[Head]:
    """Parse a comma-separated list of heads: ``"L5.H1,L6.H9"``, and also ``"5.1"``, ``"L5H1"`` or
    ``"5:1"``, the spellings users type.

    Raises:
        ValueError: a part that is not a head, or no head at all.

    >>> parse_heads("L5.H1, 6.9")
    [Head('L5.H1'), Head('L6.H9')]
    """
    heads = []
    for part in spec.split(","):
        part = part.strip().upper().replace("L", "").replace("H", ".").replace(":", ".")
        if not part:
            continue
        pieces = [p for p in part.split(".") if p]
        if len(pieces) != 2 or not all(p.isascii() and p.isdigit() for p in pieces):
            raise UserInputError(
                f"cannot read head {part!r}: write heads as L<layer>.H<head> or LAYER.HEAD, e.g. "
                "L5.H1 or 5.1"
            )
        heads.append(Head(int(pieces[0]), int(pieces[1])))
    if not heads:
        raise UserInputError("no heads given")
    return heads


@torch.no_grad()
def head_patterns(
    lm: LensModel,
    tokens: Int[Tensor, " pos"] | Int[Tensor, "1 pos"],
    heads: Sequence[Head | tuple[int, int]],
) -> Float[Tensor, "head q k"]:
    """Attention patterns of ``heads`` on one sequence, from one forward pass. Reads the model.

    Raises:
        ValueError: a layer or head index out of range.
    """
    cfg = lm.cfg
    heads = [Head.parse(h) for h in heads]
    if not heads:
        raise UserInputError("no heads given")
    for layer, head in heads:
        if not (0 <= layer < cfg.n_layers and 0 <= head < cfg.n_heads):
            raise UserInputError(
                f"head {Head(layer, head)} does not exist: {lm.name} has {cfg.n_layers} layers of "
                f"{cfg.n_heads} heads"
            )
    tokens = tokens.reshape(1, -1).to(lm.device)
    sites = sorted({hook_name("pattern", layer) for layer, _ in heads})
    with lm.hooks.capture(sites) as cap:
        lm.model(tokens, stop_at_layer=max(layer for layer, _ in heads) + 1)
    return torch.stack(
        [cap[hook_name("pattern", layer)][0, head] for layer, head in heads]
    ).float().cpu()


def attention_html(
    lm: LensModel,
    prompt: str | Int[Tensor, " pos"],
    heads: Sequence[Head | tuple[int, int]],
    *,
    token_labels: Sequence[str] | None = None,
) -> str:
    """A self-contained HTML page (script inlined) showing ``heads``' attention on ``prompt``.

    Reads the model (:func:`head_patterns`), then draws with
    :func:`~lmsci_mi.viz.attention.attention_patterns_html`.

    Args:
        lm: the model.
        prompt: text (tokenised with the sink) or token ids.
        heads: :class:`~lmsci_mi.sites.Head` values or ``(layer, head)`` pairs.
        token_labels: names shown for the tokens (default: the decoded tokens, or the ids for a
            model without tokenizer).

    Returns:
        The HTML source (circuitsvis ``attention_heads`` view, ``local_src``).
    """
    tokens = lm.to_tokens(prompt)[0] if isinstance(prompt, str) else prompt.reshape(-1)
    patterns = head_patterns(lm, tokens, heads)
    if token_labels is None:
        if lm.tokenizer is not None:
            token_labels = lm.to_str_tokens(tokens)
        else:
            token_labels = [str(int(t)) for t in tokens]
    return attention_patterns_html(patterns, token_labels, [Head.parse(h).label for h in heads])


def attention_view(
    lm: LensModel,
    prompt: str | Int[Tensor, " pos"],
    heads: Sequence[Head | tuple[int, int]],
    *,
    token_labels: Sequence[str] | None = None,
    caption: str = "",
) -> CircuitsView:
    """:func:`attention_html`'s view, inline: a notebook cell shows it (circuitsvis's script
    bundle is included once per notebook, not per cell), in any front end and in an exported file.
    Reads the model; takes :func:`attention_html`'s arguments.

    >>> from lmsci_mi import load_model
    >>> view = attention_view(load_model("toy-2l"), "The cat sat", [(0, 1), (1, 2)])
    >>> view.element, "L1.H2" in view.props
    ('AttentionHeads', True)
    """
    page = attention_html(lm, prompt, heads, token_labels=token_labels)
    return CircuitsView.from_html(page, caption)


def save_attention_html(
    lm: LensModel,
    prompt: str | Int[Tensor, " pos"],
    heads: Sequence[Head | tuple[int, int]],
    path: str | Path,
    **kwargs: Sequence[str] | None,
) -> Path:
    """Write :func:`attention_html` to ``path`` and return it (it opens with no network)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(attention_html(lm, prompt, heads, **kwargs), encoding="utf-8")  # type: ignore[arg-type]
    return path

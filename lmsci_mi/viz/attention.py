"""Attention patterns of chosen heads as circuitsvis views, saved as self-contained offline HTML.

circuitsvis's ``str()`` of a view loads its JavaScript from a CDN, which a saved page would need
at viewing time; only ``RenderedHTML.local_src`` inlines the script. Everything here uses
``local_src``, so a saved page opens on a machine with no network.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from jaxtyping import Float, Int
from torch import Tensor

from lmsci_mi.model import LensModel
from lmsci_mi.sites import Head, hook_name

__all__ = ["attention_html", "head_patterns", "parse_heads", "save_attention_html"]


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
            raise ValueError(
                f"cannot read head {part!r}: write heads as L<layer>.H<head> or LAYER.HEAD, e.g. "
                "L5.H1 or 5.1"
            )
        heads.append(Head(int(pieces[0]), int(pieces[1])))
    if not heads:
        raise ValueError("no heads given")
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
        raise ValueError("no heads given")
    for layer, head in heads:
        if not (0 <= layer < cfg.n_layers and 0 <= head < cfg.n_heads):
            raise ValueError(
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

    Args:
        lm: the model.
        prompt: text (tokenised with the sink) or token ids.
        heads: :class:`~lmsci_mi.sites.Head` values or ``(layer, head)`` pairs.
        token_labels: names shown for the tokens (default: the decoded tokens, or the ids for a
            model without tokenizer).

    Returns:
        The HTML source (circuitsvis ``attention_heads`` view, ``local_src``).
    """
    from circuitsvis.attention import attention_heads

    tokens = lm.to_tokens(prompt)[0] if isinstance(prompt, str) else prompt.reshape(-1)
    patterns = head_patterns(lm, tokens, heads)
    if token_labels is None:
        if lm.tokenizer is not None:
            token_labels = lm.to_str_tokens(tokens)
        else:
            token_labels = [str(int(t)) for t in tokens]
    rendered = attention_heads(
        attention=patterns,
        tokens=list(token_labels),
        attention_head_names=[Head.parse(h).label for h in heads],
    )
    return rendered.local_src


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

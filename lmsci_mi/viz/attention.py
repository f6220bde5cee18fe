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

__all__ = ["attention_html", "head_patterns", "parse_heads", "save_attention_html"]


def parse_heads(spec: str) -> list[tuple[int, int]]:
    """Parse ``"5.1,6.9"`` (also ``"L5H1"``/``"5:1"``) into ``[(5, 1), (6, 9)]``.

    >>> parse_heads("5.1, 6.9")
    [(5, 1), (6, 9)]
    """
    heads = []
    for part in spec.split(","):
        part = part.strip().upper().replace("L", "").replace("H", ".").replace(":", ".")
        if not part:
            continue
        pieces = [p for p in part.split(".") if p]
        if len(pieces) != 2 or not all(p.isdigit() for p in pieces):
            raise ValueError(f"cannot read head {part!r}: write heads as LAYER.HEAD, e.g. 5.1")
        heads.append((int(pieces[0]), int(pieces[1])))
    if not heads:
        raise ValueError("no heads given")
    return heads


@torch.no_grad()
def head_patterns(
    lm: LensModel,
    tokens: Int[Tensor, " pos"] | Int[Tensor, "1 pos"],
    heads: Sequence[tuple[int, int]],
) -> Float[Tensor, "head q k"]:
    """Attention patterns of ``heads`` on one sequence, from one forward pass. Reads the model.

    Raises:
        ValueError: a layer or head index out of range.
    """
    cfg = lm.cfg
    for layer, head in heads:
        if not (0 <= layer < cfg.n_layers and 0 <= head < cfg.n_heads):
            raise ValueError(
                f"head {layer}.{head} does not exist: {lm.name} has {cfg.n_layers} layers of "
                f"{cfg.n_heads} heads"
            )
    tokens = tokens.reshape(1, -1).to(lm.device)
    sites = sorted({f"blocks.{layer}.attn.hook_pattern" for layer, _ in heads})
    with lm.hooks.capture(sites) as cap:
        lm.model(tokens, stop_at_layer=max(layer for layer, _ in heads) + 1)
    return torch.stack(
        [cap[f"blocks.{layer}.attn.hook_pattern"][0, head] for layer, head in heads]
    ).float().cpu()


def attention_html(
    lm: LensModel,
    prompt: str | Int[Tensor, " pos"],
    heads: Sequence[tuple[int, int]],
    *,
    token_labels: Sequence[str] | None = None,
) -> str:
    """A self-contained HTML page (script inlined) showing ``heads``' attention on ``prompt``.

    Args:
        lm: the model.
        prompt: text (tokenised with the sink) or token ids.
        heads: ``(layer, head)`` pairs.
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
        attention_head_names=[f"L{layer}H{head}" for layer, head in heads],
    )
    return rendered.local_src


def save_attention_html(
    lm: LensModel,
    prompt: str | Int[Tensor, " pos"],
    heads: Sequence[tuple[int, int]],
    path: str | Path,
    **kwargs: Sequence[str] | None,
) -> Path:
    """Write :func:`attention_html` to ``path`` and return it (it opens with no network)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(attention_html(lm, prompt, heads, **kwargs), encoding="utf-8")  # type: ignore[arg-type]
    return path

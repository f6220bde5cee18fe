"""Keyword highlighting with an LM-Steer: which tokens of a text carry the steered attribute.

Each token's evidence is log p₊(token) − log p₋(token): its log-probability with the steer at +s
minus at −s (the dummy at 1 in both), from one forward pass, since the steer acts only after the
last block. A dynamic programme then picks at most n disjoint spans of at most L tokens with the
largest total evidence (Han et al. 2024, ``find_max_subspans``; written anew here, as the
reference indexes position −1 at the start). Rendered as offline HTML with circuitsvis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float
from torch import Tensor

from lmsci_mi import readout
from lmsci_mi.config import Config, config, paper
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.positions import Exclude, resolve_exclude
from lmsci_mi.results import Result, result_type
from lmsci_mi.steering.lm_steer import LMSteer

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["Highlight", "HighlightConfig", "highlight_keywords", "max_spans"]


@config
class HighlightConfig(Config):
    """Keyword highlighting settings (the reference's defaults: 4 spans of at most 10 tokens)."""

    attribute: str = field(
        default="sentiment", metadata={"help": "the steer whose evidence is shown"}
    )
    value: float = field(
        default=5.0, metadata={"help": "steer value s: evidence is log p(+s) − log p(−s)"}
    )
    max_spans: int = field(
        default=4,
        metadata={
            "help": "at most this many spans",
            "ge": 1,
            **paper(
                4,
                "Han et al. 2024, code: Glaciohound/LM-Steer lm_steer/models/model_base.py "
                "evidence_words(max_segments=4)",
            ),
        },
    )
    max_length: int = field(
        default=10,
        metadata={
            "help": "tokens per span at most",
            "ge": 1,
            **paper(
                10,
                "Han et al. 2024, code: Glaciohound/LM-Steer lm_steer/models/model_base.py "
                "evidence_words(max_length=10)",
            ),
        },
    )
    exclude: Exclude | None = field(
        default=None,
        metadata={"help": "positions no span may cover (None: the sink)", "cli": False},
    )

    def validate(self) -> None:
        if not (self.value != 0 and abs(self.value) < float("inf")):
            raise UserInputError(
                f"value must be finite and non-zero (evidence compares +value with −value; a "
                f"negative value highlights the other pole), not {self.value}"
            )


_DEFAULT_HIGHLIGHT_CONFIG = HighlightConfig()


def max_spans(
    evidence: Sequence[float] | Tensor,
    n_spans: int,
    max_length: int,
    *,
    allowed: Sequence[bool] | Tensor | None = None,
) -> tuple[float, list[tuple[int, int]]]:
    """At most ``n_spans`` disjoint spans ``[start, end)`` of at most ``max_length`` items with the
    largest total evidence (0 with no span when nothing is positive). O(T · n · L).

    Args:
        allowed: per item, whether a span may cover it (default: every item).

    Returns:
        (the total, the spans in order).

    >>> max_spans([1.0, -2.0, 3.0, 0.5, -1.0, 2.0], 2, 3)
    (5.5, [(2, 4), (5, 6)])
    >>> max_spans([1.0, -2.0, 3.0, 0.5, -1.0, 2.0], 2, 3, allowed=[1, 1, 1, 0, 1, 1])
    (5.0, [(2, 3), (5, 6)])
    """
    values = [float(v) for v in (evidence.tolist() if isinstance(evidence, Tensor) else evidence)]
    t = len(values)
    free = [True] * t if allowed is None else [bool(a) for a in allowed]
    if len(free) != t:
        raise UserInputError(f"allowed has {len(free)} items for {t} items of evidence")
    prefix = [0.0]
    for v in values:
        prefix.append(prefix[-1] + v)
    neg = float("-inf")
    # best[k][i]: the best total over the first i items with at most k spans; choice[k][i] is the
    # length of the span ending at item i (0: item i-1 is outside any span).
    best = [[0.0] * (t + 1) for _ in range(n_spans + 1)]
    choice = [[0] * (t + 1) for _ in range(n_spans + 1)]
    for k in range(1, n_spans + 1):
        for i in range(1, t + 1):
            top, pick = best[k][i - 1], 0
            for length in range(1, min(max_length, i) + 1):
                if not free[i - length]:
                    break  # a span never covers a left-out item, so none reaches past it
                candidate = best[k - 1][i - length] + prefix[i] - prefix[i - length]
                if candidate > top + 1e-12:
                    top, pick = candidate, length
            best[k][i], choice[k][i] = (top if top > neg else 0.0), pick
    spans: list[tuple[int, int]] = []
    k, i = n_spans, t
    while i > 0 and k > 0:
        length = choice[k][i]
        if length == 0:
            i -= 1
        else:
            spans.append((i - length, i))
            i, k = i - length, k - 1
    return best[n_spans][t], spans[::-1]


@result_type
class Highlight(Result):
    """Per-token evidence for a steer in one text (``values`` ``[position]``, axis ``("token",)``,
    labelled with the tokens; position 0, the sink, has evidence 0).

    Attributes:
        text: the text.
        spans: the chosen spans, ``(start, end)`` token positions.
        total: their total evidence.
    """

    text: str
    spans: tuple[tuple[int, int], ...]
    total: float

    def summary(self, rows: int = 10) -> str:
        """The chosen spans and their total evidence, then the ``rows`` tokens of most evidence."""
        tokens = self.axis_labels(0)
        order = self.values.abs().argsort(descending=True).tolist()[:rows]
        top = ", ".join(f"{tokens[i]!r} {float(self.values[i]):+.2f}" for i in order)
        return f"spans {self.span_texts()} (total evidence {self.total:.2f}); strongest tokens: {top}"

    def default_title(self, **options: object) -> str:
        return f"LM-Steer highlight — {self.meta.model}"

    def _draw(self, title: str) -> Figure:
        """The text, each token on a colour of its evidence (red for +, blue for −), the sink
        left out."""
        from lmsci_mi.viz.plots import plot_tokens

        spans = "; ".join(repr(s) for s in self.span_texts())
        fig = plot_tokens(
            [(f"chosen spans: {spans}", self.axis_labels(0)[1:], self.values[1:].tolist())],
            signed=True,
            value_label="log p(+s) − log p(−s)",
            title=title,
        )
        return fig

    def span_texts(self) -> list[str]:
        """The text of each chosen span."""
        tokens = self.axis_labels(0)
        return ["".join(tokens[s:e]) for s, e in self.spans]

    def html(self) -> str:
        """Self-contained HTML (circuitsvis ``ColoredTokens`` with its script inlined, never the
        CDN one): tokens coloured by evidence, the chosen spans listed beneath."""
        from lmsci_mi.viz.tokens import colored_tokens_html, page_with_views

        tokens = self.axis_labels(0)[1:]
        values = self.values[1:].tolist()
        bound = max((abs(v) for v in values), default=1.0) or 1.0
        view = colored_tokens_html(
            tokens,
            values,
            min_value=-bound,
            max_value=bound,
            negative_color="red",
            positive_color="green",
        )
        spans = "".join(f"<li>{_escape(s)}</li>" for s in self.span_texts())
        heading = (
            f"<p>Evidence log p(+s) − log p(−s) per token ({_escape(self.meta.model)}); "
            f"chosen spans (total {self.total:.2f}):</p><ul>{spans}</ul>"
        )
        return page_with_views("LM-Steer highlight", [(heading, [view])])

    def save_html(self, path: str | Path) -> Path:
        """Write :meth:`html` to ``path``."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.html(), encoding="utf-8")
        return path


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@torch.no_grad()
def token_evidence(
    lm: LensModel, steer: LMSteer, text: str, index: int, value: float
) -> Float[Tensor, " pos"]:
    """log p₊(token) − log p₋(token) for each token of ``text`` (0 at the sink)."""
    tokens = torch.tensor([lm.encode(text)], device=lm.device)
    # Stop before the unembedding: the steered logits are computed from h below.
    resid = lm.model(tokens, stop_at_layer=lm.cfg.n_layers)
    h = readout.normalized(lm, resid, norm="live")[0]
    targets = tokens[0, 1:]
    scores = []
    for sign in (1.0, -1.0):
        steered = steer.steered(h[:-1], {index: sign * value})
        logits = readout.logits(lm, steered, space="normalized")
        scores.append(logits.float().log_softmax(-1).gather(-1, targets[:, None])[:, 0])
    return torch.cat([torch.zeros(1, device=lm.device), scores[0] - scores[1]]).cpu()


def highlight_keywords(
    lm: LensModel, steer: LMSteer, text: str, config: HighlightConfig = _DEFAULT_HIGHLIGHT_CONFIG
) -> Highlight:
    """The tokens of ``text`` that carry the steer's attribute, and the best spans of them.

    Reads the model only. No span covers a position ``config.exclude`` leaves out (by default
    the sink); position 0 has no evidence in any case, as no token predicts it.

    Raises:
        ValueError: a steer of another model, an unknown attribute, an empty text.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> steer = LMSteer.for_model(lm, ("sentiment",))
    >>> result = highlight_keywords(lm, steer, "What a lovely day")
    >>> result.values.shape, len(result.spans) <= 4
    (torch.Size([5]), True)
    """
    steer.check_model(lm)
    if not text.strip():
        raise UserInputError("give a non-empty text to highlight")
    index = steer.index_of(config.attribute)
    evidence = token_evidence(lm, steer, text, index, config.value)
    # Evidence at position t is about token t itself (predicted from t − 1): spans index tokens,
    # and position 0, predicted by nothing, is never in one.
    tokens = torch.tensor([lm.encode(text)])
    allowed = resolve_exclude(config.exclude).keep(tokens)[0] & (torch.arange(len(evidence)) > 0)
    total, spans = max_spans(evidence, config.max_spans, config.max_length, allowed=allowed)
    return Highlight(
        values=evidence,
        axes=("token",),
        labels=(tuple(lm.to_str_tokens(text)),),
        meta=lm.meta([text], params=config.params()),
        text=text,
        spans=tuple(spans),
        total=total,
    )

"""Tokens coloured by a value (circuitsvis ``ColoredTokens``), on offline HTML pages.

circuitsvis's own ``local_src`` inlines its 1.3 MB script into every view; a page of many views
(an SAE feature browser) would repeat it each time. Here a page inlines the script once, in its
head, and each view is a div plus a one-line render call, so the page opens with no network and
stays small. The LM-Steer highlight and the SAE feature cards both render through this module.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from functools import cache
from importlib import resources
from uuid import uuid4

from lmsci_mi.errors import UserInputError

__all__ = ["circuitsvis_script", "colored_tokens_html", "page_with_views"]


@cache
def circuitsvis_script() -> str:
    """circuitsvis's browser bundle (it defines the global ``CircuitsVis``), from the wheel."""
    text = (
        resources.files("circuitsvis")
        .joinpath("dist", "cdn", "iife.js")
        .read_text(encoding="utf-8")
    )
    return text.replace("</script>", "")


def colored_tokens_html(
    tokens: Sequence[str],
    values: Sequence[float],
    *,
    min_value: float = 0.0,
    max_value: float = 1.0,
    negative_color: str = "red",
    positive_color: str = "blue",
) -> str:
    """One ``ColoredTokens`` view as a div and its render call (needs :func:`page_with_views`).

    >>> "CircuitsVis.render" in colored_tokens_html(["a", "b"], [0.0, 1.0])
    True
    """
    if len(tokens) != len(values):
        raise UserInputError(f"{len(tokens)} tokens but {len(values)} values")
    element = "circuits-vis-" + uuid4().hex[:13]
    props = json.dumps(
        {
            "tokens": list(tokens),
            "values": [float(v) for v in values],
            "minValue": float(min_value),
            "maxValue": float(max_value),
            "negativeColor": negative_color,
            "positiveColor": positive_color,
        }
    )
    # "</" would end the script element early; JSON lets it be written as "<\/".
    props = props.replace("</", "<\\/")
    return (
        f'<div id="{element}" style="margin: 6px 0;"></div>'
        f'<script>CircuitsVis.render("{element}", CircuitsVis.ColoredTokens, {props})</script>'
    )


def page_with_views(title: str, sections: Sequence[tuple[str, Sequence[str]]]) -> str:
    """A self-contained page: circuitsvis's script inlined once, then each section's heading
    (HTML) followed by its views (from :func:`colored_tokens_html`).

    >>> page = page_with_views("t", [("<h3>x</h3>", [colored_tokens_html(["a"], [1.0])])])
    >>> page.count("CircuitsVis.render("), "https://" in page.split("<body>")[1]
    (1, False)
    """
    body = "".join(heading + "".join(views) for heading, views in sections)
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><script>{circuitsvis_script()}</script></head>"
        f"<body><h2>{html.escape(title)}</h2>{body}</body></html>"
    )

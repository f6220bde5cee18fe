"""The site table: every activation site lmsci-mi reads or writes, and the `Head` value type.

A *site* names a kind of activation (``resid_pre``, ``z``, ``mlp_post``) independently of the layer.
The table gives, for each site, its TransformerLens hook name at a layer, where its position and
head axes sit, and whether it is per head. Nothing outside this module formats a hook name, so a
new site layout is taught here once. After TransformerLens ``utils.get_act_name``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import total_ordering

from lmsci_mi.errors import UnknownNameError, UserInputError

__all__ = [
    "SITES",
    "WEIGHTS",
    "Head",
    "Site",
    "SiteLayout",
    "hook_name",
    "layer_hooks",
    "layer_of",
    "layout_of",
    "parse_hook_name",
    "site",
    "weight_name",
]


@dataclass(frozen=True)
class SiteLayout:
    """Where the position and head axes sit in a site's activation (batch is always axis 0)."""

    position_axis: int
    head_axis: int | None


@dataclass(frozen=True)
class Site:
    """One row of the site table.

    Attributes:
        name: the site's short name (``"resid_pre"``).
        template: its hook name with ``{layer}`` where the layer goes (``None`` for sites outside
            the blocks, e.g. ``embed``).
        layout: position and head axes of the activation.
        description: what the activation is, in a few words.
    """

    name: str
    template: str
    layout: SiteLayout
    description: str

    @property
    def per_head(self) -> bool:
        """Whether the activation has a head axis (patched or ablated one head at a time)."""
        return self.layout.head_axis is not None

    @property
    def per_layer(self) -> bool:
        """Whether the site exists once per block (``resid_pre``) or once per model (``embed``)."""
        return "{layer}" in self.template

    def hook(self, layer: int | None = None) -> str:
        """The hook name of this site at ``layer``.

        >>> SITES["z"].hook(3)
        'blocks.3.attn.hook_z'
        >>> SITES["embed"].hook()
        'hook_embed'
        """
        if self.per_layer:
            if layer is None:
                raise UserInputError(f"site {self.name!r} exists in every block: give a layer")
            return self.template.format(layer=int(layer))
        if layer is not None:
            raise UserInputError(f"site {self.name!r} is outside the blocks: give no layer")
        return self.template


_VECTOR = SiteLayout(position_axis=1, head_axis=None)
_PER_HEAD = SiteLayout(position_axis=1, head_axis=2)  # [batch, pos, head, d_head]
_PATTERN = SiteLayout(position_axis=2, head_axis=1)  # [batch, head, query_pos, key_pos]

_TABLE = (
        Site("embed", "hook_embed", _VECTOR, "token embeddings (after the model's own scaling)"),
        Site("resid_pre", "blocks.{layer}.hook_resid_pre", _VECTOR, "residual stream into a block"),
        Site("resid_mid", "blocks.{layer}.hook_resid_mid", _VECTOR, "residual stream after attention"),
        Site("resid_post", "blocks.{layer}.hook_resid_post", _VECTOR, "residual stream out of a block"),
        Site("attn_out", "blocks.{layer}.hook_attn_out", _VECTOR, "attention output"),
        Site("mlp_out", "blocks.{layer}.hook_mlp_out", _VECTOR, "MLP output"),
        Site("mlp_in", "blocks.{layer}.hook_mlp_in", _VECTOR, "MLP input (needs cfg.use_hook_mlp_in)"),
        Site("mlp_post", "blocks.{layer}.mlp.hook_post", _VECTOR, "MLP neurons (ROME's keys)"),
        Site("mlp_in_normed", "blocks.{layer}.ln2.hook_normalized", _VECTOR, "MLP input after its norm"),
        Site("z", "blocks.{layer}.attn.hook_z", _PER_HEAD, "each head's output before W_O"),
        Site("q", "blocks.{layer}.attn.hook_q", _PER_HEAD, "queries"),
        Site("k", "blocks.{layer}.attn.hook_k", _PER_HEAD, "keys (key/value heads under GQA)"),
        Site("v", "blocks.{layer}.attn.hook_v", _PER_HEAD, "values (key/value heads under GQA)"),
        Site("pattern", "blocks.{layer}.attn.hook_pattern", _PATTERN, "attention probabilities"),
        Site("attn_scores", "blocks.{layer}.attn.hook_attn_scores", _PATTERN, "attention logits"),
        Site("ln_final", "ln_final.hook_normalized", _VECTOR, "final normalised residual stream"),
        Site("ln_final_scale", "ln_final.hook_scale", _VECTOR, "final norm's per-token divisor"),
        Site("pos_embed", "hook_pos_embed", _VECTOR, "learned position embeddings (GPT-2)"),
        Site("ln1_post_scale", "blocks.{layer}.ln1_post.hook_scale", _VECTOR,
             "post-attention norm's per-token divisor (Gemma 2/3)"),
        Site("ln2_post_scale", "blocks.{layer}.ln2_post.hook_scale", _VECTOR,
             "post-MLP norm's per-token divisor (Gemma 2/3)"),
        Site("ln2_post_normalized", "blocks.{layer}.ln2_post.hook_normalized", _VECTOR,
             "MLP output over the post-MLP norm's divisor, before its weight (Gemma 2/3)"),
)
if len({s.name for s in _TABLE}) != len(_TABLE):  # a second row of one name would hide the first
    raise RuntimeError("the site table names a site twice")
SITES: Mapping[str, Site] = {s.name: s for s in _TABLE}
"""Every site, by name. ``z`` is the per-head output before ``W_O``; ``pattern`` and
``attn_scores`` are indexed by query position (their position axis) and key position."""

WEIGHTS: Mapping[str, str] = {
    "W_out": "blocks.{layer}.mlp.W_out",
    "b_out": "blocks.{layer}.mlp.b_out",
}
"""Parameter names by short name, for weight edits (ROME and MEMIT write ``W_out``)."""


def site(name: str) -> Site:
    """The table row of site ``name``.

    Raises:
        ValueError: unknown site; the message lists the valid ones.
    """
    if name not in SITES:
        raise UnknownNameError(f"unknown site {name!r}; choose one of {sorted(SITES)}")
    return SITES[name]


def hook_name(site_name: str, layer: int | None = None) -> str:
    """The hook name of ``site_name`` at ``layer`` (``hook_name("resid_pre", 4)``)."""
    return site(site_name).hook(layer)


def layer_hooks(
    site_name: str, layers: Sequence[int] | None, n_layers: int, model: str = "the model"
) -> tuple[list[str], tuple[str, ...]]:
    """The hook of ``site_name`` at each of ``layers`` (every layer when None) and a label per
    layer, the site's own name for a site that exists once (``ln_final``): what a per-layer sweep
    reads. Raises ValueError, naming ``model``, for a layer it does not have.

    >>> layer_hooks("resid_post", (0, 2), 4)
    (['blocks.0.hook_resid_post', 'blocks.2.hook_resid_post'], ('0', '2'))
    """
    row = site(site_name)
    if not row.per_layer:
        return [row.hook()], (site_name,)
    chosen = tuple(layers) if layers is not None else tuple(range(n_layers))
    bad = [layer for layer in chosen if not 0 <= layer < n_layers]
    if bad:
        raise UserInputError(
            f"layer {bad[0]} does not exist: {model} has {n_layers} layers (0–{n_layers - 1}); "
            "give layers within them"
        )
    return [row.hook(layer) for layer in chosen], tuple(str(layer) for layer in chosen)


def weight_name(short: str, layer: int) -> str:
    """The parameter name of weight ``short`` (a key of :data:`WEIGHTS`) in block ``layer``."""
    if short not in WEIGHTS:
        raise UnknownNameError(f"unknown weight {short!r}; choose one of {sorted(WEIGHTS)}")
    return WEIGHTS[short].format(layer=int(layer))


_BLOCK = re.compile(r"^blocks\.(\d+)\.")


def layer_of(hook: str) -> int | None:
    """The block index in a hook or parameter name, or None outside the blocks."""
    match = _BLOCK.match(hook)
    return int(match.group(1)) if match else None


def parse_hook_name(hook: str) -> tuple[Site, int | None]:
    """The site and layer of a hook name (the inverse of :meth:`Site.hook`).

    Raises:
        ValueError: the hook name is not in the site table.

    >>> s, layer = parse_hook_name("blocks.7.attn.hook_q")
    >>> s.name, layer
    ('q', 7)
    """
    layer = layer_of(hook)
    generic = _BLOCK.sub("blocks.{layer}.", hook) if layer is not None else hook
    for candidate in SITES.values():
        if candidate.template == generic:
            return candidate, layer
    raise UnknownNameError(f"{hook!r} is not a site of the site table; sites are {sorted(SITES)}")


def layout_of(hook: str) -> SiteLayout:
    """Axis layout of any TransformerLens hook point, from its name.

    Sites of the table answer from the table. Other hook points follow TransformerLens's
    conventions: per-head vectors (``hook_result``, ``hook_rot_q``...) are ``[batch, pos, head,
    d]``, and everything else is ``[batch, pos, ...]``.

    >>> layout_of("blocks.3.attn.hook_pattern")
    SiteLayout(position_axis=2, head_axis=1)
    """
    try:
        return parse_hook_name(hook)[0].layout
    except ValueError:
        pass
    leaf = hook.rsplit(".", 1)[-1]
    if leaf in ("hook_result", "hook_rot_q", "hook_rot_k"):
        return _PER_HEAD
    return _VECTOR


_HEAD_LABEL = re.compile(r"^L(\d+)\.H(\d+)$")


@total_ordering
@dataclass(frozen=True)
class Head:
    """One attention head. It prints one way everywhere: ``L23.H3``.

    >>> Head(23, 3)
    Head('L23.H3')
    >>> Head.parse("L23.H3") == Head(23, 3)
    True
    """

    layer: int
    head: int

    @property
    def label(self) -> str:
        return f"L{self.layer}.H{self.head}"

    def __str__(self) -> str:
        return self.label

    def __repr__(self) -> str:
        return f"Head({self.label!r})"

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Head):
            return NotImplemented
        return (self.layer, self.head) < (other.layer, other.head)

    def __iter__(self) -> Iterator[int]:  # lets `layer, head = h` unpack
        return iter((self.layer, self.head))

    @staticmethod
    def axis_labels(n_heads: int) -> tuple[str, ...]:
        """Labels of a result's head axis, ``("H0", "H1", ...)``: with the layer axis's ``"23"``
        they name the head ``L23.H3``."""
        return tuple(f"H{h}" for h in range(n_heads))

    @classmethod
    def from_axis_labels(cls, layer: str, head: str) -> Head:
        """The head at a cell of a result, from its layer and head axis labels."""
        return cls(int(layer), int(head.removeprefix("H")))

    @classmethod
    def parse(cls, text: str | Head | tuple[int, int]) -> Head:
        """A head from its label ``"L23.H3"`` (or a Head, or a ``(layer, head)`` pair).

        Raises:
            ValueError: the text is not of the form ``L<layer>.H<head>``.
        """
        if isinstance(text, Head):
            return text
        if isinstance(text, tuple):
            layer, head = text
            return cls(int(layer), int(head))
        match = _HEAD_LABEL.match(text.strip())
        if not match:
            raise UserInputError(f"{text!r} is not a head label; write heads as 'L<layer>.H<head>', e.g. 'L9.H6'")
        return cls(int(match.group(1)), int(match.group(2)))

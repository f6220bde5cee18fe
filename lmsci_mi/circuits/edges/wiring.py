"""How an edge graph meets the model's hook points: where senders are read, where receivers are fed.

Senders: the input at ``hook_resid_pre`` 0, each head's ``z[h] @ W_O[h]`` (``hook_z``, written at
``hook_attn_out``), each MLP at ``hook_mlp_out``. Receivers: a head's q/k/v input through
``hook_q/k/v`` (its own projection of ``ln1`` of its input, no split-input flags), an MLP's at
``hook_mlp_in`` (the stream after the attention, or the block's input where attention and MLP run
in parallel: GPT-J, GPT-NeoX), the logits at the final stream. EAP scoring and exact edge patching
both wire through here (Hanna et al. 2024, EAP-IG; Conmy et al. 2023, ACDC).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens.utilities.attention import complex_attn_linear

from lmsci_mi.circuits.edges.graph import EdgeGraph
from lmsci_mi.hooks import HookFn
from lmsci_mi.sites import hook_name

if TYPE_CHECKING:
    from transformer_lens.hook_points import HookPoint

    from lmsci_mi.model import LensModel

__all__ = [
    "HookList",
    "ReceiverHooks",
    "SenderRecorder",
    "attn_stream",
    "head_outputs",
    "mlp_stream",
    "qkv_projection",
    "receiver_flags",
    "record_run",
    "sender_buffer",
]

HookList = list[tuple[str, HookFn]]


def attn_stream(layer: int) -> str:
    """The hook of the stream a layer's q/k/v receivers read: the block's input."""
    return hook_name("resid_pre", layer)


def mlp_stream(graph: EdgeGraph, layer: int) -> str:
    """The hook of the stream MLP ``layer`` reads: after the attention (``resid_mid``), or the
    block's input in a parallel block, which has no ``resid_mid``."""
    return attn_stream(layer) if graph.parallel else hook_name("resid_mid", layer)


def receiver_streams(graph: EdgeGraph) -> list[str]:
    """The hooks of every stream a receiver reads, in the order a forward pass reaches them."""
    names = []
    for layer in range(graph.n_layers):
        names.append(attn_stream(layer))
        if graph.has_mlp and not graph.parallel:
            names.append(mlp_stream(graph, layer))
    return names


# ---------------------------------------------------------------------------------- senders


@contextlib.contextmanager
def receiver_flags(lm: LensModel, graph: EdgeGraph) -> Iterator[None]:
    """Turn on ``hook_mlp_in`` (an MLP's input apart from the stream) and, for an ungrouped GQA
    graph, TransformerLens's per-query-head K/V, restoring both flags on exit."""
    model = lm.model
    cfgs = {
        id(c): c
        for c in [model.cfg, *(b.cfg for b in model.blocks), *(b.attn.cfg for b in model.blocks)]
    }
    saved = [(c, c.use_hook_mlp_in, c.ungroup_grouped_query_attention) for c in cfgs.values()]
    ungroup = graph.n_kv_heads < graph.n_heads and not graph.grouped
    try:
        for c, _, _ in saved:
            c.use_hook_mlp_in = True
            c.ungroup_grouped_query_attention = c.ungroup_grouped_query_attention or ungroup
        yield
    finally:
        for c, mlp_in, ungrouped in saved:
            c.use_hook_mlp_in, c.ungroup_grouped_query_attention = mlp_in, ungrouped


class SenderRecorder:
    """Writes every sender's output into ``out[sender, row, pos, d_model]`` during a forward pass.

    Sender-major, so that one sender's outputs over the whole batch are one contiguous row: the
    edge sums are then plain matrix products over senders (no copy of the buffer).

    A head's output is ``z[h] @ W_O[h]``; under post-norms (Gemma) it is scaled by the post-norm
    weight over the run's own post-norm divisor, so the heads' outputs sum to the normed
    attention output of that run. Only the rows ``rows`` of the pass are kept. With
    ``first_layer``, only the senders of that layer and above are recorded, at ``out[sender −
    first]`` where ``first`` is the layer's first sender (a patched pass that starts there).
    """

    def __init__(
        self,
        lm: LensModel,
        graph: EdgeGraph,
        out: Tensor,
        rows: slice = slice(None),
        first_layer: int | None = None,
    ):
        self.lm, self.graph, self.out, self.rows = lm, graph, out, rows
        self.first_layer = first_layer
        self.offset = 0 if first_layer is None else graph.layer(first_layer).attn_senders
        self.z: dict[int, Tensor] = {}
        self.scale: dict[int, Tensor] = {}

    def hooks(self) -> HookList:
        g = self.graph
        hooks: HookList = [] if self.first_layer is not None else [(attn_stream(0), self._input)]
        for layer in range(self.first_layer or 0, g.n_layers):
            hooks.append((hook_name("z", layer), self._keep(self.z, layer)))
            if g.post_norm:
                hooks.append((hook_name("ln1_post_scale", layer), self._keep(self.scale, layer)))
            hooks.append((hook_name("attn_out", layer), self._heads(layer)))
            if g.has_mlp:
                hooks.append((hook_name("mlp_out", layer), self._mlp(layer)))
        return hooks

    def _input(self, activation: Tensor, hook: HookPoint) -> None:
        self.out[0] = activation[self.rows].detach()

    def _keep(self, store: dict[int, Tensor], layer: int) -> HookFn:
        def keep(activation: Tensor, hook: HookPoint) -> None:
            store[layer] = activation[self.rows].detach()

        return keep

    def _heads(self, layer: int) -> HookFn:
        first = self.graph.head_sender(layer, 0) - self.offset

        def heads(activation: Tensor, hook: HookPoint) -> None:
            self.out[first : first + self.graph.n_heads] = head_outputs(
                self.lm, layer, self.z.pop(layer), self.scale.pop(layer, None)
            )

        return heads

    def _mlp(self, layer: int) -> HookFn:
        index = self.graph.mlp_sender(layer) - self.offset

        def mlp(activation: Tensor, hook: HookPoint) -> None:
            self.out[index] = activation[self.rows].detach()

        return mlp


def head_outputs(
    lm: LensModel, layer: int, z: Float[Tensor, "batch pos head d_head"], post_scale: Tensor | None
) -> Float[Tensor, "head batch pos d_model"]:
    """Each head's write into the stream, ``z[h] @ W_O[h]`` (post-normed when the model is)."""
    block = lm.model.blocks[layer]
    out = torch.einsum("bphd,hdm->hbpm", z, block.attn.W_O)
    if post_scale is not None:
        out = out * (block.ln1_post.w / post_scale)
    return out


def sender_buffer(
    lm: LensModel, graph: EdgeGraph, rows: int, width: int, first_layer: int | None = None
) -> Tensor:
    """An empty ``[sender, rows, pos, d_model]`` buffer for :class:`SenderRecorder` (with
    ``first_layer``, for the senders from that layer on only)."""
    skip = 0 if first_layer is None else graph.layer(first_layer).attn_senders
    return torch.empty(
        graph.n_senders - skip, rows, width, lm.cfg.d_model, device=lm.device, dtype=lm.cfg.dtype
    )


@torch.no_grad()
def record_run(
    lm: LensModel, graph: EdgeGraph, tokens: Tensor, *, streams: bool = False
) -> tuple[Tensor, dict[str, Tensor], Tensor]:
    """One unpatched pass: every sender's output, (optionally) every stream a receiver reads,
    by hook name (:func:`receiver_streams`, and ``"final"``), and the final residual stream."""
    out = sender_buffer(lm, graph, tokens.shape[0], tokens.shape[1])
    recorder = SenderRecorder(lm, graph, out)
    names = receiver_streams(graph) if streams else []
    with (
        lm.hooks.hooks(fwd=recorder.hooks(), label="edge senders"),
        lm.hooks.capture(names) as cap,
    ):
        final = lm.model(tokens, stop_at_layer=graph.n_layers)
    kept = {name: cap[name] for name in names}
    if streams:
        kept["final"] = final
    return out, kept, final


# ---------------------------------------------------------------------------------- receivers


def qkv_projection(
    lm: LensModel,
    graph: EdgeGraph,
    layer: int,
    letter: str,
    inputs: Float[Tensor, "batch pos head d_model"],
    heads: Tensor | None = None,
) -> Float[Tensor, "batch pos head d_head"]:
    """What ``hook_{letter}`` holds when each head reads its own pre-norm input (only the heads
    ``heads``, when given: ``inputs`` then holds theirs)."""
    block = lm.model.blocks[layer]
    attn = block.attn
    grouped_kv = letter != "q" and graph.grouped
    w = getattr(attn, f"_W_{letter.upper()}" if grouped_kv else f"W_{letter.upper()}")
    b = getattr(attn, f"_b_{letter.upper()}" if grouped_kv else f"b_{letter.upper()}")
    if heads is not None:
        w, b = w[heads], b[heads]
    return complex_attn_linear(block.ln1(inputs), w, b)


class ReceiverHooks:
    """The receiver side of a pass: one hook per receiver group, in graph order.

    Per layer, a group's columns and how many senders reach them come from the graph
    (:meth:`EdgeGraph.layer`). The q/k/v hooks get the stream they read (kept at
    ``hook_resid_pre``, released after ``hook_v``); the MLP hook gets ``hook_mlp_in`` (run inside
    :func:`receiver_flags`). Subclasses say what happens there (:meth:`qkv`, :meth:`mlp`) and which
    groups need a hook at all (:meth:`wants`); the logits are theirs to handle after the pass.
    """

    def __init__(self, lm: LensModel, graph: EdgeGraph):
        self.lm, self.graph = lm, graph
        self._stream: dict[int, Tensor] = {}

    def wants(self, cols: range, n_senders: int) -> bool:
        """Whether the receivers ``cols`` (reached by the first ``n_senders``) need a hook."""
        return True

    def qkv(self, layer: int, letter: str, part: range, stream: Tensor, activation: Tensor) -> Tensor:
        """``hook_{letter}``'s new value; ``part``: the letter's columns, ``stream``: its input."""
        raise NotImplementedError

    def mlp(self, layer: int, column: int, activation: Tensor) -> Tensor | None:
        """``hook_mlp_in``'s new value (None: unchanged); ``column``: the MLP's receiver."""
        raise NotImplementedError

    def hooks(self) -> HookList:
        hooks: HookList = []
        for layer in range(self.graph.n_layers):
            cols = self.graph.layer(layer)
            if self.wants(cols.qkv, cols.attn_senders):
                hooks.append((attn_stream(layer), self._keep(layer)))
                for letter, part in zip("qkv", (cols.q, cols.k, cols.v), strict=True):
                    hooks.append((hook_name(letter, layer), self._letter(layer, letter, part)))
            if cols.mlp is not None and self.wants(range(cols.mlp, cols.mlp + 1), cols.mlp_senders):
                hooks.append((hook_name("mlp_in", layer), self._mlp(layer, cols.mlp)))
        return hooks

    def _keep(self, layer: int) -> HookFn:
        def keep(activation: Tensor, hook: HookPoint) -> None:
            self._stream[layer] = activation

        return keep

    def _letter(self, layer: int, letter: str, part: range) -> HookFn:
        def receive(activation: Tensor, hook: HookPoint) -> Tensor:
            stream = self._stream.pop(layer) if letter == "v" else self._stream[layer]
            return self.qkv(layer, letter, part, stream, activation)

        return receive

    def _mlp(self, layer: int, column: int) -> HookFn:
        def receive(activation: Tensor, hook: HookPoint) -> Tensor | None:
            return self.mlp(layer, column, activation)

        return receive

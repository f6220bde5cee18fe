"""The computational graph of a transformer for edge-level circuit discovery (EAP, EAP-IG, ACDC).

Nodes are the input embedding, every attention head's output (``z @ W_O[h]``), every MLP and the
logits; an edge runs from each upstream output to each downstream input, with a head's q, k and v
inputs as separate receivers. The layout is EAP-IG's dense ``[sender, receiver]`` matrix with a
mask of real edges (Hanna et al. 2024, "Have Faith in Faithfulness"; Conmy et al. 2023, ACDC).
Where a block runs attention and MLP in parallel (GPT-J, GPT-NeoX / Pythia) its MLP reads the
block's input, so the block's own heads do not feed it.

Post-norms (Gemma 2/3 normalise each block's output before adding it): the normed output is the
node, split over heads at the run's own scale, ``a_h = w ⊙ (z_h W_O[h]) / s(x)``, so the stream
stays an exact sum of node outputs in every run (Gemma has no attention bias) and edge patching
is exact; a head's output then also moves with its layer-mates' (they share ``s``).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import torch
from jaxtyping import Bool
from torch import Tensor

from lmsci_mi.errors import UnknownNameError, UserInputError
from lmsci_mi.sites import Head

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from lmsci_mi.model import LensModel

__all__ = ["EdgeGraph", "LayerReceivers", "edge_graph"]

_ARROW = "->"
_RECEIVER = re.compile(r"^(?:L(\d+)\.(H|KV)(\d+)\.([qkv])|MLP(\d+)|logits)$")
_SENDER = re.compile(r"^(?:L(\d+)\.H(\d+)|MLP(\d+)|input)$")


@dataclass(frozen=True)
class LayerReceivers:
    """Where one layer's receivers sit among the columns of the score matrix.

    Attributes:
        q, k, v: column ranges of the layer's query, key and value inputs (``n_heads`` query
            columns; ``n_kv`` key and value columns each).
        mlp: the column of the layer's MLP input (None in attention-only models).
        attn_senders: how many senders (rows) can reach the layer's q/k/v (all earlier layers).
        mlp_senders: how many senders can reach the layer's MLP (also this layer's heads, unless
            attention and MLP run in parallel).
    """

    q: range
    k: range
    v: range
    mlp: int | None
    attn_senders: int
    mlp_senders: int

    @property
    def qkv(self) -> range:
        """The q, k and v columns together (they are contiguous)."""
        return range(self.q.start, self.v.stop)


@dataclass(frozen=True)
class EdgeGraph:
    """A model's edge graph: which senders feed which receivers, and how edges are named.

    Senders (rows) are ``input``, then per layer its heads ``L{l}.H{h}`` and ``MLP{l}``. Receivers
    (columns) are per layer the query inputs ``L{l}.H{h}.q``, the key and value inputs
    (``L{l}.H{h}.k`` per query head when ungrouped; ``L{l}.KV{g}.k`` per key/value head when
    grouped), ``MLP{l}``, and finally ``logits``. An edge prints as ``"L3.H2->L5.H1.q"``.

    Attributes:
        model: the model's name.
        n_layers, n_heads: the model's shape.
        n_kv_heads: key/value heads per layer (``n_heads`` without grouped-query attention).
        grouped: k/v receivers are per key/value head (False: per query head, as EAP-IG and MIB
            ungroup GQA). Always False when the model has no GQA.
        post_norm: blocks normalise their outputs before adding them (Gemma 2/3).
        has_mlp: blocks have MLPs (False for attention-only models: no MLP nodes).
        parallel: blocks run attention and MLP in parallel (GPT-J, GPT-NeoX): an MLP reads the
            block's input, so its senders are those of the block's heads.

    >>> from lmsci_mi import load_model
    >>> g = edge_graph(load_model("toy-2l"))
    >>> g.n_edges, g.edge_name(*g.edge_index("L0.H1->L1.H3.k"))
    (110, 'L0.H1->L1.H3.k')
    """

    model: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    grouped: bool
    post_norm: bool = False
    has_mlp: bool = True
    parallel: bool = False

    # ------------------------------------------------------------------ shape

    @property
    def n_kv_receivers(self) -> int:
        """Key (and value) receivers per layer: ``n_kv_heads`` grouped, else ``n_heads``."""
        return self.n_kv_heads if self.grouped else self.n_heads

    @property
    def _per_layer_senders(self) -> int:
        return self.n_heads + int(self.has_mlp)

    @property
    def n_senders(self) -> int:
        return 1 + self.n_layers * self._per_layer_senders

    @property
    def n_receivers(self) -> int:
        return self.n_layers * (self.n_heads + 2 * self.n_kv_receivers + int(self.has_mlp)) + 1

    @property
    def logits(self) -> int:
        """The column of the logits receiver (the last)."""
        return self.n_receivers - 1

    def head_sender(self, layer: int, head: int) -> int:
        """The row of head ``(layer, head)``."""
        return 1 + layer * self._per_layer_senders + head

    def mlp_sender(self, layer: int) -> int:
        """The row of MLP ``layer``."""
        if not self.has_mlp:
            raise UserInputError(f"{self.model} is attention-only: it has no MLP nodes")
        return 1 + layer * self._per_layer_senders + self.n_heads

    def layer(self, layer: int) -> LayerReceivers:
        """The columns of ``layer``'s receivers and how many senders reach them."""
        width = self.n_heads + 2 * self.n_kv_receivers + int(self.has_mlp)
        start = layer * width
        kv = self.n_kv_receivers
        q = range(start, start + self.n_heads)
        k = range(q.stop, q.stop + kv)
        v = range(k.stop, k.stop + kv)
        before = 1 + layer * self._per_layer_senders
        mlp_senders = before if self.parallel else before + self.n_heads
        return LayerReceivers(q, k, v, v.stop if self.has_mlp else None, before, mlp_senders)

    def kv_group(self, head: int) -> int:
        """The key/value head that query head ``head`` reads (GQA's ``repeat_interleave``)."""
        return head // (self.n_heads // self.n_kv_heads)

    # ------------------------------------------------------------------ edges

    @cached_property
    def real(self) -> Bool[Tensor, "sender receiver"]:
        """True where a sender can feed a receiver (an edge of the graph)."""
        mask = torch.zeros(self.n_senders, self.n_receivers, dtype=torch.bool)
        for layer in range(self.n_layers):
            cols = self.layer(layer)
            mask[: cols.attn_senders, cols.qkv.start : cols.qkv.stop] = True
            if cols.mlp is not None:
                mask[: cols.mlp_senders, cols.mlp] = True
        mask[:, self.logits] = True
        return mask

    @property
    def n_edges(self) -> int:
        """How many edges the graph has (SmolLM2: 123,211 ungrouped, 70,651 grouped)."""
        return int(self.real.sum())

    @cached_property
    def sender_names(self) -> tuple[str, ...]:
        names = ["input"]
        for layer in range(self.n_layers):
            names += [str(Head(layer, h)) for h in range(self.n_heads)]
            names += [f"MLP{layer}"] if self.has_mlp else []
        return tuple(names)

    @cached_property
    def receiver_names(self) -> tuple[str, ...]:
        names: list[str] = []
        kv = "KV" if self.grouped else "H"
        for layer in range(self.n_layers):
            names += [f"L{layer}.H{h}.q" for h in range(self.n_heads)]
            for letter in "kv":
                names += [f"L{layer}.{kv}{g}.{letter}" for g in range(self.n_kv_receivers)]
            names += [f"MLP{layer}"] if self.has_mlp else []
        return (*names, "logits")

    def edge_name(self, sender: int, receiver: int) -> str:
        """The printable name of edge ``(sender, receiver)``, e.g. ``"MLP4->logits"``."""
        if not (0 <= sender < self.n_senders and 0 <= receiver < self.n_receivers):
            raise UserInputError(
                f"({sender}, {receiver}) is outside the {self.n_senders} x "
                f"{self.n_receivers} score matrix"
            )
        return f"{self.sender_names[sender]}{_ARROW}{self.receiver_names[receiver]}"

    @cached_property
    def _sender_index(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.sender_names)}

    @cached_property
    def _receiver_index(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.receiver_names)}

    def edge_index(self, name: str) -> tuple[int, int]:
        """``(sender, receiver)`` of an edge named like ``"L3.H2->L5.H1.q"``.

        Raises:
            ValueError: the name is malformed or not an edge of this graph; the message lists the
                closest edge names.
        """
        sender, _, receiver = name.strip().partition(_ARROW)
        sender, receiver = sender.strip(), receiver.strip()
        s = self._sender_index.get(sender)
        r = self._receiver_index.get(receiver)
        if s is None or r is None or not bool(self.real[s, r]):
            raise UnknownNameError(self._unknown_edge(name, s, r))
        return s, r

    def _unknown_edge(self, name: str, s: int | None, r: int | None) -> str:
        sender, _, receiver = name.strip().partition(_ARROW)
        if s is not None and r is not None and self._same_block_mlp(s, r):
            why = f"{receiver.strip()} reads its block's input: attention and MLP run in parallel"
        elif s is not None and r is not None:
            why = f"{sender.strip()} does not come before {receiver.strip()}"
        elif _ARROW not in name:
            why = f"an edge is written 'sender{_ARROW}receiver'"
        else:
            why = "unknown sender" if s is None else "unknown receiver"
        rows = [s] if s is not None else range(self.n_senders)
        cols = [r] if r is not None else range(self.n_receivers)
        candidates = [self.edge_name(i, j) for i in rows for j in cols if bool(self.real[i, j])]
        close = difflib.get_close_matches(name.strip(), candidates, n=5, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        layout = "grouped k/v 'L5.KV0.k'" if self.grouped else "per-head k/v 'L5.H1.k'"
        return (
            f"{name!r} is not an edge of {self.model}'s graph ({why}).{hint} Edges look like "
            f"'L3.H2{_ARROW}L5.H1.q', 'input{_ARROW}MLP0', 'MLP4{_ARROW}logits' ({layout})."
        )

    def _same_block_mlp(self, sender: int, receiver: int) -> bool:
        """Whether ``sender`` is a head of the block whose MLP is ``receiver`` (no edge when the
        block runs attention and MLP in parallel)."""
        if not self.parallel or sender == 0:
            return False
        layer = (sender - 1) // self._per_layer_senders
        return receiver == self.layer(layer).mlp and sender < self.mlp_sender(layer)

    def edge_names(self, mask: Bool[Tensor, "sender receiver"]) -> list[str]:
        """The names of the edges set in ``mask`` (row-major order)."""
        self.check_mask(mask)
        return [
            self.edge_name(int(s), int(r)) for s, r in (mask.cpu() & self.real).nonzero().tolist()
        ]

    def mask(self, edges: Iterable[str] = ()) -> Bool[Tensor, "sender receiver"]:
        """A circuit mask holding the named edges (an unknown name raises, see edge_index)."""
        out = torch.zeros(self.n_senders, self.n_receivers, dtype=torch.bool)
        for name in edges:
            out[self.edge_index(name)] = True
        return out

    def full_mask(self) -> Bool[Tensor, "sender receiver"]:
        """Every edge: the whole model as a circuit."""
        return self.real.clone()

    def check_mask(self, mask: Tensor) -> None:
        """Raise ValueError unless ``mask`` is a ``[sender, receiver]`` (or ``[k, sender,
        receiver]``) matrix of this graph."""
        if tuple(mask.shape[-2:]) != (self.n_senders, self.n_receivers) or mask.ndim not in (2, 3):
            raise UserInputError(
                f"a circuit mask of this graph is [{self.n_senders}, {self.n_receivers}] "
                f"(senders x receivers, or [k, ...] for k circuits), not {tuple(mask.shape)}; "
                "build one with graph.mask(names) or graph.full_mask()"
            )

    def describe(self) -> str:
        """One line: model, nodes, edges, GQA layout."""
        layout = (
            "grouped k/v (per key/value head)" if self.grouped else "ungrouped k/v (per query head)"
        )
        norm = ", post-norm outputs at the run's own scale" if self.post_norm else ""
        norm += ", parallel attention and MLP" if self.parallel else ""
        return (
            f"{self.model}: {self.n_senders} senders x {self.n_receivers} receivers, "
            f"{self.n_edges:,} edges, {layout}{norm}"
        )

    @staticmethod
    def is_receiver_name(name: str) -> bool:
        """Whether ``name`` has the form of a receiver (``L5.H1.q``, ``L5.KV0.k``, ``MLP3``, ``logits``)."""
        return bool(_RECEIVER.match(name))

    @staticmethod
    def is_sender_name(name: str) -> bool:
        """Whether ``name`` has the form of a sender (``input``, ``L3.H2``, ``MLP3``)."""
        return bool(_SENDER.match(name))

    def heads_of(self, names: Sequence[str]) -> list[Head]:
        """The heads among sender names (for circuit views and checks against known heads)."""
        return [Head.parse(n) for n in names if n.startswith("L") and n.count(".") == 1]


def edge_graph(lm: LensModel, *, grouped: bool = False) -> EdgeGraph:
    """The edge graph of a loaded model, from its configuration.

    Args:
        lm: the model (TransformerLens architecture; attention then MLP, or the two in parallel
            as in GPT-J and GPT-NeoX, where the MLP reads the block's input).
        grouped: under grouped-query attention, make k/v receivers per key/value head (70,651
            edges on SmolLM2) instead of per query head (123,211, EAP-IG's and MIB's choice).

    Returns:
        An :class:`EdgeGraph`.

    Raises:
        ValueError: the model normalises after the residual add (OLMo 2), which this graph does
            not describe.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> edge_graph(lm).n_edges, edge_graph(lm, grouped=True).n_edges
    (110, 82)
    """
    cfg = lm.cfg
    if cfg.original_architecture in ("Olmo2ForCausalLM", "Olmo3ForCausalLM"):
        raise UserInputError(
            f"{lm.name} normalises after the residual add; its stream is not a sum of "
            "node outputs, so edges are undefined"
        )
    n_kv = cfg.n_key_value_heads or cfg.n_heads
    return EdgeGraph(
        model=lm.name,
        n_layers=cfg.n_layers,
        n_heads=cfg.n_heads,
        n_kv_heads=n_kv,
        grouped=bool(grouped and n_kv < cfg.n_heads),
        post_norm=bool(cfg.use_normalization_before_and_after),
        has_mlp=not cfg.attn_only,
        parallel=bool(cfg.parallel_attn_mlp) and not cfg.attn_only,
    )

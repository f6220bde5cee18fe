"""Exact edge patching: a circuit's metric when every edge outside it carries the corrupted value.

Each receiver's input is rebuilt inside one clean forward pass from its senders' current outputs
and the corrupted run's, ``in_v = stream_v + Σ_{u∉C} (a_u(x') − a_u(current))`` (Hanna et al. 2024,
EAP-IG's ``evaluate_graph``; Conmy et al. 2023, ACDC). Receivers are fed through the q/k/v
projections (a head's input is ``ln1(in_v) @ W[h]``, no split-input flags), ``hook_mlp_in`` and the
final residual stream, wired as :mod:`~lmsci_mi.circuits.edges.wiring` says; several circuits share
one pass, stacked along the batch.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from lmsci_mi.circuits.edges.graph import EdgeGraph
from lmsci_mi.circuits.edges.wiring import (
    ReceiverHooks,
    SenderRecorder,
    attn_stream,
    mlp_stream,
    qkv_projection,
    receiver_flags,
    record_run,
    sender_buffer,
)
from lmsci_mi.circuits.metrics import (
    KLToClean,
    LogitDiff,
    Metric,
    Normalised,
    TargetProb,
    pair_metric,
)
from lmsci_mi.data.pairs import PairsArg, TokenisedPairs, accepts_pairs, as_pairs
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import PaddedBatch
from lmsci_mi.sweep import BaseRun, resume

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel

__all__ = [
    "CircuitValues",
    "EdgePrompts",
    "batch_metric",
    "edge_pairs",
    "evaluate_circuit",
    "evaluate_circuits",
    "first_cut_layers",
    "prepare_edge_prompts",
    "shared_prefix",
]

PromptsArg = str | Sequence[str] | PaddedBatch | Int[Tensor, "pair pos"]
"""Deprecated: one side of the loose ``clean, corrupted`` form (give :class:`PromptPairs`)."""


# ---------------------------------------------------------------------------------- prompts


EdgePrompts = TokenisedPairs
"""Deprecated alias of :class:`lmsci_mi.data.pairs.TokenisedPairs` (edge patching's prompt type
before the one pair type; ``len``, ``answer_positions``, ``prompts`` and ``batches`` as before)."""


def edge_pairs(
    lm: LensModel, pairs: PairsArg, answer_positions: int | Sequence[int] | Tensor | None = None
) -> TokenisedPairs:
    """Tokenise and check prompt pairs for edge scoring or edge patching: right-padded, both
    prompts of each pair of one token length (edges are patched position by position).

    Args:
        pairs: texts (:class:`~lmsci_mi.data.pairs.PromptPairs`, any lengths across pairs) or
            token ids (:class:`~lmsci_mi.data.pairs.TokenisedPairs`, padded on the right).
        answer_positions: the position the metric reads, per pair or one for all (negative
            counts from each prompt's last real token); default the pairs' own, else the last
            real token.

    Raises:
        UserInputError: a pair whose prompts tokenise to different lengths, left padding, or an
            answer position outside a prompt.
    """
    tok = pairs.tokenise(lm, padding_side="right").with_answer_positions(answer_positions)
    bad = (tok.clean_lengths != tok.corrupted_lengths).nonzero().flatten().tolist()
    if bad:
        shown = ", ".join(
            f"pair {i} ({int(tok.clean_lengths[i])} vs {int(tok.corrupted_lengths[i])} tokens)"
            for i in bad[:3]
        )
        raise UserInputError(
            f"clean and corrupted prompts must have the same token length, since "
            f"edges are patched position by position; {len(bad)} pairs differ: "
            f"{shown}. Use a corruption that keeps the length (single-token names)."
        )
    width = max(tok.clean.shape[1], tok.corrupted.shape[1])
    return replace(tok, clean=_pad_to(tok.clean, width), corrupted=_pad_to(tok.corrupted, width))


def prepare_edge_prompts(
    lm: LensModel,
    clean: PromptsArg,
    corrupted: PromptsArg,
    answer_positions: int | Sequence[int] | Tensor | None = None,
) -> TokenisedPairs:
    """Deprecated: :func:`edge_pairs` of ``PromptPairs(clean, corrupted)``
    (:func:`lmsci_mi.data.pairs.as_pairs`, which also takes token ids and padded batches)."""
    return edge_pairs(lm, as_pairs(clean, corrupted), answer_positions)


def _pad_to(tokens: Tensor, width: int) -> Tensor:
    if tokens.shape[1] == width:
        return tokens
    return torch.cat([tokens, tokens[:, -1:].expand(-1, width - tokens.shape[1])], dim=1)


def batch_metric(metric: Metric, index: Tensor, n_pairs: int) -> Metric:
    """``metric`` restricted to the pairs ``index`` of a set of ``n_pairs``.

    lmsci-mi's metrics hold one answer per pair; they are sliced. Any other callable must score
    each row of a batch on its own (e.g. one answer id for all pairs) and is used as given.

    Raises:
        ValueError: a metric holds answers for a different number of pairs.
    """
    if isinstance(metric, Normalised):
        out = copy.copy(metric)
        out.metric = batch_metric(metric.metric, index, n_pairs)
        return out
    fields = {
        LogitDiff: ("answer", "wrong"),
        TargetProb: ("target",),
        KLToClean: ("clean_log_probs",),
    }
    names = fields.get(type(metric))  # type: ignore[call-overload]
    if names is None:
        return metric
    out = copy.copy(metric)
    for name in names:
        value: Tensor = getattr(metric, name)
        if value.shape[0] not in (1, n_pairs) or (
            name == "clean_log_probs" and value.shape[0] != n_pairs
        ):
            raise UserInputError(
                f"{metric!r} holds {value.shape[0]} {name} rows for {n_pairs} prompt "
                "pairs: give one per pair (or one for all)"
            )
        setattr(out, name, value if value.shape[0] == 1 else value[index.to(value.device)])
    return out


def check_metric(metric: Metric | Literal["kl"]) -> None:
    """Raise ValueError unless ``metric`` is a callable or ``"kl"``."""
    if (isinstance(metric, str) and metric != "kl") or not (
        isinstance(metric, str) or callable(metric)
    ):
        raise UserInputError(f"metric must be a callable or 'kl', not {metric!r}")


def batch_scorer(
    metric: Metric | Literal["kl"], clean_logits: Tensor, index: Tensor, n_pairs: int
) -> Metric:
    """The metric for one batch: ``"kl"`` becomes KL to the batch's clean logits, a metric is
    restricted to the batch's pairs (:func:`batch_metric`)."""
    if isinstance(metric, str):
        return KLToClean(clean_logits)
    return batch_metric(metric, index, n_pairs)


# Below this share of non-zero weights a sparse product beats the dense one (measured on
# SmolLM2's [28 receivers × 300 senders] blocks: about 10 % on a CPU).
_SPARSE_BELOW = 0.1


def weighted_difference(
    weights: Float[Tensor, "receiver sender"],
    plus: Float[Tensor, "sender n"],
    minus: Sequence[Float[Tensor, "part n"]],
) -> Float[Tensor, "receiver n"]:
    """``weights @ (plus − minus)`` without materialising ``plus − minus``, where ``minus`` is
    given as consecutive blocks of senders (views of different buffers); a sparse product when
    few weights are non-zero (a small circuit, or a large one's few cut edges)."""
    # torch's sparse products cover float32/64 on every device; half precision stays dense.
    sparse = weights.dtype in (torch.float32, torch.float64) and int(
        (weights != 0).sum()
    ) < _SPARSE_BELOW * weights.numel()
    addmm = torch.sparse.addmm if sparse else torch.addmm

    def product(w: Tensor, x: Tensor) -> Tensor:
        return torch.sparse.mm(w.to_sparse(), x) if sparse else w @ x

    out, start = product(weights, plus), 0
    for part in minus:
        w = weights[:, start : start + part.shape[0]]
        start += part.shape[0]
        if part.shape[0]:
            out = addmm(out, w.to_sparse() if sparse else w, part, alpha=-1)
    return out


# ---------------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class CircuitValues:
    """The metric of each circuit, with the clean and corrupted runs' for normalising.

    Attributes:
        values: per circuit, the metric averaged over prompt pairs, ``[circuit]``.
        per_prompt: per circuit and pair, ``[circuit, pair]`` (for bootstrap intervals).
        clean_value, corrupted_value: the unpatched runs' pair-averaged metric.
        clean_per_prompt, corrupted_per_prompt: the same per pair.
    """

    values: Float[Tensor, " circuit"]
    per_prompt: Float[Tensor, "circuit pair"]
    clean_value: float
    corrupted_value: float
    clean_per_prompt: Float[Tensor, " pair"]
    corrupted_per_prompt: Float[Tensor, " pair"]

    def normalised(self) -> Float[Tensor, " circuit"]:
        """``(m(C) − m(x')) / (m(M) − m(x'))``: 0 = corrupted run, 1 = whole model."""
        return (self.values - self.corrupted_value) / (self.clean_value - self.corrupted_value)


@dataclass(frozen=True)
class _Senders:
    """The sender outputs a patched pass of ``k`` circuits reads, ``[sender, row, pos, d]``.

    Attributes:
        corrupted: the corrupted run's, every sender, ``batch`` rows.
        clean: the clean run's for the senders below the pass's first layer, ``batch`` rows
            (equal in every circuit there, so stored once).
        current: the pass's own for the senders from its first layer on, ``k × batch`` rows
            (filled by a :class:`SenderRecorder` with that ``first_layer``).
    """

    corrupted: Tensor
    clean: Tensor
    current: Tensor


class _CircuitPatch(ReceiverHooks):
    """The receiver hooks of one patched pass of ``k`` circuits stacked along the batch: each
    receiver that a circuit cuts an edge into reads its rebuilt input (:meth:`rebuilt`)."""

    def __init__(
        self,
        lm: LensModel,
        graph: EdgeGraph,
        keep: Bool[Tensor, "k sender receiver"],
        senders: _Senders,
        corrupted_streams: dict[str, Tensor],
    ):
        super().__init__(lm, graph)
        self.senders = senders
        corrupted = senders.corrupted
        self.k = keep.shape[0]
        # Float weights: 1 = edge kept, 0 = edge takes the corrupted value; between, a mix
        # (soft masks, for gradient checks and integrated edge gradients).
        # Stored [k, receiver, sender]: a layer's block is then the GEMMs' left operand as is.
        keep = keep.to(device=lm.device, dtype=corrupted.dtype)
        self.keep = keep.transpose(1, 2).contiguous()
        self.ablate = (graph.real.to(lm.device, corrupted.dtype) - keep).transpose(1, 2).contiguous()
        self.corrupted_streams = corrupted_streams
        self.delta: dict[int, tuple[Tensor, Tensor]] = {}

    def rebuilt(
        self, stream: Tensor, stream_corrupted: Tensor, n_senders: int, cols: slice
    ) -> tuple[Tensor, Tensor] | None:
        """The receivers among ``cols`` that some circuit cuts an edge into (offsets in
        ``cols``) and their inputs, ``[rows, pos, receiver, d]``: per circuit the stream plus
        ``Σ_{u∉C}(a_u(x') − a_u(current))``, or, when it keeps fewer edges there than it cuts,
        the corrupted stream minus the kept edges' differences (so keeping none gives the
        corrupted input exactly, and the sum runs over the fewer edges); None when no circuit
        cuts an edge there. Every other receiver reads the stream as the model computes it."""
        ablate = self.ablate[:, cols, :n_senders]
        touched = (ablate != 0).any(2).any(0).nonzero().flatten()
        if touched.numel() == 0:
            return None
        ablate, keep = ablate[:, touched], self.keep[:, cols, :n_senders][:, touched]
        rows, width, d_model = stream.shape
        batch, n_cols = rows // self.k, touched.numel()
        lower = min(self.senders.clean.shape[0], n_senders)
        corrupted = self.senders.corrupted[:n_senders].flatten(1)  # [sender, batch·pos·d]
        clean = self.senders.clean[:lower].flatten(1)
        current = self.senders.current[: n_senders - lower]
        current = current.view(n_senders - lower, self.k, batch * width * d_model)
        # Receiver-major, as the products come out; the q/k/v projections read it as a view.
        out = stream.new_empty(n_cols, self.k, batch, width, d_model)
        for j in range(self.k):
            use_keep = int((keep[j] != 0).sum()) < int((ablate[j] != 0).sum())
            base = stream_corrupted if use_keep else stream[j * batch : (j + 1) * batch]
            weights = keep[j] if use_keep else ablate[j]
            summed = weighted_difference(weights, corrupted, (clean, current[:, j]))
            summed = summed.view(n_cols, batch, width, d_model)
            (torch.sub if use_keep else torch.add)(base, summed, out=out[:, j])
        return touched, out.view(n_cols, rows, width, d_model).permute(1, 2, 0, 3)

    def wants(self, cols: range, n_senders: int) -> bool:
        """A receiver group gets a hook only when some circuit cuts an edge into it."""
        return bool((self.ablate[:, cols.start : cols.stop, :n_senders] != 0).any())

    def qkv(self, layer: int, letter: str, part: range, stream: Tensor, activation: Tensor) -> Tensor:
        cols = self.graph.layer(layer)
        offset = part.start - cols.q.start
        if letter == "q":  # q fires first: rebuild the layer's q/k/v inputs once
            rebuilt = self.rebuilt(
                stream,
                self.corrupted_streams[attn_stream(layer)],
                cols.attn_senders,
                slice(cols.qkv.start, cols.qkv.stop),
            )
            assert rebuilt is not None
            self.delta[layer] = rebuilt
        touched, inputs = self.delta.pop(layer) if letter == "v" else self.delta[layer]
        mine = ((touched >= offset) & (touched < offset + len(part))).nonzero().flatten()
        if mine.numel() == 0:
            return activation
        heads = touched[mine] - offset
        projected = qkv_projection(self.lm, self.graph, layer, letter, inputs[:, :, mine], heads=heads)
        return activation.index_copy(2, heads, projected.to(activation.dtype))

    def mlp(self, layer: int, column: int, activation: Tensor) -> Tensor:
        rebuilt = self.rebuilt(
            activation,
            self.corrupted_streams[mlp_stream(self.graph, layer)],
            self.graph.layer(layer).mlp_senders,
            slice(column, column + 1),
        )
        assert rebuilt is not None
        return rebuilt[1][:, :, 0]

    def final(self, resid: Tensor) -> Tensor:
        """The logits' input: the final stream with the circuit's missing edges patched."""
        rebuilt = self.rebuilt(
            resid,
            self.corrupted_streams["final"],
            self.graph.n_senders,
            slice(self.graph.logits, self.graph.logits + 1),
        )
        return resid if rebuilt is None else rebuilt[1][:, :, 0]


def _answer_logits(lm: LensModel, resid: Tensor, answers: Tensor, repeats: int = 1) -> Tensor:
    rows = torch.arange(resid.shape[0], device=resid.device)
    return lm.unembed(resid[rows, answers.to(resid.device).repeat(repeats)])


def _check_masks(lm: LensModel, graph: EdgeGraph, masks: Tensor) -> Tensor:
    if (
        graph.model != lm.name
        or graph.n_layers != lm.cfg.n_layers
        or graph.n_heads != lm.cfg.n_heads
    ):
        raise UserInputError(
            f"the graph describes {graph.model}, not {lm.name}: build it with edge_graph(lm)"
        )
    graph.check_mask(masks)
    if masks.dtype != torch.bool and not masks.is_floating_point():
        raise UserInputError(f"a circuit mask is boolean (True = edge kept), not {masks.dtype}")
    if masks.is_floating_point() and bool(((masks < 0) | (masks > 1)).any()):
        raise UserInputError("a soft circuit mask holds weights in [0, 1] (1 = edge kept)")
    stray = (masks != 0) & ~graph.real
    if bool(stray.any()):
        s, r = stray.nonzero()[0, -2:].tolist()
        raise UserInputError(
            f"the circuit names {int(stray.sum())} pairs that are not edges of the "
            f"graph, e.g. {graph.sender_names[s]}->{graph.receiver_names[r]}"
        )
    return masks if masks.ndim == 3 else masks[None]


@accepts_pairs(3)
@torch.no_grad()
def evaluate_circuits(
    lm: LensModel,
    graph: EdgeGraph,
    circuits: Bool[Tensor, "circuit sender receiver"],
    pairs: PairsArg,
    metric: Metric | Literal["kl"] | None = None,
    *,
    batch_size: int = 16,
    circuits_per_pass: int = 4,
    answer_positions: int | Sequence[int] | Tensor | None = None,
    reuse: bool = True,
) -> CircuitValues:
    """Exact edge patching of several circuits: the metric when only each circuit's edges carry
    clean values and every other edge the corrupted run's.

    Reads the model only (two TransformerLens flags, ``use_hook_mlp_in`` and, for ungrouped GQA
    graphs, ``ungroup_grouped_query_attention``, are set during the call and restored). Per batch
    of prompts: one corrupted pass, one cached clean pass, and one patched pass per
    ``circuits_per_pass`` circuits stacked along the batch. A patched pass starts at the first
    layer its circuits cut an edge into (circuits are grouped by it) and after the positions the
    clean and corrupted prompts share, from the cached clean run; a layer none of whose incoming
    edges is cut gets no hook. Memory: ``[n_senders, circuits_per_pass × batch, pos, d_model]``.

    Args:
        lm: the model.
        graph: its edge graph (:func:`~lmsci_mi.circuits.edges.graph.edge_graph`).
        circuits: boolean masks ``[circuit, sender, receiver]`` (or one ``[sender, receiver]``),
            True = the edge is in the circuit; or float weights in [0, 1], an edge of weight w
            getting ``(1 − w)`` of its corrupted difference (soft masks).
        pairs: the prompt pairs (:class:`~lmsci_mi.data.pairs.PromptPairs` or token ids; see
            :func:`edge_pairs`). The deprecated form ``evaluate_circuits(lm, graph, circuits,
            clean, corrupted, metric, ...)`` still works for one release.
        metric: scores answer-position logits (:mod:`lmsci_mi.circuits.metrics`), or ``"kl"``;
            None (default) for each pair's logit difference (``LogitDiff.of_pairs``).
        batch_size: prompt pairs per pass; circuits_per_pass: circuits stacked in one pass.
        answer_positions: see :func:`edge_pairs`.
        reuse: False runs every patched pass over the whole model and prompt (the same values, to
            float error; for checking and timing the reuse).

    Returns:
        :class:`CircuitValues`.

    Raises:
        ValueError: bad prompts (see :func:`edge_pairs`), a mask of the wrong shape or
            type, or one that holds pairs that are not edges; nothing is attached.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.circuits.edges.graph import edge_graph
    >>> from lmsci_mi.data.pairs import PromptPairs
    >>> lm = load_model("toy-2l")
    >>> g = edge_graph(lm)
    >>> masks = torch.stack([g.full_mask(), torch.zeros_like(g.real)])
    >>> pairs = PromptPairs(["Mary and John: John gave it to"], ["Mary and John: Mary gave it to"],
    ...                     answers=5, wrongs=6)
    >>> res = evaluate_circuits(lm, g, masks, pairs)
    >>> torch.allclose(res.values, torch.tensor([res.clean_value, res.corrupted_value]), atol=1e-4)
    True
    """
    masks = _check_masks(lm, graph, circuits)
    metric = pair_metric(metric, pairs)
    check_metric(metric)
    if batch_size < 1 or circuits_per_pass < 1:
        raise UserInputError("batch_size and circuits_per_pass must be at least 1")
    prompts = edge_pairs(lm, pairs, answer_positions)
    per_prompt = torch.zeros(masks.shape[0], len(prompts))
    clean_pp, corrupted_pp = torch.zeros(len(prompts)), torch.zeros(len(prompts))
    for batch in prompts.batches(batch_size):
        index = batch[0]
        clean_pp[index], corrupted_pp[index], per_prompt[:, index] = _evaluate_batch(
            lm, graph, masks, batch, metric, len(prompts), (circuits_per_pass, reuse)
        )
    return CircuitValues(
        per_prompt.mean(1),
        per_prompt,
        float(clean_pp.mean()),
        float(corrupted_pp.mean()),
        clean_pp,
        corrupted_pp,
    )


def shared_prefix(clean: Tensor, corrupted: Tensor, answers: Tensor) -> int:
    """How many leading positions every pair's clean and corrupted prompts share, ending before
    the first answer position. A causal model computes them alike in every run, patched or not
    (each edge's clean and corrupted values are equal there), so a pass starts after them."""
    differs = (clean != corrupted).any(0).nonzero().flatten()
    first = int(differs[0]) if differs.numel() else clean.shape[1]
    return min(first, int(answers.min()))


def first_cut_layers(graph: EdgeGraph, masks: Tensor) -> Int[Tensor, " circuit"]:
    """Per circuit, the first layer with a receiver that loses an edge (``n_layers``: only the
    logits lose one; and also when the circuit keeps every edge). Below it a patched run is the
    clean run."""
    weights = masks.float()
    cut = (graph.real.to(masks.device, weights.dtype) - weights) != 0  # [circuit, s, r]
    width = graph.layer(1).q.start if graph.n_layers > 1 else graph.logits
    columns = torch.arange(graph.n_receivers, device=masks.device) // width
    layers = torch.where(cut.any(1), columns, graph.n_layers)
    return layers.min(1).values.cpu()


def _by_first_layer(layers: Tensor, size: int) -> list[Tensor]:
    """Circuit indices in passes of at most ``size``, each pass of one first cut layer (a pass
    starts at its lowest circuit's layer, so mixing layers would recompute clean layers)."""
    order = layers.argsort(stable=True)
    counts = torch.unique_consecutive(layers[order], return_counts=True)[1]
    return [chunk for group in order.split(counts.tolist()) for chunk in group.split(size)]


@torch.no_grad()
def _evaluate_batch(
    lm: LensModel,
    graph: EdgeGraph,
    masks: Tensor,
    batch: tuple[Tensor, Tensor, Tensor, Tensor],
    metric: Metric | Literal["kl"],
    n_pairs: int,
    settings: tuple[int, bool],
) -> tuple[Tensor, Tensor, Tensor]:
    """One prompt batch: the clean and corrupted metric per pair and every circuit's
    ``[circuit, pair]``.

    With reuse, the clean run is cached (keys, values, residual streams and sender outputs) and a
    patched pass runs only the positions after the prompts' shared prefix and the layers from
    the first one its circuits cut (circuits are grouped by that layer); without, every pass runs
    the whole model on the whole prompt.
    """
    circuits_per_pass, reuse = settings
    index, clean_tokens, corrupted_tokens, answers = batch
    prefix = shared_prefix(clean_tokens, corrupted_tokens, answers) if reuse else 0
    clean_out = sender_buffer(lm, graph, len(index), clean_tokens.shape[1])
    with receiver_flags(lm, graph), lm.hooks.hooks(fwd=SenderRecorder(lm, graph, clean_out).hooks()):
        # the cached keys then have the layout the patched passes append to
        base = BaseRun.record(lm, clean_tokens, answer_positions=answers)
    corrupted_out, streams, corrupted_final = record_run(lm, graph, corrupted_tokens, streams=True)
    scorer = batch_scorer(metric, base.logits, index, n_pairs)
    corrupted_logits = _answer_logits(lm, corrupted_final, answers)
    # Only the suffix is patched: the senders' and streams' prefix positions are never read.
    corrupted_out = corrupted_out[:, :, prefix:].contiguous()
    clean_out = clean_out[:, :, prefix:].contiguous()
    streams = {name: stream[:, prefix:] for name, stream in streams.items()}
    layers = first_cut_layers(graph, masks) if reuse else torch.zeros(masks.shape[0], dtype=torch.long)
    values = torch.zeros(masks.shape[0], len(index))
    for chunk in _by_first_layer(layers, circuits_per_pass):
        k, first = chunk.numel(), int(layers[chunk].min())
        below = graph.layer(first).attn_senders  # senders under `first` keep their clean outputs
        current = sender_buffer(lm, graph, k * len(index), clean_tokens.shape[1] - prefix, first)
        senders = _Senders(corrupted_out, clean_out[:below], current)
        patch = _CircuitPatch(lm, graph, masks[chunk], senders, streams)
        recorder = SenderRecorder(lm, graph, current, first_layer=first)
        with (
            receiver_flags(lm, graph),
            lm.hooks.hooks(fwd=recorder.hooks() + patch.hooks(), label="edge patching"),
        ):
            final = resume(lm, base, prefix, k, first_layer=first)
        logits = _answer_logits(lm, patch.final(final), answers - prefix, repeats=k)
        values[chunk] = scorer(logits.view(k, len(index), -1)).float().cpu()
    clean_values = scorer(base.logits).float().cpu()
    return clean_values, scorer(corrupted_logits).float().cpu(), values


@accepts_pairs(3)
def evaluate_circuit(
    lm: LensModel,
    graph: EdgeGraph,
    in_circuit: Bool[Tensor, "sender receiver"],
    pairs: PairsArg,
    metric: Metric | Literal["kl"] | None = None,
    *,
    batch_size: int = 16,
    answer_positions: int | Sequence[int] | Tensor | None = None,
) -> CircuitValues:
    """Exact edge patching of one circuit (see :func:`evaluate_circuits`); ``values`` has one entry.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.circuits.edges.graph import edge_graph
    >>> from lmsci_mi.data.pairs import PromptPairs
    >>> lm = load_model("toy-2l")
    >>> g = edge_graph(lm)
    >>> pairs = PromptPairs("Mary and John: John gave it to", "Mary and John: Mary gave it to",
    ...                     answers=5, wrongs=6)
    >>> res = evaluate_circuit(lm, g, g.mask(["L0.H1->L1.H3.k", "MLP1->logits"]), pairs)
    >>> tuple(res.values.shape)
    (1,)
    """
    if in_circuit.ndim != 2:
        raise UserInputError(
            f"one circuit is a [sender, receiver] mask, not {tuple(in_circuit.shape)}; "
            "use evaluate_circuits for several"
        )
    return evaluate_circuits(
        lm,
        graph,
        in_circuit,
        pairs,
        metric,
        batch_size=batch_size,
        circuits_per_pass=1,
        answer_positions=answer_positions,
    )

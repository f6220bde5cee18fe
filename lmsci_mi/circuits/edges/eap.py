"""Edge scores: edge attribution patching (EAP) and EAP-IG with interpolated input embeddings.

EAP scores edge u→v by ``(a_u(x') − a_u(x)) · ∂m/∂in_v`` at the clean run (Syed, Rager & Conmy
2023); EAP-IG averages the gradient over ``m`` inputs whose token embeddings are interpolated from
corrupted to clean, ``e' + (k/m)(e − e')`` for ``k = 1..m`` (Hanna et al. 2024, the paper's right
Riemann sum: the clean point is included, the corrupted one is not; EAP-IG's code loops
``k = 0..m−1`` since Feb 2025). A score estimates the change in the pair-averaged metric when the
edge alone is patched to its corrupted value, the first-order term of exact edge patching.

Methods register in :data:`EDGE_METHODS` by the inputs whose gradients they average; a new one is
a function ``(clean, corrupted, config) -> inputs`` and one ``@EDGE_METHODS.register(...)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Literal

import torch
from jaxtyping import Float
from torch import Tensor

from lmsci_mi.circuits.edges.graph import EdgeGraph, edge_graph
from lmsci_mi.circuits.edges.patching import (
    batch_scorer,
    check_metric,
    edge_pairs,
    shared_prefix,
)
from lmsci_mi.circuits.edges.wiring import (
    ReceiverHooks,
    SenderRecorder,
    attn_stream,
    qkv_projection,
    receiver_flags,
    record_run,
    sender_buffer,
)
from lmsci_mi.circuits.metrics import Metric, pair_metric
from lmsci_mi.config import Config, config, paper
from lmsci_mi.data.pairs import PairsArg, accepts_pairs
from lmsci_mi.errors import UserInputError
from lmsci_mi.registry import MethodRegistry
from lmsci_mi.results import Result, result_type
from lmsci_mi.sweep import BaseRun, resume

if TYPE_CHECKING:
    from lmsci_mi.cluster import ClusterConfig
    from lmsci_mi.data.pairs import PromptPairs
    from lmsci_mi.model import LensModel

__all__ = [
    "EDGE_METHODS",
    "EAPConfig",
    "EdgeInputs",
    "EdgeScores",
    "eap_ig_inputs",
    "eap_inputs",
    "edge_attribution",
    "score_edges",
]

EdgeInputs = Callable[[Tensor, Tensor, "EAPConfig"], Tensor]
"""``(clean, corrupted, config) -> inputs``: from the clean and corrupted streams entering layer 0
(``[batch, pos, d_model]``, the positions after the pairs' shared prefix), the inputs whose
gradients a method averages, ``[steps × batch, pos, d_model]`` in blocks of ``batch`` rows; the
last block is the clean input (its run gives the senders' clean outputs and the clean metric)."""

EDGE_METHODS: MethodRegistry[EdgeInputs] = MethodRegistry("edge-scoring")
"""Edge-scoring methods by name (``"EAP"``, ``"EAP-IG"``), each with :class:`EAPConfig`; the
description is what ``EdgeScores.meta.params["method_detail"]`` records."""


@config
class EAPConfig(Config):
    """How edges are scored."""

    method: str = field(
        default="EAP-IG",
        metadata={"help": "EAP (gradient at the clean run), EAP-IG (inputs), or another name "
                          "registered in EDGE_METHODS"},
    )
    steps: int = field(
        default=5,
        metadata={
            "help": "EAP-IG interpolation steps m (k/m for k = 1..m)",
            "ge": 1,
            "le": 256,
            **paper(
                5,
                "Hanna et al. 2024, code: hannamw/eap-ig-faithfulness pareto.py "
                "integrated_gradients=5 (MIB's --ig-steps 5 too)",
            ),
        },
    )
    batch_size: int = field(
        default=16,
        metadata={"help": "prompt pairs per pass (EAP-IG stacks steps x this many rows)", "ge": 1},
    )
    grouped: bool = field(
        default=False,
        metadata={"help": "GQA: k/v receivers per key/value head, not per query head"},
    )

    def validate(self) -> None:
        EDGE_METHODS.get(self.method)  # an unknown name raises UnknownNameError, with the closest


@result_type
class EdgeScores(Result):
    """Scores of every edge of a model's graph: ``values[sender, receiver]`` (0 off the graph).

    A score estimates ``m(edge patched) − m(clean)``, averaged over the prompt pairs, in the
    metric's units; rank edges by ``|score|``.

    Attributes:
        graph: the edge graph (its ``grouped`` says how GQA k/v receivers were laid out).
        method: the method's name in :data:`EDGE_METHODS` (``"EAP"``, ``"EAP-IG"``); steps: the
            inputs whose gradients were averaged (EAP-IG's m; 1 for EAP).
        clean_value, corrupted_value: the pair-averaged metric of the unpatched runs.
        metric: a description of the metric.
    """

    graph: EdgeGraph
    method: str
    steps: int
    clean_value: float
    corrupted_value: float
    metric: str

    def top(self, k: int = 10, *, absolute: bool = True) -> tuple[tuple[str, float], ...]:
        """The ``k`` highest-scoring edges as ``(name, score)``, by ``|score|`` unless
        ``absolute=False``."""
        if k < 1:
            raise UserInputError(f"k must be at least 1, not {k}")
        real = self.graph.real
        flat = self.values.masked_fill(~real, float("nan")).flatten()
        key = flat.abs() if absolute else flat
        order = key.nan_to_num(float("-inf")).argsort(descending=True)[: min(k, int(real.sum()))]
        width = self.values.shape[1]
        return tuple(
            (self.graph.edge_name(i // width, i % width), float(flat[i])) for i in order.tolist()
        )

    def score(self, edge: str) -> float:
        """The score of one edge, by name (``"L3.H2->L5.H1.q"``)."""
        return float(self.values[self.graph.edge_index(edge)])

    def summary(self, rows: int = 10) -> str:
        lines = [
            f"{self.method} edge scores on {self.meta.model} ({self.graph.describe()}); "
            f"metric clean {self.clean_value:.4g}, corrupted {self.corrupted_value:.4g}"
        ]
        lines += [f"  {name:<28} {value:+.4g}" for name, value in self.top(rows)]
        return "\n".join(lines)


class _Gradients(ReceiverHooks):
    """Hooks of the backward-carrying pass: each receiver's input is a tensor of its own whose
    gradient is contracted with the sender differences as it arrives (one einsum per layer)."""

    def __init__(
        self,
        lm: LensModel,
        graph: EdgeGraph,
        diff: Tensor,
        scores: Tensor,
        steps: int,
    ):
        super().__init__(lm, graph)
        self.diff, self.scores, self.steps = diff, scores, steps

    def contract(self, n_senders: int, cols: slice) -> Callable[[Tensor], None]:
        def hook(grad: Tensor) -> None:
            g = grad.reshape(self.steps, -1, *grad.shape[1:]).sum(0)
            if g.ndim == 3:
                g = g.unsqueeze(2)
            self.scores[:n_senders, cols] += torch.einsum(
                "sbpd,bprd->sr", self.diff[:n_senders], g.to(self.diff.dtype)
            )

        return hook

    def qkv(self, layer: int, letter: str, part: range, stream: Tensor, activation: Tensor) -> Tensor:
        # One copy of the stream per receiver (a view); a separate tensor per letter, since
        # slicing one q/k/v tensor costs a zero-filled copy per slice in the backward pass.
        inputs = stream.unsqueeze(2).expand(-1, -1, len(part), -1)
        n_senders = self.graph.layer(layer).attn_senders
        inputs.register_hook(self.contract(n_senders, slice(part.start, part.stop)))
        return qkv_projection(self.lm, self.graph, layer, letter, inputs)

    def mlp(self, layer: int, column: int, activation: Tensor) -> None:
        n_senders = self.graph.layer(layer).mlp_senders
        activation.register_hook(self.contract(n_senders, slice(column, column + 1)))


@EDGE_METHODS.register("EAP", EAPConfig, "EAP (Syed et al. 2023)")
def eap_inputs(clean: Tensor, corrupted: Tensor, config: EAPConfig) -> Tensor:
    """EAP's input: the clean run alone (the gradient at the clean run)."""
    return clean


@EDGE_METHODS.register("EAP-IG", EAPConfig, "EAP-IG-inputs, k/m for k=1..m (Hanna et al. 2024)")
def eap_ig_inputs(clean: Tensor, corrupted: Tensor, config: EAPConfig) -> Tensor:
    """EAP-IG's inputs: row block k-1 holds ``e' + (k/m)(e − e')`` for k = 1..m, m =
    ``config.steps`` (the last block is exactly the clean input)."""
    steps = config.steps
    if steps == 1:
        return clean
    alphas = torch.arange(1, steps, device=clean.device, dtype=clean.dtype) / steps
    mixed = corrupted + alphas[:, None, None, None] * (clean - corrupted)
    return torch.cat([mixed.flatten(0, 1), clean])


def _score_batch(
    lm: LensModel,
    graph: EdgeGraph,
    cfg: EAPConfig,
    metric: Metric | Literal["kl"],
    batch: tuple[Tensor, Tensor, Tensor, Tensor],
    n_pairs: int,
    scores: Tensor,
) -> tuple[Tensor, Tensor, int]:
    """Add one batch's scores (over all pairs' mean) into ``scores``; return the batch's clean and
    corrupted metric per pair and how many inputs the method's gradients were averaged over.

    The positions the clean and corrupted prompts share are computed once, in the cached clean
    run: every sender's difference is zero there, so no edge gains a score from them.
    """
    index, clean_tokens, corrupted_tokens, answers = batch
    prefix = shared_prefix(clean_tokens, corrupted_tokens, answers)
    with receiver_flags(lm, graph):  # cached keys in the layout the graded pass appends to
        base = BaseRun.record(lm, clean_tokens, answer_positions=answers)
    with lm.hooks.capture(attn_stream(0)) as cap:
        corrupted_out, _, corrupted_final = record_run(lm, graph, corrupted_tokens)
    b, width = clean_tokens.shape
    clean_out = sender_buffer(lm, graph, b, width - prefix)
    diff = corrupted_out[:, :, prefix:].contiguous()
    # A leaf that needs grad: the pass builds a graph whether or not the weights need grad, and
    # no gradient ever reaches a weight (autograd.grad on this leaf only).
    inputs = EDGE_METHODS.get(cfg.method).function
    start = inputs(base.resid[0][:, prefix:], cap[attn_stream(0)][:, prefix:], cfg)
    steps = start.shape[0] // b
    start.requires_grad_(True)
    grads = _Gradients(lm, graph, diff, scores, steps)
    recorder = SenderRecorder(lm, graph, clean_out, rows=slice((steps - 1) * b, steps * b))
    rows = torch.arange(steps * b, device=lm.device)
    with (
        torch.enable_grad(),
        receiver_flags(lm, graph),
        lm.hooks.hooks(fwd=recorder.hooks() + grads.hooks(), label="edge attribution"),
    ):
        final = resume(lm, base, prefix, steps, start=start)
        final.register_hook(grads.contract(graph.n_senders, slice(graph.logits, graph.logits + 1)))
        logits = lm.unembed(final[rows, (answers.to(lm.device) - prefix).repeat(steps)])
        clean_logits = logits[-b:].detach()
        scorer = batch_scorer(metric, clean_logits, index, n_pairs)
        diff.sub_(clean_out)  # a(x') − a(x); the hooks read it only during the backward pass
        loss = scorer(logits.view(steps, b, -1)).float().sum() / (steps * n_pairs)
        torch.autograd.grad(loss, [start])
    with torch.no_grad():
        corrupted_logits = lm.unembed(corrupted_final[rows[:b], answers.to(lm.device)])
        return scorer(clean_logits).float().cpu(), scorer(corrupted_logits).float().cpu(), steps


def _sharded(
    lm: LensModel,
    pairs: PairsArg,
    metric: Metric | Literal["kl"] | None,
    config: EAPConfig | None,
    answer_positions: int | Sequence[int] | Tensor | None,
    cluster: ClusterConfig,
) -> EdgeScores:
    """:func:`edge_attribution` in shards of prompt pairs (:func:`lmsci_mi.cluster.run_sharded`)."""
    from lmsci_mi.cluster import run_sharded

    return run_sharded(
        "edges", lm, pairs, metric, config, answer_positions=answer_positions, cluster=cluster
    )


@accepts_pairs(1)
def edge_attribution(
    lm: LensModel,
    pairs: PairsArg,
    metric: Metric | Literal["kl"] | None = None,
    config: EAPConfig | None = None,
    *,
    answer_positions: int | Sequence[int] | Tensor | None = None,
    cluster: ClusterConfig | None = None,
) -> EdgeScores:
    """Score every edge of the model's graph by EAP or EAP-IG over a prompt set.

    Reads the model only (no weight or ``.grad`` changes; two TransformerLens flags are set during
    the call and restored, see :func:`~lmsci_mi.circuits.edges.patching.evaluate_circuits`). Per
    batch: one corrupted forward, then one forward+backward over the ``m`` interpolated copies
    (EAP: the clean run) stacked along the batch. Memory: ``[batch, pos, n_senders, d_model]``
    for the sender differences, plus the model's activations for ``m × batch`` rows.

    Args:
        lm: the model.
        pairs: :class:`~lmsci_mi.data.pairs.PromptPairs` (or token ids), each pair of one token
            length (see :func:`~lmsci_mi.circuits.edges.patching.edge_pairs`);
            ``edge_attribution(lm, clean, corrupted, metric, ...)`` is deprecated, for one release.
        metric: scores answer-position logits ``[*config, pair, vocab] -> [*config, pair]``
            (:mod:`lmsci_mi.circuits.metrics`), ``"kl"`` (KL to the clean run), or None: each
            pair's logit difference (``LogitDiff.of_pairs``).
        config: method (a name in :data:`EDGE_METHODS`), steps, batch size and GQA layout
            (:class:`EAPConfig`).
        answer_positions: the position each pair's metric reads (default its last real token).
        cluster: score the pairs in shards on a Ray cluster (or in this process with
            ``address="process"``), :func:`lmsci_mi.cluster.run_sharded`; the pairs must then be
            texts. Equal to one process up to float summation order.

    Returns:
        :class:`EdgeScores`.

    Raises:
        ValueError: an empty prompt set, pairs of different token lengths, a bad metric.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.data.pairs import PromptPairs
    >>> lm = load_model("toy-2l")
    >>> res = edge_attribution(lm, PromptPairs("Mary and John: John gave it to",
    ...                                        "Mary and John: Mary gave it to", 5, 6))
    >>> res.method, tuple(res.values.shape), len(res.top(3))
    ('EAP-IG', (11, 27), 3)
    """
    if cluster is not None:
        return _sharded(lm, pairs, metric, config, answer_positions, cluster)
    cfg = config or EAPConfig()
    metric = pair_metric(metric, pairs)
    check_metric(metric)
    graph = edge_graph(lm, grouped=cfg.grouped)
    prompts = edge_pairs(lm, pairs, answer_positions)
    scores = torch.zeros(graph.n_senders, graph.n_receivers, device=lm.device)
    clean_pp, corrupted_pp = torch.zeros(len(prompts)), torch.zeros(len(prompts))
    steps = 1
    for batch in prompts.batches(cfg.batch_size):
        clean_pp[batch[0]], corrupted_pp[batch[0]], steps = _score_batch(
            lm, graph, cfg, metric, batch, len(prompts), scores
        )
    values: Float[Tensor, "sender receiver"] = scores.cpu() * graph.real
    method = EDGE_METHODS.get(cfg.method).description
    return EdgeScores(
        values=values,
        axes=("sender", "receiver"),
        labels=(graph.sender_names, graph.receiver_names),
        meta=lm.meta(
            prompts.prompts,
            data_source=prompts.source,
            params={**cfg.params(), "method_detail": method, "edges": graph.n_edges},
        ),
        graph=graph,
        method=cfg.method,
        steps=steps,
        clean_value=float(clean_pp.mean()),
        corrupted_value=float(corrupted_pp.mean()),
        metric=repr(metric),
    )


def score_edges(
    lm: LensModel,
    pairs: PromptPairs,
    config: EAPConfig | None = None,
    *,
    cluster: ClusterConfig | None = None,
) -> EdgeScores:
    """EAP or EAP-IG scores of every edge on a set of prompt pairs, each pair scored by the logit
    difference of its own answer over its own wrong token (:meth:`LogitDiff.of_pairs`).

    :func:`edge_attribution` on :class:`~lmsci_mi.data.pairs.PromptPairs` (IOI with STR corruption
    from :func:`~lmsci_mi.data.ioi.ioi_str_pairs`, or prompt files): what ``lmsci-mi circuit
    eap|curve`` and the tour score. Reads the model only.

    Args:
        lm: the model.
        pairs: clean and corrupted prompts with one answer and one wrong token id per pair.
        config: method (EAP-IG or EAP), steps, batch size and GQA layout (:class:`EAPConfig`).
        cluster: score the pairs in shards on a Ray cluster (see :func:`edge_attribution`).

    Returns:
        :class:`EdgeScores`.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.data.ioi import ioi_str_pairs
    >>> lm = load_model("toy-2l")
    >>> scores = score_edges(lm, ioi_str_pairs(lm, 2), EAPConfig(method="EAP"))
    >>> scores.method, scores.meta.prompts == ioi_str_pairs(lm, 2).clean
    ('EAP', True)
    """
    return edge_attribution(lm, pairs, None, config, cluster=cluster)

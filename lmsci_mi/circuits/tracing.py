"""Causal tracing (Meng et al. 2022, "Locating and Editing Factual Associations in GPT", ROME).

Gaussian noise on the subject's token embeddings corrupts the prediction; restoring one clean
hidden state (the residual stream after a layer, or the MLP / attention output over a window of
layers) at one position measures how much of the fact flows through that state (its indirect
effect). All noise samples and all positions of one restored layer run as one batch, resumed at the
restored layer from the shared corrupted run, so the layers below it are never recomputed.

Attention-sink pitfall (measured on SmolLM2): a model without BOS uses its first token as the
attention sink, and if that token is the subject, noising it breaks every head at once. lmsci-mi's
tokenisation puts a sink token at position 0, so the subject never includes it; this is asserted.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float
from torch import Tensor

from lmsci_mi.config import Config, config
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import hook_name
from lmsci_mi.sweep import BaseRun, Intervention, Row, SweepConfig, SweepStats, run_rows

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from lmsci_mi.hooks import Capture
    from lmsci_mi.model import LensModel

__all__ = ["TRACE_KINDS", "CausalTrace", "TraceConfig", "causal_trace", "embedding_std", "naive_causal_trace"]

logger = logging.getLogger(__name__)

TRACE_KINDS = ("resid", "mlp", "attn")
"""What a trace can restore: the residual stream after a layer, or an MLP / attention output."""

_KIND_SITE = {"resid": "resid_post", "mlp": "mlp_out", "attn": "attn_out"}
_KIND_CMAP = {"resid": "Purples", "mlp": "Greens", "attn": "Reds"}
_KIND_TITLE = {"resid": "the residual stream", "mlp": "MLP", "attn": "attention"}


@result_type
class CausalTrace(Result):
    """A causal trace: probability of the target when one state is restored from the clean run.

    ``values`` is ``[kind, layer, position]`` (axes ``("kind", "layer", "position")``), the target
    probability averaged over the noise samples. ``kind`` follows ``kinds`` (a subset of
    ``("resid", "mlp", "attn")``); positions are the prompt's tokens, sink included.

    Attributes:
        clean_prob: p(target) on the clean prompt.
        corrupted_prob: p(target) with the subject noised, nothing restored (noise-averaged).
        subject_positions: token positions of the subject (never 0, the sink).
        target / target_id: the answer token.
        noise_scale: standard deviation of the noise added to each embedding coordinate.
        window: number of layers restored together for "mlp" and "attn".
        kinds: the kinds along the first axis.
        noise: the noise used, ``[sample, subject_token, d_model]`` (reproduces the trace).
        work: what the sweep engine ran.
    """

    clean_prob: float
    corrupted_prob: float
    subject_positions: tuple[int, ...]
    target: str
    target_id: int
    noise_scale: float
    window: int
    kinds: tuple[str, ...]
    noise: Tensor
    work: SweepStats

    def kind_values(self, kind: str) -> Float[Tensor, "layer position"]:
        """The ``[layer, position]`` map of one kind."""
        if kind not in self.kinds:
            raise ValueError(f"kind {kind!r} was not traced; this trace has {self.kinds}")
        return self.values[self.kinds.index(kind)]

    def indirect_effect(self) -> Float[Tensor, "kind layer position"]:
        """``values - corrupted_prob``: how much restoring each state brings the target back."""
        return self.values - self.corrupted_prob

    def peak_layer(self, kind: str = "mlp", position: int | None = None) -> int:
        """The layer whose restoration helps most at ``position`` (default: last subject token).

        ROME edits the MLP at (around) this layer for the MLP kind.
        """
        pos = self.subject_positions[-1] if position is None else position
        return int(self.kind_values(kind)[:, pos].argmax())

    def plot(self, path: str | Path | None = None, *, title: str | None = None) -> Figure:
        """Three heatmaps in the style of Meng et al. (Figure 1): tokens down, layers across.

        Subject tokens are starred; each panel's colour bar is p(target).
        """
        from matplotlib.figure import Figure

        from lmsci_mi.viz.plots import heatmap, save_figure

        tokens = [
            f"{tok!r}*" if i in self.subject_positions else repr(tok)
            for i, tok in enumerate(self.axis_labels(2))
        ]
        layers = self.axis_labels(1)
        n = len(self.kinds)
        fig = Figure(figsize=(5.2 * n, 0.32 * len(tokens) + 2.2))
        grid = fig.subplots(1, n, squeeze=False)
        for i, kind in enumerate(self.kinds):
            label = _KIND_TITLE[kind]
            if kind != "resid" and self.window > 1:
                label += f" ({self.window}-layer window)"
            heatmap(
                grid[0][i],
                self.values[i].T,
                row_labels=tokens,
                col_labels=layers,
                row_name="token (* = subject)",
                col_name="restored layer",
                title=f"Restoring {label}",
                cmap=_KIND_CMAP[kind],
            )
        fig.suptitle(
            title
            or (
                f"Causal trace of p({self.target!r}) — {self.meta.model}: clean "
                f"{self.clean_prob:.3f}, corrupted {self.corrupted_prob:.3f}"
            ),
            fontsize=11,
        )
        fig.tight_layout()
        if path is not None:
            save_figure(fig, path)
        return fig


@torch.no_grad()
def embedding_std(lm: LensModel, max_tokens: int = 8192) -> float:
    """Standard deviation of the token embeddings (as they enter the residual stream).

    Meng et al. use 3× the std of subject embeddings over a corpus; here the std is over an
    evenly spaced subset of the vocabulary, taken after the model's own embedding scaling (Gemma
    multiplies by sqrt(d_model)), so the noise is on the scale the blocks see.
    """
    vocab = lm.cfg.d_vocab
    step = max(1, vocab // max_tokens)
    ids = torch.arange(0, vocab, step, device=lm.device)
    return float(lm.model.embed(ids[None]).float().std())


def _validate_subject(lm: LensModel, prompt: str, subject: str) -> tuple[int, ...]:
    positions = tuple(lm.find_subject(prompt, subject))
    # The sink at position 0 must never be noised: corrupting the attention sink breaks every
    # head and the trace then measures that, not the fact.
    if 0 in positions:
        raise ValueError(
            f"subject {subject!r} covers position 0 (the attention sink) of {prompt!r}; "
            "causal tracing must not noise the sink"
        )
    return positions


@config
class TraceConfig(Config):
    """Parameters of a causal trace (ROME's defaults)."""

    target: str | None = field(default=None, metadata={"help": "answer token (default: clean top-1)"})
    noise: float = field(default=3.0, metadata={"help": "noise std as a multiple of embedding_std"})
    noise_scale: float | None = field(default=None, metadata={"help": "absolute noise std (overrides --noise)"})
    n_samples: int = field(default=10, metadata={"help": "noise samples, averaged", "ge": 1})
    window: int = field(
        default=10, metadata={"help": "layers restored together for mlp and attn", "ge": 1}
    )
    seed: int = field(default=0, metadata={"help": "seed of the noise"})
    kinds: tuple[str, ...] = field(
        default=TRACE_KINDS,
        metadata={"help": "what to restore", "choices": TRACE_KINDS, "min_length": 1},
    )
    sweep: SweepConfig = field(default_factory=SweepConfig, metadata={"cli": False})


def causal_trace(lm: LensModel, prompt: str, subject: str, config: TraceConfig | None = None) -> CausalTrace:
    """Causal trace of ``prompt``'s prediction of the target through ``subject``'s tokens.

    Reads the model only (no weight changes; every hook is removed on return or error).

    Args:
        lm: the model.
        prompt: the fact's prompt, e.g. "The Eiffel Tower is located in the city of".
        subject: the subject as it appears in the prompt ("Eiffel Tower"); its tokens, leading
            space included, are found with ``lm.find_subject``.
        config: target, noise (3 × :func:`embedding_std` in ROME), samples, window (10 in ROME,
            centred on the layer), seed, kinds (:class:`TraceConfig`).

    Returns:
        A :class:`CausalTrace`; ``values[k, l, p]`` is p(target) with state (k, l, p) restored.

    Raises:
        ValueError: subject not in the prompt, target not one token, unknown kind, bad window.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> trace = causal_trace(lm, "The Eiffel Tower is in", "Eiffel Tower", TraceConfig(n_samples=2, window=1))
    >>> trace.values.shape, trace.subject_positions
    (torch.Size([3, 2, 7]), (2, 3, 4))
    """
    cfg = config or TraceConfig()
    subject_positions = _validate_subject(lm, prompt, subject)
    target_id = lm.token_id(cfg.target) if cfg.target is not None else None
    tokens = lm.to_tokens(prompt)
    hooks = sorted({h for kind in cfg.kinds for layer in range(lm.cfg.n_layers)
                    for h in _restored_hooks(kind, layer, cfg.window, lm.cfg.n_layers)})
    with torch.no_grad(), lm.hooks.capture([*hooks, hook_name("embed")]) as clean:
        clean_logits = lm(tokens)[:, -1]
    target_id = int(clean_logits[0].argmax()) if target_id is None else target_id
    scale = float(cfg.noise_scale) if cfg.noise_scale is not None else cfg.noise * embedding_std(lm)
    # Drawn on the CPU so that a seed gives the same noise on every device.
    eps = torch.randn(cfg.n_samples, len(subject_positions), lm.cfg.d_model,
                      generator=torch.Generator().manual_seed(cfg.seed)) * scale
    base = BaseRun.record(lm, tokens.expand(cfg.n_samples, -1), capture=hooks,
                          interventions=[_noise(clean[hook_name("embed")], subject_positions, eps)])
    values, work = _restorations(lm, base, clean, subject_positions[0], target_id, cfg)
    return CausalTrace(
        values=values,
        axes=("kind", "layer", "position"),
        labels=(cfg.kinds, tuple(str(i) for i in range(lm.cfg.n_layers)), tuple(lm.to_str_tokens(prompt))),
        meta=lm.meta([prompt], seed=cfg.seed, data_source="user prompt", params={
            **cfg.params(), "subject": subject, "noise_scale": scale,
            "method": "Meng et al. 2022 causal tracing, Gaussian noise on subject embeddings"}),
        clean_prob=float(clean_logits[0].float().softmax(-1)[target_id]),
        corrupted_prob=float(base.logits.float().softmax(-1)[:, target_id].mean()),
        subject_positions=subject_positions,
        target=lm.tokenizer.decode([target_id]) if lm.tokenizer is not None else str(target_id),
        target_id=target_id,
        noise_scale=scale,
        window=cfg.window,
        kinds=cfg.kinds,
        noise=eps,
        work=work,
    )


def _noise(clean_embed: Tensor, subject: Sequence[int], eps: Tensor) -> Intervention:
    """The corruption: the clean embeddings with ``eps`` added over the subject, per sample."""
    source = clean_embed.expand(eps.shape[0], -1, -1).clone()
    source[:, list(subject)] += eps.to(source)
    mask = torch.zeros(1, source.shape[1], 1, dtype=torch.bool, device=source.device)
    mask[:, list(subject)] = True
    return Intervention(hook_name("embed"), source, mask)


def _restored_hooks(kind: str, layer: int, window: int, n_layers: int) -> list[str]:
    """The hooks restored for one cell: the stream leaving ``layer``, or a window of outputs."""
    if kind == "resid":
        # resid_post of layer l is resid_pre of layer l + 1: rows then start one block later.
        return [hook_name("resid_pre", layer + 1) if layer + 1 < n_layers else hook_name("resid_post", layer)]
    return [hook_name(_KIND_SITE[kind], inner) for inner in _window(layer, window, n_layers)]


@torch.no_grad()
def _restorations(lm: LensModel, base: BaseRun, clean: Capture, first: int, target_id: int,
                  cfg: TraceConfig) -> tuple[Float[Tensor, "kind layer position"], SweepStats]:
    """p(target) with each (kind, layer, position) restored: the planner's rows, run by the engine.

    Positions before the subject never see the noise (causal attention), so restoring them is a
    no-op: they keep the corrupted probability and get no row.
    """
    n_layers, n_pos = lm.cfg.n_layers, base.n_pos
    rows, cells = [], []
    for k, kind in enumerate(cfg.kinds):
        for layer in range(n_layers):
            for pos in range(first, n_pos):
                mask = torch.zeros(1, n_pos, 1, dtype=torch.bool, device=lm.device)
                mask[:, pos] = True
                hooks = _restored_hooks(kind, layer, cfg.window, n_layers)
                rows.append(Row(tuple(Intervention(h, clean[h], mask) for h in hooks)))
                cells.append((k, layer, pos))
    probs = run_rows(lm, base, rows, lambda logits: logits.float().softmax(-1)[..., target_id], cfg.sweep)
    corrupted = float(base.logits.float().softmax(-1)[:, target_id].mean())
    values = torch.full((len(cfg.kinds), n_layers, n_pos), corrupted)
    index = torch.tensor(cells).T
    values[index[0], index[1], index[2]] = probs.values.mean(-1).cpu()
    return values, probs.stats


def _window(layer: int, window: int, n_layers: int) -> range:
    """Layers restored together around ``layer`` (ROME: ``[l - w//2, l + ceil(w/2))``, clipped)."""
    return range(max(0, layer - window // 2), min(n_layers, layer - (-window // 2)))


def naive_causal_trace(
    lm: LensModel, trace: CausalTrace, layers: Sequence[int] | None = None
) -> Float[Tensor, "kind layer position"]:
    """Reference implementation: one full forward pass (all noise samples) per restoration.

    Uses the trace's own noise, so it must reproduce ``trace.values``; it is the slow baseline
    that tests and ``benchmarks/patching.py`` compare the engine with, never for analysis.
    """
    tokens = lm.to_tokens(trace.meta.prompts[0])
    n_layers, n_pos = lm.cfg.n_layers, tokens.shape[1]
    layer_list = list(range(n_layers)) if layers is None else list(layers)
    hooks = sorted({h for kind in trace.kinds for layer in layer_list
                    for h in _restored_hooks(kind, layer, trace.window, n_layers)})
    out = torch.empty(len(trace.kinds), len(layer_list), n_pos)
    with torch.no_grad():
        with lm.hooks.capture([*hooks, hook_name("embed")]) as clean:
            lm(tokens)
        noise = _noise(clean[hook_name("embed")], trace.subject_positions, trace.noise)
        batch = tokens.expand(trace.noise.shape[0], n_pos)
        with lm.hooks.patch(noise.hook, noise.source, positions=list(trace.subject_positions)):
            for (k, kind), (li, layer), pos in itertools.product(
                    enumerate(trace.kinds), enumerate(layer_list), range(n_pos)):
                with ExitStack() as stack:
                    for name in _restored_hooks(kind, layer, trace.window, n_layers):
                        stack.enter_context(lm.hooks.patch(name, clean[name], positions=[pos]))
                    logits = lm(batch)[:, -1]
                out[k, li, pos] = logits.float().softmax(-1)[:, trace.target_id].mean()
    return out

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

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float, Int
from torch import Tensor

from lmsci_mi.circuits._batching import chunks, default_chunk_rows, run_from_layer
from lmsci_mi.results import Result, result_type

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from transformer_lens.hook_points import HookPoint

    from lmsci_mi.model import LensModel

__all__ = ["TRACE_KINDS", "CausalTrace", "causal_trace", "embedding_std"]

logger = logging.getLogger(__name__)

TRACE_KINDS = ("resid", "mlp", "attn")
"""What a trace can restore: the residual stream after a layer, or an MLP / attention output."""

_KIND_HOOK = {
    "resid": "blocks.{}.hook_resid_post",
    "mlp": "blocks.{}.hook_mlp_out",
    "attn": "blocks.{}.hook_attn_out",
}
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
        import matplotlib.pyplot as plt

        from lmsci_mi.viz.plots import heatmap, save_figure

        tokens = [
            f"{tok!r}*" if i in self.subject_positions else repr(tok)
            for i, tok in enumerate(self.axis_labels(2))
        ]
        layers = self.axis_labels(1)
        n = len(self.kinds)
        fig, grid = plt.subplots(1, n, figsize=(5.2 * n, 0.32 * len(tokens) + 2.2), squeeze=False)
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


def causal_trace(
    lm: LensModel,
    prompt: str,
    subject: str,
    *,
    target: str | None = None,
    noise: float = 3.0,
    n_samples: int = 10,
    window: int = 10,
    seed: int = 0,
    kinds: Sequence[str] = TRACE_KINDS,
    noise_scale: float | None = None,
    chunk_size: int | None = None,
) -> CausalTrace:
    """Causal trace of ``prompt``'s prediction of ``target`` through ``subject``'s tokens.

    Reads the model only (no weight changes; every hook is removed on return or error).

    Args:
        lm: the model.
        prompt: the fact's prompt, e.g. "The Eiffel Tower is located in the city of".
        subject: the subject as it appears in the prompt ("Eiffel Tower"); its tokens, leading
            space included, are found with ``lm.find_subject``.
        target: the answer token (one token, e.g. " Paris"); default the clean top-1 token.
        noise: noise standard deviation as a multiple of :func:`embedding_std` (3 in ROME).
        n_samples: number of noise samples (seeded), averaged.
        window: layers restored together for "mlp" and "attn" (ROME: 10), centred on the layer.
        seed: seed of the noise.
        kinds: which of ``("resid", "mlp", "attn")`` to trace.
        noise_scale: absolute noise std; overrides ``noise`` when given.
        chunk_size: rows (noise samples × positions) per forward pass; default keeps a chunk at
            about 4k tokens.

    Returns:
        A :class:`CausalTrace`; ``values[k, l, p]`` is p(target) with state (k, l, p) restored.

    Raises:
        ValueError: subject not in the prompt, target not one token, unknown kind, bad window.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> trace = causal_trace(lm, "The Eiffel Tower is in", "Eiffel Tower", n_samples=2, window=1)
    >>> trace.values.shape, trace.subject_positions
    (torch.Size([3, 2, 7]), (2, 3, 4))
    """
    kinds = tuple(kinds)
    unknown = [k for k in kinds if k not in TRACE_KINDS]
    if unknown or not kinds:
        raise ValueError(f"unknown trace kinds {unknown}; choose from {TRACE_KINDS}")
    if window < 1:
        raise ValueError(f"window must be at least 1 layer, not {window}")
    if n_samples < 1:
        raise ValueError(f"n_samples must be at least 1, not {n_samples}")
    subject_positions = _validate_subject(lm, prompt, subject)
    target_id = lm.token_id(target) if target is not None else None

    cfg = lm.cfg
    n_layers = cfg.n_layers
    tokens: Int[Tensor, "1 pos"] = lm.to_tokens(prompt)
    n_pos = tokens.shape[1]
    subj = list(subject_positions)

    with torch.no_grad():
        sites = [_KIND_HOOK[k].format(layer) for k in kinds for layer in range(n_layers)]
        with lm.hooks.capture(sites) as clean_cap:
            clean_logits = lm(tokens)[:, -1]
        if target_id is None:
            target_id = int(clean_logits[0].argmax())
        target_text = (
            lm.tokenizer.decode([target_id]) if lm.tokenizer is not None else str(target_id)
        )
        clean_prob = float(clean_logits[0].float().softmax(-1)[target_id])

        scale = float(noise_scale) if noise_scale is not None else noise * embedding_std(lm)
        generator = torch.Generator().manual_seed(seed)
        # Drawn on the CPU so that a seed gives the same noise on every device.
        eps = torch.randn(n_samples, len(subj), cfg.d_model, generator=generator) * scale
        eps_dev = eps.to(device=lm.device, dtype=lm.model.W_E.dtype)

        def add_noise(activation: Tensor, hook: HookPoint) -> Tensor:
            activation = activation.clone()
            activation[:, subj] += eps_dev
            return activation

        # The corrupted base run, shared by every restoration (same seed, same noise).
        resid_sites = [f"blocks.{layer}.hook_resid_pre" for layer in range(n_layers)]
        resid_sites.append(f"blocks.{n_layers - 1}.hook_resid_post")
        corrupted_tokens = tokens.expand(n_samples, n_pos)
        with (
            lm.hooks.hooks(fwd=[("hook_embed", add_noise)], label="causal trace noise"),
            lm.hooks.capture(resid_sites) as corr_cap,
        ):
            corrupted_logits = lm(corrupted_tokens)[:, -1]
        corrupted_prob = float(corrupted_logits.float().softmax(-1)[:, target_id].mean())

        def corrupted_resid_in(layer: int) -> Tensor:
            """Corrupted residual stream entering block ``layer`` (layer n_layers = final)."""
            if layer < n_layers:
                return corr_cap[f"blocks.{layer}.hook_resid_pre"]
            return corr_cap[f"blocks.{n_layers - 1}.hook_resid_post"]

        # Positions before the subject never see the noise (causal attention), so restoring them
        # is a no-op: their value is the corrupted probability and they need no forward pass.
        first = subj[0]
        n_restorable = n_pos - first
        rows_total = n_restorable * n_samples
        chunk_rows = chunk_size or default_chunk_rows(n_pos)
        values = torch.full((len(kinds), n_layers, n_pos), corrupted_prob)
        for k, kind in enumerate(kinds):
            for layer in range(n_layers):
                probs = torch.empty(rows_total)
                for rows in chunks(rows_total, chunk_rows):
                    # Row r restores position first + r // n_samples for sample r % n_samples.
                    row_ids = torch.arange(rows.start, rows.stop, device=lm.device)
                    positions = first + row_ids // n_samples
                    samples = row_ids % n_samples
                    logits = _restore_chunk(
                        lm,
                        kind,
                        layer,
                        window,
                        positions,
                        samples,
                        clean_cap,
                        corrupted_resid_in,
                    )
                    probs[rows] = logits.float().softmax(-1)[:, target_id].cpu()
                values[k, layer, first:] = probs.reshape(n_restorable, n_samples).mean(-1)
            logger.info("causal trace: %s done", kind)

    return CausalTrace(
        values=values,
        axes=("kind", "layer", "position"),
        labels=(kinds, tuple(str(i) for i in range(n_layers)), tuple(lm.to_str_tokens(prompt))),
        meta=lm.meta(
            [prompt],
            seed=seed,
            data_source="user prompt",
            params={
                "subject": subject,
                "noise_multiple": None if noise_scale is not None else float(noise),
                "noise_scale": scale,
                "n_samples": n_samples,
                "window": window,
                "method": "Meng et al. 2022 causal tracing, Gaussian noise on subject embeddings",
            },
        ),
        clean_prob=clean_prob,
        corrupted_prob=corrupted_prob,
        subject_positions=subject_positions,
        target=target_text,
        target_id=int(target_id),
        noise_scale=scale,
        window=window,
        kinds=kinds,
        noise=eps,
    )


def _window(layer: int, window: int, n_layers: int) -> range:
    """Layers restored together around ``layer`` (ROME: ``[l - w//2, l + ceil(w/2))``, clipped)."""
    return range(max(0, layer - window // 2), min(n_layers, layer - (-window // 2)))


def _restore_chunk(
    lm: LensModel,
    kind: str,
    layer: int,
    window: int,
    positions: Int[Tensor, " rows"],
    samples: Int[Tensor, " rows"],
    clean_cap: object,
    corrupted_resid_in: object,
) -> Float[Tensor, "rows vocab"]:
    """Logits of corrupted runs with ``kind`` restored at (layer, positions[r]) for each row r."""
    n_layers = lm.cfg.n_layers
    rows = torch.arange(positions.numel(), device=positions.device)
    if kind == "resid":
        # Restoring resid_post of `layer` means starting block layer+1 from the patched stream.
        clean = clean_cap[_KIND_HOOK["resid"].format(layer)][0]  # type: ignore[index]
        start = corrupted_resid_in(layer + 1)[samples].clone()  # type: ignore[operator]
        start[rows, positions] = clean[positions]
        return run_from_layer(lm, start, layer + 1, label="causal trace restore")
    restored = _window(layer, window, n_layers)
    hooks = []
    for inner in restored:
        name = _KIND_HOOK[kind].format(inner)
        clean = clean_cap[name][0]  # type: ignore[index]

        def restore(activation: Tensor, hook: HookPoint, clean: Tensor = clean) -> Tensor:
            activation = activation.clone()
            activation[rows, positions] = clean[positions]
            return activation

        hooks.append((name, restore))
    start = corrupted_resid_in(restored.start)[samples]  # type: ignore[operator]
    return run_from_layer(lm, start, restored.start, hooks, label="causal trace restore")


def _naive_causal_trace(
    lm: LensModel, trace: CausalTrace, layers: Sequence[int] | None = None
) -> Float[Tensor, "kind layer position"]:
    """Reference implementation: one full forward pass (all noise samples) per restoration.

    Uses the trace's own noise, so it must reproduce ``trace.values``; kept for tests and the
    benchmark, never for analysis.
    """
    prompt = trace.meta.prompts[0]
    tokens = lm.to_tokens(prompt)
    n_layers, n_pos = lm.cfg.n_layers, tokens.shape[1]
    subj = list(trace.subject_positions)
    eps = trace.noise.to(device=lm.device, dtype=lm.model.W_E.dtype)
    batch = tokens.expand(eps.shape[0], n_pos)

    def add_noise(activation: Tensor, hook: HookPoint) -> Tensor:
        activation = activation.clone()
        activation[:, subj] += eps
        return activation

    layer_list = list(range(n_layers)) if layers is None else list(layers)
    out = torch.empty(len(trace.kinds), len(layer_list), n_pos)
    with torch.no_grad():
        sites = [_KIND_HOOK[k].format(layer) for k in trace.kinds for layer in range(n_layers)]
        with lm.hooks.capture(sites) as clean_cap:
            lm(tokens)
        for k, kind in enumerate(trace.kinds):
            for li, layer in enumerate(layer_list):
                restored = (
                    [layer] if kind == "resid" else list(_window(layer, trace.window, n_layers))
                )
                for pos in range(n_pos):
                    fwd = [("hook_embed", add_noise)]
                    for inner in restored:
                        name = _KIND_HOOK[kind].format(inner)
                        source = clean_cap[name]

                        def put(
                            activation: Tensor,
                            hook: HookPoint,
                            source: Tensor = source,
                            pos: int = pos,
                        ) -> Tensor:
                            activation = activation.clone()
                            activation[:, pos] = source[0, pos]
                            return activation

                        fwd.append((name, put))
                    with lm.hooks.hooks(fwd=fwd, label="naive trace"):
                        logits = lm(batch)[:, -1]
                    out[k, li, pos] = logits.float().softmax(-1)[:, trace.target_id].mean()
    return out

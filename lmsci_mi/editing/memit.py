"""MEMIT: many fact edits at once, spread over a range of MLP layers (Meng et al. 2023,
"Mass-Editing Memory in a Transformer").

For each request a residual change δ at the last layer of the range is optimised (as ROME's v*);
then, layer by layer, the remaining residual is split evenly over the layers left and installed by
a least-squares update ΔW = (λC + KKᵀ)⁻¹ K Rᵀ, solved in float64. Changes the weights in place.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from lmsci_mi.editing.handle import EditHandle
from lmsci_mi.editing.requests import EditRequest
from lmsci_mi.editing.rome import (
    ROMEHyperParams,
    _check_requests,
    _keys,
    _optimise_deltas,
    _pad,
    _subject_row,
    _target_ids,
    context_templates,
    validate_layer,
)
from lmsci_mi.editing.stats import DEFAULT_STATS_TOKENS, KeyStatistics, StatsConfig, key_statistics
from lmsci_mi.model import LensModel

__all__ = ["MEMITHyperParams", "default_memit_layers", "memit_edit"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MEMITHyperParams:
    """MEMIT's settings (after the paper's GPT-J config; λ and the clamp checked on SmolLM2).

    Attributes:
        n_contexts: generated prefixes (MEMIT uses 5 of 10 tokens, plus the bare prompt).
        context_lengths: their token lengths.
        steps, lr, early_stop_nll, kl_factor, weight_decay: as in :class:`ROMEHyperParams`.
        clamp_norm: ‖δ‖ ≤ clamp_norm·‖h‖ (h = the residual at the last layer).
        mom2_weight: λ in λC + KKᵀ: how strongly the keys of ordinary text are preserved (the
            paper's 15000 left 20% of 10 SmolLM2 edits uninstalled; 5000 installs them all with
            NS 92%, see docs/editing.md).
        seed: seed for the prefixes.
        batch_size: requests whose targets are optimised together in one forward per step.
    """

    n_contexts: int = 5
    context_lengths: tuple[int, ...] = (10,)
    steps: int = 20
    lr: float = 0.5
    early_stop_nll: float = 0.05
    kl_factor: float = 0.0625
    weight_decay: float = 0.5
    clamp_norm: float = 0.75
    mom2_weight: float = 5000.0
    seed: int = 0
    batch_size: int = 8

    def as_rome(self) -> ROMEHyperParams:
        return ROMEHyperParams(
            n_contexts=self.n_contexts,
            context_lengths=self.context_lengths,
            steps=self.steps,
            lr=self.lr,
            early_stop_nll=self.early_stop_nll,
            kl_factor=self.kl_factor,
            weight_decay=self.weight_decay,
            clamp_norm=self.clamp_norm,
            seed=self.seed,
        )


def default_memit_layers(lm: LensModel) -> tuple[int, ...]:
    """Five consecutive layers ending just after the ROME default: 2…6 on SmolLM2's 30."""
    from lmsci_mi.editing.rome import default_rome_layer

    top = min(lm.cfg.n_layers - 1, default_rome_layer(lm) + 2)
    return tuple(range(max(0, top - 4), top + 1))


def memit_edit(
    lm: LensModel,
    requests: Sequence[EditRequest],
    *,
    layers: Sequence[int] | None = None,
    stats: KeyStatistics | None = None,
    stats_tokens: int = DEFAULT_STATS_TOKENS,
    hparams: MEMITHyperParams | None = None,
) -> EditHandle:
    """Install many facts at once with MEMIT. **Changes ``lm``'s weights in place** (one
    ``W_out`` per layer of the range).

    All requests and layers are validated before any weight changes.

    Args:
        lm: the model.
        requests: the facts (distinct subjects work best, as in the paper).
        layers: the MLP layers to spread the edit over (default :func:`default_memit_layers`).
        stats: key statistics covering ``layers`` (default: computed or read from the cache).
        stats_tokens: text tokens for the statistics when they must be computed.
        hparams: :class:`MEMITHyperParams`.

    Returns:
        An :class:`EditHandle` holding one delta per layer; ``restore()`` undoes all of them.

    >>> import tempfile
    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> stats = key_statistics(lm, [0, 1], StatsConfig(n_tokens=512), cache_dir=tempfile.mkdtemp())
    >>> reqs = [EditRequest("{} is in", s, t) for s, t in [("Paris", " Rome"), ("Berlin", " Oslo")]]
    >>> with memit_edit(lm, reqs, layers=[0, 1], stats=stats, hparams=MEMITHyperParams(steps=2)) as h:
    ...     h.layers
    (0, 1)
    """
    hp = hparams or MEMITHyperParams()
    requests = list(requests)
    _check_requests(lm, requests)
    layers = sorted(set(layers if layers is not None else default_memit_layers(lm)))
    if not layers:
        raise ValueError("no layers given")
    for layer in layers:
        validate_layer(lm, layer)
    if stats is not None and any(layer not in stats.layers for layer in layers):
        raise ValueError(f"the statistics given cover layers {stats.layers}, not all of {layers}")

    begin = time.perf_counter()
    if stats is None:
        stats = key_statistics(lm, layers, StatsConfig(n_tokens=stats_tokens))
    rome_hp = hp.as_rome()
    templates = context_templates(lm, hp.n_contexts, hp.context_lengths, seed=hp.seed)
    top = layers[-1]

    # Target residuals z_i = h_i + δ_i at the top layer, one optimisation per request.
    deltas = []
    chunks = range(0, len(requests), hp.batch_size)
    for start in tqdm(chunks, desc="MEMIT targets", unit="batch", disable=len(chunks) < 2):
        chunk = requests[start : start + hp.batch_size]
        delta, _ = _optimise_deltas(lm, top, chunk, templates, rome_hp, site="hook_resid_post")
        deltas.extend(delta)
    plain = [
        _subject_row(lm, "{}", r.prompt, r.subject, _target_ids(lm, r.target_new)) for r in requests
    ]
    z = _top_resid(lm, top, plain) + torch.stack(deltas)

    context_rows = [
        _subject_row(lm, t, r.prompt, r.subject, []) for r in requests for t in templates
    ]
    handles: list[EditHandle] = []
    try:
        for i, layer in enumerate(layers):
            # Keys and the remaining residual are re-read after each layer's update, so later
            # layers install what the earlier ones did not.
            keys = _keys(lm, layer, context_rows).view(len(requests), len(templates), -1)
            keys = keys.mean(1).double()  # k̄ per request: [n, d_mlp]
            remaining = (z - _top_resid(lm, top, plain)).double() / (
                len(layers) - i
            )  # [n, d_model]
            c = stats.for_layer(layer).double().to(keys.device)
            lhs = hp.mom2_weight * c + keys.T @ keys
            update = torch.linalg.solve(lhs, keys.T @ remaining)  # [d_mlp, d_model]
            weight = lm.model.blocks[layer].mlp.W_out
            name = f"blocks.{layer}.mlp.W_out"
            handles.append(EditHandle(lm, {name: update.to(weight.dtype)}, method="memit").apply())
            logger.info("MEMIT layer %d: ‖ΔW‖ %.3f", layer, update.norm().item())
    except BaseException:
        for handle in reversed(handles):
            handle.restore()
        raise

    # One handle for the whole edit: the originals are the weights before the first layer's update.
    combined = EditHandle.combine(
        handles, method="memit", requests=requests, seconds=time.perf_counter() - begin
    )
    return combined


@torch.no_grad()
def _top_resid(lm: LensModel, layer: int, rows: Sequence) -> torch.Tensor:
    tokens = _pad(rows, lm.device)
    site = f"blocks.{layer}.hook_resid_post"
    with lm.hooks.capture(site) as cap:
        lm.model(tokens, stop_at_layer=layer + 1)
    index = torch.tensor([r.subject_last for r in rows], device=lm.device)
    return cap[site][torch.arange(len(rows), device=lm.device), index].float()

"""Key second-moment statistics C = E[k kᵀ] at MLP key sites, as ROME and MEMIT use them.

The keys of an MLP's output projection are its hidden activations (`blocks.L.mlp.hook_post`,
act(gate)·up for gated MLPs), and the edit's update is whitened by C⁻¹ (Meng et al. 2022, eq. 2).
C is uncentred and taken over every token but the attention sink of an offline text source
(`lmsci_mi.data.text_corpus`); all requested layers are filled in one pass and cached on disk.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from jaxtyping import Float
from torch import Tensor
from tqdm.auto import tqdm

from lmsci_mi.data.text_corpus import STDLIB_TEXT_SOURCE, text_chunks
from lmsci_mi.loading import cache_root
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result, result_type

__all__ = ["DEFAULT_STATS_TOKENS", "KeyStatistics", "key_statistics", "stats_dir"]

logger = logging.getLogger(__name__)

DEFAULT_STATS_TOKENS = 50_000
"""Text tokens per layer by default: a few minutes on two CPU cores for early layers of SmolLM2.

ROME used ~44 M Wikipedia tokens; the eval in docs/editing.md shows 50 k already makes the
whitened update specific on SmolLM2 (d_mlp 1536: 33 tokens per dimension, plus a small ridge).
"""


@result_type
class KeyStatistics(Result):
    """Uncentred second moments of MLP keys: ``values`` is ``[layer, d_mlp, d_mlp]`` (float64).

    Attributes:
        layers: the layer of each slice of ``values``.
        n_tokens: tokens averaged over (the sink position is never counted).
        source: name of the text source.
        seconds: time the statistics took to compute (0 for a slice read from the cache).
    """

    layers: tuple[int, ...]
    n_tokens: int
    source: str
    seconds: float

    def for_layer(self, layer: int) -> Float[Tensor, "d_mlp d_mlp"]:
        """C of one layer."""
        if layer not in self.layers:
            raise ValueError(f"no statistics for layer {layer}; have {self.layers}")
        return self.values[self.layers.index(layer)]


def stats_dir(lm: LensModel, cache_dir: str | Path | None = None) -> Path:
    """Folder of a model's cached statistics: ``cache_root()/stats/<model>`` by default."""
    base = Path(cache_dir) if cache_dir is not None else cache_root() / "stats"
    return base / lm.name.replace("/", "_")


def _cache_path(folder: Path, layer: int, n_tokens: int, seq_len: int) -> Path:
    return folder / f"mom2-layer{layer:02d}-seq{seq_len}-{n_tokens}tok.json"


def _cached(folder: Path, layer: int, n_tokens: int, seq_len: int) -> Path | None:
    """The cached file for ``layer`` with the fewest tokens ≥ ``n_tokens`` (more is as good)."""
    best: tuple[int, Path] | None = None
    for path in folder.glob(f"mom2-layer{layer:02d}-seq{seq_len}-*tok.json"):
        count = int(path.stem.rsplit("-", 1)[1].removesuffix("tok"))
        if count >= n_tokens and (best is None or count < best[0]):
            best = (count, path)
    return None if best is None else best[1]


@torch.no_grad()
def key_statistics(
    lm: LensModel,
    layers: int | Sequence[int],
    *,
    n_tokens: int = DEFAULT_STATS_TOKENS,
    seq_len: int = 128,
    batch_size: int = 8,
    cache_dir: str | Path | None = None,
    use_cache: bool = True,
) -> KeyStatistics:
    """C = E[k kᵀ] over text tokens at ``blocks.L.mlp.hook_post`` for each layer L. Reads the model only.

    Layers found in the cache (with at least ``n_tokens`` tokens) are loaded; the others are
    computed together in one pass over the text, which stops at the deepest missing layer.

    Args:
        lm: the model.
        layers: one layer or several.
        n_tokens: text tokens to average over (the sink at the start of each row is excluded).
        seq_len: tokens per row, sink included.
        batch_size: rows per forward pass.
        cache_dir: where to cache (default ``cache_root()/"stats"``); files are per model and layer.
        use_cache: False recomputes and overwrites.

    Returns:
        :class:`KeyStatistics` with ``values[i]`` the C of ``layers[i]``, float64 on the model's
        device, and the text source and token count in its fields and ``meta``.

    >>> import tempfile
    >>> from lmsci_mi import load_model
    >>> stats = key_statistics(load_model("toy-2l"), [0, 1], n_tokens=254, cache_dir=tempfile.mkdtemp())
    >>> tuple(stats.values.shape), stats.n_tokens
    ((2, 256, 256), 254)
    """
    wanted = [layers] if isinstance(layers, int) else list(dict.fromkeys(layers))
    n_layers = lm.cfg.n_layers
    for layer in wanted:
        if not 0 <= layer < n_layers:
            raise ValueError(f"layer {layer} is out of range for {lm.name} (0…{n_layers - 1})")
    folder = stats_dir(lm, cache_dir)
    found: dict[int, KeyStatistics] = {}
    if use_cache:
        for layer in wanted:
            path = _cached(folder, layer, n_tokens, seq_len)
            if path is not None:
                found[layer] = KeyStatistics.load(path)
    missing = [layer for layer in wanted if layer not in found]
    seconds = 0.0
    if missing:
        start = time.perf_counter()
        computed, counted = _compute(lm, missing, n_tokens, seq_len, batch_size)
        seconds = time.perf_counter() - start
        logger.info(
            "key statistics for layers %s: %d tokens of %s in %.1f s",
            missing,
            counted,
            STDLIB_TEXT_SOURCE,
            seconds,
        )
        folder.mkdir(parents=True, exist_ok=True)
        for layer in missing:
            single = _statistics(lm, [layer], computed[layer][None], counted, seq_len, seconds)
            single.save(_cache_path(folder, layer, counted, seq_len))
            found[layer] = single
    values = torch.stack([found[layer].for_layer(layer).to(lm.device) for layer in wanted])
    count = min(found[layer].n_tokens for layer in wanted)
    return _statistics(lm, wanted, values, count, seq_len, seconds)


def _statistics(
    lm: LensModel,
    layers: Sequence[int],
    values: Tensor,
    n_tokens: int,
    seq_len: int,
    seconds: float,
) -> KeyStatistics:
    return KeyStatistics(
        values=values,
        axes=("layer", "key_i", "key_j"),
        labels=(tuple(str(layer) for layer in layers), (), ()),
        meta=lm.meta(
            data_source=STDLIB_TEXT_SOURCE,
            params={"n_tokens": n_tokens, "seq_len": seq_len, "site": "blocks.L.mlp.hook_post"},
        ),
        layers=tuple(layers),
        n_tokens=n_tokens,
        source=STDLIB_TEXT_SOURCE,
        seconds=seconds,
    )


def _compute(
    lm: LensModel, layers: Sequence[int], n_tokens: int, seq_len: int, batch_size: int
) -> tuple[dict[int, Tensor], int]:
    chunks = text_chunks(lm, n_tokens, seq_len)
    d_mlp = lm.cfg.d_mlp
    assert d_mlp is not None
    sums = {
        layer: torch.zeros(d_mlp, d_mlp, dtype=torch.float64, device=lm.device) for layer in layers
    }
    sites = [f"blocks.{layer}.mlp.hook_post" for layer in layers]

    def accumulate(activation: Tensor, hook: object) -> None:
        layer = int(getattr(hook, "name", "").split(".")[1])
        # Position 0 is the attention sink, whose activations are outliers by design; edits
        # never key on it, so it stays out of C.
        keys = activation[:, 1:].reshape(-1, activation.shape[-1]).float()
        # One batch's products in float32 (fast), the running sum in float64 (exact enough
        # over hundreds of thousands of tokens).
        sums[layer] += (keys.T @ keys).double()

    counted = 0
    stop = max(layers) + 1
    with lm.hooks.hooks(fwd=[(sites, accumulate)], label="key statistics"):
        for start in tqdm(range(0, len(chunks), batch_size), desc="key statistics", unit="batch"):
            batch = chunks[start : start + batch_size].to(lm.device)
            lm.model(batch, stop_at_layer=stop)
            counted += batch.shape[0] * (seq_len - 1)
    return {layer: total / counted for layer, total in sums.items()}, counted

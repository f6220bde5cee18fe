"""Key second-moment statistics C = E[k kᵀ] at MLP key sites, as ROME and MEMIT use them.

The keys of an MLP's output projection are its hidden activations (site ``mlp_post``,
act(gate)·up for gated MLPs), and the edit's update is whitened by C⁻¹ (Meng et al. 2022, eq. 2).
C is uncentred and taken over every token but the attention sink (or the positions an
:class:`~lmsci_mi.positions.Exclude` names) of a text source (by default the offline
`lmsci_mi.data.text_corpus`); all requested layers are filled in one pass and cached on disk under
a key made of the weights that produce the keys, the dtype, the text, its length and the exclusion.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float, Int
from torch import Tensor
from tqdm.auto import tqdm

from lmsci_mi.cache import WeightsHash, cache_key, cache_root
from lmsci_mi.config import Config, config
from lmsci_mi.data.text_corpus import STDLIB_TEXT_SOURCE, stdlib_documents, text_chunks
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.positions import Exclude, resolve_exclude
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import hook_name, layer_of, site, weight_name
from lmsci_mi.weights import WeightEdit

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "DEFAULT_STATS_TOKENS",
    "STDLIB_TEXT",
    "KeyStatistics",
    "StatsConfig",
    "TextSource",
    "check_statistics",
    "key_statistics",
    "stats_dir",
    "weight_fingerprints",
]

logger = logging.getLogger(__name__)

DEFAULT_STATS_TOKENS = 50_000
"""Text tokens per layer by default: a few minutes on two CPU cores for early layers of SmolLM2.

ROME used ~44 M Wikipedia tokens; the eval in docs/editing.md shows 50 k already makes the
whitened update specific on SmolLM2 (d_mlp 1536: 33 tokens per dimension, plus a small ridge).
"""


@config
class StatsConfig(Config):
    """How the key statistics are gathered.

    Attributes:
        n_tokens: text tokens to average over (the sink at the start of each row is excluded).
        seq_len: tokens per row, sink included.
        batch_size: rows per forward pass.
        exclude: the positions left out of C (None: the sink, whose activations are outliers
            by design and which edits never key on); each row contributes the tokens it keeps.
    """

    n_tokens: int = field(default=DEFAULT_STATS_TOKENS, metadata={"ge": 1})
    seq_len: int = field(default=128, metadata={"ge": 2})  # the sink and one token
    batch_size: int = field(default=8, metadata={"ge": 1})
    exclude: Exclude | None = field(default=None, metadata={"cli": False})


@dataclass(frozen=True)
class TextSource:
    """Documents to gather key statistics over, and the name they are cached under.

    Attributes:
        name: identifies the text in the cache key and in results; two sources with one name
            must hold the same text.
        documents: returns the documents, in a fixed order, each time it is called.
    """

    name: str
    documents: Callable[[], Iterable[str]]

    @classmethod
    def of(cls, text: TextSource | Iterable[str] | Callable[[], Iterable[str]] | None) -> TextSource:
        """A source from what a user gives: None (the stdlib text), a source, a callable returning
        documents (named by its module and qualified name) or the documents themselves (named by
        a hash of their content)."""
        if text is None:
            return STDLIB_TEXT
        if isinstance(text, TextSource):
            return text
        if callable(text):
            name = f"{getattr(text, '__module__', '')}.{getattr(text, '__qualname__', repr(text))}"
            return cls(name, text)
        documents = (text,) if isinstance(text, str) else tuple(text)
        if not documents or not all(isinstance(d, str) for d in documents):
            raise UserInputError("text must be documents (strings), a callable returning them, or a TextSource")
        digest = cache_key("\x00".join(documents), length=16, algorithm="sha256")
        return cls(f"text-{digest}", lambda: documents)


STDLIB_TEXT = TextSource(STDLIB_TEXT_SOURCE, stdlib_documents)
"""The default source: the Python standard library's docstrings and help topics (offline)."""


@result_type
class KeyStatistics(Result):
    """Uncentred second moments of MLP keys: ``values`` is ``[layer, d_mlp, d_mlp]`` (float64).

    Attributes:
        layers: the layer of each slice of ``values``.
        n_tokens: tokens averaged over (the sink position is never counted).
        source: name of the text source.
        seconds: time the statistics took to compute (0 for a slice read from the cache).
        fingerprints: per layer, the hash of the weights that produce its keys.
    """

    layers: tuple[int, ...]
    n_tokens: int
    source: str
    seconds: float
    fingerprints: tuple[str, ...]

    def for_layer(self, layer: int) -> Float[Tensor, "d_mlp d_mlp"]:
        """C of one layer."""
        if layer not in self.layers:
            raise UserInputError(f"no statistics for layer {layer}; have {self.layers}")
        return self.values[self.layers.index(layer)]

    def spectra(self) -> Float[Tensor, "layer d_mlp"]:
        """Each layer's eigenvalues of C, largest first: how many key directions carry the mass."""
        return torch.linalg.eigvalsh(self.values.double()).flip(-1).clamp_min(0.0)

    def summary(self, rows: int = 10) -> str:
        """Per layer (the first ``rows``): the trace of C and the share of it in the top 10
        eigenvalues; the tokens and the text source."""
        lines = [f"key statistics of {self.meta.model}: {self.n_tokens} tokens of {self.source}"]
        for layer, spectrum in list(zip(self.layers, self.spectra(), strict=True))[:rows]:
            total = float(spectrum.sum()) or 1.0
            lines.append(
                f"  layer {layer}: trace {total:.4g}, top 10 eigenvalues hold "
                f"{100 * float(spectrum[:10].sum()) / total:.0f}%"
            )
        return "\n".join(lines)

    def default_title(self, **options: object) -> str:
        return f"Key statistics: eigenvalues of C — {self.meta.model}"

    def _draw(self, title: str) -> Figure:
        """Each layer's eigenvalue spectrum of C on a log scale (a ``d_mlp × d_mlp`` heatmap
        shows only its diagonal)."""
        from lmsci_mi.viz.plots import plot_curves

        spectra = self.spectra().float()
        fig = plot_curves(
            spectra.clamp_min(float(spectra[spectra > 0].min()) if (spectra > 0).any() else 1e-12),
            series=[f"layer {layer}" for layer in self.layers],
            x_label="eigenvalue rank",
            title=title,
        )
        ax = fig.axes[0]
        ax.set_yscale("log")
        ax.set_ylabel("eigenvalue of C = E[k kᵀ]")
        for line in ax.lines:
            line.set_marker("")
        return fig


def stats_dir(lm: LensModel, cache_dir: str | Path | None = None) -> Path:
    """Folder of a model's cached statistics: ``cache_root()/stats/<model>`` by default.

    The folder only groups files for people; what a file holds is decided by its cache key.
    """
    base = Path(cache_dir) if cache_dir is not None else cache_root() / "stats"
    return base / lm.name.replace("/", "_")


@torch.no_grad()
def weight_fingerprints(lm: LensModel, layers: Sequence[int]) -> dict[int, str]:
    """Per layer, a hash of the bytes of every parameter that the layer's MLP keys depend on.

    That is the embeddings, every block below the layer, and the layer's block except the MLP's
    output projection (``W_out``, ``b_out``), which acts after the keys. Two models with equal
    fingerprints produce equal keys, whatever they are called.
    """
    params = dict(lm.model.named_parameters())
    running = WeightsHash(size=16)
    for name in params:
        if layer_of(name) is None and not name.startswith(("unembed", "ln_final")):
            running.update(name, params[name])
    out: dict[int, str] = {}
    for layer in range(max(layers) + 1):
        block = [name for name in params if layer_of(name) == layer]
        after_keys = {weight_name("W_out", layer), weight_name("b_out", layer)}
        if layer in layers:
            keys_side = running.copy()
            for name in block:
                if name not in after_keys:
                    keys_side.update(name, params[name])
            out[layer] = keys_side.hexdigest()
        for name in block:
            running.update(name, params[name])
    return out


def _cache_key(
    fingerprint: str, lm: LensModel, source: TextSource, seq_len: int, exclude: Exclude | None = None
) -> str:
    # Kept in the form the cache was first written with, so existing statistics stay valid.
    text = f"{fingerprint}|{lm.cfg.dtype}|{source.name}|seq{seq_len}"
    if lm.sink_token_id is None:
        # A sink-free model's rows have no sink (text_chunks), so its statistics differ from
        # the same weights' with one; without this it read theirs from the cache.
        text += "|nosink"
    chosen = resolve_exclude(exclude)
    if not chosen.is_default:  # the default (the sink) keeps the key statistics were cached under
        text += f"|exclude{chosen.positions}{chosen.token_ids}{'' if chosen.sink else 'nosink'}"
    return cache_key(text, length=20, algorithm="sha256")


def _cached(folder: Path, layer: int, key: str, n_tokens: int) -> Path | None:
    """The cached file for ``layer`` and ``key`` with the fewest tokens ≥ ``n_tokens`` (the rows
    of a longer run start with the rows of a shorter one, so more is as good)."""
    best: tuple[int, Path] | None = None
    for path in folder.glob(f"mom2-layer{layer:02d}-{key}-*tok.json"):
        count = int(path.stem.rsplit("-", 1)[1].removesuffix("tok"))
        if count >= n_tokens and (best is None or count < best[0]):
            best = (count, path)
    return None if best is None else best[1]


def check_statistics(lm: LensModel, stats: KeyStatistics, layers: Sequence[int]) -> None:
    """Raise ValueError unless ``stats`` are ``lm``'s (by name and key width) and cover ``layers``.

    The weights are not compared: a sequential session edits with the statistics of the model
    before its first edit, on purpose.
    """
    if stats.meta.model != lm.name or stats.values.shape[-1] != lm.cfg.d_mlp:
        raise UserInputError(
            f"the statistics were computed on {stats.meta.model} (keys of width "
            f"{stats.values.shape[-1]}), not {lm.name} (width {lm.cfg.d_mlp}): compute them with "
            "key_statistics(lm, layers)"
        )
    missing = [layer for layer in layers if layer not in stats.layers]
    if missing:
        raise UserInputError(
            f"the statistics given cover layers {stats.layers}, not {missing}: compute them with "
            f"key_statistics(lm, {sorted(set(layers))})"
        )


def key_statistics(
    lm: LensModel,
    layers: int | Sequence[int],
    config: StatsConfig | None = None,
    *,
    text: TextSource | Iterable[str] | Callable[[], Iterable[str]] | None = None,
    cache_dir: str | Path | None = None,
    use_cache: bool = True,
) -> KeyStatistics:
    """C = E[k kᵀ] over text tokens at the ``mlp_post`` site of each layer. Reads the model only.

    Layers found in the cache are loaded. A cache entry is keyed by a fingerprint of the weights
    that produce the layer's keys (:func:`weight_fingerprints`), the dtype, the text source's
    name, the row length and the token count, so a renamed, wrapped or edited model never reads
    another model's statistics. The missing layers are computed together in one pass over the
    text, which stops at the deepest missing layer.

    Args:
        lm: the model.
        layers: one layer or several.
        config: :class:`StatsConfig` (token count, row length, batch size).
        text: documents to average over (an iterable of strings, a callable returning them, or a
            :class:`TextSource`); default the offline stdlib text.
        cache_dir: where to cache (default ``cache_root()/"stats"``).
        use_cache: False recomputes and overwrites.

    Returns:
        :class:`KeyStatistics` with ``values[i]`` the C of ``layers[i]``, float64 on the model's
        device, and the text source and token count in its fields and ``meta``.

    Raises:
        ValueError: a layer out of range, or statistics to compute while an edit is applied to
            the model (they would describe the edited model; restore the edit first).

    >>> import tempfile
    >>> from lmsci_mi import load_model
    >>> cfg = StatsConfig(n_tokens=254)
    >>> stats = key_statistics(load_model("toy-2l"), [0, 1], cfg, cache_dir=tempfile.mkdtemp())
    >>> tuple(stats.values.shape), stats.n_tokens
    ((2, 256, 256), 254)
    """
    config = config or StatsConfig()
    wanted = _checked_layers(lm, layers)
    source = TextSource.of(text)
    fingerprints = weight_fingerprints(lm, wanted)
    folder = stats_dir(lm, cache_dir)
    keys = {
        layer: _cache_key(fingerprints[layer], lm, source, config.seq_len, config.exclude)
        for layer in wanted
    }
    found: dict[int, KeyStatistics] = {}
    if use_cache:
        for layer in wanted:
            path = _cached(folder, layer, keys[layer], config.n_tokens)
            if path is not None:
                found[layer] = KeyStatistics.load(path)
    missing = [layer for layer in wanted if layer not in found]
    seconds = 0.0
    if missing:
        computed, seconds = _compute(lm, missing, config, source)
        folder.mkdir(parents=True, exist_ok=True)
        for layer in missing:
            value = computed.values[missing.index(layer)][None]
            single = _statistics(lm, [layer], value, computed, (fingerprints[layer],), seconds)
            single.save(folder / f"mom2-layer{layer:02d}-{keys[layer]}-{single.n_tokens}tok.json")
            found[layer] = single
    values = torch.stack([found[layer].for_layer(layer).to(lm.device) for layer in wanted])
    least = min((found[layer] for layer in wanted), key=lambda s: s.n_tokens)
    prints = tuple(fingerprints[layer] for layer in wanted)
    return _statistics(lm, wanted, values, least, prints, seconds)


def _checked_layers(lm: LensModel, layers: int | Sequence[int]) -> list[int]:
    wanted = [layers] if isinstance(layers, int) else list(dict.fromkeys(layers))
    if not wanted:
        raise UserInputError("no layers given")
    n_layers = lm.cfg.n_layers
    for layer in wanted:
        if not isinstance(layer, int) or not 0 <= layer < n_layers:
            raise UserInputError(f"layer {layer} is out of range for {lm.name} (0…{n_layers - 1})")
    return wanted


@dataclass(frozen=True)
class _Moments:
    values: Tensor
    n_tokens: int
    source: str
    config: StatsConfig


def _statistics(
    lm: LensModel, layers: Sequence[int], values: Tensor, origin: _Moments | KeyStatistics,
    fingerprints: tuple[str, ...],
    seconds: float = 0.0,
) -> KeyStatistics:
    params = origin.config.params() if isinstance(origin, _Moments) else dict(origin.meta.params)
    params.update({"n_tokens": origin.n_tokens, "site": site("mlp_post").template})
    return KeyStatistics(
        values=values,
        axes=("layer", "key_i", "key_j"),
        labels=(tuple(str(layer) for layer in layers), (), ()),
        meta=lm.meta(data_source=origin.source, params=params),
        layers=tuple(layers),
        n_tokens=origin.n_tokens,
        source=origin.source,
        seconds=seconds,
        fingerprints=fingerprints,
    )


def _compute(
    lm: LensModel, layers: Sequence[int], config: StatsConfig, source: TextSource
) -> tuple[_Moments, float]:
    """One pass over the text that fills every missing layer."""
    if WeightEdit.applied_to(lm):
        raise UserInputError(
            f"refusing to compute key statistics while {len(WeightEdit.applied_to(lm))} edit(s) "
            f"are applied to {lm.name}: they would describe the edited model. Restore the "
            "edits first (handle.restore()), or pass statistics computed before editing (stats=...)"
        )
    start = time.perf_counter()
    rows = _token_rows(lm, source, config.n_tokens, config.seq_len)
    values, counted = _accumulate(lm, layers, rows, config.batch_size, config.exclude)
    seconds = time.perf_counter() - start
    logger.info("key statistics for layers %s: %d tokens of %s in %.1f s", layers, counted,
                source.name, seconds)
    return _Moments(values, counted, source.name, config), seconds


def _token_rows(
    lm: LensModel, source: TextSource, n_tokens: int, seq_len: int
) -> Int[Tensor, "row seq_len"]:
    """The source's documents tokenised, joined by the end-of-text token and cut into rows of
    ``seq_len - 1`` tokens, each behind the attention sink (as every lmsci-mi prompt is)."""
    if lm.tokenizer is None:
        raise UserInputError(f"{lm.name} has no tokenizer: key statistics need text")
    return text_chunks(lm, n_tokens, seq_len, documents=source.documents(), name=f"the text {source.name!r}")


@torch.no_grad()
def _accumulate(
    lm: LensModel, layers: Sequence[int], rows: Tensor, batch_size: int,
    exclude: Exclude | None = None,
) -> tuple[Tensor, int]:
    d_mlp = lm.cfg.d_mlp
    assert d_mlp is not None
    sums = torch.zeros(len(layers), d_mlp, d_mlp, dtype=torch.float64, device=lm.device)
    slot = {layer: i for i, layer in enumerate(layers)}
    chosen = resolve_exclude(exclude)
    kept: list[Tensor] = []  # the keep-mask of the batch running now

    def accumulate(activation: Tensor, hook: object) -> None:
        layer = layer_of(str(getattr(hook, "name", "")))
        assert layer is not None
        # The sink's activations are outliers by design and edits never key on it, so it stays
        # out of C (as do the other excluded positions); row-major, as the keys were summed.
        keys = activation[kept[-1]].float()
        # One batch's products in float32 (fast), the running sum in float64 (exact enough
        # over hundreds of thousands of tokens).
        sums[slot[layer]] += (keys.T @ keys).double()

    sites = [hook_name("mlp_post", layer) for layer in layers]
    counted = 0
    with lm.hooks.hooks(fwd=[(sites, accumulate)], label="key statistics"):
        for start in tqdm(range(0, len(rows), batch_size), desc="key statistics", unit="batch"):
            batch = rows[start : start + batch_size].to(lm.device)
            kept.append(chosen.keep(batch))
            lm.model(batch, stop_at_layer=max(layers) + 1)
            counted += int(kept.pop().sum())
    return sums / counted, counted

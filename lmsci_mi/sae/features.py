"""The feature browser: for each SAE feature, its top-activating contexts, its density and the
tokens its decoder direction promotes through the unembedding; rendered offline with circuitsvis.

Activations are stored sparsely while the corpus is encoded (each token's nonzero features), so
every feature's contexts come from one pass. After Bricken et al. 2023 ("Towards
Monosemanticity") feature dashboards and Neuronpedia.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float
from torch import Tensor

from lmsci_mi import readout
from lmsci_mi.collect import CollectConfig, collect_activations
from lmsci_mi.config import Config, config
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result, result_type
from lmsci_mi.sae.core import LensSAE
from lmsci_mi.viz.tokens import colored_tokens_html, page_with_views

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["FeatureCards", "FeatureConfig", "feature_cards", "find_features", "promoted_tokens"]


@config
class FeatureConfig(Config):
    """How feature cards are built."""

    contexts: int = field(
        default=8, metadata={"help": "top-activating contexts per feature", "ge": 1}
    )
    before: int = field(
        default=12, metadata={"help": "tokens shown before the peak token", "ge": 0}
    )
    after: int = field(default=3, metadata={"help": "tokens shown after the peak token", "ge": 0})
    promoted: int = field(
        default=10, metadata={"help": "promoted tokens listed per feature", "ge": 1}
    )
    max_active: int = field(
        default=64, metadata={"help": "nonzero features kept per token (>= the SAE's L0)", "ge": 1}
    )
    autocast: str | None = field(
        default=None, metadata={"help": "autocast dtype of the harvest (None: float32)"}
    )
    progress: bool = field(default=True, metadata={"help": "show progress bars", "cli": False})


@result_type
class FeatureCards(Result):
    """Cards of SAE features. ``values`` ``[feature, context]`` is each top context's peak
    activation (axes ``("feature", "context")``, features labelled by index).

    Attributes:
        hook: the SAE's site.
        features: the feature indices, in row order.
        density: fraction of corpus tokens where each feature fires.
        scale: each feature's typical maximum activation (the steering unit).
        promoted: each feature's top promoted tokens (decoder direction through ``W_U``).
        promoted_logits: their logit contributions per unit of activation, ``[feature, promoted]``.
        context_tokens: ``[feature, context, window]`` indices into ``token_strings`` (−1: none).
        context_acts: the feature's activation at each window token, same shape.
        token_strings: the distinct token strings the contexts use.
        n_tokens: corpus tokens encoded.
    """

    hook: str
    features: tuple[int, ...]
    density: Tensor
    scale: Tensor
    promoted: tuple[tuple[str, ...], ...]
    promoted_logits: Tensor
    context_tokens: Tensor
    context_acts: Tensor
    token_strings: tuple[str, ...]
    n_tokens: int

    def row(self, feature: int) -> int:
        """The row of ``feature`` in this card set.

        Raises:
            ValueError: the feature has no card here.
        """
        if feature not in self.features:
            raise UserInputError(
                f"feature {feature} has no card here; cards cover {len(self.features)} features"
            )
        return self.features.index(feature)

    def select(self, features: Sequence[int]) -> FeatureCards:
        """The cards of ``features`` only (a small page out of a full card set)."""
        rows = torch.tensor([self.row(f) for f in features], dtype=torch.long)
        return replace(
            self,
            values=self.values[rows],
            labels=(tuple(str(f) for f in features), ()),
            features=tuple(features),
            density=self.density[rows],
            scale=self.scale[rows],
            promoted=tuple(self.promoted[int(r)] for r in rows),
            promoted_logits=self.promoted_logits[rows],
            context_tokens=self.context_tokens[rows],
            context_acts=self.context_acts[rows],
        )

    def contexts(self, feature: int) -> list[tuple[list[str], list[float]]]:
        """Feature ``feature``'s top contexts: (tokens, activations) per context, best first."""
        r = self.row(feature)
        out = []
        for c in range(self.context_tokens.shape[1]):
            ids = self.context_tokens[r, c]
            keep = ids >= 0
            if not keep.any():
                continue
            out.append(
                (
                    [self.token_strings[i] for i in ids[keep].tolist()],
                    self.context_acts[r, c][keep].tolist(),
                )
            )
        return out

    def context_texts(self, feature: int, mark: bool = True) -> list[str]:
        """Each top context as text, the peak token in [[brackets]] when ``mark``."""
        texts = []
        for tokens, acts in self.contexts(feature):
            peak = max(range(len(acts)), key=acts.__getitem__)
            texts.append(
                "".join(f"[[{t}]]" if mark and i == peak else t for i, t in enumerate(tokens))
            )
        return texts

    def describe(self, feature: int, contexts: int = 3) -> str:
        """A few plain-text lines about one feature."""
        r = self.row(feature)
        lines = [
            f"feature {feature}: density {float(self.density[r]):.2e}, typical max "
            f"{float(self.scale[r]):.2f}",
            "  promotes: " + " ".join(repr(t) for t in self.promoted[r][:10]),
        ]
        lines += [f"  {text!r}" for text in self.context_texts(feature)[:contexts]]
        return "\n".join(lines)

    def summary(self, rows: int = 10) -> str:
        """:meth:`describe` of the first ``rows`` features (three contexts each)."""
        head = f"{len(self.features)} feature cards of {self.meta.model} {self.hook}"
        return "\n".join([head, *(self.describe(f) for f in self.features[:rows])])

    def plot(self, path: str | Path | None = None, *, title: str | None = None) -> Figure:
        """A token view: the top contexts of the first six features, each token on a colour of
        the feature's activation, under a line with the feature's density and promoted tokens."""
        from lmsci_mi.viz.plots import plot_tokens, save_figure

        rows = []
        for feature in self.features[:6]:
            r = self.row(feature)
            promotes = " ".join(repr(t) for t in self.promoted[r][:6])
            caption = f"feature {feature} · density {float(self.density[r]):.1e} · promotes {promotes}"
            for c, (tokens, acts) in enumerate(self.contexts(feature)[:3]):
                rows.append((caption if c == 0 else "", tokens, acts))
        fig = plot_tokens(
            rows,
            value_label="feature activation",
            title=title or f"SAE feature cards — {self.meta.model} {self.hook}",
        )
        if path is not None:
            save_figure(fig, path)
        return fig

    def html(self) -> str:
        """Self-contained HTML: per feature, its numbers, promoted tokens, and its contexts with
        tokens coloured by activation (circuitsvis, script inlined once, never the CDN)."""
        views = []
        for feature in self.features:
            r = self.row(feature)
            head = (
                f"<h3>feature {feature}</h3><p>density {float(self.density[r]):.2e} · typical max "
                f"{float(self.scale[r]):.2f} · promotes: "
                + ", ".join(f"<code>{html.escape(t)}</code>" for t in self.promoted[r])
                + "</p>"
            )
            bodies = []
            for tokens, acts in self.contexts(feature):
                bodies.append(
                    colored_tokens_html(tokens, acts, max_value=float(self.scale[r]) or 1.0)
                )
            views.append((head, bodies))
        title = f"SAE features — {self.meta.model} {self.hook}"
        return page_with_views(title, views)

    def save_html(self, path: str | Path) -> Path:
        """Write :meth:`html` to ``path``."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.html(), encoding="utf-8")
        return path


@torch.no_grad()
def promoted_tokens(
    lm: LensModel, sae: LensSAE, features: Sequence[int], k: int = 10, chunk: int = 256
) -> tuple[list[list[int]], Float[Tensor, "feature k"]]:
    """The ``k`` tokens each feature's decoder direction raises most through ``W_U``.

    The direction is ``decode(e_i) − decode(0)`` (what steering adds), a residual-stream direction
    read out through the final norm's linear part (:func:`lmsci_mi.readout.vocab_projection`:
    centred for a LayerNorm, times the gain when it is not folded into ``W_U``), so the product
    is the direct logit effect up to the norm's divisor.
    """
    ids: list[list[int]] = []
    logits: list[Tensor] = []
    for start in range(0, len(features), chunk):
        part = list(features[start : start + chunk])
        basis = torch.zeros(len(part) + 1, sae.d_sae, device=sae.sae.device, dtype=sae.sae.dtype)
        basis[torch.arange(len(part)), torch.tensor(part)] = 1.0
        decoded = sae.sae.decode(basis).float()
        directions = (decoded[:-1] - decoded[-1]).to(lm.cfg.dtype)
        top = readout.vocab_projection(lm, directions, space="resid").topk(k, dim=-1)
        ids += top.indices.tolist()
        logits.append(top.values.float().cpu())
    return ids, torch.cat(logits) if logits else torch.zeros(0, k)


@torch.no_grad()
def _sparse_codes(
    sae: LensSAE, acts: Tensor, keep: int, chunk: int = 4096
) -> tuple[Tensor, Tensor]:
    """Each token's ``keep`` largest feature activations: (indices, values), ``[token, keep]``."""
    keep = min(keep, sae.d_sae)
    index = torch.empty(len(acts), keep, dtype=torch.int32)
    value = torch.empty(len(acts), keep)
    for start in range(0, len(acts), chunk):
        f = sae.encode(acts[start : start + chunk].to(sae.sae.device, torch.float32)).float()
        top = f.topk(keep, dim=-1)
        index[start : start + len(f)] = top.indices.int().cpu()
        value[start : start + len(f)] = top.values.cpu()
    return index, value


def feature_cards(
    lm: LensModel,
    sae: LensSAE,
    rows: Sequence[Sequence[int]],
    features: Sequence[int] | None = None,
    config: FeatureConfig | None = None,
) -> FeatureCards:
    """Cards of ``features`` (default: all) from the corpus ``rows`` (token rows, sink first).

    Reads the model only.

    Raises:
        ValueError: a feature index out of range, or an SAE of another model.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.sae.train import SAETrainConfig, untrained_sae
    >>> lm = load_model("toy-2l")
    >>> sae = untrained_sae(lm, SAETrainConfig(layer=1, d_sae=32, k=4))
    >>> cards = feature_cards(lm, sae, [lm.encode("The cat sat on the mat")], [0, 5],
    ...                       FeatureConfig(contexts=2, progress=False))
    >>> cards.features, tuple(cards.values.shape)
    ((0, 5), (2, 2))
    """
    config = config or FeatureConfig()
    sae.check(lm)
    chosen = list(range(sae.d_sae)) if features is None else [sae.feature(i) for i in features]
    collected = collect_activations(
        lm,
        list(rows),
        [sae.hook],
        positions="all",
        config=CollectConfig(autocast=config.autocast, progress=config.progress),
    )
    index, value = _sparse_codes(sae, collected.acts[sae.hook], config.max_active)
    n_tokens = len(index)
    density, peaks, peak_values = _densities_and_peaks(sae, index, value, chosen, config.contexts)
    tokens, acts, strings = _windows(
        lm,
        collected.example,
        collected.position,
        collected.token,
        index,
        value,
        chosen,
        peaks,
        config,
    )
    ids, logits = promoted_tokens(lm, sae, chosen, config.promoted)
    return FeatureCards(
        values=peak_values,
        axes=("feature", "context"),
        labels=(tuple(str(i) for i in chosen), ()),
        meta=lm.meta((), params=config.params()),
        hook=sae.hook,
        features=tuple(chosen),
        density=density,
        scale=sae.feature_scale[torch.tensor(chosen, dtype=torch.long)].float().cpu(),
        promoted=tuple(tuple(lm.to_str_tokens(row)) for row in ids),
        promoted_logits=logits,
        context_tokens=tokens,
        context_acts=acts,
        token_strings=strings,
        n_tokens=n_tokens,
    )


def _densities_and_peaks(
    sae: LensSAE, index: Tensor, value: Tensor, chosen: list[int], contexts: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Per chosen feature: its activation density, and the token rows and values of its top
    ``contexts`` activations (row -1 where it fired on fewer tokens)."""
    n_tokens = len(index)
    feats = torch.tensor(chosen, dtype=torch.int32)
    density = torch.zeros(len(chosen))
    peaks = torch.full((len(chosen), contexts), -1, dtype=torch.long)
    peak_values = torch.zeros(len(chosen), contexts)
    for start in range(0, len(chosen), 512):
        part = feats[start : start + 512].long()
        # [token, feature] activations of these features, scattered from the sparse codes
        column = torch.full((sae.d_sae,), -1, dtype=torch.long)
        column[part] = torch.arange(len(part))
        col = column[index.long()]
        hit = col >= 0
        act = torch.zeros(n_tokens, len(part))
        act[hit.nonzero()[:, 0], col[hit]] = value[hit]
        density[start : start + len(part)] = (act > 0).float().mean(0)
        top = act.topk(min(contexts, n_tokens), dim=0)
        n = top.indices.shape[0]
        peaks[start : start + len(part), :n] = top.indices.T
        peak_values[start : start + len(part), :n] = top.values.T
    peaks[peak_values <= 0] = -1
    return density, peaks, peak_values


def _windows(
    lm: LensModel,
    example: Tensor,
    position: Tensor,
    token: Tensor,
    index: Tensor,
    value: Tensor,
    chosen: list[int],
    peaks: Tensor,
    config: FeatureConfig,
) -> tuple[Tensor, Tensor, tuple[str, ...]]:
    """Token windows around each peak (same text only), with the feature's activation there."""
    width = config.before + 1 + config.after
    offsets = torch.arange(-config.before, config.after + 1)
    safe = peaks.clamp(min=0)
    where = safe.unsqueeze(-1) + offsets  # [feature, context, window] row numbers
    inside = (where >= 0) & (where < len(example)) & (peaks.unsqueeze(-1) >= 0)
    where = where.clamp(0, len(example) - 1)
    same_text = example[where] == example[safe].unsqueeze(-1)
    inside &= same_text
    feature = torch.tensor(chosen, dtype=torch.int32).view(-1, 1, 1, 1)
    acts = (value[where] * (index[where] == feature)).sum(-1)
    ids = torch.where(inside, token[where], torch.full_like(token[where], -1))
    distinct = sorted(set(ids[inside].tolist()))
    lookup = {t: i for i, t in enumerate(distinct)}
    table = torch.tensor([lookup.get(t, -1) for t in ids.flatten().tolist()]).view(ids.shape)
    strings = tuple(lm.to_str_tokens(distinct)) if distinct else ()
    assert table.shape[-1] == width
    return table, torch.where(inside, acts, torch.zeros_like(acts)), strings


def find_features(
    cards: FeatureCards,
    words: Sequence[str],
    *,
    contexts: bool = True,
    promoted: bool = True,
    include_dead: bool = False,
) -> list[int]:
    """Features whose promoted tokens or top-context peak tokens match any of ``words``.

    Matching is case-insensitive on whole tokens with surrounding spaces stripped; features are
    ordered by how many matches they have (most first). Features that never fire on the cards'
    corpus are left out unless ``include_dead`` (a dead feature's decoder direction still
    promotes tokens, but nothing in the text activates it).

    >>> import torch
    >>> from lmsci_mi.results import Meta
    >>> cards = FeatureCards(values=torch.ones(2, 1), axes=("feature", "context"),
    ...     labels=((), ()), meta=Meta(model="toy", sink=None), hook="h", features=(4, 7),
    ...     density=torch.ones(2), scale=torch.ones(2), promoted=((" bread", " soup"), (" code",)),
    ...     promoted_logits=torch.ones(2, 1), context_tokens=torch.full((2, 1, 1), -1),
    ...     context_acts=torch.zeros(2, 1, 1), token_strings=(), n_tokens=1)
    >>> find_features(cards, ["Soup"])
    [4]
    """
    wanted = {w.strip().lower() for w in words if w.strip()}
    if not wanted:
        raise UserInputError("give at least one word to match")
    scored = []
    for r, feature in enumerate(cards.features):
        if not include_dead and float(cards.density[r]) == 0:
            continue
        hits = 0
        if promoted:
            hits += sum(t.strip().lower() in wanted for t in cards.promoted[r])
        if contexts:
            for tokens, acts in cards.contexts(feature):
                peak = max(range(len(acts)), key=acts.__getitem__)
                hits += tokens[peak].strip().lower() in wanted
        if hits:
            scored.append((-hits, r, feature))
    return [feature for _, _, feature in sorted(scored)]

"""Massive activations (Sun et al. 2024, arXiv:2402.17762): the few residual-stream entries that
are hundreds of times larger than the rest, at fixed positions and fixed dimensions.

Per layer, the paper's layer-wise statistic (the top-3 |activation| and the median of each text's
hidden state, ``main_llm.py --exp2``), and every entry above the paper's rule (|a| > 100 and
|a| >= 1,000 × the median |activation| of its hidden state) with its position, token and dimension;
entries that meet the ratio alone are kept beside them, labelled, never merged. Each layer is
reduced inside its hook, so no layer's activations are kept.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from lmsci_mi.config import Config, config, paper
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.positions import Exclude
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import layer_hooks, layer_of

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure
    from transformer_lens.hook_points import HookPoint

__all__ = [
    "MASSIVE_SITES",
    "ROLES",
    "MassiveActivations",
    "MassiveConfig",
    "MassiveEntry",
    "RecurringDimension",
    "find_massive_activations",
]

MASSIVE_SITES: tuple[str, ...] = ("resid_pre", "resid_mid", "resid_post")
"""Residual-stream sites the search can read (the paper reads each block's output)."""

ROLES: tuple[str, ...] = ("sink", "first token", "first newline", "first '.'")
"""The named positions of a text where Sun et al. find massive activations; any other position
is ``"other"``. ``sink``: position 0 when it holds the model's sink token; ``first token``: the
text's first token (position 1 after a sink, else 0); ``first newline``: the first token made of
whitespace holding a newline; ``first '.'``: the first token that is a full stop."""

_SUN = "Sun et al. 2024 (arXiv:2402.17762)"


@config
class MassiveConfig(Config):
    """The paper's rule and where it is applied."""

    threshold: float = dataclasses.field(
        default=100.0,
        metadata={
            "help": "absolute rule: |activation| must exceed this",
            "gt": 0,
            **paper(100.0, f"{_SUN} §2: 'magnitude surpasses 100'"),
        },
    )
    ratio: float = dataclasses.field(
        default=1000.0,
        metadata={
            "help": "ratio rule: |activation| / median |activation| of its hidden state, at least",
            "gt": 0,
            **paper(1000.0, f"{_SUN} §2: 'at least or around 1,000 times larger than the median "
                    "magnitude of its hidden state'"),
        },
    )
    site: str = dataclasses.field(
        default="resid_post",
        metadata={
            "help": "residual site read at each layer",
            "choices": MASSIVE_SITES,
            **paper("resid_post", f"{_SUN}, main_llm.py: the decoder layer's output "
                    "(monkey_patch/modify_llama.py stores it as layer.feat)"),
        },
    )
    layers: tuple[int, ...] | None = dataclasses.field(
        default=None, metadata={"help": "layers to read (default: every layer)", "ge": 0}
    )
    top_k: int = dataclasses.field(
        default=3,
        metadata={
            "help": "largest |activation| values kept per layer and text",
            "ge": 1,
            **paper(3, f"{_SUN}, main_llm.py --exp2: sort_res.values[:3] and torch.median"),
        },
    )
    batch_size: int = dataclasses.field(
        default=8, metadata={"help": "texts per forward pass", "ge": 1}
    )
    max_entries: int = dataclasses.field(
        default=10_000,
        metadata={"help": "entries kept (largest ratios first); the result counts the rest", "ge": 1},
    )


_DEFAULT_CONFIG = MassiveConfig()


@dataclass(frozen=True)
class MassiveEntry:
    """One activation above the ratio rule.

    Attributes:
        layer, text, position, dim: where it is (``position`` absolute: 0 is the sink when the
            text has one).
        token_id, token: the token at that position.
        value: the signed activation; ``ratio``: |value| over the median |activation| of the
            text's hidden state at that layer.
        role: the position's role (:data:`ROLES`, or ``"other"``).
        rule: ``"paper"`` (|value| > threshold and ratio >= the ratio) or ``"ratio only"``.
    """

    layer: int
    text: int
    position: int
    token_id: int
    token: str
    dim: int
    value: float
    ratio: float
    role: str
    rule: str


@dataclass(frozen=True)
class RecurringDimension:
    """A (layer, role, dimension) that carries entries, with its value over every text that has
    the role: near input-independent values give a coefficient of variation near 0.

    Attributes:
        n_texts: texts that have the role; ``n_massive``: those where the entry met a rule there.
        mean, std, cv: the signed value's mean, standard deviation (n - 1) and std / |mean|.
    """

    layer: int
    role: str
    dim: int
    n_texts: int
    n_massive: int
    mean: float
    std: float
    cv: float


@result_type
class MassiveActivations(Result):
    """Massive activations of a model on a set of texts.

    ``values`` is the paper's layer-wise statistic averaged over the texts, ``[layer, statistic]``
    with statistics ``top-1 .. top-k`` (largest |activation| of the hidden state) and ``median``.

    Attributes:
        per_text: ``[text, layer, statistic]`` the same statistic for each text.
        entries: every entry meeting the ratio rule (up to ``max_entries``, largest ratio first),
            each saying which rule it met; ``n_found``: how many there were before that cap.
        absolute_only: ``[layer]`` how many entries exceeded the threshold but not the ratio
            (not listed: they are not massive by either rule alone that the paper uses).
        dimensions: the value of each recurring (layer, role, dimension) across texts.
        role_texts: for each role, how many texts have it.
        lengths: tokens per text (sink included); ``sink_at_zero``: per text, whether position 0
            holds the model's sink token.
        site, threshold, ratio: what was read and the rule applied.
    """

    per_text: Tensor
    entries: tuple[MassiveEntry, ...]
    n_found: int
    absolute_only: Tensor
    dimensions: tuple[RecurringDimension, ...]
    role_texts: dict[str, int]
    lengths: tuple[int, ...]
    sink_at_zero: tuple[bool, ...]
    site: str
    threshold: float
    ratio: float

    @property
    def n_texts(self) -> int:
        return len(self.lengths)

    def selected(self, rule: Literal["paper", "ratio"] = "paper") -> tuple[MassiveEntry, ...]:
        """The entries of ``rule``: ``"paper"`` (both criteria) or ``"ratio"`` (the ratio
        criterion: the paper's entries and the ratio-only ones)."""
        if rule not in ("paper", "ratio"):
            raise UserInputError(f"rule must be 'paper' or 'ratio', not {rule!r}")
        return tuple(e for e in self.entries if rule == "ratio" or e.rule == "paper")

    def token_counts(self, rule: Literal["paper", "ratio"] = "paper") -> Counter[str]:
        """Per token text: in how many texts it carries an entry of ``rule``."""
        return Counter(token for _, token in {(e.text, e.token) for e in self.selected(rule)})

    def position_counts(self, rule: Literal["paper", "ratio"] = "paper") -> Counter[int]:
        """Per absolute position: in how many texts an entry of ``rule`` sits there."""
        return Counter(pos for _, pos in {(e.text, e.position) for e in self.selected(rule)})

    def role_counts(self, rule: Literal["paper", "ratio"] = "paper") -> dict[str, tuple[int, int]]:
        """Per role: (texts with an entry of ``rule`` at it, texts that have the role)."""
        hits = Counter(role for _, role in {(e.text, e.role) for e in self.selected(rule)})
        out = {role: (hits[role], self.role_texts.get(role, 0)) for role in ROLES}
        out["other"] = (hits["other"], self.n_texts)
        return out

    def exclude(
        self,
        rule: Literal["paper", "ratio"] = "paper",
        *,
        by: Literal["positions", "tokens", "both"] = "both",
        min_share: float = 0.5,
    ) -> Exclude:
        """The :class:`~lmsci_mi.positions.Exclude` that leaves these activations' positions out.

        Args:
            rule: whose entries: the paper's, or every entry meeting the ratio.
            by: ``"positions"``: absolute positions holding an entry in at least ``min_share`` of
                the texts (position 0 becomes ``sink=True``); ``"tokens"``: the token ids that
                carry an entry anywhere (every occurrence is left out, e.g. every "."); ``"both"``:
                those positions, and the tokens of the entries elsewhere.
            min_share: share of texts a position must hold entries in.
        """
        if by not in ("positions", "tokens", "both"):
            raise UserInputError(f"by must be 'positions', 'tokens' or 'both', not {by!r}")
        if not 0 < min_share <= 1:
            raise UserInputError(f"min_share must be in (0, 1], not {min_share}")
        chosen = self.selected(rule)
        positions: set[int] = set()
        if by in ("positions", "both"):
            counts = self.position_counts(rule)
            positions = {p for p, n in counts.items() if n >= min_share * self.n_texts}
        # With both, tokens cover what the positions do not (the first '.' moves from text to
        # text); the first word at a fixed position is left out there, not as every "The".
        tokens = {e.token_id for e in chosen if by == "tokens" or e.position not in positions}
        if by == "positions":
            tokens = set()
        return Exclude(sink=0 in positions, positions=tuple(positions - {0}), token_ids=tuple(tokens))

    def to_dataframe(self) -> pd.DataFrame:
        """One row per entry: layer, text, position, role, token, dimension, value, ratio, rule
        (the table the docs show; :meth:`layer_frame` has the layer-wise statistic)."""
        import pandas as pd

        columns = [f.name for f in dataclasses.fields(MassiveEntry)]
        return pd.DataFrame([dataclasses.astuple(e) for e in self.entries], columns=columns)

    def layer_frame(self) -> pd.DataFrame:
        """One row per layer: the texts' mean top-k and median |activation|, the paper and
        ratio-only entry counts and the threshold-only count."""
        import pandas as pd

        frame = pd.DataFrame(self.values.numpy(), columns=list(self.labels[1]))
        frame.insert(0, "layer", [int(label) for label in self.labels[0]])
        for rule, label in (("paper", "paper"), ("ratio only", "ratio_only")):
            counts = Counter(e.layer for e in self.entries if e.rule == rule)
            frame[f"n_{label}"] = [counts[int(layer)] for layer in self.labels[0]]
        frame["n_absolute_only"] = self.absolute_only.tolist()
        return frame

    def dimension_frame(self) -> pd.DataFrame:
        """One row per recurring (layer, role, dimension): its value across texts and its
        coefficient of variation."""
        import pandas as pd

        columns = [f.name for f in dataclasses.fields(RecurringDimension)]
        return pd.DataFrame([dataclasses.astuple(d) for d in self.dimensions], columns=columns)

    def summary(self, rows: int = 10) -> str:
        """Counts by rule, the roles and dimensions that carry entries, the largest entries."""
        sinks = sum(self.sink_at_zero)
        paper_entries, ratio_entries = self.selected("paper"), self.selected("ratio")
        lines = [
            f"massive activations at {self.site} of {self.meta.model}, {self.n_texts} texts; "
            f"sink token {self.meta.sink!r} at position 0 in {sinks} of them",
            f"rule |a| > {self.threshold:g} and |a| >= {self.ratio:g} x median: "
            f"{len(paper_entries)} entries; ratio alone: {len(ratio_entries) - len(paper_entries)}"
            f" (found {self.n_found}, listed {len(self.entries)})",
        ]
        for role, (hits, having) in self.role_counts("ratio").items():
            if hits:
                lines.append(f"  {role}: entries in {hits} of {having} texts")
        for d in sorted(self.dimensions, key=lambda d: -abs(d.mean))[:rows]:
            lines.append(f"  layer {d.layer} dim {d.dim} at {d.role}: mean {d.mean:.4g}, cv {d.cv:.3g}"
                         f" over {d.n_texts} texts")
        for e in sorted(self.entries, key=lambda e: -e.ratio)[:rows]:
            lines.append(f"  L{e.layer} text {e.text} pos {e.position} {e.token!r} dim {e.dim}: "
                         f"{e.value:.4g} ({e.ratio:.3g} x median, {e.rule})")
        return "\n".join(lines)

    def default_title(self, **options: object) -> str:
        return f"Largest |activations| per layer ({self.site}) — {self.meta.model}"

    def _draw(self, title: str) -> Figure:
        """Per layer the texts' mean top-k |activation| and median on a log scale (Sun et al.'s
        Fig. 2 style), with the rule's absolute threshold as a dashed line."""
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator

        fig = Figure(figsize=(7, 4), layout="tight")  # laid out when drawn: no cost unless saved or shown
        ax = fig.subplots()
        layers = [int(label) for label in self.labels[0]]
        for i, name in enumerate(self.labels[1]):
            ax.plot(layers, self.values[:, i].clamp_min(1e-12).numpy(), marker="o", markersize=3,
                    label=name, linestyle="--" if name == "median" else "-")
        ax.axhline(self.threshold, color="grey", linewidth=0.8, linestyle=":",
                   label=f"threshold {self.threshold:g}")
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(f"layer ({self.site})")
        ax.set_ylabel(f"|activation|, mean over {self.n_texts} texts")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        return fig


# ----------------------------------------------------------------------------- inputs


def _sequences(lm: LensModel, texts_or_tokens: Any) -> tuple[list[list[int]], tuple[str, ...]]:
    """Token id lists of the texts (the sink policy applied) or of the token ids as given, and
    the texts (none for token ids)."""
    if isinstance(texts_or_tokens, str):
        texts_or_tokens = [texts_or_tokens]
    if isinstance(texts_or_tokens, Tensor):
        if texts_or_tokens.ndim not in (1, 2) or texts_or_tokens.is_floating_point():
            raise UserInputError("token ids must be an integer tensor [text, pos] (or [pos])")
        rows = texts_or_tokens.reshape(-1, texts_or_tokens.shape[-1]).tolist()
    else:
        rows = list(texts_or_tokens)
    if not rows:
        raise UserInputError("no texts given: pass texts, token id lists or a [text, pos] tensor")
    sequences, texts = [], []
    for i, row in enumerate(rows):
        if isinstance(row, str):
            if not row.strip():
                raise UserInputError(f"text {i} is empty; drop it")
            texts.append(row)
            row = lm.encode(row)
        ids = [int(t) for t in row]
        if not ids:
            raise UserInputError(f"token sequence {i} is empty; drop it")
        sequences.append(ids)
    for ids in sequences:
        lm.check_tokens(torch.tensor(ids))
    return sequences, tuple(texts)


class _TokenKinds:
    """Which token ids are a newline or a full stop (decoded once per id)."""

    def __init__(self, lm: LensModel) -> None:
        self.tokenizer = lm.tokenizer
        self.cache: dict[int, str] = {}

    def text(self, token: int) -> str:
        if token not in self.cache:
            self.cache[token] = (
                f"<token {token}>" if self.tokenizer is None else self.tokenizer.decode([token])
            )
        return self.cache[token]

    def role_positions(self, ids: Sequence[int], sink_id: int | None) -> list[int]:
        """The position of each of :data:`ROLES` in one text (-1 where it has none)."""
        sink = 0 if sink_id is not None and ids[0] == sink_id else -1
        start = sink + 1
        first = start if start < len(ids) else -1
        newline = period = -1
        if self.tokenizer is not None:
            for pos in range(start, len(ids)):
                text = self.text(ids[pos])
                if newline < 0 and "\n" in text and not text.strip():
                    newline = pos
                if period < 0 and text.strip() == ".":
                    period = pos
                if newline >= 0 and period >= 0:
                    break
        return [sink, first, newline, period]


# ----------------------------------------------------------------------------- the reduction


@dataclass
class _Batch:
    """What every hook of one forward pass needs to know about its batch."""

    mask: Bool[Tensor, "batch pos"]
    roles: Int[Tensor, "batch role"]
    first_text: int


class _LayerReduction:
    """One layer's statistics, merged batch by batch: nothing of the activation is kept."""

    def __init__(self, cfg: MassiveConfig, d_model: int) -> None:
        self.cfg = cfg
        self.per_text: list[Tensor] = []
        self.hits: list[Tensor] = []  # [n, 3] text, position, dim
        self.values: list[Tensor] = []
        self.ratios: list[Tensor] = []
        self.n_found = 0
        self.absolute_only = 0
        n_roles = len(ROLES)
        self.sum = torch.zeros(n_roles, d_model, dtype=torch.float64)
        self.sumsq = torch.zeros(n_roles, d_model, dtype=torch.float64)
        self.count = torch.zeros(n_roles, dtype=torch.long)

    def update(self, act: Float[Tensor, "batch pos d"], batch: _Batch) -> None:
        x = act.detach().float()
        mag = x.abs()
        n_text = x.shape[0]
        real = batch.mask[..., None]
        flat = mag.masked_fill(~real, float("nan")).reshape(n_text, -1)
        # torch.median (the lower middle value), as the paper's code computes it.
        median = flat.nanmedian(dim=1).values.clamp_min(torch.finfo(torch.float32).tiny)
        k = min(self.cfg.top_k, flat.shape[1])
        top = mag.masked_fill(~real, -1.0).reshape(n_text, -1).topk(k, dim=1).values
        top = top.masked_fill(top < 0, float("nan"))  # a text shorter than k entries
        self.per_text.append(torch.cat([top, median[:, None]], dim=1).cpu())
        ratio = mag / median[:, None, None]
        hit = (ratio >= self.cfg.ratio) & real
        self.absolute_only += int(((mag > self.cfg.threshold) & ~hit & real).sum())
        where = hit.nonzero()
        self.n_found += where.shape[0]
        if where.shape[0]:
            values = x[where[:, 0], where[:, 1], where[:, 2]]
            ratios = ratio[where[:, 0], where[:, 1], where[:, 2]]
            where[:, 0] += batch.first_text
            self._keep(where.cpu(), values.cpu(), ratios.cpu())
        self._accumulate_roles(x, batch.roles)

    def _keep(self, where: Tensor, values: Tensor, ratios: Tensor) -> None:
        self.hits.append(where)
        self.values.append(values)
        self.ratios.append(ratios)
        if sum(len(r) for r in self.ratios) > 2 * self.cfg.max_entries:  # bound the memory
            self.hits, self.values, self.ratios = (
                [t] for t in _largest(self.cfg.max_entries, *self.merged())
            )

    def merged(self) -> tuple[Tensor, Tensor, Tensor]:
        if not self.hits:
            return torch.zeros(0, 3, dtype=torch.long), torch.zeros(0), torch.zeros(0)
        return torch.cat(self.hits), torch.cat(self.values), torch.cat(self.ratios)

    def _accumulate_roles(self, x: Tensor, roles: Tensor) -> None:
        present = roles >= 0  # [batch, role]
        rows = torch.arange(x.shape[0], device=x.device)[:, None]
        at = x[rows, roles.clamp_min(0).to(x.device)].double().cpu() * present[..., None].cpu()
        self.sum += at.sum(0)
        self.sumsq += (at**2).sum(0)
        self.count += present.sum(0).cpu()


def _largest(n: int, where: Tensor, values: Tensor, ratios: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The ``n`` entries of largest ratio."""
    if ratios.numel() <= n:
        return where, values, ratios
    keep = ratios.topk(n).indices
    return where[keep], values[keep], ratios[keep]


# ----------------------------------------------------------------------------- the analysis


@torch.no_grad()
def _reduce(
    lm: LensModel, sequences: list[list[int]], layers: list[int], names: list[str], cfg: MassiveConfig
) -> tuple[dict[int, _LayerReduction], Tensor]:
    """Run the texts in batches; each hook reduces its layer. Returns the reductions and the
    ``[text, role]`` role positions."""
    kinds = _TokenKinds(lm)
    roles = torch.tensor([kinds.role_positions(ids, lm.sink_token_id) for ids in sequences])
    reductions = {layer: _LayerReduction(cfg, lm.cfg.d_model) for layer in layers}
    current: list[_Batch] = []

    def reduce(activation: Tensor, hook: HookPoint) -> None:
        layer = layer_of(hook.name or "")
        assert layer is not None
        reductions[layer].update(activation, current[0])

    stop = max(layers) + 1
    with lm.hooks.hooks(fwd=[(names, reduce)], label="massive activations"):
        for start in range(0, len(sequences), cfg.batch_size):
            padded = lm.pad_batch(sequences[start : start + cfg.batch_size])
            batch_roles = roles[start : start + cfg.batch_size].to(lm.device)
            current[:] = [_Batch(padded.mask, batch_roles, start)]
            # Stopping after the last layer read skips the unembedding (a quarter of SmolLM2's
            # forward FLOPs) and every later block.
            lm(padded.tokens, stop_at_layer=stop if stop < lm.cfg.n_layers else None)
    return reductions, roles


def _entries(
    lm: LensModel,
    sequences: list[list[int]],
    roles: Tensor,
    reductions: dict[int, _LayerReduction],
    cfg: MassiveConfig,
) -> tuple[tuple[MassiveEntry, ...], int]:
    """Every layer's entries as records, largest ratio first, capped at ``cfg.max_entries``."""
    kinds = _TokenKinds(lm)
    parts = [(layer, *r.merged()) for layer, r in reductions.items()]
    where = torch.cat([torch.cat([torch.full((len(w), 1), layer), w], 1) for layer, w, _, _ in parts])
    values = torch.cat([v for _, _, v, _ in parts])
    ratios = torch.cat([r for _, _, _, r in parts])
    n_found = sum(r.n_found for r in reductions.values())
    where, values, ratios = _largest(cfg.max_entries, where, values, ratios)
    order = torch.argsort(ratios, descending=True, stable=True)
    entries = []
    for (layer, text, pos, dim), value, ratio in zip(
        where[order].tolist(), values[order].tolist(), ratios[order].tolist(), strict=True
    ):
        token = sequences[text][pos]
        at = roles[text].tolist()
        role = ROLES[at.index(pos)] if pos in at else "other"
        rule = "paper" if abs(value) > cfg.threshold else "ratio only"
        entries.append(MassiveEntry(layer, text, pos, token, kinds.text(token), dim, value, ratio, role, rule))
    return tuple(entries), n_found


def _dimensions(
    entries: Sequence[MassiveEntry], reductions: dict[int, _LayerReduction]
) -> tuple[RecurringDimension, ...]:
    """The value across texts of each (layer, role, dimension) holding an entry at a role."""
    massive = Counter((e.layer, e.role, e.dim) for e in entries if e.role in ROLES)
    out = []
    for (layer, role, dim), n_massive in sorted(massive.items()):
        r = reductions[layer]
        i = ROLES.index(role)
        n = int(r.count[i])
        mean = float(r.sum[i, dim]) / n
        var = (float(r.sumsq[i, dim]) - n * mean**2) / (n - 1) if n > 1 else float("nan")
        std = max(var, 0.0) ** 0.5
        cv = std / abs(mean) if mean else float("nan")
        out.append(RecurringDimension(layer, role, dim, n, n_massive, mean, std, cv))
    return tuple(out)


def find_massive_activations(
    lm: LensModel,
    texts_or_tokens: str | Sequence[str] | Sequence[Sequence[int]] | Int[Tensor, "text pos"],
    config: MassiveConfig = _DEFAULT_CONFIG,
) -> MassiveActivations:
    """Massive activations of ``lm`` on the texts, by Sun et al.'s rule. Reads the model only.

    Args:
        lm: the model.
        texts_or_tokens: texts (tokenised with the sink policy: position 0 is the sink), token
            id lists or a ``[text, pos]`` tensor taken as they are (e.g.
            :func:`lmsci_mi.data.text_corpus.text_chunks`, which puts the sink in front).
        config: the rule, the site, the layers, the batching.

    Returns:
        :class:`MassiveActivations`; ``meta.sink`` names the sink and ``sink_at_zero`` says per
        text whether it is at position 0.

    Raises:
        UserInputError: no texts, an empty text, a layer the model does not have.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> found = find_massive_activations(lm, ["The cat sat.", "A dog ran.\\nIt sat."])
    >>> found.values.shape, found.labels[1]
    (torch.Size([2, 4]), ('top-1', 'top-2', 'top-3', 'median'))
    """
    sequences, texts = _sequences(lm, texts_or_tokens)
    names, labels = layer_hooks(config.site, config.layers, lm.cfg.n_layers, lm.name)
    if not names:
        raise UserInputError("no layers given: pass layer indices, or None for every layer")
    layers = [int(label) for label in labels]
    reductions, roles = _reduce(lm, sequences, layers, names, config)
    entries, n_found = _entries(lm, sequences, roles, reductions, config)
    per_text = torch.stack([torch.cat(reductions[layer].per_text) for layer in layers], dim=1)
    statistics = tuple(f"top-{i + 1}" for i in range(config.top_k))
    sink_id = lm.sink_token_id
    return MassiveActivations(
        values=per_text.nanmean(0),
        axes=("layer", "statistic"),
        labels=(tuple(labels), (*statistics, "median")),
        meta=lm.meta(texts, params=config.params(), data_source=f"{len(sequences)} texts"),
        per_text=per_text,
        entries=entries,
        n_found=n_found,
        absolute_only=torch.tensor([reductions[layer].absolute_only for layer in layers]),
        dimensions=_dimensions(entries, reductions),
        role_texts={role: int((roles[:, i] >= 0).sum()) for i, role in enumerate(ROLES)},
        lengths=tuple(len(ids) for ids in sequences),
        sink_at_zero=tuple(sink_id is not None and ids[0] == sink_id for ids in sequences),
        site=config.site,
        threshold=config.threshold,
        ratio=config.ratio,
    )

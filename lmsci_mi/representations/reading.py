"""Representation reading: LAT reading vectors per layer, after Zou et al. 2023, "Representation
Engineering: A Top-Down Approach to AI Transparency" (arXiv:2310.01405), §3.1.

Pairs of prompts that differ in one concept are read at a site of every layer; the pairs'
activation differences get random signs (Zou et al. shuffle each pair's order) and their first
principal component is the reading vector. It is scored on held-out pairs against the difference
of means, a logistic probe's direction (the public API of :mod:`lmsci_mi.probes`) and random
directions; the layer is chosen on a dev split and reported on a test split.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Literal

import torch
from jaxtyping import Float
from torch import Tensor

from lmsci_mi.collect import CollectConfig, collect_activations
from lmsci_mi.config import NOT_IN_NOTES, Config, config, paper
from lmsci_mi.data.contrasts import ContrastPairs
from lmsci_mi.errors import UnknownNameError, UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.probes import ProbeConfig, Split, fit_probes
from lmsci_mi.results import Meta, Result, result_type
from lmsci_mi.sites import layer_hooks
from lmsci_mi.sites import site as site_row
from lmsci_mi.stats import bootstrap_replicates, percentile_bounds

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "READING_METHODS",
    "READING_SCORES",
    "READING_SPLITS",
    "ReadingConfig",
    "RepresentationReading",
    "pairwise_accuracy",
    "reading_from_activations",
    "reading_vector",
    "representation_reading",
]

READING_METHODS = ("pca", "diff_of_means", "probe", "random")
"""The directions scored: the reading vector (first PC of the sign-randomised differences), the
difference of the class means, a logistic probe's weight direction, and random directions (the
mean over ``ReadingConfig.n_random`` draws)."""

READING_SPLITS = ("fit", "dev", "test")
"""The splits of the pairs: directions and thresholds are fitted on ``fit``, the layer is chosen on
``dev`` (and the probe's L2 strength), and ``test`` is only scored."""

READING_SCORES = ("pairwise", "unpaired")
"""``pairwise``: the share of pairs whose positive prompt projects higher than its negative one.
``unpaired``: the accuracy over single prompts of "positive if the projection exceeds a threshold",
the threshold chosen on the fit split."""

_LEGEND = {
    "pca": "reading vector (PC1)",
    "diff_of_means": "difference of means",
    "probe": "logistic probe",
    "random": "random (mean of {n})",
}
_KEPT = 3  # the first three methods keep their directions; random ones are redrawn from the seed


@config
class ReadingConfig(Config):
    """Where representation reading reads, how the pairs are split, and how it is scored."""

    site: str = field(
        default="resid_post",
        metadata={
            "help": "site of the site table to read",
            **paper(NOT_IN_NOTES, "Zou et al. 2023, arXiv:2310.01405, §3.1 (LAT)"),
        },
    )
    layers: tuple[int, ...] | None = field(
        default=None, metadata={"help": "layers to read (default: all)", "ge": 0, "min_length": 1}
    )
    position: Literal["last", "mean"] = field(
        default="last",
        metadata={
            "help": "the prompt's last token (it has attended to the whole prompt, and the LAT "
            "template ends by asking for the concept) or the mean over its tokens (sink left out)",
            **paper(NOT_IN_NOTES, "Zou et al. 2023, arXiv:2310.01405, §3.1 (LAT)"),
        },
    )
    fractions: tuple[float, ...] = field(
        default=(0.5, 0.25, 0.25),
        metadata={
            "help": "fit/dev/test shares of the pairs",
            "gt": 0,
            "min_length": 3,
            "max_length": 3,
        },
    )
    seed: int = field(
        default=0,
        metadata={
            "help": "seed of the split, the pair orders, the random directions and the bootstrap"
        },
    )
    randomise_signs: bool = field(
        default=True,
        metadata={
            "help": "swap a random half of the pairs before the PCA, as Zou et al. do "
            "(off only to show what centring does without it)",
            **paper(NOT_IN_NOTES, "Zou et al. 2023, arXiv:2310.01405, §3.1 (LAT)"),
        },
    )
    n_random: int = field(
        default=10, metadata={"help": "random directions drawn for the random baseline", "ge": 1}
    )
    bootstrap: int = field(
        default=1000, metadata={"help": "bootstrap resamples of the test pairs (0: none)", "ge": 0}
    )
    probe_l2_grid: tuple[float, ...] = field(
        default=ProbeConfig().l2_grid,
        metadata={
            "help": "the logistic probe's L2 strengths, chosen on the dev split",
            "ge": 0,
            "min_length": 1,
        },
    )
    token_budget: int = field(
        default=8192, metadata={"help": "tokens per forward pass while collecting", "ge": 1}
    )
    autocast: str | None = field(
        default=None,
        metadata={
            "help": "collect under autocast to this dtype (default: exact float32)",
            "choices": ("bfloat16", "float16"),
        },
    )

    def validate(self) -> None:
        row = site_row(self.site)  # an unknown site raises here, listing the valid ones
        if row.layout.position_axis != 1:
            raise UserInputError(
                f"site {self.site!r} has no vector per position; read a residual, MLP or "
                "per-head site instead"
            )
        if self.layers is not None and not row.per_layer:
            raise UserInputError(f"site {self.site!r} exists once per model; give no layers")
        if not math.isclose(sum(self.fractions), 1.0, abs_tol=1e-6):
            raise UserInputError(f"fractions must sum to 1 (fit, dev, test), not {self.fractions}")


@result_type
class RepresentationReading(Result):
    """Reading accuracies per layer: ``values[method, split, score, layer]``.

    The axes' labels are :data:`READING_METHODS`, :data:`READING_SPLITS`, :data:`READING_SCORES`
    and the layers read.

    Attributes:
        contrast: the concept read ("sentiment").
        site, hooks, position: where the activations were read.
        directions: ``[method, layer, d]`` unit directions of ``pca`` (the reading vectors),
            ``diff_of_means`` and ``probe``, in the site's activation space (``d_model`` for
            residual sites), oriented so that positive prompts project higher on the fit split.
        intervals: ``[method, score, layer, 2]`` 95% bootstrap intervals of the test scores over
            resampled test pairs (NaN without a bootstrap).
        explained: ``[layer]`` the share of the (signed, centred) fit differences' variance the
            first principal component explains.
        chosen: per method, the index of the layer chosen on the dev split (pairwise accuracy,
            then unpaired accuracy, then the earlier layer).
        fit_pairs, dev_pairs, test_pairs: the pair indices of each split.
        n_random: the random directions averaged in the ``random`` rows.
    """

    contrast: str
    site: str
    hooks: tuple[str, ...]
    position: str
    directions: Tensor
    intervals: Tensor
    explained: Tensor
    chosen: tuple[int, ...]
    fit_pairs: tuple[int, ...]
    dev_pairs: tuple[int, ...]
    test_pairs: tuple[int, ...]
    n_random: int

    def accuracy(
        self, method: str = "pca", split: str = "test", score: str = "pairwise"
    ) -> Float[Tensor, " layer"]:
        """One curve: a method's accuracy per layer on a split."""
        return self.values[
            _index(READING_METHODS, method, "method"),
            _index(READING_SPLITS, split, "split"),
            _index(READING_SCORES, score, "score"),
        ]

    def chosen_layer(self, method: str = "pca") -> str:
        """The label of the layer chosen on the dev split for ``method``."""
        return self.axis_labels(3)[self.chosen[_index(READING_METHODS, method, "method")]]

    def direction(self, layer: int | str | None = None, method: str = "pca") -> Float[Tensor, " d"]:
        """The unit direction read at ``layer`` (default: the layer chosen on dev).

        Positive prompts project higher. Scale it for steering (Zou et al. add a multiple of the
        reading vector to the residual stream).

        Raises:
            ValueError: a layer that was not read (the message lists those read), or ``random``.
        """
        m = _index(READING_METHODS[:_KEPT], method, "method with a kept direction")
        labels = self.axis_labels(3)
        if layer is None:
            column = self.chosen[m]
        elif str(layer) in labels:
            column = labels.index(str(layer))
        else:
            raise UserInputError(f"layer {layer} was not read; choose one of {labels}")
        return self.directions[m, column].clone()  # a copy: the result stays as it was saved

    def summary(self, rows: int = 10) -> str:
        """Each method at its dev-chosen layer: test accuracies with their 95% intervals."""
        head = (
            f"RepresentationReading ({self.contrast}) on {self.meta.model}: {self.site} at the "
            f"{'last token' if self.position == 'last' else 'mean over tokens'}, "
            f"{len(self.fit_pairs)} fit / {len(self.dev_pairs)} dev / {len(self.test_pairs)} "
            f"test pairs; layer chosen on dev"
        )
        lines = [
            head,
            f"{'method':22s} {'layer':>6s}  {'test pairwise':>21s}  "
            f"{'test unpaired':>21s}  {'dev pairwise':>12s}",
        ]
        for m, method in enumerate(READING_METHODS):
            column = self.chosen[m]
            cells = []
            for s in range(len(READING_SCORES)):
                low, high = self.intervals[m, s, column].tolist()
                value = float(self.values[m, 2, s, column])
                cells.append(f"{value:.3f} [{low:.3f}, {high:.3f}]")
            dev = float(self.values[m, 1, 0, column])
            name = method if method != "random" else f"random (mean of {self.n_random})"
            lines.append(
                f"{name:22s} {self.axis_labels(3)[column]:>6s}  {cells[0]:>21s}  "
                f"{cells[1]:>21s}  {dev:12.3f}"
            )
        return "\n".join(lines)

    def default_title(self, **options: object) -> str:
        return f"{self.contrast} reading — {self.meta.model}"

    def _draw(self, title: str, *, score: str = "pairwise") -> Figure:
        """Test accuracy against layer, one line per method, the reading vector's 95% interval
        shaded and the layer chosen on dev marked."""
        from lmsci_mi.viz.plots import plot_layer_scores

        s = _index(READING_SCORES, score, "score")
        fig = plot_layer_scores(
            self.axis_labels(3),
            {
                _LEGEND.get(m, m).format(n=self.n_random): self.accuracy(m, "test", score)
                for m in READING_METHODS
            },
            band=(self.intervals[0, s, :, 0], self.intervals[0, s, :, 1]),
            x_label=f"layer ({self.site})",
            y_label=f"test {score} accuracy",
            title=title,
        )
        ax = fig.axes[0]
        ax.axvline(
            self.chosen[0],
            color="black",
            linewidth=0.8,
            linestyle="-.",
            label=f"chosen on dev: {self.chosen_layer()}",
        )
        ax.axhline(0.5, color="grey", linewidth=0.5, linestyle=":")
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize=8)
        return fig


# ---------------------------------------------------------------------- the method


def reading_vector(
    differences: Float[Tensor, "*layer pair d"],
    *,
    randomise_signs: bool = True,
    seed: int = 0,
) -> Float[Tensor, "*layer d"]:
    """The LAT reading vector: the first principal component of the pairs' differences.

    Zou et al. shuffle the order within each pair before taking differences. It matters: PCA
    centres the differences, and when every pair is in the same order their mean *is* the concept,
    so centring removes it and the first PC follows whatever else varies. With a random half of
    the pairs swapped (``±δ``) the concept becomes variance, which the first PC finds. Exactly half
    are swapped (a seeded random half), so a small set cannot draw all pairs one way.

    Args:
        differences: positive minus negative activation, one row per pair (any leading axes,
            e.g. layers; a pair is swapped at every layer alike).
        randomise_signs: swap a random half of the pairs first (False reproduces the failure).
        seed: which half is swapped.

    Returns:
        Unit vectors, oriented so that the mean difference projects positive (positive prompts
        project higher).

    Raises:
        ValueError: fewer than two pairs.

    >>> concept = torch.zeros(8); concept[2] = 1.0
    >>> noise = 0.3 * torch.randn(40, 8, generator=torch.Generator().manual_seed(0))
    >>> float(reading_vector(3 * concept + noise) @ concept) > 0.95
    True
    """
    return _first_component(differences, randomise_signs, seed)[0]


def pairwise_accuracy(
    positive: Float[Tensor, "*batch pair"], negative: Float[Tensor, "*batch pair"]
) -> Float[Tensor, "*batch"]:
    """The share of pairs whose positive member projects higher than its negative one; a tie
    counts half (a direction that cannot tell them apart scores 0.5).

    >>> pairwise_accuracy(torch.tensor([3.0, 1.0, 2.0]), torch.tensor([1.0, 2.0, 2.0]))
    tensor(0.5000)
    """
    return _pairwise_correct(positive, negative).mean(-1)


_DEFAULT = ReadingConfig()


def representation_reading(
    lm: LensModel,
    pairs: ContrastPairs | Sequence[tuple[str, str]],
    *,
    config: ReadingConfig = _DEFAULT,
) -> RepresentationReading:
    """Read a concept at every layer (or ``config.layers``) of ``config.site`` with LAT.

    One batched collection runs every prompt once (``2 × pairs`` prompts; the forward pass stops
    after the deepest layer read). Reads the model only; every hook is removed on exit, errors
    included.

    Args:
        lm: the model.
        pairs: contrast pairs (:func:`lmsci_mi.data.contrasts.contrast_pairs`) or a list of
            ``(positive prompt, negative prompt)``.
        config: site, layers, position, split, seeds and the baselines' settings.

    Returns:
        A :class:`RepresentationReading`: accuracies per method, split and layer, the reading
        vectors, and the layer chosen on the dev split.

    Raises:
        ValueError: fewer than 4 pairs (2 fit, 1 dev, 1 test), too few fit pairs for the
            fractions, a layer the model does not have, or a site that does not exist.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.data.contrasts import contrast_pairs
    >>> lm = load_model("toy-2l")
    >>> config = ReadingConfig(n_random=4, bootstrap=100)
    >>> reading = representation_reading(lm, contrast_pairs("sentiment", n_pairs=16), config=config)
    >>> reading.values.shape, reading.axes
    (torch.Size([4, 3, 2, 2]), ('method', 'split', 'score', 'layer'))
    >>> reading.direction(1).shape, round(float(reading.direction(1).norm()), 4)
    (torch.Size([64]), 1.0)
    """
    if not isinstance(pairs, ContrastPairs):
        pairs = ContrastPairs.from_pairs(list(pairs))
    _check_pair_count(len(pairs))
    hooks, layer_labels = layer_hooks(config.site, config.layers, lm.cfg.n_layers, lm.name)
    acts = _collect(lm, [*pairs.positive, *pairs.negative], hooks, config)
    n = len(pairs)
    meta = lm.meta(
        (*pairs.positive, *pairs.negative),
        seed=config.seed,
        data_source=pairs.source,
        params=config.params(),
    )
    return reading_from_activations(
        acts[:, :n],
        acts[:, n:],
        config=config,
        meta=meta,
        layer_labels=layer_labels,
        hooks=hooks,
        contrast=pairs.name,
    )


def reading_from_activations(
    positive: Float[Tensor, "layer pair d"],
    negative: Float[Tensor, "layer pair d"],
    *,
    config: ReadingConfig = _DEFAULT,
    meta: Meta | None = None,
    layer_labels: Sequence[str] | None = None,
    hooks: Sequence[str] = (),
    contrast: str = "contrast",
) -> RepresentationReading:
    """LAT and its baselines on activations already collected: what
    :func:`representation_reading` runs after its forward pass.

    Directions and the unpaired threshold are fitted on the fit pairs, the probe's strength and
    the layer are chosen on the dev pairs, and the test pairs are only scored: changing a test
    pair's activations changes no direction, threshold or chosen layer.

    Args:
        positive, negative: ``[layer, pair, d]`` activations of each pair's two prompts.
        config: the split, seeds and baselines (``site``, ``layers`` and ``position`` are only
            recorded).
        meta: provenance (default: a record naming no model).
        layer_labels: a label per layer (default ``"0"``, ``"1"``, ...).
        hooks, contrast: recorded in the result.

    Returns:
        A :class:`RepresentationReading`.

    Raises:
        ValueError: mismatched shapes, fewer than 4 pairs or too few fit pairs.

    >>> g = torch.Generator().manual_seed(0)
    >>> concept = torch.zeros(2, 1, 16); concept[1, 0, 3] = 2.0   # planted at layer 1 only
    >>> negative = torch.randn(2, 40, 16, generator=g)
    >>> positive = torch.randn(2, 40, 16, generator=g) + concept
    >>> reading = reading_from_activations(positive, negative, config=ReadingConfig(bootstrap=0))
    >>> reading.chosen_layer(), float(reading.accuracy("pca")[1]) > 0.8
    ('1', True)
    """
    if positive.shape != negative.shape or positive.ndim != 3:
        raise UserInputError(
            f"positive {tuple(positive.shape)} and negative {tuple(negative.shape)} activations "
            "must both be [layer, pair, d]"
        )
    n_layers, n_pairs, _ = positive.shape
    _check_pair_count(n_pairs)
    labels = tuple(layer_labels) if layer_labels is not None else tuple(map(str, range(n_layers)))
    if len(labels) != n_layers:
        raise UserInputError(f"{len(labels)} layer labels for {n_layers} layers; give one per layer")
    split = Split.random(n_pairs, fractions=config.fractions, seed=config.seed)
    if len(split.train) < 2:
        raise UserInputError(
            f"only {len(split.train)} of {n_pairs} pairs fall in the fit split; a principal "
            "component needs 2: raise fractions[0] or give more pairs"
        )
    positive, negative = positive.float(), negative.float()
    directions, explained = _directions(positive, negative, split, config)
    per_pair, intervals = _score(positive, negative, directions, split, config)
    values = torch.stack([c.mean(-1) for c in per_pair], 1)  # [method, split, score, layer]
    return RepresentationReading(
        values=values.cpu(),
        axes=("method", "split", "score", "layer"),
        labels=(READING_METHODS, READING_SPLITS, READING_SCORES, labels),
        meta=meta
        if meta is not None
        else Meta(model="activations", sink=None, seed=config.seed, params=config.params()),
        contrast=contrast,
        site=config.site,
        hooks=tuple(hooks),
        position=config.position,
        directions=directions[:_KEPT].cpu(),
        intervals=intervals.cpu(),
        explained=explained.cpu(),
        chosen=_choose_layers(values[:, 1]),
        fit_pairs=tuple(split.train.tolist()),
        dev_pairs=tuple(split.val.tolist()),
        test_pairs=tuple(split.test.tolist()),
        n_random=config.n_random,
    )


# ---------------------------------------------------------------------- collection


def _check_pair_count(n_pairs: int) -> None:
    if n_pairs < 4:
        raise UserInputError(
            f"representation reading needs at least 4 contrast pairs (2 to fit the reading "
            f"vector, 1 dev, 1 test), got {n_pairs}; give more pairs (60 or more for a "
            "meaningful test accuracy)"
        )


_MEAN_CHUNK = 64  # texts per collection when averaging: every token of the chunk sits in memory


def _collect(
    lm: LensModel, texts: list[str], hooks: list[str], config: ReadingConfig
) -> Float[Tensor, "layer text d"]:
    """One vector per text and hook: the last token's, or the mean over the text's tokens."""
    settings = CollectConfig(token_budget=config.token_budget, autocast=config.autocast)
    if config.position == "last":
        acts = collect_activations(lm, texts, hooks, positions="last", config=settings)
        return acts.stack(hooks).flatten(2).to(lm.device)
    # Every token of every layer would be [layer, tokens, d] (1.4 GB for 400 prompts of 50
    # tokens on a 30-layer model), so the means are taken chunk by chunk.
    means = []
    for start in range(0, len(texts), _MEAN_CHUNK):
        chunk = texts[start : start + _MEAN_CHUNK]
        acts = collect_activations(lm, chunk, hooks, positions="all", config=settings)
        rows = acts.stack(hooks).flatten(2)  # [layer, token, d]
        sums = torch.zeros(rows.shape[0], len(chunk), rows.shape[2], dtype=rows.dtype)
        sums.index_add_(1, acts.example, rows)
        counts = torch.bincount(acts.example, minlength=len(chunk)).to(rows.dtype)
        means.append(sums / counts[None, :, None])
    return torch.cat(means, 1).to(lm.device)


# ---------------------------------------------------------------------- directions


def _first_component(
    differences: Tensor, randomise_signs: bool, seed: int
) -> tuple[Tensor, Tensor]:
    """The oriented first principal component of the (signed, centred) differences, and the share
    of their variance it explains."""
    n_pairs = differences.shape[-2]
    if n_pairs < 2:
        raise UserInputError(f"a principal component needs at least 2 pairs, got {n_pairs}")
    signed = differences
    if randomise_signs:
        order = torch.randperm(n_pairs, generator=torch.Generator().manual_seed(seed))
        signs = torch.ones(n_pairs)
        signs[order[: n_pairs // 2]] = -1.0
        signed = differences * signs.to(differences)[:, None]
    centred = signed - signed.mean(-2, keepdim=True)
    _, singular, vh = torch.linalg.svd(centred, full_matrices=False)
    component = vh[..., 0, :]
    explained = singular[..., 0] ** 2 / (singular**2).sum(-1).clamp_min(1e-12)
    return _orient(component, differences.mean(-2)), explained


def _orient(directions: Tensor, mean_difference: Tensor) -> Tensor:
    """Unit directions, flipped where the mean difference (positive minus negative) projects
    negative, so that positive prompts project higher."""
    unit = directions / directions.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    sign = torch.where((unit * mean_difference).sum(-1, keepdim=True) < 0, -1.0, 1.0)
    return unit * sign


def _directions(
    positive: Tensor, negative: Tensor, split: Split, config: ReadingConfig
) -> tuple[Float[Tensor, "method layer d"], Float[Tensor, " layer"]]:
    """Every method's direction per layer, fitted on the fit pairs: PC1, the difference of
    means, the probe's, then ``n_random`` random directions; all oriented the same way."""
    fit = split.train.to(positive.device)
    differences = (positive - negative)[:, fit]  # [layer, fit pair, d]
    pca, explained = _first_component(differences, config.randomise_signs, config.seed)
    mean_difference = differences.mean(1)
    probe = _probe_directions(positive, negative, split, config)
    n_layers, _, d = positive.shape
    # Drawn on the host with their own seed, so the random baseline is the same on any device.
    generator = torch.Generator().manual_seed(config.seed + 1)
    random = torch.randn(config.n_random, n_layers, d, generator=generator).to(positive)
    stacked = torch.cat([pca[None], mean_difference[None], probe[None], random])
    return _orient(stacked, mean_difference[None]), explained


def _probe_directions(
    positive: Tensor, negative: Tensor, split: Split, config: ReadingConfig
) -> Float[Tensor, "layer d"]:
    """A logistic probe per layer on single prompts (fit pairs' prompts to train, dev pairs' to
    choose the strength), as a direction in activation space: the logit difference's gradient
    ``(w_positive - w_negative) / std`` (the probe reads standardised features)."""
    n = positive.shape[1]
    features = torch.cat([positive, negative], 1)  # rows: positive prompts, then negative ones
    labels = torch.cat([torch.ones(n, dtype=torch.long), torch.zeros(n, dtype=torch.long)])

    def rows(pairs: Tensor) -> Tensor:
        return torch.cat([pairs, pairs + n])

    prompt_split = Split(rows(split.train), rows(split.val), rows(split.test))
    probe_config = ProbeConfig(
        l2_grid=config.probe_l2_grid, control=False, bootstrap=0, seed=config.seed
    )
    fits, _ = fit_probes(features, labels.to(features.device), prompt_split, probe_config)
    # classes are (0, 1): column 1 is the positive prompts' logit
    return torch.stack([(f.probe.weight[:, 1] - f.probe.weight[:, 0]) / f.probe.std for f in fits])


# ---------------------------------------------------------------------- scoring


def _pairwise_correct(positive: Tensor, negative: Tensor) -> Tensor:
    return (positive > negative).float() + 0.5 * (positive == negative).float()


def _best_threshold(positive: Tensor, negative: Tensor) -> Tensor:
    """Per leading index, the threshold on the projections ``[..., pair]`` that best separates
    positive from negative prompts ("positive if above"): a midpoint between sorted values."""
    n = positive.shape[-1]
    values = torch.cat([positive, negative], -1)
    is_positive = torch.cat([torch.ones(n), torch.zeros(n)]).to(values)
    ordered, order = values.sort(-1)
    labels = is_positive[order]
    # candidate j lies between ordered[j-1] and ordered[j]: the first j values are called negative
    padded = torch.cat([ordered[..., :1] - 1, ordered, ordered[..., -1:] + 1], -1)
    candidates = (padded[..., :-1] + padded[..., 1:]) / 2
    zero = torch.zeros_like(labels[..., :1])
    negatives_below = torch.cat([zero, (1 - labels).cumsum(-1)], -1)
    positives_below = torch.cat([zero, labels.cumsum(-1)], -1)
    accuracy = negatives_below + (n - positives_below)
    return candidates.gather(-1, accuracy.argmax(-1, keepdim=True))[..., 0]


def _score(
    positive: Tensor,
    negative: Tensor,
    directions: Tensor,
    split: Split,
    config: ReadingConfig,
) -> tuple[list[Tensor], Tensor]:
    """Per split, the per-pair correctness ``[method, score, layer, pair]`` (random directions
    averaged), and the test scores' bootstrap intervals ``[method, score, layer, 2]``."""
    project_pos = torch.einsum("lnd,kld->kln", positive, directions)
    project_neg = torch.einsum("lnd,kld->kln", negative, directions)
    fit = split.train.to(positive.device)
    threshold = _best_threshold(project_pos[..., fit], project_neg[..., fit])[..., None]
    per_split = []
    for pairs in (split.train, split.val, split.test):
        pos, neg = (
            project_pos[..., pairs.to(positive.device)],
            project_neg[..., pairs.to(positive.device)],
        )
        pairwise = _pairwise_correct(pos, neg)
        unpaired = ((pos > threshold).float() + (neg <= threshold).float()) / 2
        correct = torch.stack([pairwise, unpaired], 1)  # [direction, score, layer, pair]
        per_split.append(torch.cat([correct[:_KEPT], correct[_KEPT:].mean(0, keepdim=True)]))
    return per_split, _bootstrap(per_split[2], config)


def _bootstrap(correct: Tensor, config: ReadingConfig) -> Tensor:
    """95% percentile intervals of the mean over pairs, resampling the test pairs."""
    if config.bootstrap == 0:
        return torch.full((*correct.shape[:3], 2), math.nan)
    means = bootstrap_replicates(correct, n_resamples=config.bootstrap, seed=config.seed + 2)
    return percentile_bounds(means).float().cpu()  # means: [method, score, layer, draw]


def _choose_layers(dev: Float[Tensor, "method score layer"]) -> tuple[int, ...]:
    """Per method, the layer with the best dev pairwise accuracy; ties go to the better dev
    unpaired accuracy, then to the earlier layer."""
    chosen = []
    for scores in dev.tolist():
        pairwise, unpaired = scores
        chosen.append(max(range(len(pairwise)), key=lambda i: (pairwise[i], unpaired[i], -i)))
    return tuple(chosen)


def _index(names: Sequence[str], name: str, what: str) -> int:
    if name not in names:
        raise UnknownNameError(f"unknown {what} {name!r}; choose one of {list(names)}")
    return list(names).index(name)

"""The causal role of massive activations and super weights: ablations against random controls.

Zeroing (or setting to their mean) the massive activations of Sun et al. (2024, arXiv:2402.17762,
``lib/hook.py`` ``set_zero``/``set_mean``), zeroing or scaling a super weight of Yu et al. (2024,
arXiv:2411.07191) and their ``removeSW_restoreSA`` (remove the weight, restore the super
activation), each against random coordinates of the same layers or matrix, measured on held-out
standard-library prose (perplexity) and on the fact and IOI sets (accuracy). Uses circuits'
public ``LogitDiff`` (the project's IOI metric), one direction only.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from lmsci_mi.circuits.metrics import LogitDiff
from lmsci_mi.config import Config, config, paper
from lmsci_mi.data.facts import load_facts
from lmsci_mi.data.ioi import ioi_dataset
from lmsci_mi.data.text_corpus import STDLIB_TEXT_SOURCE, text_chunks
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.positions import Exclude
from lmsci_mi.readout import centres, frozen_norm, post_mlp_norm
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import hook_name, weight_name
from lmsci_mi.stats import Interval, bootstrap_interval, wilson_interval
from lmsci_mi.weights import WeightEdit

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "SENSITIVITY_SCALES",
    "AblationEffect",
    "ControlSpread",
    "MassiveActivationAblation",
    "MassiveCoordinate",
    "OutlierAblationConfig",
    "OutlierAblations",
    "OutlierIntervention",
    "OutlierPositions",
    "SuperWeightCoordinate",
    "SuperWeightRestoreActivation",
    "SuperWeightScaling",
    "ablate_massive_activations",
    "massive_means",
    "outlier_ablations",
    "random_massive_controls",
    "random_weight_controls",
    "remove_super_weight_restore_activation",
    "scale_super_weights",
    "sensitivity_interventions",
    "super_activation",
]

logger = logging.getLogger(__name__)

_SUN = "Sun et al. 2024, locuslab/massive-activations"
_YU = "Yu et al. 2024, mengxiayu/LLMSuperWeight"

SENSITIVITY_SCALES: tuple[float, ...] = (0.0, 0.2, 0.5, 0.8, 1.0, 1.5, 2.0, 3.0)
"""Yu et al.'s super-weight scales (README, ``manual_scaling_SO_<s>``)."""


# ------------------------------------------------------------------------------ coordinates


@dataclass(frozen=True, order=True)
class MassiveCoordinate:
    """One massive activation's coordinate: dimension ``dim`` of the residual stream after block
    ``layer`` (``blocks.{layer}.hook_resid_post``, the block output Sun et al. hook).

    >>> str(MassiveCoordinate(1, 5))
    'L1.d5'
    """

    layer: int
    dim: int

    def __str__(self) -> str:
        return f"L{self.layer}.d{self.dim}"


@dataclass(frozen=True, order=True)
class SuperWeightCoordinate:
    """A super weight in Yu et al.'s coordinates: ``down_proj.weight[row, col]`` of block ``layer``,
    ``row`` the output channel (``d_model``), ``col`` the input channel (``d_mlp``).

    TransformerLens stores the down-projection as ``W_out`` ``[d_mlp, d_model]``, the transpose,
    so the entry is ``blocks[layer].mlp.W_out[col, row]``.

    >>> str(SuperWeightCoordinate(2, 7, 30))
    'L2.W_out[col 30, row 7]'
    """

    layer: int
    row: int
    col: int

    def __str__(self) -> str:
        return f"L{self.layer}.W_out[col {self.col}, row {self.row}]"


MassiveLike = MassiveCoordinate | tuple[int, int]
WeightLike = SuperWeightCoordinate | tuple[int, int, int]


def _massive_coords(lm: LensModel, items: Sequence[MassiveLike]) -> tuple[MassiveCoordinate, ...]:
    """The coordinates as :class:`MassiveCoordinate`, checked against ``lm``'s shape."""
    coords = tuple(c if isinstance(c, MassiveCoordinate) else MassiveCoordinate(*c) for c in items)
    if not coords:
        raise UserInputError("no massive activations given: pass (layer, dim) pairs, e.g. [(1, 5)]")
    n_layers, d_model = lm.cfg.n_layers, lm.cfg.d_model
    for c in coords:
        if not 0 <= c.layer < n_layers:
            raise UserInputError(f"massive activation {c}: layer {c.layer} does not exist; "
                                 f"{lm.name} has layers 0–{n_layers - 1}")
        if not 0 <= c.dim < d_model:
            raise UserInputError(f"massive activation {c}: dimension {c.dim} is outside the residual "
                                 f"stream; {lm.name} has d_model {d_model} (dims 0–{d_model - 1})")
    if len(set(coords)) != len(coords):
        raise UserInputError(f"a massive activation is given twice in {[str(c) for c in coords]}")
    return coords


def _weight_coords(lm: LensModel, items: Sequence[WeightLike]) -> tuple[SuperWeightCoordinate, ...]:
    """The coordinates as :class:`SuperWeightCoordinate`, checked against ``W_out``'s shape."""
    coords = tuple(c if isinstance(c, SuperWeightCoordinate) else SuperWeightCoordinate(*c) for c in items)
    if not coords:
        raise UserInputError("no super weights given: pass (layer, row, col) triples, e.g. [(1, 7, 30)]")
    if lm.cfg.attn_only:
        raise UserInputError(f"{lm.name} has no MLPs, so no down-projection to hold a super weight")
    n_layers, d_model, d_mlp = lm.cfg.n_layers, lm.cfg.d_model, int(lm.cfg.d_mlp or 0)
    for c in coords:
        if not 0 <= c.layer < n_layers:
            raise UserInputError(f"super weight {c}: layer {c.layer} does not exist; "
                                 f"{lm.name} has layers 0–{n_layers - 1}")
        if not (0 <= c.row < d_model and 0 <= c.col < d_mlp):
            raise UserInputError(
                f"super weight (layer {c.layer}, row {c.row}, col {c.col}) is outside W_out: rows are "
                f"output channels 0–{d_model - 1} (d_model), cols input channels 0–{d_mlp - 1} "
                "(d_mlp); TransformerLens's W_out is [d_mlp, d_model], so give down_proj.weight's "
                "[row, col], not W_out's [col, row]"
            )
    if len(set(coords)) != len(coords):
        raise UserInputError(f"a super weight is given twice in {[str(c) for c in coords]}")
    return coords


def _mlp(lm: LensModel, layer: int) -> Any:
    """Block ``layer``'s MLP module (``W_out``, ``b_out``)."""
    blocks: Any = lm.model.blocks
    return blocks[layer].mlp


def _w_out(lm: LensModel, layer: int) -> Tensor:
    """Block ``layer``'s ``W_out`` ``[d_mlp, d_model]``, detached (read, never written through)."""
    return _mlp(lm, layer).W_out.detach()


# ------------------------------------------------------------------------------ positions


@config
class OutlierPositions(Config):
    """Where an outlier intervention acts: absolute positions and/or every position holding one of
    ``token_ids`` (Sun et al. set the massive activations at the tokens where they occur: the
    first token, the first "." or newline). Position 0 is the sink token where the model has one.

    >>> OutlierPositions(positions=(0,), token_ids=(13,)).mask(torch.tensor([[5, 13, 7, 13]])).tolist()
    [[True, True, False, True]]
    """

    positions: tuple[int, ...] = field(default=(0,), metadata={
        "help": "absolute positions (0: the sink token where there is one)", "ge": 0})
    token_ids: tuple[int, ...] = field(default=(), metadata={
        "help": "also every position holding one of these tokens", "ge": 0})

    def validate(self) -> None:
        if not self.positions and not self.token_ids:
            raise UserInputError("OutlierPositions selects nothing: give positions=(0,) or token_ids")

    @classmethod
    def from_exclude(cls, exclude: Exclude) -> OutlierPositions:
        """The positions an :class:`~lmsci_mi.positions.Exclude` leaves out (what a finder of
        massive activations reports for other tools to skip), as the positions to act on; the
        sink is position 0.

        >>> OutlierPositions.from_exclude(Exclude(token_ids=(13,)))
        OutlierPositions(positions=(0,), token_ids=(13,))
        """
        positions = tuple(sorted({0, *exclude.positions} if exclude.sink else set(exclude.positions)))
        return cls(positions=positions, token_ids=exclude.token_ids)

    def exclusion(self) -> Exclude:
        """The same positions as an :class:`~lmsci_mi.positions.Exclude` (what the running pass's
        :class:`~lmsci_mi.hooks.RunningExclusion` recognises them by)."""
        return Exclude(sink=False, positions=self.positions, token_ids=self.token_ids)

    def mask(self, tokens: Int[Tensor, "batch pos"]) -> Bool[Tensor, "batch pos"]:
        """True at the selected positions of a token batch."""
        return ~self.exclusion().keep(tokens)

    def describe(self) -> str:
        parts = [f"positions {list(self.positions)}"] if self.positions else []
        parts += [f"tokens {list(self.token_ids)}"] if self.token_ids else []
        return " and ".join(parts)


def _chosen(running: Any, activation: Tensor) -> Bool[Tensor, "batch pos 1"]:
    """The selected positions of the running pass (the complement of the exclusion's keep)."""
    return ~running.keep(activation)


# ------------------------------------------------------------------------------ interventions


@contextmanager
def ablate_massive_activations(
    lm: LensModel,
    activations: Sequence[MassiveLike],
    *,
    positions: OutlierPositions | None = None,
    values: Sequence[float] | None = None,
) -> Iterator[None]:
    """Set massive activations to zero (Sun et al.'s ``set_zero``) or to given values (their
    ``set_mean``, with :func:`massive_means`) for the forward passes inside the block.

    The residual stream after each named block (``resid_post``) has its dimension ``dim`` written
    at the selected positions; every other entry passes unchanged. Changes no weight; the hooks
    leave on exit, also on error.

    Args:
        lm: the model.
        activations: ``(layer, dim)`` pairs or :class:`MassiveCoordinate`.
        positions: where (default: position 0).
        values: one value per activation (default: zeros).

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> with ablate_massive_activations(lm, [(0, 5)]), lm.hooks.capture(hook_name("resid_post", 0)) as cap:
    ...     _ = lm(torch.tensor([[1, 2, 3]]))
    >>> cap[hook_name("resid_post", 0)][0, :, 5].tolist()[0]  # position 0 only
    0.0
    """
    coords = _massive_coords(lm, activations)
    fills = [0.0] * len(coords) if values is None else [float(v) for v in values]
    if len(fills) != len(coords):
        raise UserInputError(f"{len(fills)} values for {len(coords)} massive activations: give one each")
    running = lm.running_exclusion((positions or OutlierPositions()).exclusion())
    by_layer: dict[int, list[tuple[int, float]]] = {}
    for coord, fill in zip(coords, fills, strict=True):
        by_layer.setdefault(coord.layer, []).append((coord.dim, fill))

    def writer(entries: list[tuple[int, float]]) -> Callable[[Tensor, Any], Tensor]:
        dims = torch.tensor([d for d, _ in entries])
        fill = torch.tensor([v for _, v in entries])

        def write(activation: Tensor, hook: Any) -> Tensor:
            index = dims.to(activation.device)
            out = activation.clone()
            out[..., index] = torch.where(_chosen(running, activation), fill.to(activation),
                                          activation[..., index])
            return out

        return write

    fwd = [*running.hooks(), *[(hook_name("resid_post", layer), writer(entries))
                               for layer, entries in sorted(by_layer.items())]]
    with lm.hooks.hooks(fwd=fwd, label="massive activation ablation"):
        yield


@contextmanager
def scale_super_weights(
    lm: LensModel, weights: Sequence[WeightLike], scale: float = 0.0
) -> Iterator[WeightEdit]:
    """Multiply super weights by ``scale`` (0: Yu et al.'s pruning; their sensitivity sweep is
    :data:`SENSITIVITY_SCALES`) for the block; the weights come back bit for bit on exit, also on
    error (a :class:`~lmsci_mi.weights.WeightEdit`). Changes the model inside the block only.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> w = lm.model.blocks[1].mlp.W_out
    >>> before = w.clone()
    >>> with scale_super_weights(lm, [(1, 7, 30)], scale=0.0):
    ...     float(w[30, 7].detach())
    0.0
    >>> torch.equal(w, before)
    True
    """
    if not math.isfinite(scale) or scale < 0:
        raise UserInputError(f"scale must be a finite number >= 0 (Yu et al. use {list(SENSITIVITY_SCALES)}), "
                             f"not {scale}")
    coords = _weight_coords(lm, weights)
    deltas: dict[str, Tensor] = {}
    with torch.no_grad():
        for c in coords:
            w_out = _w_out(lm, c.layer)
            delta = deltas.setdefault(weight_name("W_out", c.layer), torch.zeros_like(w_out))
            delta[c.col, c.row] = (scale - 1.0) * w_out[c.col, c.row]
    with WeightEdit(lm, deltas).apply() as edit:
        yield edit


def _down_proj_row(lm: LensModel, layer: int, row: int, post: Tensor) -> Float[Tensor, "batch pos"]:
    """Channel ``row`` of the raw down-projection output from its input ``post`` (``mlp_post``):
    what ``F.linear(post, W_out.T, b_out)`` gives there, with the weights as they are now."""
    mlp = _mlp(lm, layer)
    return post @ mlp.W_out[:, row].to(post) + mlp.b_out[row].to(post)


@torch.no_grad()
def super_activation(lm: LensModel, tokens: Int[Tensor, "batch pos"], weight: WeightLike) -> Float[Tensor, "batch pos"]:
    """The super activation of ``weight`` on ``tokens``: channel ``row`` of the raw output of block
    ``layer``'s down-projection, before any post-norm (Gemma's ``ln2_post``), with the model as it
    is (one pass up to that block). Reads the model only.

    >>> from lmsci_mi import load_model
    >>> super_activation(load_model("toy-2l"), torch.tensor([[1, 2, 3]]), (1, 7, 30)).shape
    torch.Size([1, 3])
    """
    (coord,) = _weight_coords(lm, [weight])
    post_site = hook_name("mlp_post", coord.layer)
    out_site = hook_name("mlp_out", coord.layer)
    with lm.hooks.capture([post_site, out_site]) as cap:
        lm(tokens, stop_at_layer=coord.layer + 1)
    if post_mlp_norm(lm, coord.layer) is None:
        # Without a post-norm, hook_mlp_out is the down-projection's output itself.
        return cap[out_site][..., coord.row]
    return _down_proj_row(lm, coord.layer, coord.row, cap[post_site])


@contextmanager
def remove_super_weight_restore_activation(
    lm: LensModel,
    weight: WeightLike,
    clean_values: Float[Tensor, "batch pos"] | float,
    *,
    positions: OutlierPositions | None = None,
) -> Iterator[WeightEdit]:
    """Yu et al.'s ``removeSW_restoreSA``: zero the super weight, and at the selected positions set
    channel ``row`` of that block's down-projection output back to ``clean_values`` (the super
    activation with the weight: :func:`super_activation` on the same tokens, measured first).

    On a model with a post-MLP norm (Gemma 3) the raw output is not hooked, so at the selected
    positions the block's MLP output is recomputed from the down-projection's input with the
    restored channel and passed through the norm; elsewhere it is the running pass's own. Weights
    come back bit for bit and the hooks leave on exit, also on error.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> tokens = torch.tensor([[1, 2, 3]])
    >>> clean = super_activation(lm, tokens, (1, 7, 30))
    >>> with remove_super_weight_restore_activation(lm, (1, 7, 30), clean):  # position 0 restored
    ...     now = super_activation(lm, tokens, (1, 7, 30))
    >>> [bool(torch.equal(now[:, p], clean[:, p])) for p in (0, 1)]
    [True, False]
    """
    (coord,) = _weight_coords(lm, [weight])
    running = lm.running_exclusion((positions or OutlierPositions()).exclusion())
    norm = post_mlp_norm(lm, coord.layer)
    post_site = hook_name("mlp_post", coord.layer)
    seen: dict[str, Tensor] = {}

    def clean_row(activation: Tensor) -> Tensor:
        value = torch.as_tensor(clean_values, device=activation.device, dtype=activation.dtype)
        if value.ndim and tuple(value.shape) != tuple(activation.shape[:2]):
            raise UserInputError(
                f"clean super-activation values of shape {tuple(value.shape)} for a pass of shape "
                f"{tuple(activation.shape[:2])}: measure them with super_activation(lm, tokens, weight) "
                "on the same tokens, or give one number"
            )
        return value

    def restore(activation: Tensor, hook: Any) -> Tensor:
        chosen = _chosen(running, activation)[..., 0]
        if norm is None:
            out = activation.clone()
            out[..., coord.row] = torch.where(chosen, clean_row(activation), activation[..., coord.row])
            return out
        post = seen.pop("post")
        mlp = _mlp(lm, coord.layer)
        raw = F.linear(post, mlp.W_out.T, mlp.b_out)
        raw[..., coord.row] = torch.where(chosen, clean_row(raw), raw[..., coord.row])
        # The post-norm's divisor moves with the restored channel: recomputed, as the norm would.
        centred = raw - raw.mean(-1, keepdim=True) if centres(norm) else raw
        scale = (centred.pow(2).mean(-1, keepdim=True) + float(getattr(norm, "eps", lm.cfg.eps))).sqrt()
        recomputed = frozen_norm(norm, raw, scale, bias=True).to(activation.dtype)
        return torch.where(chosen[..., None], recomputed, activation)

    def keep_post(activation: Tensor, hook: Any) -> None:
        seen["post"] = activation

    fwd = [*running.hooks(), (hook_name("mlp_out", coord.layer), restore)]
    if norm is not None:
        fwd.insert(0, (post_site, keep_post))
    with scale_super_weights(lm, [coord], 0.0) as edit, lm.hooks.hooks(fwd=fwd, label="restore super activation"):
        yield edit


@torch.no_grad()
def massive_means(
    lm: LensModel,
    tokens: Int[Tensor, "batch pos"],
    activations: Sequence[MassiveLike],
    positions: OutlierPositions | None = None,
) -> tuple[float, ...]:
    """Each activation's mean over the selected positions of ``tokens`` (the values Sun et al.'s
    ``set_mean`` writes), from one pass with the model as it is. Reads the model only.

    Raises:
        UserInputError: no selected position in ``tokens``.
    """
    coords = _massive_coords(lm, activations)
    chosen = (positions or OutlierPositions()).mask(tokens.cpu())
    if not bool(chosen.any()):
        raise UserInputError("the reference tokens hold none of the selected positions, so there is no mean")
    sites = sorted({hook_name("resid_post", c.layer) for c in coords})
    with lm.hooks.capture(sites) as cap:
        lm(tokens, stop_at_layer=max(c.layer for c in coords) + 1)
    return tuple(float(cap[hook_name("resid_post", c.layer)][..., c.dim].cpu()[chosen].double().mean())
                 for c in coords)


# ------------------------------------------------------------------------------ random controls


def random_massive_controls(
    lm: LensModel, activations: Sequence[MassiveLike], n_draws: int, seed: int = 0
) -> list[tuple[MassiveCoordinate, ...]]:
    """``n_draws`` sets of random activations, each as many as ``activations`` and in the same
    layers: every coordinate is replaced by a dimension of its layer drawn uniformly (seeded) among
    those that hold none of the given activations, distinct within a draw.

    >>> from lmsci_mi import load_model
    >>> draws = random_massive_controls(load_model("toy-2l"), [(0, 5), (1, 9)], n_draws=3, seed=0)
    >>> len(draws), [c.layer for c in draws[0]]
    (3, [0, 1])
    """
    coords = _massive_coords(lm, activations)
    if n_draws < 1:
        raise UserInputError(f"n_draws must be at least 1, not {n_draws}")
    taken = {(c.layer, c.dim) for c in coords}
    generator = torch.Generator().manual_seed(seed)
    draws = []
    for _ in range(n_draws):
        used: set[tuple[int, int]] = set()
        draw = []
        for c in coords:
            allowed = [d for d in range(lm.cfg.d_model) if (c.layer, d) not in taken | used]
            if not allowed:
                raise UserInputError(f"layer {c.layer} has no dimension left for a random control")
            dim = allowed[int(torch.randint(len(allowed), (1,), generator=generator))]
            used.add((c.layer, dim))
            draw.append(MassiveCoordinate(c.layer, dim))
        draws.append(tuple(draw))
    return draws


def _nearest_pool(lm: LensModel, coord: SuperWeightCoordinate, excluded: set[SuperWeightCoordinate], pool: int) -> list[SuperWeightCoordinate]:
    """The ``pool`` entries of the same ``W_out`` whose |value| is closest to ``coord``'s."""
    w_out = _w_out(lm, coord.layer)
    target = w_out[coord.col, coord.row].abs()
    distance = (w_out.abs() - target).abs().double()
    for other in excluded:
        if other.layer == coord.layer:
            distance[other.col, other.row] = math.inf
    k = min(pool, distance.numel() - len(excluded))
    index = torch.topk(distance.flatten(), k, largest=False).indices
    cols, rows = index // w_out.shape[1], index % w_out.shape[1]
    return [SuperWeightCoordinate(coord.layer, int(r), int(c)) for c, r in zip(cols, rows, strict=True)]


def random_weight_controls(
    lm: LensModel, weights: Sequence[WeightLike], n_draws: int, seed: int = 0, pool: int = 64
) -> list[tuple[SuperWeightCoordinate, ...]]:
    """``n_draws`` sets of random weights of (nearly) equal magnitude, one per given weight, in the
    same ``W_out``: each is drawn uniformly (seeded) from the ``pool`` entries whose |value| is
    closest to its weight's, never a given weight, distinct within a draw and, while the pool
    lasts, across draws. Equal magnitude removes as much weight as the candidate does, so the
    comparison isolates where the weight sits, not how large it is; a true super weight is an
    outlier, so read the drawn entries' |value| (the result records them) beside the candidate's.

    >>> from lmsci_mi import load_model
    >>> draws = random_weight_controls(load_model("toy-2l"), [(1, 7, 30)], n_draws=2, seed=0)
    >>> len(draws), draws[0][0].layer
    (2, 1)
    """
    coords = _weight_coords(lm, weights)
    if n_draws < 1 or pool < 1:
        raise UserInputError(f"n_draws and pool must be at least 1, not {n_draws} and {pool}")
    pools = [_nearest_pool(lm, c, set(coords), pool) for c in coords]
    generator = torch.Generator().manual_seed(seed)
    drawn: list[set[SuperWeightCoordinate]] = [set() for _ in coords]
    draws = []
    for _ in range(n_draws):
        draw: list[SuperWeightCoordinate] = []
        for i, candidates in enumerate(pools):
            order = torch.randperm(len(candidates), generator=generator).tolist()
            fresh = [candidates[j] for j in order if candidates[j] not in draw and candidates[j] not in drawn[i]]
            reuse = [candidates[j] for j in order if candidates[j] not in draw]
            if not (fresh or reuse):
                raise UserInputError(f"the pool of {len(candidates)} weights is too small for {len(coords)} "
                                     "weights in one draw; raise pool")
            pick = (fresh or reuse)[0]
            drawn[i].add(pick)
            draw.append(pick)
        draws.append(tuple(draw))
    return draws


# ------------------------------------------------------------------------------ named interventions


class OutlierIntervention(Protocol):
    """What :func:`outlier_ablations` runs: an intervention that draws its own random control."""

    def describe(self, lm: LensModel) -> str:
        """The coordinates and what is done to them, for the result's record."""
        ...

    def prepared(self, lm: LensModel, reference: Tensor, config: OutlierAblationConfig) -> OutlierIntervention:
        """Itself with anything measured on the reference text filled in (``set_mean``'s means)."""
        ...

    def controls(self, lm: LensModel, config: OutlierAblationConfig) -> list[OutlierIntervention]:
        """``config.n_control_draws`` seeded random stand-ins, done the same way."""
        ...

    def applied(self, lm: LensModel, tokens: Tensor) -> AbstractContextManager[Any]:
        """The intervention for passes over ``tokens`` (restored on exit)."""
        ...


@dataclass(frozen=True)
class MassiveActivationAblation:
    """Massive activations set to zero, or to their mean on the reference text when the config
    says ``massive_fill="mean"`` (or to ``values`` given here), at ``positions``; the control sets
    as many random dimensions of the same layers at the same positions the same way."""

    activations: tuple[MassiveLike, ...]
    positions: OutlierPositions = field(default_factory=OutlierPositions)
    values: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        coords = tuple(c if isinstance(c, MassiveCoordinate) else MassiveCoordinate(*c) for c in self.activations)
        object.__setattr__(self, "activations", coords)

    def describe(self, lm: LensModel) -> str:
        fill = "0" if self.values is None else str([round(v, 4) for v in self.values])
        return f"{', '.join(map(str, self.activations))} at {self.positions.describe()} set to {fill}"

    def prepared(self, lm: LensModel, reference: Tensor, config: OutlierAblationConfig) -> MassiveActivationAblation:
        if config.massive_fill == "mean" and self.values is None:
            return replace(self, values=massive_means(lm, reference, self.activations, self.positions))
        return self

    def controls(self, lm: LensModel, config: OutlierAblationConfig) -> list[OutlierIntervention]:
        draws = random_massive_controls(lm, self.activations, config.n_control_draws, config.seed)
        return [replace(self, activations=draw, values=None) for draw in draws]

    def applied(self, lm: LensModel, tokens: Tensor) -> AbstractContextManager[Any]:
        return ablate_massive_activations(lm, self.activations, positions=self.positions, values=self.values)


def _weights_text(lm: LensModel, weights: Sequence[WeightLike]) -> str:
    """Each weight with its |value| now (a control's magnitude is read beside its candidate's)."""
    coords = _weight_coords(lm, weights)
    return ", ".join(f"{w} (|w| {float(_w_out(lm, w.layer)[w.col, w.row].abs()):.4g})" for w in coords)


@dataclass(frozen=True)
class SuperWeightScaling:
    """Super weights multiplied by ``scale`` (0: removed; Yu et al.'s sensitivity sweep:
    :func:`sensitivity_interventions`); the control scales random weights of equal magnitude in
    the same matrices (:func:`random_weight_controls`) by the same factor."""

    weights: tuple[WeightLike, ...]
    scale: float = 0.0

    def __post_init__(self) -> None:
        coords = tuple(c if isinstance(c, SuperWeightCoordinate) else SuperWeightCoordinate(*c) for c in self.weights)
        object.__setattr__(self, "weights", coords)

    def describe(self, lm: LensModel) -> str:
        return f"{_weights_text(lm, self.weights)} scaled by {self.scale:g}"

    def prepared(self, lm: LensModel, reference: Tensor, config: OutlierAblationConfig) -> SuperWeightScaling:
        return self

    def controls(self, lm: LensModel, config: OutlierAblationConfig) -> list[OutlierIntervention]:
        draws = random_weight_controls(lm, self.weights, config.n_control_draws, config.seed, config.control_pool)
        return [replace(self, weights=draw) for draw in draws]

    def applied(self, lm: LensModel, tokens: Tensor) -> AbstractContextManager[Any]:
        return scale_super_weights(lm, self.weights, self.scale)


@dataclass(frozen=True)
class SuperWeightRestoreActivation:
    """Yu et al.'s ``removeSW_restoreSA``: the super weight zeroed, its super activation restored at
    ``positions`` from a clean pass over the same tokens; the control does the same to a random
    weight of equal magnitude in the same matrix (restoring that weight's output channel)."""

    weight: WeightLike
    positions: OutlierPositions = field(default_factory=OutlierPositions)

    def __post_init__(self) -> None:
        if not isinstance(self.weight, SuperWeightCoordinate):
            object.__setattr__(self, "weight", SuperWeightCoordinate(*self.weight))

    def describe(self, lm: LensModel) -> str:
        return f"{_weights_text(lm, [self.weight])} zeroed, its activation restored at {self.positions.describe()}"

    def prepared(self, lm: LensModel, reference: Tensor, config: OutlierAblationConfig) -> SuperWeightRestoreActivation:
        return self

    def controls(self, lm: LensModel, config: OutlierAblationConfig) -> list[OutlierIntervention]:
        draws = random_weight_controls(lm, [self.weight], config.n_control_draws, config.seed, config.control_pool)
        return [replace(self, weight=draw[0]) for draw in draws]

    @contextmanager
    def applied(self, lm: LensModel, tokens: Tensor) -> Iterator[WeightEdit]:
        clean = super_activation(lm, tokens, self.weight)  # with the weight, before it goes
        with remove_super_weight_restore_activation(lm, self.weight, clean, positions=self.positions) as edit:
            yield edit


def sensitivity_interventions(
    weights: Sequence[WeightLike], scales: Sequence[float] = SENSITIVITY_SCALES
) -> dict[str, SuperWeightScaling]:
    """Yu et al.'s sensitivity sweep as named interventions: the super weights scaled by each of
    ``scales`` (their README's 0, 0.2, 0.5, 0.8, 1, 1.5, 2, 3).

    >>> list(sensitivity_interventions([(1, 7, 30)], (0.0, 2.0)))
    ['super weights x0', 'super weights x2']
    """
    return {f"super weights x{s:g}": SuperWeightScaling(tuple(weights), float(s)) for s in scales}  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ the measurement


@config
class OutlierAblationConfig(Config):
    """How :func:`outlier_ablations` measures: held-out text, the fact and IOI sets, the controls.

    The text is the standard library's prose (:func:`~lmsci_mi.data.text_corpus.text_chunks`):
    chunks ``[0, text_start)`` are left for finding the outliers (and the first
    ``n_reference_texts`` of them give ``set_mean``'s means); chunks ``[text_start, text_start +
    n_texts)`` are evaluated.
    """

    n_texts: int = field(default=64, metadata={"help": "held-out text chunks evaluated", "ge": 2})
    seq_len: int = field(default=256, metadata={
        "help": "tokens per chunk, the sink included", "ge": 8,
        **paper(4096, f"{_SUN} lib/eval_utils.py (seqlen=4096)",
                why="every condition and control draw is a pass over the text on a 2-core CPU; "
                    "256 keeps SmolLM2's 30 layers to seconds per condition")})
    text_start: int = field(default=256, metadata={
        "help": "the first evaluated chunk; earlier chunks are left for finding the outliers", "ge": 1})
    n_reference_texts: int = field(default=16, metadata={
        "help": "chunks 0.. whose selected positions give set_mean's means", "ge": 1})
    massive_fill: Literal["zero", "mean"] = field(default="zero", metadata={
        "help": "what massive activations are set to: 0 (Sun et al.'s set_zero) or their mean "
                "on the reference chunks (set_mean)"})
    n_control_draws: int = field(default=5, metadata={"help": "random control draws per intervention", "ge": 1})
    control_pool: int = field(default=64, metadata={
        "help": "a weight control is drawn from this many entries of the same W_out closest in |value|",
        "ge": 1})
    n_facts: int | None = field(default=None, metadata={"help": "facts of the fact set (None: all)", "ge": 1})
    n_ioi: int = field(default=60, metadata={"help": "IOI prompts", "ge": 1})
    batch_size: int = field(default=8, metadata={"help": "rows per forward pass", "ge": 1})
    n_resamples: int = field(default=1000, metadata={"help": "bootstrap resamples over texts", "ge": 10})
    seed: int = field(default=0, metadata={"help": "seed of the control draws, IOI prompts and bootstrap"})

    def validate(self) -> None:
        if self.n_reference_texts > self.text_start:
            raise UserInputError(
                f"n_reference_texts ({self.n_reference_texts}) must be <= text_start ({self.text_start}): "
                "the reference chunks come before the held-out ones")


@dataclass(frozen=True)
class _EvalData:
    """The held-out chunks, and the prompts read at their last token: the facts, then the IOI
    prompts, in one padded list (one pass serves both sets)."""

    texts: Int[Tensor, "text pos"]
    prompts: tuple[tuple[int, ...], ...]
    answers: Int[Tensor, " prompt"]
    wrongs: Int[Tensor, " prompt"]
    n_facts: int
    n_ioi: int


def _evaluation_data(
    lm: LensModel, cfg: OutlierAblationConfig, documents: Sequence[str] | None
) -> tuple[_EvalData, Tensor]:
    """The held-out chunks, the reference chunks, the facts (the first token of each true answer
    is the answer) and the IOI prompts (indirect object over subject)."""
    per_row = cfg.seq_len - 1 if lm.sink_token_id is not None else cfg.seq_len
    rows = text_chunks(lm, (cfg.text_start + cfg.n_texts) * per_row, seq_len=cfg.seq_len, documents=documents)
    facts = load_facts("facts")[: cfg.n_facts]
    prompts = [tuple(lm.encode(f.rewrite_prompt)) for f in facts]
    answers = [lm.continuation_ids(f.target_true)[0] for f in facts]
    wrongs = list(answers)  # a fact has no wrong token: its logit difference is never read
    ioi = ioi_dataset(lm, cfg.n_ioi, seed=cfg.seed)
    for batch in ioi.batches:
        prompts += [tuple(row) for row in batch.tokens.tolist()]
        answers += batch.io_token.tolist()
        wrongs += batch.s_token.tolist()
    data = _EvalData(rows[cfg.text_start : cfg.text_start + cfg.n_texts], tuple(prompts),
                     torch.tensor(answers), torch.tensor(wrongs), len(facts), len(ioi))
    return data, rows[: cfg.n_reference_texts]


def _final_resid(lm: LensModel, tokens: Tensor) -> Tensor:
    """The residual stream after the last block: the logits are read from it through the readout."""
    return lm(tokens, stop_at_layer=lm.cfg.n_layers)


def _text_nll(lm: LensModel, tokens: Tensor) -> Float[Tensor, " batch"]:
    """Each row's mean next-token NLL over its positions (the first predicts the token after the sink)."""
    logits = lm.unembed(_final_resid(lm, tokens)[:, :-1])  # readout.logits, the final norm live
    targets = tokens[:, 1:].to(logits.device)
    nll = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")
    return nll.view(targets.shape).double().mean(-1).cpu()


def _last_logits(lm: LensModel, tokens: Tensor, lengths: Tensor) -> Float[Tensor, "batch vocab"]:
    """Logits at each row's last real token (right padding never reaches it)."""
    resid = _final_resid(lm, tokens)
    rows = torch.arange(resid.shape[0], device=resid.device)
    return lm.unembed(resid[rows, lengths.to(resid.device) - 1]).float()


@torch.no_grad()
def _evaluate(
    lm: LensModel, spec: OutlierIntervention | None, data: _EvalData, batch_size: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-text NLL, per-fact top-1 hit and per-IOI-prompt logit difference under ``spec``."""

    def under(tokens: Tensor) -> AbstractContextManager[Any]:
        return nullcontext() if spec is None else spec.applied(lm, tokens)

    nll = []
    for start in range(0, len(data.texts), batch_size):
        batch = data.texts[start : start + batch_size].to(lm.device)
        with under(batch):
            nll.append(_text_nll(lm, batch))
    top, diff = [], []
    for start in range(0, len(data.prompts), batch_size):
        padded = lm.pad_batch(data.prompts[start : start + batch_size])
        with under(padded.tokens):
            logits = _last_logits(lm, padded.tokens, padded.lengths)
        top.append(logits.argmax(-1).cpu())
        answers, wrongs = data.answers[start : start + batch_size], data.wrongs[start : start + batch_size]
        diff.append(LogitDiff(answers, wrongs)(logits).double().cpu())
    predicted, logit_diff = torch.cat(top), torch.cat(diff)
    hits = predicted[: data.n_facts] == data.answers[: data.n_facts]
    return torch.cat(nll), hits, logit_diff[data.n_facts :]


def _named(
    interventions: Mapping[str, OutlierIntervention] | Sequence[OutlierIntervention], lm: LensModel
) -> dict[str, OutlierIntervention]:
    named = dict(interventions) if isinstance(interventions, Mapping) else {
        spec.describe(lm): spec for spec in interventions}
    if not named:
        raise UserInputError("no interventions given: pass e.g. {'zero massive': MassiveActivationAblation(((1, 5),))}")
    if "clean" in named:
        raise UserInputError("'clean' names the unmodified model; give the intervention another name")
    return named


@torch.no_grad()
def outlier_ablations(
    lm: LensModel,
    interventions: Mapping[str, OutlierIntervention] | Sequence[OutlierIntervention],
    config: OutlierAblationConfig | None = None,
    *,
    documents: Sequence[str] | None = None,
) -> OutlierAblations:
    """Run each intervention, and its random control draws, on held-out text and the fact and IOI
    sets: per-text mean NLL (perplexity), top-1 of each fact's answer, IOI logit difference.

    Every intervention is undone after each batch (weights bit for bit, no hook left), so the
    model is as it was on return. ``set_mean``'s means and nothing else are read from the
    reference chunks; the evaluated chunks are held out from them (see :class:`OutlierAblationConfig`).

    Args:
        lm: the model.
        interventions: ``{name: intervention}``, or interventions named by their description;
            each is a :class:`MassiveActivationAblation`, :class:`SuperWeightScaling` or
            :class:`SuperWeightRestoreActivation` (anything with :class:`OutlierIntervention`'s methods).
        config: :class:`OutlierAblationConfig`.
        documents: the text, one string per document (default: the standard library's prose,
            :func:`~lmsci_mi.data.text_corpus.stdlib_documents`), cut into chunks as the config says.

    Returns:
        :class:`OutlierAblations`; ``report()`` gives each intervention beside its control.

    >>> from lmsci_mi import load_model
    >>> small = OutlierAblationConfig(n_texts=2, seq_len=8, text_start=1, n_reference_texts=1,
    ...                               n_control_draws=1, n_facts=2, n_ioi=1, batch_size=4, n_resamples=10)
    >>> prose = ["The quick brown fox jumps over the lazy dog. " * 4]
    >>> zero = {"zero L0.d5": MassiveActivationAblation(((0, 5),))}
    >>> result = outlier_ablations(load_model("toy-2l"), zero, small, documents=prose)
    >>> result.conditions
    ('clean', 'zero L0.d5', 'zero L0.d5 / random 0')
    """
    cfg = config or OutlierAblationConfig()
    named = _named(interventions, lm)
    data, reference = _evaluation_data(lm, cfg, documents)
    plan: list[tuple[str, str, str, OutlierIntervention | None]] = [("clean", "clean", "", None)]
    for name, spec in named.items():
        plan.append((name, "intervention", name, spec.prepared(lm, reference, cfg)))
        plan += [(f"{name} / random {d}", "control", name, control.prepared(lm, reference, cfg))
                 for d, control in enumerate(spec.controls(lm, cfg))]
    nll, hits, diffs = [], [], []
    for i, (label, _, _, spec) in enumerate(plan):
        logger.info("outlier ablations: condition %d/%d (%s)", i + 1, len(plan), label)
        text_nll, fact_hit, logit_diff = _evaluate(lm, spec, data, cfg.batch_size)
        nll.append(text_nll)
        hits.append(fact_hit)
        diffs.append(logit_diff)
    stop = cfg.text_start + cfg.n_texts
    text = STDLIB_TEXT_SOURCE if documents is None else f"{len(documents)} given documents"
    source = (f"{text}: chunks {cfg.text_start}..{stop - 1} of {cfg.seq_len} tokens (held out; "
              f"chunks 0..{cfg.text_start - 1} left for finding outliers); facts: {data.n_facts} of "
              f"the shipped set (selected on SmolLM2); IOI: {data.n_ioi} prompts, seed {cfg.seed}")
    return OutlierAblations(
        values=torch.stack(nll),
        axes=("condition", "text"),
        labels=(tuple(p[0] for p in plan), ()),
        meta=lm.meta(seed=cfg.seed, data_source=source, params=cfg.params()),
        fact_correct=torch.stack(hits),
        ioi_logit_diff=torch.stack(diffs),
        kinds=tuple(p[1] for p in plan),
        parents=tuple(p[2] for p in plan),
        descriptions=tuple("no intervention" if s is None else s.describe(lm) for *_, s in plan),
        text_rows=(cfg.text_start, stop),
    )


# ------------------------------------------------------------------------------ the result


@dataclass(frozen=True)
class ControlSpread:
    """A figure over the random control's draws: each draw's value, their mean, standard deviation
    (NaN for one draw) and range.

    >>> ControlSpread.of([1.0, 2.0, 3.0]).as_dict()["mean"]
    2.0
    """

    draws: tuple[float, ...]
    mean: float
    sd: float
    low: float
    high: float

    @classmethod
    def of(cls, draws: Sequence[float]) -> ControlSpread:
        values = tuple(float(v) for v in draws)
        if not values:
            return cls((), math.nan, math.nan, math.nan, math.nan)
        x = torch.tensor(values, dtype=torch.float64)
        sd = float(x.std()) if len(values) > 1 else math.nan
        return cls(values, float(x.mean()), sd, min(values), max(values))

    def as_dict(self) -> dict[str, Any]:
        return {"draws": list(self.draws), "mean": self.mean, "sd": self.sd, "low": self.low, "high": self.high}

    def __str__(self) -> str:
        return f"{self.mean:.4g} (sd {self.sd:.2g}, {self.low:.4g}–{self.high:.4g}, {len(self.draws)} draws)"


@dataclass(frozen=True)
class AblationEffect:
    """One intervention beside its random control.

    Attributes:
        perplexity_ratio: perplexity under the intervention over the clean one, exp(mean NLL −
            clean mean NLL), with a paired percentile-bootstrap interval over texts.
        control_ratio: the same ratio for each control draw (point estimates), their mean and spread.
        fact_accuracy, ioi_accuracy: top-1 accuracy on the facts and the share of IOI prompts with
            logit difference > 0, with Wilson intervals; ``control_*`` over the draws.
    """

    intervention: str
    description: str
    perplexity_ratio: Interval
    control_ratio: ControlSpread
    fact_accuracy: Interval
    control_fact_accuracy: ControlSpread
    ioi_accuracy: Interval
    control_ioi_accuracy: ControlSpread

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"intervention": self.intervention, "description": self.description}
        for name in ("perplexity_ratio", "control_ratio", "fact_accuracy", "control_fact_accuracy",
                     "ioi_accuracy", "control_ioi_accuracy"):
            out[name] = getattr(self, name).as_dict()
        return out


def _perplexity_ratio(a: Tensor, b: Tensor, axis: int = -1) -> Tensor:
    return torch.exp(a.mean(axis) - b.mean(axis))


def _perplexity(a: Tensor, axis: int = -1) -> Tensor:
    return torch.exp(a.mean(axis))


@result_type
class OutlierAblations(Result):
    """Outlier interventions and their random controls on held-out text and the fact and IOI sets.

    ``values`` is ``[condition, text]``: each held-out chunk's mean next-token NLL. Conditions are
    ``"clean"``, then each intervention followed by its control draws (``"<name> / random <d>"``).

    Attributes:
        fact_correct: ``[condition, fact]`` whether the answer's first token is the top-1 prediction.
        ioi_logit_diff: ``[condition, prompt]`` logit(IO) − logit(S) at the last position.
        kinds: per condition, ``"clean"``, ``"intervention"`` or ``"control"``.
        parents: per condition, the intervention it belongs to (``""`` for clean).
        descriptions: per condition, the coordinates and what was done (weights with their |value|).
        text_rows: the evaluated chunks ``[start, stop)`` of the standard-library text.
    """

    fact_correct: Tensor
    ioi_logit_diff: Tensor
    kinds: tuple[str, ...]
    parents: tuple[str, ...]
    descriptions: tuple[str, ...]
    text_rows: tuple[int, int]

    @property
    def conditions(self) -> tuple[str, ...]:
        return tuple(self.labels[0])

    @property
    def interventions(self) -> tuple[str, ...]:
        return tuple(c for c, k in zip(self.conditions, self.kinds, strict=True) if k == "intervention")

    def _row(self, condition: str) -> int:
        if condition not in self.conditions:
            raise UserInputError(f"no condition {condition!r}; conditions are {list(self.conditions)}")
        return self.conditions.index(condition)

    def controls_of(self, intervention: str) -> tuple[str, ...]:
        """The control draws' condition names of ``intervention``."""
        self._row(intervention)
        return tuple(c for c, k, p in zip(self.conditions, self.kinds, self.parents, strict=True)
                     if k == "control" and p == intervention)

    @property
    def _n_resamples(self) -> int:
        value = self.meta.params.get("n_resamples")
        return value if isinstance(value, int) else 1000

    def perplexity(self, condition: str = "clean", *, seed: int = 0) -> Interval:
        """exp(mean per-text NLL), with a percentile-bootstrap interval over texts."""
        return bootstrap_interval(self.values[self._row(condition)].double(), _perplexity, seed=seed,
                                  n_resamples=self._n_resamples)

    def perplexity_ratio(self, condition: str, *, seed: int = 0) -> Interval:
        """Perplexity of ``condition`` over the clean one, with a paired bootstrap over texts."""
        pair = (self.values[self._row(condition)].double(), self.values[self._row("clean")].double())
        return bootstrap_interval(pair, _perplexity_ratio, seed=seed, n_resamples=self._n_resamples)

    def fact_accuracy(self, condition: str = "clean") -> Interval:
        hits = self.fact_correct[self._row(condition)]
        return wilson_interval(int(hits.sum()), hits.numel())

    def ioi_accuracy(self, condition: str = "clean") -> Interval:
        """The share of IOI prompts whose logit difference IO − S is positive (Wilson interval)."""
        wins = self.ioi_logit_diff[self._row(condition)] > 0
        return wilson_interval(int(wins.sum()), wins.numel())

    def effect(self, intervention: str, *, seed: int = 0) -> AblationEffect:
        """``intervention`` beside its random control."""
        controls = self.controls_of(intervention)
        return AblationEffect(
            intervention=intervention,
            description=self.descriptions[self._row(intervention)],
            perplexity_ratio=self.perplexity_ratio(intervention, seed=seed),
            control_ratio=ControlSpread.of([self.perplexity_ratio(c, seed=seed).estimate for c in controls]),
            fact_accuracy=self.fact_accuracy(intervention),
            control_fact_accuracy=ControlSpread.of([self.fact_accuracy(c).estimate for c in controls]),
            ioi_accuracy=self.ioi_accuracy(intervention),
            control_ioi_accuracy=ControlSpread.of([self.ioi_accuracy(c).estimate for c in controls]),
        )

    def report(self, *, seed: int = 0) -> tuple[AblationEffect, ...]:
        """Every intervention beside its control, in the order run."""
        return tuple(self.effect(name, seed=seed) for name in self.interventions)

    def summary(self, rows: int = 10) -> str:
        clean = self.perplexity()
        lines = [f"OutlierAblations on {self.meta.model} (sink {self.meta.sink!r}), {self.values.shape[1]} "
                 f"held-out texts: clean perplexity {clean}, facts {self.fact_accuracy()}, IOI {self.ioi_accuracy()}"]
        for e in self.report()[:rows]:
            lines.append(f"  {e.intervention}: perplexity x{e.perplexity_ratio} vs control x{e.control_ratio}; "
                         f"facts {e.fact_accuracy} vs {e.control_fact_accuracy.mean:.3g}; "
                         f"IOI {e.ioi_accuracy} vs {e.control_ioi_accuracy.mean:.3g}")
        return "\n".join(lines)

    def _draw(self, title: str) -> Figure:
        from matplotlib.figure import Figure

        report = self.report()
        fig = Figure(figsize=(6.5, 0.45 * len(report) + 1.6))
        ax = fig.add_subplot()
        for y, e in enumerate(report):
            r = e.perplexity_ratio
            ax.errorbar([r.estimate], [y], xerr=[[r.estimate - r.low], [r.high - r.estimate]], fmt="o",
                        color="tab:red", capsize=3, label="intervention (95% bootstrap)" if y == 0 else None)
            ax.scatter(e.control_ratio.draws, [y + 0.2] * len(e.control_ratio.draws), color="grey", s=12,
                       label="random control draws" if y == 0 else None)
        ax.set_yticks(range(len(report)), [e.intervention for e in report])
        ax.invert_yaxis()
        shown = [v for e in report for v in (e.perplexity_ratio.low, e.perplexity_ratio.high, *e.control_ratio.draws)]
        if shown and max(shown) / max(min(shown), 1e-12) > 20:  # a model destroyed: orders of magnitude
            ax.set_xscale("log")
        ax.axvline(1.0, color="black", linewidth=0.5)
        ax.set_xlabel(f"perplexity / clean perplexity ({self.values.shape[1]} held-out texts)")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        return fig

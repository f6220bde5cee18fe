"""Activation-addition steering vectors: the mean difference (ActAdd-style, after Turner et al.
2023) takes the difference of mean activations between two prompt sets at one layer and site; any
other direction (a probe's weight, a concept direction, an SAE feature) becomes a vector the same
way. A vector is added with a coefficient through the hook registry, over an explicit
:class:`~lmsci_mi.hooks.PositionScope`. CAA as Rimsky et al. (2024) define it, read at the answer
letter of A/B items, is :func:`lmsci_mi.steering.caa.caa_vector`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import field
from typing import TYPE_CHECKING, Literal

import torch
from jaxtyping import Float
from torch import Tensor

from lmsci_mi.collect import CollectConfig, collect_activations
from lmsci_mi.config import Config, config
from lmsci_mi.errors import UserInputError
from lmsci_mi.hooks import PositionScope
from lmsci_mi.model import LensModel
from lmsci_mi.positions import Exclude, resolve_exclude
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import hook_name, layer_of, layout_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "MeanDifferenceConfig",
    "SteeringVector",
    "mean_difference_vector",
    "steering_vector",
]


@config
class MeanDifferenceConfig(Config):
    """Where a mean-difference (ActAdd-style) vector is read.

    Attributes:
        layer: the block whose ``site`` is read (and later steered).
        site: a per-position vector site of the site table (``resid_post``, ``resid_pre``,
            ``mlp_out``, ``attn_out``).
        read: each prompt's ``"last"`` token, or the ``"mean"`` over its tokens but the sink.
            (CAA proper reads the answer letter of A/B prompts: :func:`~lmsci_mi.steering.caa.caa_vector`.)
        token_budget: tokens per forward pass while reading.
        exclude: the positions a ``"mean"`` read leaves out (None: the sink token, where the
            model puts one in front).
    """

    layer: int = field(default=0, metadata={"help": "layer read and steered", "ge": 0})
    site: str = field(default="resid_post", metadata={"help": "site read and steered"})
    read: Literal["last", "mean"] = field(
        default="last",
        metadata={"help": "read each prompt's last token or its mean", "choices": ("last", "mean")},
    )
    token_budget: int = field(default=8192, metadata={"help": "tokens per forward pass", "ge": 1})
    exclude: Exclude | None = field(
        default=None, metadata={"help": "positions a mean read leaves out", "cli": False}
    )


@result_type
class SteeringVector(Result):
    """A vector to add at one hook point (``values``, axis ``("d",)``).

    Attributes:
        hook: the hook point it is added at (``blocks.6.hook_resid_post``).
        method: where it comes from (``"mean_difference"``, ``"caa"``, ``"probe"``, ``"concept"``, ...).
        n_positive: prompts on the positive side (0 for a given direction).
        n_negative: prompts on the negative side.
    """

    hook: str
    method: str
    n_positive: int = 0
    n_negative: int = 0

    @property
    def layer(self) -> int | None:
        return layer_of(self.hook)

    @property
    def norm(self) -> float:
        return float(self.values.norm())

    def unit(self) -> SteeringVector:
        """The same vector scaled to norm 1 (coefficients then count in activation units)."""
        return self.scaled(1.0)

    def scaled(self, norm: float) -> SteeringVector:
        """The same direction with norm ``norm``."""
        if self.norm == 0:
            raise UserInputError("the vector is zero: it has no direction to scale")
        return SteeringVector(
            values=self.values * (norm / self.norm), axes=self.axes, labels=self.labels,
            meta=self.meta, hook=self.hook, method=self.method,
            n_positive=self.n_positive, n_negative=self.n_negative,
        )

    @contextmanager
    def apply(
        self,
        lm: LensModel,
        coefficient: float = 1.0,
        scope: PositionScope | None = None,
        *,
        exclude: Exclude | None = None,
    ) -> Iterator[None]:
        """Add ``coefficient × vector`` at its hook over ``scope`` while the block runs.

        The default scope is every position but the sink (``PositionScope.all(exclude=Exclude())``
        for a model with a sink; the sink's huge residual anchors attention, and ActAdd never
        meant to move it; CAA's positions are :func:`~lmsci_mi.steering.caa.caa_scope`).
        ``exclude`` leaves more positions alone, within any scope: chosen positions, and
        positions holding chosen tokens (massive-activation tokens, recognised in every pass by
        :class:`~lmsci_mi.hooks.RunningExclusion`). Under cached generation the scope is applied
        per row and per step, so greedy decoding gives the same tokens with and without the KV
        cache. Nothing is attached when the vector belongs to another model or does not fit this
        one (checked before entering). The model's weights are not changed.

        >>> from lmsci_mi import load_model
        >>> lm = load_model("toy-2l")
        >>> v = mean_difference_vector(lm, ["I love it"], ["I hate it"], MeanDifferenceConfig(layer=1))
        >>> with v.apply(lm, 4.0, PositionScope.from_last_prompt()):
        ...     text = lm.generate("The film was", 3)
        >>> len(lm.hooks.active())
        0
        """
        if self.meta.model != lm.name:
            raise UserInputError(
                f"this vector was built on {self.meta.model}, not {lm.name}: build it on the "
                "model it steers (residual directions do not carry over between models)"
            )
        check_fits(lm, self.hook, self.values)
        if scope is not None and not isinstance(scope, PositionScope):
            raise TypeError(f"scope must be a PositionScope, got {type(scope).__name__}")
        if scope is None:  # every position but the sink token, where the model puts one in front
            scope = PositionScope.all(exclude=_sink_token(lm))
        vector = self.values.to(lm.device)
        if exclude is not None and not exclude.by_position:
            with _add_where_kept(lm, self.hook, float(coefficient) * vector, scope, exclude):
                yield
            return
        if exclude is not None:
            scope = dataclasses.replace(scope, exclude=exclude.union(scope.exclude))
        with lm.hooks.add_vector(self.hook, vector, scale=float(coefficient), positions=scope):
            yield

    def summary(self, rows: int = 10) -> str:
        sides = f", {self.n_positive} vs {self.n_negative} prompts" if self.n_positive else ""
        return f"{self.method} steering vector at {self.hook} of {self.meta.model}: ‖v‖ {self.norm:.3f}{sides}"

    def default_title(self, **options: object) -> str:
        return self.summary()

    def _draw(self, title: str) -> Figure:
        """The vector's entries, largest magnitude first."""
        from matplotlib.figure import Figure

        fig = Figure(figsize=(6, 3))
        ax = fig.add_subplot()
        ax.plot(self.values.abs().sort(descending=True).values.tolist())
        ax.set_xlabel("entry (sorted by |value|)")
        ax.set_ylabel("|value|")
        ax.set_title(title, fontsize=8)
        fig.tight_layout()
        return fig


def _sink_token(lm: LensModel) -> Exclude:
    """What steering leaves alone by default: the sink token, where ``lm`` puts one in front
    (a sink-free model's first token is a word, and always was steered)."""
    return resolve_exclude(None, sink_token=lm.sink_token_id is not None)


@contextmanager
def _add_where_kept(
    lm: LensModel, site: str, shift: Tensor, scope: PositionScope, exclude: Exclude
) -> Iterator[None]:
    """Add ``shift`` at hook ``site`` over ``scope`` but where ``exclude`` leaves a position out,
    tokens included: a scope sees positions only, so the tokens are marked in each pass."""
    running = lm.running_exclusion(exclude)

    def add(activation: Tensor, hook: object) -> Tensor:
        batch, n_pos = activation.shape[:2]
        keep = scope.mask(batch, n_pos, activation.device)[..., None] & running.keep(activation)
        return activation + keep * shift.to(activation.dtype)

    with lm.hooks.hooks(fwd=[*running.hooks(), (site, add)], label=f"add_vector {site}"):
        yield


def check_fits(lm: LensModel, hook: str, vector: Tensor) -> None:
    """Raise ValueError unless ``hook`` is one of ``lm``'s per-position vector sites and
    ``vector`` is one vector as wide as its activation."""
    if hook not in lm.model.hook_dict:
        (hook,) = lm.hooks.resolve(hook)  # raises, listing the closest names
    if layout_of(hook).head_axis is not None or layout_of(hook).position_axis != 1:
        raise UserInputError(f"{hook!r} has no single vector per position: steer a residual, mlp_out or attn_out site")
    if vector.ndim != 1:
        raise UserInputError(f"a steering vector is one vector [d]; got shape {tuple(vector.shape)}")
    width = _site_width(lm, hook)
    if vector.shape[0] != width:
        raise UserInputError(
            f"the vector has width {vector.shape[0]} but {hook!r} of {lm.name} has width {width}: "
            "build it at the same site of the same model"
        )


def _site_width(lm: LensModel, hook: str) -> int:
    """The activation width at ``hook``, from a one-token forward that stops after its block."""
    layer = layer_of(hook)
    tokens = torch.tensor([[lm.sink_token_id or 0]], device=lm.device)
    with torch.no_grad(), lm.hooks.capture([hook]) as captured:
        lm.model(tokens, stop_at_layer=None if layer is None else layer + 1)
    return int(captured[hook].shape[-1])


def _site_hook(lm: LensModel, site: str, layer: int) -> str:
    if not 0 <= layer < lm.cfg.n_layers:
        raise UserInputError(f"layer {layer} is out of range for {lm.name}: it has layers 0…{lm.cfg.n_layers - 1}")
    (hook,) = lm.hooks.resolve(hook_name(site, layer))  # an unknown site lists the valid ones
    return hook


def mean_difference_vector(
    lm: LensModel,
    positive: Sequence[str],
    negative: Sequence[str],
    config: MeanDifferenceConfig | None = None,
) -> SteeringVector:
    """The mean difference (ActAdd-style): the mean activation over ``positive`` prompts minus that
    over ``negative``.

    Reads the model only. Turner et al. add the difference of one prompt pair; with one prompt per
    side and ``read="mean"`` this is close to ActAdd's pair. It is not CAA: Rimsky et al. read the
    answer letter of multiple-choice prompts and add the vector from the instruction's end on
    (:func:`lmsci_mi.steering.caa.caa_vector`).

    Args:
        lm: the model.
        positive: prompts showing the behaviour to add (at least one).
        negative: prompts showing its opposite (at least one).
        config: layer, site and read position.

    Returns:
        A :class:`SteeringVector` with the raw difference (not normalised: a coefficient of 1
        moves the activation by the average gap between the two sets).

    Raises:
        ValueError: an empty prompt set, a layer out of range, an unknown site.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> v = mean_difference_vector(lm, ["I love it", "Great"], ["I hate it", "Awful"],
    ...                            MeanDifferenceConfig(layer=1))
    >>> v.hook, tuple(v.values.shape), v.n_positive
    ('blocks.1.hook_resid_post', (64,), 2)
    """
    config = config or MeanDifferenceConfig()
    if not positive or not negative:
        raise UserInputError(
            f"give at least one prompt on each side (got {len(positive)} positive, "
            f"{len(negative)} negative)"
        )
    hook = _site_hook(lm, config.site, config.layer)
    collect = CollectConfig(token_budget=config.token_budget, progress=False)
    positions = "last" if config.read == "last" else "all"
    means = []
    for prompts in (positive, negative):
        acts = collect_activations(
            lm, list(prompts), [hook], positions=positions, config=collect, exclude=config.exclude
        )
        rows = acts.acts[hook].float()
        # One mean per prompt first, so a long prompt weighs as much as a short one.
        per_prompt = torch.zeros(len(prompts), rows.shape[-1]).index_add_(0, acts.example, rows)
        per_prompt /= torch.bincount(acts.example, minlength=len(prompts)).clamp_min(1)[:, None]
        means.append(per_prompt.mean(0))
    return SteeringVector(
        values=(means[0] - means[1]).to(lm.device),
        axes=("d",),
        labels=((),),
        meta=lm.meta([*positive, *negative], params=config.params(), data_source="mean difference"),
        hook=hook,
        method="mean_difference",
        n_positive=len(positive),
        n_negative=len(negative),
    )


def steering_vector(
    lm: LensModel,
    direction: Float[Tensor, " d"],
    layer: int,
    site: str = "resid_post",
    *,
    method: str = "direction",
) -> SteeringVector:
    """A steering vector from any direction: a probe's weight, a concept direction, an SAE
    feature's decoder row. The direction is kept as given (``.unit()`` or ``.scaled(norm)``
    sets its size).

    Raises:
        ValueError: a layer out of range, an unknown site, a direction of the wrong width.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> steering_vector(lm, torch.ones(64), 0, method="probe").unit().norm
    1.0
    """
    hook = _site_hook(lm, site, layer)
    direction = torch.as_tensor(direction).detach().float()
    check_fits(lm, hook, direction)
    return SteeringVector(
        values=direction.to(lm.device),
        axes=("d",),
        labels=((),),
        meta=lm.meta(params={"layer": layer, "site": site}, data_source=method),
        hook=hook,
        method=method,
    )

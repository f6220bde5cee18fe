"""Feature interventions: set transcoder features to chosen values and measure the logits, to test
an attribution graph's claim on the model (circuit-tracer's ``feature_intervention``).

At each intervened layer the MLP output becomes the transcoder's reconstruction with the chosen
features set, plus the transcoder's error at the running input, so everything the transcoder
misses is kept: ``out + Σ (value − a) · W_dec[i]`` at the feature's position. By default the real
model runs on from there (attention, norms and later MLPs recompute); a freeze scope gives
circuit-tracer's frozen variants. Every hook goes through the hook registry and leaves on exit.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any, Literal, get_args

import torch
from torch import Tensor

from lmsci_mi.circuits.graphs.replacement import (
    check_replacement,
    frozen_forward,
    last_logits,
    prompt_tokens,
)
from lmsci_mi.config import validate_choice
from lmsci_mi.errors import UserInputError
from lmsci_mi.results import Result, result_type

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel
    from lmsci_mi.transcoders.model import TranscoderSet

__all__ = [
    "Freeze",
    "Intervention",
    "InterventionEffect",
    "check_interventions",
    "feature_intervention",
    "feature_interventions",
]

Intervention = tuple[int, int, int, float]
"""``(layer, position, feature index, value)``: set that feature at that position to the value
(0 ablates it; twice its activation steers it up)."""

Freeze = Literal["none", "attention", "all"]
"""``"none"``: the real model runs on; ``"attention"``: attention patterns frozen at the clean
run (circuit-tracer's ``feature_intervention`` default); ``"all"``: patterns, norm divisors and
MLP outputs frozen, so only the direct effects remain (what the graph's edges predict)."""


def check_interventions(
    transcoders: TranscoderSet, interventions: Sequence[Intervention], n_pos: int
) -> list[Intervention]:
    """The interventions as plain tuples, each checked: a layer with a transcoder, a feature
    index within its width, a position within the prompt, a finite value.

    Raises:
        UserInputError: the first bad intervention, named with what would fix it.
    """
    if not interventions:
        raise UserInputError("no interventions given: give (layer, position, feature, value) tuples")
    checked = []
    for item in interventions:
        if len(item) != 4:
            raise UserInputError(f"an intervention is (layer, position, feature, value), not {item!r}")
        layer, position, feature, value = int(item[0]), int(item[1]), int(item[2]), float(item[3])
        width = transcoders[layer].d_transcoder  # a layer without a transcoder raises here
        if not 0 <= feature < width:
            raise UserInputError(
                f"feature {feature} is out of range: layer {layer}'s transcoder has {width} "
                f"features (0–{width - 1})"
            )
        if not 0 <= position < n_pos:
            raise UserInputError(
                f"position {position} is out of range for a prompt of {n_pos} tokens (0–{n_pos - 1})"
            )
        if not math.isfinite(value):
            raise UserInputError(f"the value of feature {feature} must be finite, not {value}")
        checked.append((layer, position, feature, value))
    return checked


@contextmanager
def feature_interventions(
    lm: LensModel,
    transcoders: TranscoderSet,
    interventions: Sequence[Intervention],
    tokens: Tensor,
    freeze: Freeze = "none",
) -> Iterator[None]:
    """Set features for the block: forward passes of ``tokens`` (``[pos]``; rows may repeat it)
    run with each intervened MLP output shifted by ``(value − a) · W_dec[i]``.

    ``a`` is the feature's running activation (its clean one under ``freeze="all"``, where
    effects must not pass through other MLPs, as circuit-tracer's constrained layers).
    """
    check_replacement(lm, transcoders)
    validate_choice("freeze", freeze, get_args(Freeze))
    checked = check_interventions(transcoders, interventions, int(tokens.numel()))
    by_layer: dict[int, list[tuple[int, int, float]]] = {}
    for layer, position, feature, value in checked:
        by_layer.setdefault(layer, []).append((position, feature, value))
    names = {layer: transcoders.hook_names(layer) for layer in by_layer}
    clean: dict[int, Tensor] = {}
    if freeze == "all":
        with torch.no_grad(), lm.hooks.capture([names[layer][0] for layer in by_layer]) as cap:
            lm.model(tokens.reshape(1, -1).to(lm.device))
            clean = {layer: transcoders[layer].encode(cap[names[layer][0]]) for layer in by_layer}
    inputs: dict[int, Tensor] = {}

    def record(act: Tensor, hook: Any, *, layer: int) -> None:
        inputs[layer] = act

    def shift(act: Tensor, hook: Any, *, layer: int) -> Tensor:
        tc = transcoders[layer]
        acts = clean[layer] if layer in clean else tc.encode(inputs[layer])
        delta = torch.zeros_like(act)
        for position, feature, value in by_layer[layer]:
            change = value - acts[:, position, feature].to(act.dtype)
            delta[:, position] += change[:, None] * tc.W_dec[feature].to(act.dtype)
        return act + delta

    fwd: list[tuple[str, Any]] = []
    for layer, (source, target) in names.items():
        fwd += [(source, _at(record, layer)), (target, _at(shift, layer))]
    with ExitStack() as stack:
        if freeze != "none":
            stack.enter_context(frozen_forward(lm, transcoders, tokens, scope=freeze))
        stack.enter_context(lm.hooks.hooks(fwd=fwd, label="feature intervention"))
        yield


def _at(fn: Any, layer: int) -> Any:
    def hook(act: Tensor, hook: Any) -> Tensor | None:
        return fn(act, hook, layer=layer)

    return hook


@result_type
class InterventionEffect(Result):
    """Logit changes at the last position when features are set: ``values[token]`` is the new
    logit minus the clean one, for ``token_ids``.

    Attributes:
        token_ids: the tokens of ``values``.
        clean_logits, new_logits: the last position's logits ``[vocab]`` without and with the
            interventions.
        interventions: the ``(layer, position, feature, value)`` set.
        freeze: what was frozen (:data:`Freeze`).
    """

    token_ids: Tensor
    clean_logits: Tensor
    new_logits: Tensor
    interventions: tuple[tuple[int, int, int, float], ...]
    freeze: str

    @property
    def demeaned_change(self) -> Tensor:
        """The change of each token's logit minus the mean logit: what a graph's logit rows
        predict (under ``freeze="all"``, before any soft cap)."""
        new = self.new_logits - self.new_logits.mean()
        old = self.clean_logits - self.clean_logits.mean()
        return (new - old)[self.token_ids]

    @property
    def probability_change(self) -> Tensor:
        """``[token]``: the change of each token's probability."""
        ids = self.token_ids
        return self.new_logits.softmax(-1)[ids] - self.clean_logits.softmax(-1)[ids]


def feature_intervention(
    lm: LensModel,
    transcoders: TranscoderSet,
    prompt: str | Sequence[int] | Tensor,
    interventions: Sequence[Intervention],
    *,
    token_ids: Sequence[int] | None = None,
    freeze: Freeze = "none",
    max_tokens: int = 256,
) -> InterventionEffect:
    """Set features and measure the logits at the last position (a graph's claim, tested).

    Reads the model only: the hooks leave on exit, also on error; weights are unchanged.

    Args:
        lm: the model.
        transcoders: the transcoders whose features are set.
        prompt: text (the sink is added) or token ids.
        interventions: ``(layer, position, feature index, value)`` tuples; take a graph
            feature's from ``graph.features[i]`` (its activation is ``graph.activations[i]``).
        token_ids: the tokens whose logits ``values`` reports (None: the clean top 10).
        freeze: ``"none"`` (the real model), ``"attention"`` or ``"all"`` (:data:`Freeze`).
        max_tokens: the prompt budget.

    Raises:
        UserInputError: a layer without a transcoder, a feature or position out of range, a
            prompt over the budget.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.transcoders import TranscoderSet
    >>> lm = load_model("toy-2l")
    >>> effect = feature_intervention(lm, TranscoderSet.random(lm, 32), "The cat sat", [(0, 2, 5, 0.0)])
    >>> tuple(effect.values.shape), len(lm.hooks.active())
    ((10,), 0)
    """
    tokens = prompt_tokens(lm, prompt, max_tokens)
    checked = check_interventions(transcoders, interventions, int(tokens.numel()))
    with torch.no_grad():
        clean = last_logits(lm, tokens[None])[0]
        with feature_interventions(lm, transcoders, checked, tokens, freeze):
            new = last_logits(lm, tokens[None])[0]
    ids = clean.topk(10).indices if token_ids is None else torch.as_tensor(list(token_ids))
    lm.check_tokens(ids)
    ids = ids.cpu().long()
    labels = tuple(lm.tokenizer.decode([i]) for i in ids.tolist()) if lm.tokenizer else ()
    text = prompt if isinstance(prompt, str) else ""
    return InterventionEffect(
        values=(new - clean).float().cpu()[ids], axes=("token",), labels=(labels,),
        meta=lm.meta([text], params={"freeze": freeze, "interventions": tuple(checked)}),
        token_ids=ids, clean_logits=clean.float().cpu(), new_logits=new.float().cpu(),
        interventions=tuple(checked), freeze=freeze,
    )

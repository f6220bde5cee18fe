"""The local replacement model of an attribution graph (Ameisen et al. 2025, "Circuit Tracing").

Exactly circuit-tracer v0.5.0's TransformerLens backend: every attention pattern and every norm's
divisor is frozen (a stop-gradient), each MLP's output is replaced in the gradient path by its
transcoder's linear skip (``skip + (mlp_out − skip).detach()``), so the model is linear in the
residual stream; features, error vectors (``mlp_out − reconstruction``, zeroed at the sink) and
token embeddings enter as constants. Every hook goes through the hook registry and leaves on exit.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from lmsci_mi import readout
from lmsci_mi.config import validate_choice
from lmsci_mi.errors import UserInputError
from lmsci_mi.readout import final_norm_module
from lmsci_mi.sites import hook_name

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel
    from lmsci_mi.transcoders.model import Transcoder, TranscoderSet

__all__ = [
    "FreezeScope",
    "ReplacementRun",
    "ReplacementTrace",
    "check_replacement",
    "frozen_forward",
    "is_frozen_site",
    "last_logits",
    "prompt_tokens",
    "replacement_gradients",
    "replacement_run",
]

ZERO_POSITIONS = 1
"""Positions ``[0, ZERO_POSITIONS)`` carry no feature and no error node: the attention sink (our
tokenisation policy puts it at position 0; circuit-tracer prepends a BOS there and zeroes it too,
as the first position's activations are outsized and explain nothing about the prompt)."""


def is_frozen_site(name: str) -> bool:
    """Whether a hook point is frozen in the replacement model: every attention pattern and every
    norm's divisor on the residual stream (``ln1``, ``ln2``, Gemma's ``ln1_post``/``ln2_post``,
    ``ln_final``). Gemma 3's q/k norms sit inside attention, upstream of the frozen pattern, so
    they need no freeze (circuit-tracer leaves them too).

    >>> is_frozen_site("blocks.3.attn.hook_pattern"), is_frozen_site("ln_final.hook_scale")
    (True, True)
    >>> is_frozen_site("blocks.3.hook_mlp_out"), is_frozen_site("blocks.0.attn.q_norm.hook_scale")
    (False, False)
    """
    if name.endswith("attn.hook_pattern"):
        return True
    return name.endswith(".hook_scale") and ".attn." not in name


def check_replacement(lm: LensModel, transcoders: TranscoderSet) -> None:
    """Raise :class:`~lmsci_mi.errors.UserInputError` unless ``transcoders`` replace every MLP of
    ``lm``: one transcoder per layer, of the model's width, at sites the model has.

    A layer without a transcoder cannot be made linear (its MLP would stay in the gradient path),
    so a graph needs them all.
    """
    transcoders.check(lm)
    missing = [layer for layer in range(lm.cfg.n_layers) if layer not in transcoders.layers]
    if missing:
        raise UserInputError(
            f"no transcoder for layer {missing[0]} of {lm.name} (the set covers layers "
            f"{sorted(transcoders.layers)}); an attribution graph replaces every MLP: train or "
            "load transcoders for all layers"
        )
    if lm.cfg.parallel_attn_mlp or lm.cfg.attn_only:
        raise UserInputError(
            f"{lm.name} has no sequential MLP after attention (parallel or attention-only "
            "blocks): the replacement model needs one MLP per block, read after attention"
        )
    names = [name for layer in range(lm.cfg.n_layers) for name in transcoders.hook_names(layer)]
    lm.hooks.resolve(names)  # an unknown site raises here, with the closest hook names


def prompt_tokens(
    lm: LensModel, prompt: str | Sequence[int] | Tensor, max_tokens: int
) -> Int[Tensor, " pos"]:
    """The prompt's token ids under the tokenisation policy (text gets the sink), checked against
    the vocabulary and the budget ``max_tokens``.

    Raises:
        UserInputError: an empty prompt, a batch, ids outside the vocabulary, or more than
            ``max_tokens`` tokens.
    """
    if isinstance(prompt, str):
        ids = torch.tensor(lm.encode(prompt), dtype=torch.long)
    else:
        ids = torch.as_tensor(prompt, dtype=torch.long).cpu()
        if ids.ndim == 2 and ids.shape[0] == 1:
            ids = ids[0]
        if ids.ndim != 1:
            raise UserInputError(
                f"an attribution graph explains one prompt: give its token ids as one row, not "
                f"shape {tuple(ids.shape)}"
            )
    if ids.numel() < 2:
        raise UserInputError("the prompt has fewer than two tokens (the sink and one more)")
    if ids.numel() > max_tokens:
        raise UserInputError(
            f"the prompt is {ids.numel()} tokens, over the budget of {max_tokens} (memory grows "
            "with the prompt's length times the batch): shorten the prompt or raise max_tokens"
        )
    lm.check_tokens(ids)
    return ids.to(lm.device)


def last_logits(lm: LensModel, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch vocab"]:
    """The logits at the last position, the final norm run over every position (so a frozen
    divisor of the whole prompt fits) and only the last one unembedded (the soft cap applied).

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> tokens = lm.to_tokens("The cat sat")
    >>> bool(torch.allclose(last_logits(lm, tokens), lm(tokens)[:, -1], atol=1e-5))
    True
    """
    resid = lm.model(tokens.to(lm.device), stop_at_layer=lm.cfg.n_layers)
    # "live": the model's own ln_final and unembed modules, so the freeze hooks on them fire; every
    # position, as in the clean run whose norm scales those hooks hold.
    return readout.logits(lm, resid, space="resid", norm="live")[:, -1]


@dataclass(frozen=True)
class ReplacementRun:
    """What the clean run of one prompt gives the replacement model.

    Active features are ordered by (layer, position, feature index), circuit-tracer's order.

    Attributes:
        tokens: the prompt's ids ``[pos]``.
        logits: the model's own logits at the last position ``[vocab]``.
        features: the active features ``[n, 3]``: layer, position, feature index.
        activations: their activations ``[n]``.
        encoder_vectors: their encoder rows ``W_enc[i]`` ``[n, d_model]`` (a feature target's
            injected gradient).
        decoder_vectors: their decoder rows scaled by the activation, ``a · W_dec[i]``
            ``[n, d_model]`` (a feature source).
        errors: ``mlp_out − reconstruction`` ``[layer, pos, d_model]``, zero at the sink.
        token_vectors: the embeddings at ``hook_embed`` ``[pos, d_model]`` (``W_E[tokens]``).
    """

    tokens: Int[Tensor, " pos"]
    logits: Float[Tensor, " vocab"]
    features: Int[Tensor, "n 3"]
    activations: Float[Tensor, " n"]
    encoder_vectors: Float[Tensor, "n d_model"]
    decoder_vectors: Float[Tensor, "n d_model"]
    errors: Float[Tensor, "layer pos d_model"]
    token_vectors: Float[Tensor, "pos d_model"]

    @property
    def n_pos(self) -> int:
        return int(self.tokens.numel())


def _transcoder_output(tc: Transcoder, x: Tensor) -> tuple[Tensor, Tensor]:
    """The activations of ``x`` with the sink's zeroed, and the reconstruction they give."""
    acts = tc.encode(x)
    acts[:ZERO_POSITIONS] = 0
    return acts, tc.decode(acts) + tc.skip(x)


@torch.no_grad()
def replacement_run(lm: LensModel, transcoders: TranscoderSet, tokens: Tensor) -> ReplacementRun:
    """One clean forward pass of ``tokens`` (``[pos]``): the active features, their encoder and
    scaled decoder vectors, the error vectors and the token vectors. Reads the model only.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.transcoders import TranscoderSet
    >>> lm = load_model("toy-2l")
    >>> run = replacement_run(lm, TranscoderSet.random(lm, 32), lm.to_tokens("The cat sat")[0])
    >>> tuple(run.errors.shape), bool(run.errors[:, 0].eq(0).all()), int(run.features.shape[1])
    ((2, 4, 64), True, 3)
    """
    n_layers = lm.cfg.n_layers
    sites = [name for layer in range(n_layers) for name in transcoders.hook_names(layer)]
    embed = hook_name("embed")
    with lm.hooks.capture([*sites, embed]) as cap:
        logits = last_logits(lm, tokens[None])[0].float()
    features, values, encoders, decoders, errors = [], [], [], [], []
    for layer in range(n_layers):
        tc = transcoders[layer]
        source, target = transcoders.hook_names(layer)
        x = cap[source][0]
        acts, reconstruction = _transcoder_output(tc, x)
        errors.append(cap[target][0] - reconstruction)
        positions, index = acts.nonzero(as_tuple=True)  # row-major: sorted by (position, index)
        features.append(torch.stack([torch.full_like(index, layer), positions, index], dim=1))
        values.append(acts[positions, index])
        encoders.append(tc.W_enc[index])
        decoders.append(tc.W_dec[index] * values[-1][:, None])
    error = torch.stack(errors)
    error[:, :ZERO_POSITIONS] = 0
    return ReplacementRun(
        tokens=tokens,
        logits=logits,
        features=torch.cat(features).cpu(),
        activations=torch.cat(values).float(),
        encoder_vectors=torch.cat(encoders).float(),
        decoder_vectors=torch.cat(decoders).float(),
        errors=error.float(),
        token_vectors=cap[embed][0].float(),
    )


@contextmanager
def _parameters_frozen(modules: Sequence[nn.Module]) -> Iterator[None]:
    """``requires_grad`` off on every parameter of ``modules`` for the block, then restored.

    Gradients must start at the embeddings: a parameter that requires grad makes the forward
    pass keep every matmul's input for a weight gradient no one reads (memory), and would
    collect a ``.grad`` (a change to the model)."""
    params = [p for module in modules for p in module.parameters() if p.requires_grad]
    try:
        for p in params:
            p.requires_grad_(False)
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


@dataclass
class ReplacementTrace:
    """The tensors of one forward pass of the replacement model, in its autograd graph.

    Attributes:
        inputs: each layer's transcoder input (a feature target's gradient goes in here).
        outputs: each layer's replaced MLP output (a feature or error source reads its gradient).
        embed: the token embeddings, the graph's leaf (a token source reads its gradient).
        final: the final norm's output ``ln_final.hook_normalized`` (a logit target's gradient
            goes in here), or the last residual stream of a model without a final norm.
    """

    inputs: dict[int, Tensor] = field(default_factory=dict)
    outputs: dict[int, Tensor] = field(default_factory=dict)
    embed: Tensor | None = None
    final: Tensor | None = None


def _skip(tc: Transcoder, x: Tensor) -> Tensor:
    # Without a skip, x·0 keeps the output in the autograd graph (its gradient is read there).
    return tc.skip(x) if tc.W_skip is not None else x * 0


@contextmanager
def replacement_gradients(lm: LensModel, transcoders: TranscoderSet) -> Iterator[ReplacementTrace]:
    """Attach the replacement model's hooks for the block; forward passes inside it fill the
    yielded :class:`ReplacementTrace`.

    Patterns and norm divisors are detached; each MLP output becomes ``skip + (out −
    skip).detach()``; the embeddings become a leaf that requires grad. Model and transcoder
    parameters do not require grad inside the block (restored on exit), so gradients start at the
    embeddings and no ``.grad`` is written. Run ``lm.model(tokens, stop_at_layer=n_layers)``, then
    ``lm.model.ln_final`` on its output, to reach ``final``.
    """
    check_replacement(lm, transcoders)
    trace = ReplacementTrace()
    final = final_norm_module(lm)

    def detach(act: Tensor, hook: Any) -> Tensor:
        return act.detach()

    def leaf(act: Tensor, hook: Any) -> Tensor:
        trace.embed = act.detach().requires_grad_(True)
        return trace.embed

    def record_input(act: Tensor, hook: Any, *, layer: int) -> None:
        trace.inputs[layer] = act

    def replace_output(act: Tensor, hook: Any, *, layer: int) -> Tensor:
        skip = _skip(transcoders[layer], trace.inputs[layer])
        trace.outputs[layer] = skip + (act - skip).detach()
        return trace.outputs[layer]

    def record_final(act: Tensor, hook: Any) -> None:
        trace.final = act

    fwd: list[tuple[Any, Any]] = [(is_frozen_site, detach), (hook_name("embed"), leaf)]
    for layer in range(lm.cfg.n_layers):
        source, target = transcoders.hook_names(layer)
        fwd.append((source, _bound(record_input, layer)))
        fwd.append((target, _bound(replace_output, layer)))
    if final is not None:
        fwd.append((hook_name("ln_final"), record_final))
    with _parameters_frozen([lm.model, *transcoders.layers.values()]), torch.enable_grad(), \
            lm.hooks.hooks(fwd=fwd, label="replacement model"):
        yield trace


def _bound(fn: Any, layer: int) -> Any:
    def hook(act: Tensor, hook: Any) -> Tensor | None:
        return fn(act, hook, layer=layer)

    return hook


FreezeScope = Literal["attention", "all"]
"""What :func:`frozen_forward` freezes: the attention patterns only (circuit-tracer's
``freeze_attention``), or patterns, norm divisors and MLP outputs (its ``constrained_layers``
over every layer: the replacement model's direct effects)."""


@contextmanager
def frozen_forward(
    lm: LensModel, transcoders: TranscoderSet, tokens: Tensor, scope: FreezeScope = "all"
) -> Iterator[None]:
    """Freeze forward *values* at the clean run of ``tokens`` (``[pos]``) for the block.

    ``"all"``: every pattern and norm divisor takes its clean value, every MLP output its clean
    value plus the skip's change (``skip(x) − skip(x_clean)``): circuit-tracer's
    ``setup_intervention_with_freeze`` over all layers. The model is then affine in anything added
    to the embeddings or an MLP output, and adding a graph source there moves every target
    (feature pre-activations, demeaned logits) by exactly its edge weight. ``"attention"``: the
    patterns only. Forward passes inside the block must run ``tokens`` (rows may repeat them).
    """
    check_replacement(lm, transcoders)
    validate_choice("scope", scope, get_args(FreezeScope))
    if scope == "all":
        frozen_names = lm.hooks.resolve(is_frozen_site)
        ends = {layer: transcoders.hook_names(layer) for layer in range(lm.cfg.n_layers)}
    else:
        frozen_names = lm.hooks.resolve(lambda name: name.endswith("attn.hook_pattern"))
        ends = {}
    with torch.no_grad(), lm.hooks.capture(
        [*frozen_names, *(name for pair in ends.values() for name in pair)]
    ) as clean:
        lm.model(tokens.reshape(1, -1).to(lm.device))
    inputs: dict[int, Tensor] = {}

    def frozen(act: Tensor, hook: Any) -> Tensor:
        return clean[hook.name].expand_as(act)

    def record_input(act: Tensor, hook: Any, *, layer: int) -> None:
        inputs[layer] = act

    def skip_shift(act: Tensor, hook: Any, *, layer: int) -> Tensor:
        source, target = ends[layer]
        tc = transcoders[layer]
        shift = _skip(tc, inputs[layer]) - _skip(tc, clean[source])
        return clean[target].expand_as(act) + shift

    fwd: list[tuple[Any, Any]] = [(frozen_names, frozen)]
    for layer, (source, target) in ends.items():
        fwd += [(source, _bound(record_input, layer)), (target, _bound(skip_shift, layer))]
    with lm.hooks.hooks(fwd=fwd, label=f"frozen replacement ({scope})"):
        yield

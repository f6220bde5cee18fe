"""Per-layer and skip transcoders: a sparse map from an MLP's input to its output.

A transcoder replaces one MLP with ``decode(encode(x)) + skip(x)``: ``encode`` is a linear map and a
sparse activation (ReLU, TopK or JumpReLU), ``decode`` a linear map back, ``skip`` an optional
linear shortcut. Dunefsky et al. 2024 (arXiv:2406.11944) introduced them, Paulo et al. 2025
(arXiv:2501.18823) the skip. Parameters are stored in circuit-tracer's orientation, so its files
load without a transpose; a :class:`TranscoderSet` holds one per layer with its sites and model.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn

from lmsci_mi.errors import UserInputError
from lmsci_mi.sites import hook_name, site

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel

__all__ = [
    "Activation",
    "Transcoder",
    "TranscoderMismatchError",
    "TranscoderSet",
    "check_sites",
]

Activation = Literal["relu", "topk", "jumprelu"]
ACTIVATIONS: tuple[str, ...] = get_args(Activation)


class TranscoderMismatchError(UserInputError):
    """A transcoder was used on a model, layer or width other than the one it was made for."""


def check_sites(lm: LensModel, input_site: str) -> None:
    """Raise :class:`TranscoderMismatchError` where ``input_site`` is not the MLP's input.

    In a post-norm block (OLMo 2/3) ``ln2`` normalises the MLP's *output*, so
    ``mlp_in_normed`` is no MLP input there; the MLP reads ``resid_mid``. (In Gemma 2/3 ``ln2``
    is the MLP's input norm and ``ln2_post`` comes after it, before ``hook_mlp_out``.)
    """
    from transformer_lens.utilities.architectures import POST_NORM_ARCHITECTURES

    if input_site == "mlp_in_normed" and lm.cfg.original_architecture in POST_NORM_ARCHITECTURES:
        raise TranscoderMismatchError(
            f"{lm.name} is post-norm ({lm.cfg.original_architecture}): its ln2 normalises the "
            "MLP's output, so mlp_in_normed is no MLP input; use input_site='resid_mid'"
        )


class Transcoder(nn.Module):
    """One layer's transcoder: ``forward(x) = decode(encode(x)) + skip(x)``.

    Args:
        d_model: the width it reads and writes.
        d_transcoder: the number of latents (features).
        activation: ``"relu"``; ``"topk"`` (the ``k`` largest pre-activations kept as they are,
            the rest zeroed: circuit-tracer's TopK, so a saved file computes the same function
            there); ``"jumprelu"`` (``pre · (pre > threshold)``, a per-latent threshold buffer).
        k: the number of latents TopK keeps (TopK only).
        skip: whether it has the linear skip ``W_skip`` (Paulo et al.).

    >>> tc = Transcoder(8, 32, activation="topk", k=4)
    >>> tc(torch.zeros(3, 8)).shape, tc.W_skip is None
    (torch.Size([3, 8]), True)
    """

    threshold: Tensor

    def __init__(
        self,
        d_model: int,
        d_transcoder: int,
        *,
        activation: Activation = "topk",
        k: int | None = None,
        skip: bool = False,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise UserInputError(
                f"unknown transcoder activation {activation!r}; choose one of {list(ACTIVATIONS)}"
            )
        if activation == "topk" and (k is None or not 1 <= k <= d_transcoder):
            raise UserInputError(
                f"a TopK transcoder needs k in 1..{d_transcoder} (its width), not {k}"
            )
        if d_model < 1 or d_transcoder < 1:
            raise UserInputError(f"widths must be positive, not d_model {d_model}, d_transcoder {d_transcoder}")
        self.activation: Activation = activation
        self.k: int | None = int(k) if activation == "topk" and k is not None else None
        # circuit-tracer's orientation: both W_enc and W_dec are [d_transcoder, d_model], so a
        # latent's encoder and decoder directions are rows (W_enc[i], W_dec[i]).
        self.W_enc = nn.Parameter(torch.zeros(d_transcoder, d_model))
        self.b_enc = nn.Parameter(torch.zeros(d_transcoder))
        self.W_dec = nn.Parameter(torch.zeros(d_transcoder, d_model))
        self.b_dec = nn.Parameter(torch.zeros(d_model))
        self.W_skip: nn.Parameter | None = (
            nn.Parameter(torch.zeros(d_model, d_model)) if skip else None
        )
        # A buffer, not a parameter: the TopK and ReLU recipes never train it, and JumpReLU's is
        # read from a file; it stays in state_dict either way (a zero threshold is plain ReLU).
        self.register_buffer("threshold", torch.zeros(d_transcoder))

    @property
    def d_model(self) -> int:
        return int(self.W_enc.shape[1])

    @property
    def d_transcoder(self) -> int:
        return int(self.W_enc.shape[0])

    def extra_repr(self) -> str:
        k = f", k={self.k}" if self.k is not None else ""
        return (
            f"d_model={self.d_model}, d_transcoder={self.d_transcoder}, "
            f"activation={self.activation!r}{k}, skip={self.W_skip is not None}"
        )

    def check_input(self, x: Tensor) -> None:
        """Raise :class:`TranscoderMismatchError` unless ``x``'s last axis is ``d_model``."""
        if x.ndim == 0 or x.shape[-1] != self.d_model:
            raise TranscoderMismatchError(
                f"this transcoder reads vectors of width {self.d_model}, but the input has shape "
                f"{tuple(x.shape)}; use a transcoder trained on this model (d_model {self.d_model})"
            )

    def pre_acts(self, x: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_transcoder"]:
        """The encoder's pre-activations ``x @ W_encᵀ + b_enc`` (circuit-tracer's ``F.linear``)."""
        self.check_input(x)
        return F.linear(x.to(self.W_enc.dtype), self.W_enc, self.b_enc)

    def activate(self, pre: Float[Tensor, "... d_transcoder"]) -> Float[Tensor, "... d_transcoder"]:
        """The sparse activation of pre-activations ``pre``."""
        if self.activation == "relu":
            return F.relu(pre)
        if self.activation == "jumprelu":
            return pre * (pre > self.threshold).to(pre.dtype)
        assert self.k is not None
        # Gate the k largest as circuit-tracer's TopK does (a kept value stays as it is, even if
        # negative), so that training, inference and the exported file agree bit for bit.
        indices = pre.topk(self.k, dim=-1).indices
        gate = torch.zeros_like(pre).scatter_(-1, indices, 1.0)
        return pre * gate

    def encode(self, x: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_transcoder"]:
        """Latent activations of ``x`` (after the sparse activation)."""
        return self.activate(self.pre_acts(x))

    def decode(self, acts: Float[Tensor, "... d_transcoder"]) -> Float[Tensor, "... d_model"]:
        """``acts @ W_dec + b_dec``: the latents' part of the output (no skip)."""
        return acts @ self.W_dec + self.b_dec

    def skip(self, x: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_model"]:
        """The linear skip ``x @ W_skipᵀ``, or zeros when the transcoder has none."""
        if self.W_skip is None:
            return torch.zeros_like(x, dtype=self.W_dec.dtype)
        return x.to(self.W_skip.dtype) @ self.W_skip.T

    def forward(self, x: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_model"]:
        return self.decode(self.encode(x)) + self.skip(x)

    @classmethod
    def random(
        cls,
        d_model: int,
        d_transcoder: int,
        *,
        activation: Activation = "topk",
        k: int | None = 4,
        skip: bool = True,
        seed: int = 0,
    ) -> Transcoder:
        """A transcoder with every parameter drawn from uniform(−1, 1), as circuit-tracer's tests
        build theirs (a JumpReLU threshold from uniform(0, 1)); for tests and comparisons.

        >>> a, b = Transcoder.random(8, 16, seed=1), Transcoder.random(8, 16, seed=1)
        >>> bool(torch.equal(a.W_enc, b.W_enc)) and a.k == 4
        True
        """
        tc = cls(d_model, d_transcoder, activation=activation,
                 k=k if activation == "topk" else None, skip=skip)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for param in tc.parameters():
                param.copy_(torch.rand(param.shape, generator=generator) * 2 - 1)
            if activation == "jumprelu":
                tc.threshold.copy_(torch.rand(d_transcoder, generator=generator))
        return tc


@dataclass(frozen=True)
class TranscoderSet(Mapping[int, Transcoder]):
    """One transcoder per layer of a model, with the sites they read and write.

    A mapping from layer to :class:`Transcoder`. Sites are site-table names: the input is the MLP's
    input after its norm (``mlp_in_normed``, ``blocks.L.ln2.hook_normalized``: exactly the MLP's
    input in a model with folded norms, as :func:`~lmsci_mi.load_model` and circuit-tracer's
    TransformerLens models load them; before the norm's weight otherwise), the output what the MLP
    adds to the residual stream (``mlp_out``; for Gemma 2/3 that is after the post-MLP norm).

    Attributes:
        layers: the transcoders by layer.
        input_site: the site each transcoder reads.
        output_site: the site it replaces.
        model_name: the model they were trained on (``LensModel.name``).
    """

    layers: dict[int, Transcoder]
    input_site: str = "mlp_in_normed"
    output_site: str = "mlp_out"
    model_name: str = ""

    def __post_init__(self) -> None:
        site(self.input_site), site(self.output_site)  # unknown names raise with the valid ones
        if not self.layers:
            raise UserInputError("a transcoder set needs at least one layer's transcoder")
        widths = {tc.d_model for tc in self.layers.values()}
        if len(widths) != 1:
            raise TranscoderMismatchError(f"the transcoders of one set read different widths {sorted(widths)}")

    def __getitem__(self, layer: int) -> Transcoder:
        if isinstance(layer, bool) or layer not in self.layers:
            raise TranscoderMismatchError(
                f"this transcoder set has no transcoder for layer {layer}: it covers layers "
                f"{sorted(self.layers)}; train or load one for that layer"
            )
        return self.layers[layer]

    def __contains__(self, layer: object) -> bool:
        # Mapping's own test calls __getitem__, whose miss is an error (not a KeyError) here
        return not isinstance(layer, bool) and layer in self.layers

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self.layers))

    def __len__(self) -> int:
        return len(self.layers)

    @property
    def d_model(self) -> int:
        return next(iter(self.layers.values())).d_model

    def hook_names(self, layer: int) -> tuple[str, str]:
        """The (input, output) hook names of ``layer``'s transcoder, from the site table.

        >>> TranscoderSet({0: Transcoder.random(8, 16)}).hook_names(0)
        ('blocks.0.ln2.hook_normalized', 'blocks.0.hook_mlp_out')
        """
        self[layer]
        return hook_name(self.input_site, layer), hook_name(self.output_site, layer)

    def check(self, lm: LensModel) -> None:
        """Raise :class:`TranscoderMismatchError` unless the set fits ``lm``: its width, its
        layers, and its name when the set records one."""
        if lm.cfg.d_model != self.d_model:
            raise TranscoderMismatchError(
                f"these transcoders read width {self.d_model}, but {lm.name} has d_model "
                f"{lm.cfg.d_model}; train transcoders for {lm.name}"
            )
        if self.model_name and self.model_name != lm.name:
            raise TranscoderMismatchError(
                f"these transcoders were trained on {self.model_name}, not {lm.name}; train "
                f"transcoders for {lm.name}"
            )
        check_sites(lm, self.input_site)
        extra = [layer for layer in self.layers if not 0 <= layer < lm.cfg.n_layers]
        if extra:
            raise TranscoderMismatchError(
                f"layer {extra[0]} does not exist: {lm.name} has {lm.cfg.n_layers} layers"
            )

    def to(self, device: torch.device | str) -> TranscoderSet:
        """The set with every transcoder moved to ``device`` (in place, returned for chaining)."""
        for tc in self.layers.values():
            tc.to(device)
        return self

    @classmethod
    def random(
        cls, lm: LensModel, d_transcoder: int, *, seed: int = 0, **kw: object
    ) -> TranscoderSet:
        """One :meth:`Transcoder.random` per layer of ``lm`` (layer L seeded ``seed + L``).

        Args:
            lm: the model (its width, layer count and name).
            d_transcoder: latents per layer.
            seed: the first layer's seed.
            **kw: ``activation``, ``k``, ``skip`` for :meth:`Transcoder.random`, and
                ``input_site`` / ``output_site`` for the set.
        """
        sites = {name: str(kw.pop(name)) for name in ("input_site", "output_site") if name in kw}
        layers = {
            layer: Transcoder.random(lm.cfg.d_model, d_transcoder, seed=seed + layer, **kw)  # type: ignore[arg-type]
            for layer in range(lm.cfg.n_layers)
        }
        return cls(layers, model_name=lm.name, **sites)

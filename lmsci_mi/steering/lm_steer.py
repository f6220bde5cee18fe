"""`LMSteer`: steer a frozen model through its output embeddings, e' = (I + εW)e.

Han et al., "Word Embeddings Are Steers for Language Models" (ACL 2024). Each steer i holds two
low-rank factors P1ᵢ, P2ᵢ (d × r) and W = Σᵢ sᵢ P1ᵢ P2ᵢᵀ; adding ε·Σᵢ sᵢ (h P1ᵢ) P2ᵢᵀ to the final
normalised state h before the unembedding is the same as replacing each output embedding u by
(I + εW)u. The steer attaches through the hook registry at ``hook_name("ln_final")``, so it works
during cached generation; a "dummy" steer held at 1 absorbs what the whole training corpus shares.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import field
from pathlib import Path

import torch
from jaxtyping import Float
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from lmsci_mi import readout
from lmsci_mi.config import Config, config, paper
from lmsci_mi.errors import UnknownNameError, UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.sites import hook_name

__all__ = [
    "LMSteer",
    "LMSteerConfig",
    "SteerValues",
    "logits_from_normalized",
    "normalized_to_unembed_input",
]

_FORMAT = "lmsci-mi-lm-steer/1"

SteerValues = Sequence[float] | Mapping[str | int, float] | float
"""Steer values: one number (the first steer), one per steer in order, or ``{name or index:
value}``; steers not named are 0. The dummy steer is set separately (``dummy``, default 1)."""


@config
class LMSteerConfig(Config):
    """The shape of an LM-Steer.

    The reference code (Glaciohound/LM-Steer) uses ε = 1e-3, factors drawn as randn × 1e-2 and rank
    1000 (full rank for its models). Rank 32 is the default here: the training data are a few
    thousand tokens, and a low rank keeps each training step cheap (see ``train.py``).
    """

    rank: int = field(
        default=32,
        metadata={
            "help": "rank r of each steer's factors P1, P2 (d x r)",
            "ge": 1,
            **paper(
                1000,
                "Han et al. 2024, code: Glaciohound/LM-Steer defaults (rank=1000: full rank for "
                "its models)",
                why="a few thousand training tokens and cheaper steps: the shipped steer is rank "
                "32 on 4,267 tokens, docs/data/steering.json (steer, training); no rank sweep yet",
            ),
        },
    )
    epsilon: float = field(
        default=1e-3,
        metadata={
            "help": "scale ε of the steer: h + ε Σ s_i (h P1_i) P2_iᵀ",
            "gt": 0,
            **paper(1e-3, "Han et al. 2024, code: Glaciohound/LM-Steer defaults (epsilon=1e-3)"),
        },
    )
    init_std: float = field(
        default=1e-2,
        metadata={
            "help": "standard deviation of the initial factors",
            "ge": 0,
            **paper(
                1e-2,
                "Han et al. 2024, code: Glaciohound/LM-Steer lm_steer/models/steers.py "
                "Projected_Adaptor (randn × init_var, init_var=1e-2)",
            ),
        },
    )
    dummy: bool = field(
        default=True,
        metadata={
            "help": "add a dummy steer held at 1 (absorbs the corpus-wide shift)",
            **paper(True, "Han et al. 2024, code: Glaciohound/LM-Steer README recipe (--dummy_steer 1)"),
        },
    )


_DEFAULT_STEER_CONFIG = LMSteerConfig()


def normalized_to_unembed_input(lm: LensModel, h: Float[Tensor, "... d_model"]) -> Tensor:
    """Deprecated: :func:`lmsci_mi.readout.unembed_input` with ``space="normalized"`` (the final
    norm's gain and bias after ``ln_final.hook_normalized``, where ``fold_ln`` left them)."""
    warnings.warn(
        "normalized_to_unembed_input is deprecated; use lmsci_mi.readout.unembed_input(lm, h, "
        'space="normalized")',
        DeprecationWarning,
        stacklevel=2,
    )
    return readout.unembed_input(lm, h, space="normalized")


def logits_from_normalized(
    lm: LensModel, h: Float[Tensor, "... d_model"]
) -> Float[Tensor, "... vocab"]:
    """Logits from final normalised states (the output of ``hook_name("ln_final")``).

    The rest of the final norm, the unembedding and the logit soft cap: exactly what the model
    computes after the hook (:func:`lmsci_mi.readout.logits`, ``space="normalized"``). Reads the
    model only.
    """
    return readout.logits(lm, h, space="normalized")


class LMSteer(nn.Module):
    """Several LM-Steers of one model, each with low-rank factors, plus an optional dummy steer.

    Args:
        attributes: one name per steer (``("sentiment", "topic")``); the dummy steer comes last.
        d_model: the model's width.
        model_name: the model the steer belongs to; applying it to another model is an error.
        config: rank, ε, initial scale, dummy.
        seed: seeds the initial factors.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> steer = LMSteer.for_model(lm, ("sentiment",))
    >>> with steer.apply(lm, {"sentiment": 3.0}):
    ...     lm.generate("Hello", 3) == lm.generate("Hello", 3)
    True
    """

    def __init__(
        self,
        attributes: Sequence[str],
        d_model: int,
        model_name: str,
        config: LMSteerConfig = _DEFAULT_STEER_CONFIG,
        *,
        seed: int = 0,
    ) -> None:
        super().__init__()
        attributes = tuple(attributes)
        if not attributes:
            raise UserInputError("an LMSteer needs at least one attribute name")
        if len(set(attributes)) != len(attributes):
            raise UserInputError(f"attribute names must be distinct, not {attributes}")
        self.attributes = attributes
        self.d_model = int(d_model)
        self.model_name = model_name
        self.config = config
        n = len(attributes) + int(config.dummy)
        generator = torch.Generator().manual_seed(seed)
        shape = (n, self.d_model, config.rank)
        self.p1 = nn.Parameter(torch.randn(shape, generator=generator) * config.init_std)
        self.p2 = nn.Parameter(torch.randn(shape, generator=generator) * config.init_std)

    @classmethod
    def for_model(
        cls,
        lm: LensModel,
        attributes: Sequence[str],
        config: LMSteerConfig = _DEFAULT_STEER_CONFIG,
        *,
        seed: int = 0,
    ) -> LMSteer:
        """A freshly initialised steer for ``lm``, on its device."""
        return cls(attributes, lm.cfg.d_model, lm.name, config, seed=seed).to(lm.device)

    def __repr__(self) -> str:
        dummy = " + dummy" if self.config.dummy else ""
        return (
            f"LMSteer({self.model_name!r}: {list(self.attributes)}{dummy}, d_model {self.d_model}, "
            f"rank {self.config.rank}, ε {self.config.epsilon:g})"
        )

    @property
    def n_steers(self) -> int:
        """Steers including the dummy."""
        return int(self.p1.shape[0])

    # ------------------------------------------------------------------ values

    def index_of(self, key: str | int) -> int:
        """The index of a steer given by name or index.

        Raises:
            ValueError: an unknown name or an index out of range (the dummy cannot be addressed).
        """
        if isinstance(key, str) and not key.lstrip("-").isdigit():
            if key not in self.attributes:
                raise UnknownNameError(f"unknown steer {key!r}; this LMSteer has {list(self.attributes)}")
            return self.attributes.index(key)
        index = int(key)
        if not 0 <= index < len(self.attributes):
            raise UserInputError(
                f"steer index {index} is out of range: this LMSteer has {len(self.attributes)} "
                f"steer(s) {list(self.attributes)}, indices 0..{len(self.attributes) - 1}"
            )
        return index

    def value_vector(self, values: SteerValues, *, dummy: float = 1.0) -> Float[Tensor, " steer"]:
        """All steer values as one vector (dummy last), on the steer's device.

        Raises:
            ValueError: too many values, an unknown name or index, or a value that is not finite.
        """
        vector = torch.zeros(self.n_steers, device=self.p1.device, dtype=self.p1.dtype)
        if isinstance(values, int | float):
            values = [float(values)]
        if isinstance(values, Mapping):
            items = [(self.index_of(k), float(v)) for k, v in values.items()]
        else:
            values = list(values)
            if len(values) > len(self.attributes):
                raise UserInputError(
                    f"{len(values)} steer values for {len(self.attributes)} steer(s) "
                    f"{list(self.attributes)}: steer index {len(values) - 1} is out of range"
                )
            items = [(i, float(v)) for i, v in enumerate(values)]
        for index, value in items:
            if not torch.isfinite(torch.tensor(value)):
                raise UserInputError(f"steer value {value} is not finite")
            vector[index] = value
        if self.config.dummy:
            vector[-1] = dummy
        return vector

    # ------------------------------------------------------------------ the steer

    def matrix(self, index: int | str = 0) -> Float[Tensor, "d_model d_model"]:
        """W of one steer, P1 P2ᵀ (unscaled by ε): h ↦ h + ε s h W."""
        i = self.index_of(index)
        return (self.p1[i] @ self.p2[i].T).detach()

    def shift(self, h: Float[Tensor, "... d_model"], vector: Float[Tensor, " steer"]) -> Tensor:
        """ε Σᵢ sᵢ (h P1ᵢ) P2ᵢᵀ for a value vector from :meth:`value_vector`."""
        n, d, r = self.p1.shape
        projected = h @ self.p1.permute(1, 0, 2).reshape(d, n * r)  # [..., steer*rank]
        scaled = projected * vector.to(h.dtype).repeat_interleave(r)
        return self.config.epsilon * scaled @ self.p2.transpose(1, 2).reshape(n * r, d)

    def steered(
        self, h: Float[Tensor, "... d_model"], values: SteerValues, *, dummy: float = 1.0
    ) -> Tensor:
        """h + ε Σᵢ sᵢ (h P1ᵢ) P2ᵢᵀ."""
        return h + self.shift(h, self.value_vector(values, dummy=dummy))

    def check_model(self, lm: LensModel) -> None:
        """Raise ValueError unless this steer was trained on ``lm``'s model."""
        if lm.name != self.model_name or lm.cfg.d_model != self.d_model:
            raise UserInputError(
                f"this steer belongs to {self.model_name} (d_model {self.d_model}) and cannot steer "
                f"{lm.name} (d_model {lm.cfg.d_model}); map it over with "
                "lmsci_mi.steering.transfer_steer (`lmsci-mi steer transfer`)"
            )

    @contextmanager
    def apply(self, lm: LensModel, values: SteerValues, *, dummy: float = 1.0) -> Iterator[None]:
        """Steer ``lm`` inside the block: every forward pass, cached generation included, sees
        h + ε Σᵢ sᵢ (h P1ᵢ) P2ᵢᵀ at ``hook_name("ln_final")``. Leaves the model as it was.

        Raises:
            ValueError: a steer of another model, or bad values.
        """
        self.check_model(lm)
        vector = self.value_vector(values, dummy=dummy).detach()

        def steer_hook(activation: Tensor, hook: HookPoint) -> Tensor:
            with torch.no_grad():
                return activation + self.shift(activation, vector.to(activation.device)).to(
                    activation.dtype
                )

        with lm.hooks.hooks(fwd=[(hook_name("ln_final"), steer_hook)], label="lm_steer"):
            yield

    # ------------------------------------------------------------------ files

    def save(self, path: str | Path) -> Path:
        """Write the factors as safetensors, with the model's name, width and the config.

        Raises:
            ValueError: ``path`` names no file.
        """
        path = Path(path)
        if path.name in ("", ".", ".."):
            raise UserInputError(
                f"cannot save a steer as {str(path)!r}: give a file name, e.g. steer.safetensors"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        metadata = {
            "format": _FORMAT,
            "model": self.model_name,
            "d_model": str(self.d_model),
            "attributes": json.dumps(list(self.attributes)),
            "config": json.dumps(self.config.params()),
        }
        tensors = {
            "p1": self.p1.detach().cpu().contiguous(),
            "p2": self.p2.detach().cpu().contiguous(),
        }
        try:
            save_file(tensors, str(path), metadata=metadata)
        except (SafetensorError, OSError) as error:
            raise UserInputError(f"cannot write {path}: {error}") from None
        return path

    @classmethod
    def load(cls, path: str | Path, lm: LensModel | None = None) -> LMSteer:
        """Read a steer written by :meth:`save`; with ``lm``, check it belongs to that model and
        move it to its device.

        Raises:
            FileNotFoundError: no file at ``path``.
            ValueError: not an LMSteer file, or a steer of another model than ``lm``.
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no steer file at {path}")
        try:
            with safe_open(str(path), framework="pt") as handle:
                metadata = handle.metadata() or {}
                if metadata.get("format") != _FORMAT:
                    raise UserInputError(f"{path} is not an LMSteer file (no format {_FORMAT!r})")
                p1, p2 = handle.get_tensor("p1"), handle.get_tensor("p2")
            params = json.loads(metadata["config"])
            config = LMSteerConfig(**{k: v for k, v in params.items() if k != "config"})
            attributes = tuple(json.loads(metadata["attributes"]))
            steer = cls(attributes, int(metadata["d_model"]), metadata["model"], config)
        except (SafetensorError, OSError, KeyError, TypeError, json.JSONDecodeError) as error:
            raise UserInputError(
                f"{path} is not a readable LMSteer file ({type(error).__name__}: {error})"
            ) from None
        if p1.shape != steer.p1.shape or p2.shape != steer.p2.shape:
            raise UserInputError(f"{path}: factor shapes {tuple(p1.shape)} do not match its metadata")
        with torch.no_grad():
            steer.p1.copy_(p1)
            steer.p2.copy_(p2)
        steer.requires_grad_(False)  # a loaded steer is for use; train_steer trains fresh ones
        if lm is not None:
            steer.check_model(lm)
            steer = steer.to(lm.device)
        return steer

"""`LensSAE`: a sae-lens SAE bound to the model and hook it was trained on.

The wrapper records the model's name, its width and the hook name next to the sae-lens weights,
and every use checks them against the model at hand, so an SAE is never silently applied to
another model or site. It also holds each feature's typical maximum activation, the unit in which
steering coefficients are given, and the exact steering direction of a feature (sae-lens's
``decode``, which a TopK SAE with ``rescale_acts_by_decoder_norm`` needs instead of ``W_dec``).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float
from safetensors.torch import load_file, save_file
from torch import Tensor

from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel

__all__ = ["LensSAE", "SAEMismatchError", "check_feature"]

_META_FILE = "lmsci_sae.json"
_SCALE_FILE = "lmsci_feature_scale.safetensors"


class SAEMismatchError(UserInputError):
    """An SAE was used on a model or site other than the one it was trained on."""


def check_feature(index: int, d_sae: int) -> int:
    """``index`` if it names a feature of an SAE with ``d_sae`` features, else a ValueError.

    >>> check_feature(3, 8)
    3
    """
    if isinstance(index, bool) or not 0 <= int(index) < d_sae:
        raise UserInputError(
            f"feature index {index} is out of range: this SAE has features 0..{d_sae - 1}"
        )
    return int(index)


@dataclass(frozen=True)
class LensSAE:
    """A sae-lens SAE with its provenance (frozen; the SAE's weights are not trained further).

    Attributes:
        sae: the sae-lens inference SAE (``sae_lens.SAE``).
        hook: the hook name it reads and writes (``hook_name("resid_post", 15)``).
        model_name: the model it was trained on (``LensModel.name``).
        d_model: that model's width.
        model_fingerprint: a hash of that model's weights ("" when unknown, e.g. pretrained).
        feature_scale: each feature's typical maximum activation (``[d_sae]``): the unit of
            steering coefficients; measured on held-out tokens.
        source: where it came from (a cache folder, a release/id).
    """

    sae: Any
    hook: str
    model_name: str
    d_model: int
    feature_scale: Float[Tensor, " d_sae"]
    model_fingerprint: str = ""
    source: str = ""
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def d_sae(self) -> int:
        return int(self.sae.cfg.d_sae)

    @property
    def architecture(self) -> str:
        return str(self.sae.cfg.architecture())

    def check(self, lm: LensModel, hook: str | None = None) -> None:
        """Raise :class:`SAEMismatchError` unless ``lm`` (and ``hook``, if given) are the SAE's.

        The model is compared by name and width (and by weights when both fingerprints are
        known); a different hook (site or layer) is refused as well.
        """
        if lm.cfg.d_model != self.d_model or lm.name != self.model_name:
            raise SAEMismatchError(
                f"this SAE was trained on {self.model_name} (d_model {self.d_model}) at "
                f"{self.hook}, not on {lm.name} (d_model {lm.cfg.d_model}); train one for this "
                f"model with `lmsci-mi sae train --model {lm.name}`"
            )
        if hook is not None and hook != self.hook:
            raise SAEMismatchError(
                f"this SAE reads {self.hook}, not {hook}; train one for that site with "
                "`lmsci-mi sae train --layer N`"
            )
        lm.hooks.resolve([self.hook])

    def feature(self, index: int) -> int:
        """``index``, checked against the number of features."""
        return check_feature(index, self.d_sae)

    @torch.no_grad()
    def encode(self, x: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_sae"]:
        """Feature activations of ``x`` (computed in the SAE's dtype, returned in ``x``'s)."""
        return self.sae.encode(x.to(self.sae.dtype)).to(x.dtype)

    @torch.no_grad()
    def decode(self, f: Float[Tensor, "... d_sae"]) -> Float[Tensor, "... d_model"]:
        """The reconstruction of feature activations ``f``."""
        return self.sae.decode(f.to(self.sae.dtype)).to(f.dtype)

    @torch.no_grad()
    def direction(self, index: int) -> Float[Tensor, " d_model"]:
        """What one unit of feature ``index`` adds to the reconstruction: ``decode(e_i) − decode(0)``.

        For a TopK SAE that rescales by the decoder norm this differs from ``W_dec[i]``.
        """
        i = self.feature(index)
        basis = torch.zeros(2, self.d_sae, dtype=self.sae.dtype, device=self.sae.device)
        basis[0, i] = 1.0
        out = self.sae.decode(basis)
        return (out[0] - out[1]).float()

    def to(self, device: torch.device | str) -> LensSAE:
        """This SAE with its weights on ``device``."""
        self.sae.to(device)
        return replace(self, feature_scale=self.feature_scale.to(device))

    # -------------------------------------------------------------------- files

    def save(self, folder: str | Path) -> Path:
        """Write the sae-lens weights plus lmsci-mi's metadata into ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        # An inference SAE writes itself with save_model; a training SAE as its inference form.
        save = getattr(self.sae, "save_inference_model", None) or self.sae.save_model
        save(str(folder))
        save_file(
            {"feature_scale": self.feature_scale.detach().cpu().float().contiguous()},
            str(folder / _SCALE_FILE),
        )
        meta = {
            "hook": self.hook,
            "model_name": self.model_name,
            "d_model": self.d_model,
            "model_fingerprint": self.model_fingerprint,
            "source": self.source,
            "info": self.info,
        }
        (folder / _META_FILE).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        return folder

    @classmethod
    def load(cls, folder: str | Path, device: torch.device | str = "cpu") -> LensSAE:
        """Read an SAE written by :meth:`save`.

        Raises:
            FileNotFoundError: ``folder`` holds no lmsci-mi SAE.
            UserInputError: its metadata file is not JSON.
        """
        from sae_lens import SAE

        folder = Path(folder)
        if not (folder / _META_FILE).is_file():
            raise FileNotFoundError(
                f"{folder} holds no lmsci-mi SAE (no {_META_FILE}); train one with `lmsci-mi sae train`"
            )
        try:
            meta = json.loads((folder / _META_FILE).read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise UserInputError(f"{folder / _META_FILE} is not an SAE's metadata ({error})") from None
        with warnings.catch_warnings():
            warnings.simplefilter(
                "ignore"
            )  # sae-lens's deprecation notes trip filterwarnings=error
            sae = SAE.load_from_disk(str(folder), device=str(device))
        scale = load_file(str(folder / _SCALE_FILE))["feature_scale"].to(device)
        return cls(
            sae=sae,
            hook=meta["hook"],
            model_name=meta["model_name"],
            d_model=int(meta["d_model"]),
            feature_scale=scale,
            model_fingerprint=meta.get("model_fingerprint", ""),
            source=str(folder),
            info=dict(meta.get("info", {})),
        )

"""The tuned lens (Belrose et al. 2023, "Eliciting Latent Predictions with the Tuned Lens").

One affine translator per layer maps that layer's residual stream (``resid_post``) towards the
final one before the final norm and unembedding. Translators start from a ridge least-squares fit
to the final stream (tokens weighted by the final norm's scale, so each counts as it does after
the norm), then a short Adam fine-tune on KL(final ‖ lens), read out as the logit lens reads
(:func:`lmsci_mi.readout.logits`, soft cap included). Trained on the bundled stdlib text on CPU and
cached by the model's weights fingerprint and the config.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from jaxtyping import Float
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor

from lmsci_mi import readout
from lmsci_mi.cache import cache_key, cache_root, weights_fingerprint
from lmsci_mi.config import Config, config
from lmsci_mi.data.text_corpus import stdlib_documents, text_chunks
from lmsci_mi.errors import UserInputError
from lmsci_mi.lenses.logit_lens import LogitLens, LogitLensConfig, resolve_layers, run_lens
from lmsci_mi.model import LensModel
from lmsci_mi.positions import Exclude, resolve_exclude
from lmsci_mi.sites import hook_name

__all__ = [
    "TunedLens",
    "TunedLensConfig",
    "heldout_documents",
    "train_tuned_lens",
    "tuned_lens",
    "tuned_lens_for",
    "tuned_lens_path",
]

log = logging.getLogger(__name__)

_FORMAT = "lmsci-mi-tuned-lens/1"


@config
class TunedLensConfig(Config):
    """How a tuned lens is trained (every field is part of its cache key)."""

    n_tokens: int = dataclasses.field(
        default=16384, metadata={"paper": 65536000, "paper_source": "Belrose et al. 2023, code: AlignmentResearch/tuned-lens scripts/train_loop.py (2^18 tokens per step × 250 steps, the Pile)", "why": "benchmarks/tuned_lens.py, docs/data/tuned_lens.json (KL training on this CPU is issue 37's item 1)", "help": "training tokens (stdlib text, even documents)", "ge": 64}
    )
    seq_len: int = dataclasses.field(
        default=128, metadata={"help": "tokens per training row, sink included", "ge": 8}
    )
    ridge: float = dataclasses.field(
        default=1e-3,
        metadata={"help": "least-squares ridge, relative to the mean variance", "ge": 0},
    )
    steps: int = dataclasses.field(
        default=0,
        metadata={"paper": 250, "paper_source": "Belrose et al. 2023, code: AlignmentResearch/tuned-lens scripts/train_loop.py Train.num_steps (SGD-Nesterov on KL, translators initialised to the identity)", "why": "benchmarks/tuned_lens.py, docs/data/tuned_lens.json (KL training on this CPU is issue 37's item 1)",
            "help": "Adam steps on KL after the least-squares start (each costs a vocabulary-"
            "sized unembedding per layer and token: off by default on CPU)",
            "ge": 0,
        },
    )
    lr: float = dataclasses.field(default=1e-3, metadata={"paper": "1.0 × (1 − 0.9), SGD-Nesterov, momentum 0.9", "paper_source": "Belrose et al. 2023, code: AlignmentResearch/tuned-lens scripts/ingredients.py Optimizer", "why": "benchmarks/tuned_lens.py, docs/data/tuned_lens.json (KL training on this CPU is issue 37's item 1)", "help": "Adam learning rate", "gt": 0})
    batch_tokens: int = dataclasses.field(
        default=128, metadata={"help": "tokens per Adam step", "ge": 1}
    )
    seed: int = dataclasses.field(default=0, metadata={"help": "seed of the Adam batches"})
    exclude: Exclude | None = dataclasses.field(
        default=None,
        metadata={"help": "positions left out of training (None: the sink)", "cli": False},
    )

    def key_params(self) -> dict[str, object]:
        """:meth:`params` as the cache key reads them: the default exclusion (the sink) left
        out, so lenses cached before the field existed keep their key."""
        params = self.params()
        if resolve_exclude(self.exclude).is_default:
            params.pop("exclude")
        return params


_DEFAULT_CONFIG = TunedLensConfig()
_DEFAULT_LENS_CONFIG = LogitLensConfig()


def _documents(split: int) -> Iterator[str]:
    """Even-numbered stdlib documents train, odd-numbered ones are held out."""
    return itertools.islice(stdlib_documents(), split, None, 2)


def heldout_documents() -> Iterator[str]:
    """The stdlib documents a tuned lens never trains on (the odd-numbered ones)."""
    return _documents(1)


@dataclass(frozen=True)
class TunedLens:
    """Affine translators, one per layer: ``resid_post[layer] @ weight[layer] + bias[layer]``.

    Attributes:
        weight: ``[layer, d_model, d_model]``; bias: ``[layer, d_model]``.
        model: the model's name; fingerprint: its weights fingerprint (a lens fits one model).
        config: how it was trained; train_seconds: what training cost on this machine.
    """

    weight: Tensor
    bias: Tensor
    model: str
    fingerprint: str
    config: TunedLensConfig
    train_seconds: float

    def translate(
        self, layer: int, resid: Float[Tensor, "... d_model"]
    ) -> Float[Tensor, "... d_model"]:
        """The translated stream of ``layer``."""
        weight = self.weight[layer].to(resid.device, resid.dtype)
        return resid @ weight + self.bias[layer].to(resid.device, resid.dtype)

    def save(self, path: str | Path) -> Path:
        """Write the lens as safetensors, its provenance in the file's metadata."""
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "format": _FORMAT,
            "model": self.model,
            "fingerprint": self.fingerprint,
            "config": json.dumps(self.config.key_params()),
            "train_seconds": repr(self.train_seconds),
        }
        # Written under a private name and renamed: a reader never sees half a lens.
        partial = out.with_name(f".{out.name}.{os.getpid()}.partial")
        try:
            tensors = {"weight": self.weight.contiguous(), "bias": self.bias.contiguous()}
            save_file(tensors, partial, meta)
            os.replace(partial, out)
        finally:
            partial.unlink(missing_ok=True)
        return out

    @classmethod
    def load(cls, path: str | Path, lm: LensModel) -> TunedLens:
        """Read a lens written by :meth:`save` for the model ``lm``.

        Raises:
            FileNotFoundError: no file at ``path``.
            ValueError: not a tuned-lens file, or a lens of another model (the message names the
                fix: train one for this model).
        """
        if not Path(path).is_file():
            raise FileNotFoundError(f"no tuned lens at {path}")
        try:
            with safe_open(str(path), framework="pt") as handle:
                meta = handle.metadata() or {}
                weight, bias = handle.get_tensor("weight"), handle.get_tensor("bias")
        except (SafetensorError, OSError) as error:
            raise UserInputError(f"{path} is not a tuned-lens file ({error})") from None
        if meta.get("format") != _FORMAT:
            raise UserInputError(f"{path} is not a tuned-lens file (no format {_FORMAT!r})")
        mine = weights_fingerprint(lm)
        if meta.get("fingerprint") != mine:
            raise UserInputError(
                f"{path} is a tuned lens of {meta.get('model')!r} (weights "
                f"{meta.get('fingerprint')}), not of {lm.name} (weights {mine}); train one for "
                f"this model with tuned_lens_for(lm) or `lmsci-mi lens tuned --model {lm.name}`"
            )
        return cls(
            weight,
            bias,
            meta["model"],
            meta["fingerprint"],
            _config_from(meta["config"]),
            float(meta["train_seconds"]),
        )


def _config_from(text: str) -> TunedLensConfig:
    """The config recorded in a lens file (``params()`` as JSON, its type name dropped)."""
    fields = {f.name for f in dataclasses.fields(TunedLensConfig)}
    values = {k: v for k, v in json.loads(text).items() if k in fields}
    if isinstance(values.get("exclude"), dict):
        values["exclude"] = Exclude.from_params(values["exclude"])
    return TunedLensConfig(**values)


# --------------------------------------------------------------------------- training

# Tokens kept (in bfloat16) for the Adam fine-tune: enough for the default steps without reuse.
_KEEP_TOKENS = 8192


@torch.no_grad()
def _normal_equations(
    lm: LensModel, rows: Tensor, config: TunedLensConfig
) -> tuple[Tensor, Tensor, Tensor]:
    """``X^T X`` and ``X^T Y`` of every layer (X = ``[resid_post, 1]``, Y = the final stream, each
    token's row divided by the final norm's scale), and a sample of streams ``[token, layer, d]``."""
    n_layers, d = lm.cfg.n_layers, lm.cfg.d_model
    names = [hook_name("resid_post", layer) for layer in range(n_layers)]
    xtx = torch.zeros(n_layers, d + 1, d + 1, dtype=torch.float64)
    xty = torch.zeros(n_layers, d + 1, d, dtype=torch.float64)
    kept: list[Tensor] = []
    generator = torch.Generator().manual_seed(config.seed)
    per_batch = -(-_KEEP_TOKENS // -(-rows.shape[0] // 8))
    exclude = resolve_exclude(config.exclude)
    for index, batch in enumerate(rows.split(8)):
        log.info("tuned lens: least-squares batch %d of %d", index + 1, -(-rows.shape[0] // 8))
        with lm.hooks.capture(names) as cap:
            lm.model(batch.to(lm.device), stop_at_layer=n_layers)
        # The sink is a resting place for attention, not a prediction: left out (with any other
        # excluded position), row-major as before.
        keep = exclude.keep(batch).to(lm.device)
        streams = torch.stack([cap[n][keep].reshape(-1, d).float() for n in names], 1).cpu()
        final = streams[:, -1]
        weight = 1 / readout.final_norm_scale(lm, final)
        ones = torch.ones(len(final), 1)
        target = final * weight
        for layer in range(n_layers):
            x = torch.cat([streams[:, layer], ones], 1) * weight
            xtx[layer] += (x.T @ x).double()
            xty[layer] += (x.T @ target).double()
        pick = torch.randperm(len(streams), generator=generator)[:per_batch]
        kept.append(streams[pick].to(torch.bfloat16))
    return xtx, xty, torch.cat(kept)[:_KEEP_TOKENS]


def _solve(xtx: Tensor, xty: Tensor, ridge: float) -> tuple[Tensor, Tensor]:
    """Ridge least squares per layer; the last layer's translator is the identity."""
    n_layers, d = xty.shape[0], xty.shape[2]
    weights, biases = [], []
    for layer in range(n_layers - 1):
        a = xtx[layer]
        a = a + ridge * a.diagonal()[:d].mean() * torch.eye(d + 1, dtype=a.dtype)
        solution = torch.linalg.solve(a, xty[layer]).float()
        weights.append(solution[:d])
        biases.append(solution[d])
    weights.append(torch.eye(d))
    biases.append(torch.zeros(d))
    return torch.stack(weights), torch.stack(biases)


def _lens_logits(lm: LensModel, stream: Tensor) -> Tensor:
    """The lens's readout of a (translated) stream: the logit lens's own, soft cap included, so
    the translators are trained against the distribution they are later read with. The readout's
    weights are detached: the gradient reaches the translators only, never the model."""
    return readout.logits(lm, stream, space="resid", norm="recompute")


def _kl_to_final(lm: LensModel, stream: Tensor, final_logp: Tensor) -> Tensor:
    logp = _lens_logits(lm, stream).log_softmax(-1)
    return (final_logp.exp() * (final_logp - logp)).sum(-1).mean()


def _fine_tune(
    lm: LensModel, weight: Tensor, bias: Tensor, kept: Tensor, config: TunedLensConfig
) -> tuple[Tensor, Tensor]:
    """Adam on KL(final ‖ lens) over the kept tokens, every layer but the last."""
    device = lm.device
    n = weight.shape[0] - 1
    w = weight[:n].clone().to(device).requires_grad_(True)
    b = bias[:n].clone().to(device).requires_grad_(True)
    optimiser = torch.optim.Adam([w, b], lr=config.lr)
    generator = torch.Generator().manual_seed(config.seed + 1)
    for _ in range(config.steps):
        pick = torch.randint(len(kept), (config.batch_tokens,), generator=generator)
        batch = kept[pick].to(device).float()
        with torch.no_grad():
            final_logp = _lens_logits(lm, batch[:, -1]).log_softmax(-1)
        optimiser.zero_grad()
        # One backward per layer keeps one layer's vocabulary-sized logits in memory at a time.
        for layer in range(n):
            _kl_to_final(lm, batch[:, layer] @ w[layer] + b[layer], final_logp).backward()
        optimiser.step()
    return (
        torch.cat([w.detach().cpu(), weight[n:]]),
        torch.cat([b.detach().cpu(), bias[n:]]),
    )


def train_tuned_lens(lm: LensModel, config: TunedLensConfig = _DEFAULT_CONFIG) -> TunedLens:
    """Train a tuned lens on the even-numbered stdlib documents (no cache; see
    :func:`tuned_lens_for`). Reads the model only; its weights get no gradient.

    Args:
        lm: the model.
        config: training tokens, ridge, Adam steps.

    Returns:
        :class:`TunedLens`, with its training time.

    >>> from lmsci_mi import load_model
    >>> lens = train_tuned_lens(load_model("toy-2l"), TunedLensConfig(n_tokens=256, steps=1))
    >>> lens.weight.shape
    torch.Size([2, 64, 64])
    """
    start = time.perf_counter()
    rows = text_chunks(lm, config.n_tokens, config.seq_len, documents=_documents(0))
    xtx, xty, kept = _normal_equations(lm, rows, config)
    weight, bias = _solve(xtx, xty, config.ridge)
    if config.steps:
        weight, bias = _fine_tune(lm, weight, bias, kept, config)
    seconds = time.perf_counter() - start
    log.info("trained a tuned lens for %s in %.1f s", lm.name, seconds)
    return TunedLens(weight, bias, lm.name, weights_fingerprint(lm), config, seconds)


def tuned_lens_path(lm: LensModel, config: TunedLensConfig = _DEFAULT_CONFIG) -> Path:
    """Where :func:`tuned_lens_for` caches the lens of ``lm`` under ``config``."""
    key = cache_key(weights_fingerprint(lm), config.key_params())
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in lm.name)
    return cache_root() / "tuned_lens" / f"{safe}-{key}.safetensors"


def tuned_lens_for(lm: LensModel, config: TunedLensConfig = _DEFAULT_CONFIG) -> TunedLens:
    """The tuned lens of ``lm``: loaded from the cache, or trained and cached."""
    path = tuned_lens_path(lm, config)
    if path.is_file():
        return TunedLens.load(path, lm)
    lens = train_tuned_lens(lm, config)
    lens.save(path)
    return lens


def tuned_lens(
    lm: LensModel,
    prompts: str | Sequence[str],
    answer: str | Sequence[str] | None = None,
    lens: TunedLens | None = None,
    config: LogitLensConfig = _DEFAULT_LENS_CONFIG,
) -> LogitLens:
    """The tuned lens at every layer (or ``config.layers``) and position of a batch of prompts.

    Like :func:`~lmsci_mi.lenses.logit_lens` (same result type, ``lens="tuned"``), with each
    layer's stream translated first. Reads hooked activations, so it shows an intervention's
    stream when run inside one.

    Args:
        lm: the model.
        prompts, answer: as for the logit lens.
        lens: a trained lens (default: :func:`tuned_lens_for` ``(lm)``, trained once and cached).
        config: the layers and batch size; the site must be ``resid_post`` (what lenses train on).

    Raises:
        ValueError: another site, an unknown layer, a lens of another model, bad prompts.
    """
    if config.site != "resid_post":
        raise UserInputError(
            f"the tuned lens reads resid_post (its training site), not {config.site!r}"
        )
    layers = resolve_layers(lm, config.layers)
    if lens is None:
        lens = tuned_lens_for(lm)
    elif lens.fingerprint != weights_fingerprint(lm):
        raise UserInputError(
            f"this tuned lens was trained on {lens.model!r}, not {lm.name}; train one for this "
            "model with tuned_lens_for(lm)"
        )
    chosen = lens

    def translate(index: int, stream: Tensor) -> Tensor:
        return chosen.translate(layers[index], stream)

    return run_lens(lm, prompts, answer, config, translate=translate, lens="tuned")

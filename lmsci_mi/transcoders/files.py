"""Transcoder files: circuit-tracer's format (``layer_{i}.safetensors`` + ``config.yaml``), so its
``load_transcoder_set`` reads our transcoders, and a compact float16 form for shipping.

circuit-tracer's layout (v0.5.0, ``single_layer_transcoder.py`` ``to_safetensors`` and
``load_transcoder``; ``utils/hf_utils.py`` ``load_transcoders``): per layer ``W_enc`` and ``W_dec``
``[d_transcoder, d_model]``, ``b_enc``, ``b_dec``, ``W_skip`` ``[d_model, d_model]`` when present,
``activation_function.threshold`` for JumpReLU; ``config.yaml`` names the hooks relative to a
block (``ln2.hook_normalized``, ``hook_mlp_out``) and gives ``activation`` and TopK's ``k``. The compact form
keeps only live latents (as :mod:`lmsci_mi.sae.compact` does for SAEs); a dropped latent expands to
a zero encoder row with bias −10⁴ and a zero decoder row, so it never contributes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

from lmsci_mi.errors import UserInputError
from lmsci_mi.sites import SITES, parse_hook_name
from lmsci_mi.transcoders.model import ACTIVATIONS, Transcoder, TranscoderSet

__all__ = [
    "COMPACT_FILE",
    "COMPACT_META",
    "DEAD_BIAS",
    "compact_size",
    "expand_transcoders",
    "load_circuit_tracer",
    "save_circuit_tracer",
    "save_compact",
]

CONFIG = "config.yaml"
COMPACT_FILE = "transcoders_live_float16.safetensors"
COMPACT_META = "transcoders_compact.json"
DEAD_BIAS = -1.0e4
"""Encoder bias of a dropped latent: with a zero encoder row it never reaches a TopK's k largest
(nor passes ReLU or a threshold); its decoder row is zero besides."""

_ALIASES = {"mlp.hook_in": "mlp_in_normed", "mlp.hook_out": "mlp_out"}
"""circuit-tracer's own MLP wrapper hooks (its Llama configs) and our sites: the MLP's input is
its norm's output; its output is what the block adds, for models without a post-MLP norm."""


def _block_hook(site_name: str) -> str:
    """A site's hook name relative to its block (``ln2.hook_normalized``), as config.yaml has it."""
    template = SITES[site_name].template
    prefix = "blocks.{layer}."
    if not template.startswith(prefix):
        raise UserInputError(f"site {site_name!r} is not inside a block; circuit-tracer hooks are")
    return template[len(prefix):]


def _site_of(block_hook: str) -> str:
    if block_hook in _ALIASES:
        return _ALIASES[block_hook]
    try:
        return parse_hook_name(f"blocks.0.{block_hook}")[0].name
    except ValueError:
        raise UserInputError(
            f"config.yaml names the hook {block_hook!r}, which is no site of ours; transcoders "
            "must read and write TransformerLens hooks such as ln2.hook_normalized and hook_mlp_out"
        ) from None


def save_circuit_tracer(tcs: TranscoderSet, folder: str | Path, *, scan: str = "") -> Path:
    """Write ``tcs`` as circuit-tracer writes a transcoder set (float32, keys and orientations
    as its ``to_safetensors``), with a ``config.yaml`` naming the hooks; returns the folder.

    circuit-tracer needs layers 0..n−1 all present. Load there with
    ``load_transcoder_set({i: folder/f"layer_{i}.safetensors"}, scan, feature_input_hook,
    feature_output_hook, activation=..., k=...)`` using the config's values.
    """
    import yaml

    if sorted(tcs) != list(range(len(tcs))):
        raise UserInputError(
            f"circuit-tracer needs a transcoder for every layer from 0, not layers {sorted(tcs)}"
        )
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    first = tcs[0]
    for layer in tcs:
        tc = tcs[layer]
        if (tc.activation, tc.k) != (first.activation, first.k):
            raise UserInputError("circuit-tracer's config holds one activation and k for all layers")
        tensors = {name: getattr(tc, name) for name in ("W_enc", "W_dec", "b_enc", "b_dec")}
        if tc.W_skip is not None:
            tensors["W_skip"] = tc.W_skip
        if tc.activation == "jumprelu":
            tensors["activation_function.threshold"] = tc.threshold
        # No scalar "k" in the file, though circuit-tracer's to_safetensors writes one: its own
        # load_transcoder then fails ("Unexpected key(s) in state_dict: k"); k is in config.yaml.
        tensors = {k: v.detach().float().cpu().contiguous() for k, v in tensors.items()}
        save_file(tensors, str(folder / f"layer_{layer}.safetensors"))
    config: dict[str, Any] = {
        "model_kind": "transcoder_set",
        "model_name": tcs.model_name,
        "scan": scan or f"lmsci-mi/{tcs.model_name}",
        "feature_input_hook": _block_hook(tcs.input_site),
        "feature_output_hook": _block_hook(tcs.output_site),
        # JumpReLU's thresholds are read from the files: circuit-tracer takes no activation then
        "activation": None if first.activation == "jumprelu" else first.activation,
    }
    if first.k is not None:
        config["k"] = first.k
    (folder / CONFIG).write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return folder


def load_circuit_tracer(folder: str | Path, *, model_name: str | None = None) -> TranscoderSet:
    """A :class:`TranscoderSet` from circuit-tracer's files (ours or its own single-layer sets).

    Raises:
        FileNotFoundError: no ``config.yaml`` or no ``layer_0.safetensors`` in ``folder``.
        UserInputError: the config is not a transcoder set, names a hook that is no site, or a
            TopK set gives no ``k``.
    """
    import yaml

    folder = Path(folder)
    if not (folder / CONFIG).is_file():
        raise FileNotFoundError(f"{folder} holds no circuit-tracer transcoders (no {CONFIG})")
    config = yaml.safe_load((folder / CONFIG).read_text(encoding="utf-8")) or {}
    if config.get("model_kind") != "transcoder_set":
        raise UserInputError(
            f"{folder / CONFIG} has model_kind {config.get('model_kind')!r}; only per-layer "
            "transcoder sets (model_kind: transcoder_set) load here"
        )
    files = sorted(folder.glob("layer_*.safetensors"), key=lambda p: int(p.stem.split("_")[1]))
    if not files:
        raise FileNotFoundError(f"{folder} holds no layer_{{i}}.safetensors")
    layers = {int(p.stem.split("_")[1]): _read_layer(load_file(str(p)), config) for p in files}
    return TranscoderSet(
        layers,
        input_site=_site_of(config["feature_input_hook"]),
        output_site=_site_of(config["feature_output_hook"]),
        model_name=model_name if model_name is not None else str(config.get("model_name") or ""),
    )


def _read_layer(tensors: Mapping[str, Tensor], config: Mapping[str, Any]) -> Transcoder:
    threshold = tensors.get("activation_function.threshold")
    activation = "jumprelu" if threshold is not None else (config.get("activation") or "relu")
    if activation not in ACTIVATIONS:
        raise UserInputError(f"config.yaml's activation {activation!r} is none of {list(ACTIVATIONS)}")
    k = config.get("k", int(tensors["k"]) if "k" in tensors else None)
    d_transcoder, d_model = tensors["W_enc"].shape
    tc = Transcoder(d_model, d_transcoder, activation=activation,
                    k=k if activation == "topk" else None, skip="W_skip" in tensors)
    state = {name: tensors[name] for name in ("W_enc", "W_dec", "b_enc", "b_dec", "W_skip")
             if name in tensors}
    state["threshold"] = threshold if threshold is not None else torch.zeros(d_transcoder)
    tc.load_state_dict({k: v.float() for k, v in state.items()})
    return tc.requires_grad_(False)


def save_compact(
    tcs: TranscoderSet, folder: str | Path, live: Mapping[int, Tensor] | None = None
) -> Path:
    """Write the live latents of every layer in float16 (biases and thresholds in float32).

    Args:
        live: per layer, a ``[d_transcoder]`` bool mask of the latents to keep (e.g. those that
            fired on held-out text); default: those with a non-zero decoder row.

    Returns:
        The compact weights file (its metadata JSON lies beside it).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, Tensor] = {}
    for layer in tcs:
        tc = tcs[layer]
        keep = live[layer] if live is not None else tc.W_dec.detach().abs().sum(-1) > 0
        ids = keep.nonzero().flatten().cpu()
        half = {"W_enc": tc.W_enc[ids], "W_dec": tc.W_dec[ids]}
        if tc.W_skip is not None:
            half["W_skip"] = tc.W_skip
        full = {"b_enc": tc.b_enc[ids], "b_dec": tc.b_dec, "threshold": tc.threshold[ids]}
        tensors.update({f"{layer}.{k}": v.detach().cpu().half().contiguous() for k, v in half.items()})
        tensors.update({f"{layer}.{k}": v.detach().cpu().float().contiguous() for k, v in full.items()})
        tensors[f"{layer}.live"] = ids
    save_file(tensors, str(folder / COMPACT_FILE))
    first = next(iter(tcs.layers.values()))
    meta = {
        "layers": sorted(tcs), "d_model": tcs.d_model, "d_transcoder": first.d_transcoder,
        "activation": first.activation, "k": first.k, "skip": first.W_skip is not None,
        "input_site": tcs.input_site, "output_site": tcs.output_site, "model_name": tcs.model_name,
    }
    (folder / COMPACT_META).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return folder / COMPACT_FILE


def expand_transcoders(folder: str | Path) -> TranscoderSet:
    """The full-size float32 set of a compact folder (:func:`save_compact`); every latent keeps
    its index, and a dropped one never fires."""
    folder = Path(folder)
    if not (folder / COMPACT_FILE).is_file():
        raise FileNotFoundError(f"{folder} holds no compact transcoders ({COMPACT_FILE})")
    meta = json.loads((folder / COMPACT_META).read_text(encoding="utf-8"))
    tensors = load_file(str(folder / COMPACT_FILE))
    layers = {}
    for layer in meta["layers"]:
        tc = Transcoder(meta["d_model"], meta["d_transcoder"], activation=meta["activation"],
                        k=meta["k"], skip=meta["skip"])
        ids = tensors[f"{layer}.live"]
        with torch.no_grad():
            tc.b_enc.fill_(DEAD_BIAS)
            tc.W_enc[ids] = tensors[f"{layer}.W_enc"].float()
            tc.W_dec[ids] = tensors[f"{layer}.W_dec"].float()
            tc.b_enc[ids] = tensors[f"{layer}.b_enc"]
            tc.threshold[ids] = tensors[f"{layer}.threshold"]
            tc.b_dec.copy_(tensors[f"{layer}.b_dec"])
            if tc.W_skip is not None:
                tc.W_skip.copy_(tensors[f"{layer}.W_skip"].float())
        layers[layer] = tc.requires_grad_(False)
    return TranscoderSet(layers, meta["input_site"], meta["output_site"], meta["model_name"])


def compact_size(folder: str | Path) -> int:
    """Bytes of the compact form in ``folder`` (weights and metadata)."""
    folder = Path(folder)
    return sum((folder / name).stat().st_size for name in (COMPACT_FILE, COMPACT_META))

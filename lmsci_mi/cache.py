"""The on-disk cache: where it lives, and how its entries are named.

:func:`cache_root` is the folder; :func:`weights_fingerprint` hashes a model's weights (the part of
a key that says "this model"); :func:`cache_key` turns a JSON-able payload into the hex name of a
cache entry. Every cached artefact (converted weights, SAEs, steers, the CFG GPT, editing
statistics) is named through these, so a shipped artefact is found by recomputing its key.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel

__all__ = [
    "Payload",
    "WeightsHash",
    "cache_key",
    "cache_root",
    "file_sha256",
    "weights_fingerprint",
]

Payload = Mapping[str, Any] | Sequence[Any] | str | bytes
"""What a cache key hashes: JSON-able mappings and lists (serialised with sorted keys), text
(UTF-8) or raw bytes."""


def cache_root() -> Path:
    """Where cached files live: ``$LMSCI_MI_CACHE``, else ``$XDG_CACHE_HOME/lmsci-mi``."""
    if env := os.environ.get("LMSCI_MI_CACHE"):
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "lmsci-mi"


def _encode(part: Payload) -> bytes:
    if isinstance(part, bytes):
        return part
    if isinstance(part, str):
        return part.encode()
    # json's default separators and sort_keys: the shipped artefacts' folder names depend on them.
    return json.dumps(part, sort_keys=True).encode()


def cache_key(
    *parts: Payload, length: int = 20, algorithm: Literal["blake2b", "sha256"] = "blake2b"
) -> str:
    """A hex key of ``length`` characters for ``parts``, hashed one after another.

    Parts are fed without a separator, so only the last one may vary in length where two keys
    must never collide (a fixed-length fingerprint first, then a payload). ``blake2b`` makes a
    digest of ``length // 2`` bytes; ``sha256`` keeps the first ``length`` hex digits. Both exist
    because keys that name shipped artefacts were made with each; a new key takes the default.

    >>> cache_key({"b": 1, "a": [2, 3]}) == cache_key({"a": [2, 3], "b": 1})
    True
    >>> cache_key("abc", length=12, algorithm="sha256")
    'ba7816bf8f01'
    """
    if algorithm == "blake2b":
        if length % 2 or not 2 <= length <= 128:
            raise ValueError(f"a blake2b key has an even length of 2 to 128, not {length}")
        hasher = hashlib.blake2b(digest_size=length // 2)
    elif algorithm == "sha256":
        if not 1 <= length <= 64:
            raise ValueError(f"a sha256 key has 1 to 64 hex digits, not {length}")
        hasher = hashlib.sha256()
    else:
        raise ValueError(f"algorithm must be 'blake2b' or 'sha256', not {algorithm!r}")
    for part in parts:
        hasher.update(_encode(part))
    return hasher.hexdigest()[:length]


class WeightsHash:
    """A running blake2b hash of named tensors' bytes; :meth:`copy` branches it, so fingerprints
    of nested prefixes of a model (one per layer) cost one pass over the weights.

    >>> a = WeightsHash().update("w", torch.ones(2))
    >>> b = a.copy().update("v", torch.zeros(1))
    >>> a.hexdigest() != b.hexdigest(), len(a.hexdigest())
    (True, 24)
    """

    def __init__(self, size: int = 12, header: str = "") -> None:
        self._hasher: Any = hashlib.blake2b(digest_size=size)  # Any: it takes numpy buffers
        if header:
            self._hasher.update(header.encode())

    def update(self, name: str, tensor: Tensor) -> WeightsHash:
        """Feed a tensor's name and raw bytes (any dtype, any device); returns ``self``."""
        self._hasher.update(name.encode())
        self._hasher.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy())
        return self

    def copy(self) -> WeightsHash:
        clone = WeightsHash.__new__(WeightsHash)
        clone._hasher = self._hasher.copy()
        return clone

    def hexdigest(self) -> str:
        return self._hasher.hexdigest()


@torch.no_grad()
def weights_fingerprint(lm: LensModel, names: Iterable[str] | None = None) -> str:
    """A hash of the model's weights (every parameter by default, else those ``names``), with its
    name, sink and dtype: 24 hex digits, the model part of a cache key.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> weights_fingerprint(lm) == weights_fingerprint(lm), len(weights_fingerprint(lm))
    (True, 24)
    """
    hasher = WeightsHash(12, header=f"{lm.name}|{lm.sink}|{lm.cfg.dtype}")
    params = dict(lm.model.named_parameters())
    for name in params if names is None else names:
        hasher.update(name, params[name])
    return hasher.hexdigest()


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes (a checksum of shipped files, not a cache key)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()

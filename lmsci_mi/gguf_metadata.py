"""The scalar metadata of a GGUF file (name, architecture, quantisation, layer and head counts),
read from its key-value header alone.

`gguf.GGUFReader` parses every field into numpy arrays, the tokenizer's vocabulary and merges
included, and indexes every tensor: 5 s for SmolLM2's 49k-token vocabulary, 15 s for Gemma 3's
262k. A model card needs a handful of scalars, so this reader walks the header once, keeps the
scalars and steps over the arrays by their lengths (well under a second for either file). The
layout is the GGUF specification's (version 2 and 3: little-endian, 64-bit counts):
https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

_MAGIC = b"GGUF"
_STRING, _ARRAY = 8, 9
# The fixed-size value types: GGUF type id -> struct format (little-endian).
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
            11: "<q", 12: "<d"}

Scalar = int | float | bool | str


class _Cursor:
    """A read position in the mapped file."""

    def __init__(self, data: mmap.mmap) -> None:
        self.data, self.at = data, 0

    def unpack(self, fmt: str) -> int | float | bool:
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        length = int(self.unpack("<Q"))
        text = self.data[self.at:self.at + length].decode("utf-8", errors="replace")
        self.at += length
        return text

    def skip_array(self) -> None:
        kind, count = int(self.unpack("<I")), int(self.unpack("<Q"))
        if kind in _SCALARS:
            self.at += struct.calcsize(_SCALARS[kind]) * count
        elif kind == _STRING:
            for _ in range(count):
                self.at += 8 + int(struct.unpack_from("<Q", self.data, self.at)[0])
        elif kind == _ARRAY:
            for _ in range(count):
                self.skip_array()
        else:
            raise ValueError(f"unknown GGUF value type {kind} in an array at byte {self.at}")


def read_gguf_scalars(path: str | Path) -> dict[str, Scalar]:
    """Every scalar key-value pair in the header of the GGUF file at ``path`` (arrays left out).

    Raises ValueError where the file is not GGUF (its first four bytes are not ``GGUF``), is
    version 1 (32-bit counts) or holds a value type the specification does not define.
    """
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data[:4] != _MAGIC:
            raise ValueError(f"{path} is not a GGUF file: it starts {bytes(data[:4])!r}, not b'GGUF'")
        cursor = _Cursor(data)
        cursor.at = 4
        version = int(cursor.unpack("<I"))
        if version < 2:
            raise ValueError(f"{path} is GGUF version {version}; only versions 2 and 3 are read "
                             "(convert it with a current llama.cpp)")
        cursor.at += 8  # the tensor count
        scalars: dict[str, Scalar] = {}
        for _ in range(int(cursor.unpack("<Q"))):
            key, kind = cursor.string(), int(cursor.unpack("<I"))
            if kind in _SCALARS:
                scalars[key] = cursor.unpack(_SCALARS[kind])
            elif kind == _STRING:
                scalars[key] = cursor.string()
            elif kind == _ARRAY:
                cursor.skip_array()
            else:
                raise ValueError(f"{path}: unknown GGUF value type {kind} for the key {key!r}")
        return scalars

"""lmsci_mi.gguf_metadata: the header's scalars as gguf's own reader reads them, arrays skipped,
and a clear error for a file that is not GGUF."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader, GGUFWriter

from lmsci_mi.gguf_metadata import read_gguf_scalars


def _written(path: Path) -> Path:
    writer = GGUFWriter(str(path), "llama")
    writer.add_name("toy")
    writer.add_block_count(3)
    writer.add_uint64("toy.big", 2**40)
    writer.add_float32("toy.eps", 0.25)
    writer.add_bool("toy.flag", True)
    writer.add_token_list(["a", "bb", "ccc"])  # a string array, stepped over
    writer.add_array("toy.ints", [1, 2, 3])
    writer.add_string("toy.after_arrays", "still read")
    writer.add_tensor("w", np.zeros((2, 2), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_scalars_equal_ggufs_own_reader_and_arrays_are_left_out(tmp_path: Path) -> None:
    path = _written(tmp_path / "toy.gguf")
    fields = GGUFReader(path).fields
    expected = {key: field.contents() for key, field in fields.items()
                if not key.startswith("GGUF.") and not isinstance(field.contents(), list)}
    scalars = read_gguf_scalars(path)
    assert scalars == pytest.approx(expected)
    assert scalars["toy.after_arrays"] == "still read" and scalars["toy.big"] == 2**40
    assert "tokenizer.ggml.tokens" not in scalars and "toy.ints" not in scalars


def test_a_file_that_is_not_gguf_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"{}\0\0\0\0\0\0\0\0\0\0\0\0\0\0")
    with pytest.raises(ValueError, match="not a GGUF file"):
        read_gguf_scalars(path)


def test_version_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "old.gguf"
    path.write_bytes(b"GGUF" + (1).to_bytes(4, "little") + bytes(16))
    with pytest.raises(ValueError, match="version 1"):
        read_gguf_scalars(path)

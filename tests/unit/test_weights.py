"""WeightEdit: exact restore, validation before any change, save and read back."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lmsci_mi import LensModel, WeightEdit
from lmsci_mi.weights import read_deltas

W = "blocks.1.mlp.W_out"


def _snapshot(lm: LensModel) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in lm.model.named_parameters()}


def _unchanged(lm: LensModel, snapshot: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(p, snapshot[name]) for name, p in lm.model.named_parameters())


def test_restore_is_bit_identical_after_a_tiny_delta(tiny: LensModel) -> None:
    before = _snapshot(tiny)
    # A delta far below float32 resolution of some weights: subtracting it back would not be exact.
    delta = torch.full_like(tiny.model.blocks[1].mlp.W_out, 1e-9)
    edit = WeightEdit(tiny, {W: delta}).apply()
    assert edit.applied and edit.layers == (1,)
    edit.restore()
    edit.restore()
    assert _unchanged(tiny, before)


@pytest.mark.parametrize(
    "deltas",
    [
        {W: torch.ones(3, 3)},
        {"blocks.9.mlp.W_out": torch.ones(256, 64)},
        {W: torch.ones(256, 64), "blocks.0.mlp.W_ot": torch.ones(256, 64)},
    ],
)
def test_bad_deltas_change_nothing(tiny: LensModel, deltas: dict[str, torch.Tensor]) -> None:
    before = _snapshot(tiny)
    with pytest.raises(ValueError):
        WeightEdit(tiny, deltas).apply()
    assert _unchanged(tiny, before)


def test_applying_twice_is_refused(tiny: LensModel) -> None:
    edit = WeightEdit(tiny, {W: torch.ones(256, 64)}).apply()
    with pytest.raises(RuntimeError, match="already applied"):
        edit.apply()
    edit.restore()


def test_save_and_read_back(tiny: LensModel, tmp_path: Path) -> None:
    delta = torch.randn(256, 64)
    path = WeightEdit(tiny, {W: delta}).save(tmp_path / "d.safetensors", {"note": "x"})
    deltas, meta = read_deltas(path)
    assert torch.equal(deltas[W], delta) and meta["note"] == "x" and meta["model"] == "toy-2l"
    (tmp_path / "other.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    with pytest.raises(ValueError, match="not an lmsci-mi edit file"):
        read_deltas(tmp_path / "other.safetensors")


def test_restore_out_of_order_is_refused_and_changes_nothing(tiny: LensModel) -> None:
    """Restoring A under a later B of the same weight would bring back the weights before A and
    silently drop B (B's own restore then brings A back). It must raise and leave both applied."""
    before = _snapshot(tiny)
    first = WeightEdit(tiny, {W: torch.full((256, 64), 1.0)}).apply()
    second = WeightEdit(tiny, {W: torch.full((256, 64), 2.0)}).apply()
    both = tiny.model.blocks[1].mlp.W_out.detach().clone()
    with pytest.raises(RuntimeError, match="reverse order"):
        first.restore()
    assert torch.equal(tiny.model.blocks[1].mlp.W_out, both)
    second.restore()
    first.restore()
    assert _unchanged(tiny, before)


def test_restore_refuses_a_weight_changed_by_hand(tiny: LensModel) -> None:
    edit = WeightEdit(tiny, {W: torch.ones(256, 64)}).apply()
    with torch.no_grad():
        tiny.model.blocks[1].mlp.W_out.mul_(2.0)
    changed = tiny.model.blocks[1].mlp.W_out.detach().clone()
    with pytest.raises(RuntimeError, match="no longer its original"):
        edit.restore()
    assert torch.equal(tiny.model.blocks[1].mlp.W_out, changed)


def test_edits_of_other_weights_restore_in_any_order(tiny: LensModel) -> None:
    before = _snapshot(tiny)
    a = WeightEdit(tiny, {W: torch.ones(256, 64)}).apply()
    b = WeightEdit(tiny, {"blocks.0.mlp.W_out": torch.ones(256, 64)}).apply()
    assert WeightEdit.applied_to(tiny) == (a, b)
    a.restore()
    b.restore()
    assert WeightEdit.applied_to(tiny) == ()
    assert _unchanged(tiny, before)


def test_combine_restores_all_parts_at_once(tiny: LensModel) -> None:
    before = _snapshot(tiny)
    parts = [
        WeightEdit(tiny, {W: torch.ones(256, 64)}).apply(),
        WeightEdit(tiny, {"blocks.0.mlp.W_out": torch.ones(256, 64)}).apply(),
        WeightEdit(tiny, {W: torch.full((256, 64), 0.5)}).apply(),
    ]
    combined = WeightEdit.combine(parts)
    assert WeightEdit.applied_to(tiny) == (combined,)
    assert torch.equal(combined.deltas[W], torch.full((256, 64), 1.5))
    assert combined.layers == (0, 1) and not any(p.applied for p in parts)
    combined.restore()
    assert _unchanged(tiny, before)
    with pytest.raises(ValueError, match="not applied"):
        WeightEdit.combine(parts)


@pytest.mark.parametrize("content", [b"just some text\n", b""])
def test_a_file_that_is_not_an_edit_is_a_clear_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"not a saved edit.*lmsci-mi edit --delta-out"):
        read_deltas(path)
    with pytest.raises(ValueError, match="no edit file"):
        read_deltas(tmp_path / "missing.safetensors")


def test_a_dropped_model_is_freed_with_an_edit_applied_and_hooks_used() -> None:
    # The applied-edit record and the hook registry once lived in WeakKeyDictionaries whose values
    # referred to their keys, so no model was ever freed: the test suite grew 25 MB per toy.
    import gc
    import weakref

    from lmsci_mi import load_model
    from lmsci_mi.hooks import registry_for

    lm = load_model("toy-2l", device="cpu")
    with registry_for(lm.model).capture(["blocks.0.hook_resid_post"]):
        lm(lm.to_tokens("The cat sat"))
    edit = WeightEdit(lm, {W: torch.ones_like(lm.model.blocks[1].mlp.W_out)}).apply()
    model = weakref.ref(lm.model)
    del lm, edit
    gc.collect()
    assert model() is None

"""The hook registry: validation before attachment, exact cleanup, nesting, interventions."""

from __future__ import annotations

import pytest
import torch

from lmsci_mi import LensModel, UnknownHookError
from lmsci_mi.hooks import registry_for, selection_mask

RESID = "blocks.0.hook_resid_post"


def test_registry_is_one_per_model(tiny: LensModel) -> None:
    assert registry_for(tiny.model) is tiny.hooks


def test_misspelt_name_raises_before_attaching_and_suggests(tiny: LensModel) -> None:
    seen: list[str] = []
    with pytest.raises(UnknownHookError, match=r"blocks\.0\.hook_resid_post") as info:  # noqa: SIM117
        with tiny.hooks.hooks(
            fwd=[(RESID, lambda a, hook: seen.append("ok")), ("blocks.0.hook_resid_psot", lambda a, hook: None)]
        ):
            pass
    assert "Did you mean" in str(info.value)
    assert tiny.hooks.attached_count() == 0
    assert seen == []


def test_exception_inside_nested_interventions_leaves_no_hook(tiny: LensModel) -> None:
    tokens = torch.tensor([[0, 5, 6, 7]])
    with pytest.raises(RuntimeError, match="boom"):  # noqa: SIM117
        with tiny.hooks.capture(RESID):
            with tiny.hooks.ablate("blocks.1.hook_mlp_out"):
                with tiny.hooks.add_vector(RESID, torch.ones(64)):
                    tiny(tokens)
                    assert tiny.hooks.attached_count() == 3
                    raise RuntimeError("boom")
    assert tiny.hooks.attached_count() == 0
    assert tiny.hooks.active() == []


def test_leaving_inner_block_keeps_outer_hooks(tiny: LensModel) -> None:
    with tiny.hooks.capture(RESID) as outer:
        with tiny.hooks.capture("blocks.1.hook_resid_post"):
            assert len(tiny.hooks.active()) == 2
        assert [h.name for h in tiny.hooks.active()] == [RESID]
        tiny(torch.tensor([[0, 1, 2]]))
    assert RESID in outer
    assert tiny.hooks.attached_count() == 0


def test_same_site_twice_removes_only_its_own(tiny: LensModel) -> None:
    with tiny.hooks.capture(RESID):
        with tiny.hooks.capture(RESID):
            assert tiny.hooks.attached_count() == 2
        assert tiny.hooks.attached_count() == 1
    assert tiny.hooks.attached_count() == 0


def test_filter_with_no_match_raises(tiny: LensModel) -> None:
    with pytest.raises(UnknownHookError):  # noqa: SIM117
        with tiny.hooks.capture(lambda name: name.endswith("nothing")):
            pass


def test_patch_replaces_only_selected_positions(tiny: LensModel) -> None:
    tokens = torch.tensor([[0, 5, 6, 7]])
    with tiny.hooks.capture(RESID) as base:
        tiny(tokens)
    source = torch.full_like(base[RESID], 3.0)
    with tiny.hooks.patch(RESID, source, positions=[2]), tiny.hooks.capture(RESID) as patched:
        tiny(tokens)
    got = patched[RESID]
    assert torch.equal(got[:, 2], source[:, 2])
    assert torch.equal(got[:, [0, 1, 3]], base[RESID][:, [0, 1, 3]])


def test_patch_heads_on_grouped_kv_uses_tensor_head_count(tiny: LensModel) -> None:
    # toy-2l has 4 query heads and 2 K/V heads: head 3 exists for z but not for v.
    tokens = torch.tensor([[0, 5, 6, 7]])
    with tiny.hooks.capture(["blocks.0.attn.hook_v", "blocks.0.attn.hook_z"]) as cap:
        tiny(tokens)
    assert cap["blocks.0.attn.hook_v"].shape[2] == 2
    zeros = torch.zeros_like(cap["blocks.0.attn.hook_v"])
    with tiny.hooks.patch("blocks.0.attn.hook_v", zeros, heads=[1]), tiny.hooks.capture(
        "blocks.0.attn.hook_v"
    ) as after:
        tiny(tokens)
    assert torch.equal(after["blocks.0.attn.hook_v"][:, :, 1], zeros[:, :, 1])
    assert torch.equal(after["blocks.0.attn.hook_v"][:, :, 0], cap["blocks.0.attn.hook_v"][:, :, 0])
    with pytest.raises(ValueError, match="out of range"), tiny.hooks.patch(
        "blocks.0.attn.hook_v", zeros, heads=[3]
    ):
        tiny(tokens)
    assert tiny.hooks.attached_count() == 0


def test_patch_shape_mismatch_is_clear_and_cleans_up(tiny: LensModel) -> None:
    with pytest.raises(ValueError, match="same length"), tiny.hooks.patch(
        RESID, torch.zeros(1, 9, 64)
    ):
        tiny(torch.tensor([[0, 1, 2]]))
    assert tiny.hooks.attached_count() == 0


def test_per_example_positions(tiny: LensModel) -> None:
    act = torch.zeros(3, 5, 64)
    mask = selection_mask(act, RESID, torch.tensor([1, 4, -1]), None)
    assert mask.shape == (3, 5, 1)
    assert mask[:, :, 0].nonzero().tolist() == [[0, 1], [1, 4], [2, 4]]


def test_zero_and_mean_ablation_of_heads(tiny: LensModel) -> None:
    tokens = torch.tensor([[0, 5, 6, 7], [0, 8, 9, 10]])
    z = "blocks.1.attn.hook_z"
    with tiny.hooks.ablate(z, heads=[2]), tiny.hooks.capture(z) as cap:
        tiny(tokens)
    assert cap[z][:, :, 2].abs().sum() == 0
    assert cap[z][:, :, 1].abs().sum() > 0
    means = tiny.hooks.mean_activations(z, tokens)
    with tiny.hooks.ablate(z, mode="mean", means=means, heads=[0]), tiny.hooks.capture(z) as cap:
        tiny(tokens)
    assert torch.allclose(cap[z][0, :, 0], means[z][0, :, 0])
    with pytest.raises(ValueError, match="mean ablation needs means"), tiny.hooks.ablate(z, mode="mean"):
        pass
    assert tiny.hooks.attached_count() == 0


def test_add_vector_applies_during_cached_generation(tiny: LensModel) -> None:
    calls: list[int] = []

    def count(act: torch.Tensor, hook: object) -> None:
        calls.append(act.shape[1])

    with tiny.hooks.add_vector(RESID, torch.ones(64), scale=100.0), tiny.hooks.hooks(
        fwd=[(RESID, count)]
    ):
        steered = tiny.generate("Hello there", max_new_tokens=4)
    plain = tiny.generate("Hello there", max_new_tokens=4)
    assert calls[0] == len(tiny.encode("Hello there")) and calls[1:] == [1, 1, 1]
    assert steered != plain
    assert tiny.hooks.attached_count() == 0


def test_capture_keeps_grad_when_asked(tiny: LensModel) -> None:
    with tiny.hooks.capture(RESID, retain_grad=True) as cap:
        logits = tiny(torch.tensor([[0, 1, 2]]))
    logits[0, -1, 0].backward()
    assert cap[RESID].grad is not None and cap[RESID].grad.abs().sum() > 0

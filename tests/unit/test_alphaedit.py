"""AlphaEdit: the closed form, the preserved keys, the reduction to MEMIT, and bad input."""

from __future__ import annotations

import tempfile

import pytest
import torch

from lmsci_mi import LensModel, load_model
from lmsci_mi.editing import EDITING_METHODS, EditRequest, StatsConfig, key_statistics
from lmsci_mi.editing.alphaedit import (
    AlphaEditConfig,
    alphaedit_edit,
    alphaedit_update,
    null_space_projector,
)
from tests.conftest import TEST_DEVICE, weights_fingerprint

D_K, D_OUT = 24, 8


def _keys(n: int, rank: int, seed: int) -> torch.Tensor:
    """``n`` keys in a random ``rank``-dimensional subspace of R^D_K (float64)."""
    gen = torch.Generator().manual_seed(seed)
    basis = torch.linalg.qr(torch.randn(D_K, rank, generator=gen, dtype=torch.float64))[0]
    return torch.randn(n, rank, generator=gen, dtype=torch.float64) @ basis.T


def test_update_equals_the_papers_closed_form() -> None:
    gen = torch.Generator().manual_seed(1)
    preserved = _keys(200, 16, seed=2)
    projector, dims = null_space_projector(preserved.T @ preserved / 200, 1e-8)
    assert dims == D_K - 16
    k1 = torch.randn(3, D_K, generator=gen, dtype=torch.float64)  # keys as rows
    kp = torch.randn(5, D_K, generator=gen, dtype=torch.float64)
    r = torch.randn(3, D_OUT, generator=gen, dtype=torch.float64)
    ours = alphaedit_update(k1, r, projector, kp, l2=10.0)
    # Fang et al., eq. for Δ_AlphaEdit, keys as columns and W as [d_out, d_k]:
    # Δ = R K₁ᵀ P (K_p K_pᵀ P + K₁ K₁ᵀ P + αI)⁻¹
    K1, Kp, R, P = k1.T, kp.T, r.T, projector
    eye = torch.eye(D_K, dtype=torch.float64)
    paper = R @ K1.T @ P @ torch.linalg.inv(Kp @ Kp.T @ P + K1 @ K1.T @ P + 10.0 * eye)
    torch.testing.assert_close(ours, paper.T, atol=1e-10, rtol=1e-9)


def test_preserved_keys_read_the_same_output() -> None:
    """(W + ΔW) k₀ = W k₀ for the keys whose directions the projector removes."""
    preserved = _keys(300, 18, seed=3)
    projector, _ = null_space_projector(preserved.T @ preserved / 300, 1e-8)
    gen = torch.Generator().manual_seed(4)
    k1 = torch.randn(4, D_K, generator=gen, dtype=torch.float64)
    r = torch.randn(4, D_OUT, generator=gen, dtype=torch.float64)
    update = alphaedit_update(k1, r, projector, None, 1.0)
    assert float(update.abs().max()) > 1e-3  # the edit does something
    assert float((preserved @ update).abs().max()) < 1e-9


def test_with_identity_projector_and_no_earlier_keys_it_is_memits_update() -> None:
    """P = I, K_p empty and MEMIT's λC replaced by the identity: MEMIT's solve."""
    gen = torch.Generator().manual_seed(5)
    k1 = torch.randn(6, D_K, generator=gen, dtype=torch.float64)
    r = torch.randn(6, D_OUT, generator=gen, dtype=torch.float64)
    eye = torch.eye(D_K, dtype=torch.float64)
    alpha = 3.0
    memit = torch.linalg.solve(alpha * eye + k1.T @ k1, k1.T @ r)  # memit_edit's solve with C = I
    ours = alphaedit_update(k1, r, eye, None, alpha)
    torch.testing.assert_close(ours, memit, atol=1e-10, rtol=1e-9)


@pytest.fixture(scope="module")
def stats(tmp_path_factory: pytest.TempPathFactory):
    # Once per module: every test's `tiny` is a copy of the same seeded build (see test_session.py).
    lm = load_model("toy-2l", device=TEST_DEVICE)
    return key_statistics(lm, [0, 1], StatsConfig(n_tokens=512), cache_dir=tmp_path_factory.mktemp("stats"))


REQUESTS = [EditRequest("{} is in", "Paris", " Rome"), EditRequest("{} is in", "Berlin", " Oslo")]


def test_an_edit_reports_its_projection_and_restores_bit_exactly(tiny: LensModel, stats) -> None:
    before = weights_fingerprint(tiny)
    hp = AlphaEditConfig(layers=(0, 1), steps=2, nullspace_threshold=1e-2)
    handle = alphaedit_edit(tiny, REQUESTS, hp, stats=stats)
    assert weights_fingerprint(tiny) != before
    dims = handle.details["null_space_dims"]
    assert set(dims) == {0, 1} and all(0 < d < tiny.cfg.d_mlp for d in dims.values())
    assert all(0 <= s <= 1 + 1e-9 for s in handle.details["key_share_kept"].values())
    assert handle.details["keys"][0].shape == (2, tiny.cfg.d_mlp)
    assert handle.details["stats_tokens"] == stats.n_tokens
    handle.restore()
    assert weights_fingerprint(tiny) == before
    assert EDITING_METHODS.get("alphaedit").config_type is AlphaEditConfig


def test_bad_input_leaves_the_weights_alone(tiny: LensModel, tiny_gpt2: LensModel, stats) -> None:
    before = weights_fingerprint(tiny)
    hp = AlphaEditConfig(layers=(0, 1), steps=2)
    with pytest.raises(ValueError, match="raise nullspace_threshold"):
        alphaedit_edit(tiny, REQUESTS, hp.replace(nullspace_threshold=1e-12), stats=stats)
    with pytest.raises(ValueError):  # the subject is not in the prompt: no {} to fill
        alphaedit_edit(tiny, [EditRequest("Paris is in", "Atlantis", " Rome")], hp, stats=stats)
    other = key_statistics(
        tiny_gpt2, [0, 1], StatsConfig(n_tokens=256), cache_dir=tempfile.mkdtemp()
    )
    with pytest.raises(ValueError, match="computed on"):
        alphaedit_edit(tiny, REQUESTS, hp, stats=other)
    with pytest.raises(ValueError):
        AlphaEditConfig(nullspace_threshold=0.0)
    assert weights_fingerprint(tiny) == before
    assert tiny.hooks.attached_count() == 0

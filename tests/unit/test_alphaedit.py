"""AlphaEdit: the closed form, the preserved keys, the reduction to MEMIT, the trace-share rule,
solving from given targets, and bad input."""

from __future__ import annotations

import tempfile

import pytest
import torch

from lmsci_mi import LensModel, load_model
from lmsci_mi.editing import EDITING_METHODS, EditRequest, StatsConfig, key_statistics
from lmsci_mi.editing.alphaedit import (
    AlphaEditConfig,
    NullSpace,
    alphaedit_edit,
    alphaedit_update,
    null_space,
    null_space_projector,
    trace_share_rank,
)
from tests.fixtures import TEST_DEVICE, weights_fingerprint

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


# ---------------------------------------------------------------------- the trace-share rule

SPECTRUM = torch.tensor([4.0, 3.0, 2.0, 1.0], dtype=torch.float64)  # trace 10


def _rotated(values: torch.Tensor, seed: int = 7) -> tuple[torch.Tensor, torch.Tensor]:
    """C = Q diag(values) Qᵀ for a random rotation Q, and Q."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.linalg.qr(torch.randn(len(values), len(values), generator=gen, dtype=torch.float64))[0]
    return q @ torch.diag(values) @ q.T, q


@pytest.mark.parametrize(("share", "dims"), [(0.1, 1), (0.29, 1), (0.3, 2), (0.6, 3), (0.99, 3)])
def test_a_trace_share_keeps_the_smallest_directions_within_it(share: float, dims: int) -> None:
    c, q = _rotated(SPECTRUM)
    projector, record = null_space(c, trace_share=share)
    assert trace_share_rank(SPECTRUM, share) == dims
    assert (record.rule, record.dims, record.d_mlp) == ("trace_share", dims, 4)
    assert record.direction_share == dims / 4
    held = float(SPECTRUM.sort().values[:dims].sum() / SPECTRUM.sum())
    assert record.trace_share == pytest.approx(held) and record.trace_share <= share * (1 + 1e-9)
    # P projects onto the eigenvectors of the `dims` smallest eigenvalues (q's last columns).
    smallest = q[:, list(range(4 - dims, 4))]
    torch.testing.assert_close(projector, smallest @ smallest.T, atol=1e-10, rtol=1e-9)


def test_the_two_rules_agree_where_their_cuts_meet() -> None:
    preserved = _keys(300, 18, seed=8) + 1e-2 * torch.randn(300, D_K, generator=torch.Generator().manual_seed(9),
                                                            dtype=torch.float64)
    c = preserved.T @ preserved / 300
    _, by_threshold = null_space(c, 1e-3)
    _, by_share = null_space(c, trace_share=by_threshold.trace_share * (1 + 1e-9))
    assert 0 < by_threshold.dims == by_share.dims < D_K
    assert by_threshold.rule == "threshold" and by_share.trace_share == pytest.approx(by_threshold.trace_share)


@pytest.mark.parametrize(("share", "message"), [
    (0.0, "a share of 0 leaves no null space"),
    (-0.1, "a share of 0 leaves no null space"),
    (1.0, r"P = I"),
    (1.5, r"P = I"),
])
def test_a_share_outside_zero_one_is_refused_with_the_fix(share: float, message: str) -> None:
    c, _ = _rotated(SPECTRUM)
    with pytest.raises(ValueError, match=message) as info:
        null_space(c, trace_share=share)
    assert "give a share such as 1e-2" in str(info.value)
    with pytest.raises(ValueError, match="nullspace_trace_share"):
        AlphaEditConfig(nullspace_trace_share=share)


def test_a_share_below_the_smallest_eigenvalue_names_the_field_to_raise() -> None:
    c, _ = _rotated(SPECTRUM)
    with pytest.raises(ValueError, match="raise nullspace_trace_share"):
        null_space(c, trace_share=0.05, layer=3)  # the smallest eigenvalue is 10 % of the trace
    with pytest.raises(ValueError, match=r"raise nullspace_threshold \(or set nullspace_trace_share\)"):
        null_space(c, 0.5)


def test_an_edit_under_a_trace_share_records_its_null_space(tiny: LensModel, stats) -> None:
    before = weights_fingerprint(tiny)
    hp = AlphaEditConfig(layers=(0, 1), steps=2, nullspace_trace_share=0.05)
    with alphaedit_edit(tiny, REQUESTS, hp, stats=stats) as handle:
        records = handle.details["null_space"]
        assert set(records) == {0, 1}
        for layer, record in records.items():
            assert isinstance(record, NullSpace) and record.layer == layer
            assert record.rule == "trace_share" and record.cut == 0.05
            assert 0 < record.trace_share <= 0.05 and 0 < record.direction_share < 1
            assert record.dims == handle.details["null_space_dims"][layer]
            keys = handle.details["keys"][layer]
            assert len(record.key_norm_kept) == len(REQUESTS)
            assert all(0 <= k <= 1 + 1e-9 for k in record.key_norm_kept)
            # The batch's share is the per-key shares weighted by the keys' squared norms.
            norms = keys.norm(dim=1) ** 2
            pooled = float((torch.tensor(record.key_norm_kept, dtype=torch.float64) ** 2 * norms).sum() / norms.sum()) ** 0.5
            assert handle.details["key_share_kept"][layer] == pytest.approx(pooled, rel=1e-9)
    assert weights_fingerprint(tiny) == before


# ---------------------------------------------------------------------- solving from given targets


@pytest.mark.parametrize("method", ["memit", "alphaedit"])
def test_solving_from_given_targets_equals_fitting_them(
    tiny: LensModel, stats, method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lmsci_mi.editing import memit

    edit = alphaedit_edit if method == "alphaedit" else memit.memit_edit
    hp = (AlphaEditConfig if method == "alphaedit" else memit.MEMITConfig)(layers=(0, 1), steps=2)
    with edit(tiny, REQUESTS, hp, stats=stats) as fitted:
        expected = {k: v.clone() for k, v in fitted.deltas.items()}
    targets = memit.memit_targets(tiny, REQUESTS, hp)
    assert targets.shape == (len(REQUESTS), tiny.cfg.d_model)

    def no_fit(*args, **kwargs):
        raise AssertionError("given targets were fitted again")

    monkeypatch.setattr(memit, "fit_deltas", no_fit)
    with edit(tiny, REQUESTS, hp, stats=stats, targets=targets) as given:
        for name, delta in expected.items():
            torch.testing.assert_close(given.deltas[name], delta, atol=1e-6, rtol=1e-5)
    before = weights_fingerprint(tiny)
    with pytest.raises(ValueError, match="memit_targets"):
        edit(tiny, REQUESTS, hp, stats=stats, targets=targets[:1])
    assert weights_fingerprint(tiny) == before and tiny.hooks.attached_count() == 0

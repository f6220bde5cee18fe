"""The sweep engine on its own: the scheduler's passes, prefix detection, and rows that equal
plain forward passes with the same interventions made through the registry."""

from __future__ import annotations

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.sites import hook_name
from lmsci_mi.sweep import (
    BaseRun,
    Intervention,
    PlannedRow,
    Row,
    SweepConfig,
    plan_passes,
    run_rows,
)

PROMPT = "When Mary and John went, John gave it to"


def _planned(layer: int, prefix: int, index: int = 0) -> PlannedRow:
    return PlannedRow(index=index, row=Row(()), layer=layer, prefix=prefix)


def test_rows_of_far_apart_layers_share_one_pass() -> None:
    rows = [_planned(layer, 5, i) for i, layer in enumerate((0, 10, 25))]
    passes = plan_passes(rows, n_layers=30, n_pos=15, batch=1, config=SweepConfig())
    assert len(passes) == 1
    assert [r.layer for r in passes[0].rows] == [0, 10, 25]  # they join in layer order


def test_token_budget_splits_passes() -> None:
    rows = [_planned(layer, 0, i) for i, layer in enumerate(range(8))]
    passes = plan_passes(rows, n_layers=8, n_pos=10, batch=2, config=SweepConfig(token_budget=40))
    assert all(len(p.rows) * 2 * 10 <= 40 for p in passes)
    assert sorted(r.index for p in passes for r in p.rows) == list(range(8))


def test_prefixes_merge_only_when_it_pays() -> None:
    # Two single rows one position apart: one shared block call per layer beats two.
    close = [_planned(0, 10, 0), _planned(0, 11, 1)]
    assert len(plan_passes(close, 4, 15, 1, SweepConfig(pass_overhead_tokens=24))) == 1
    # Many rows whose prefixes lie far apart: merging would recompute too many positions.
    far = [_planned(0, 2, i) for i in range(20)] + [_planned(0, 14, 20 + i) for i in range(20)]
    assert len(plan_passes(far, 4, 15, 1, SweepConfig(pass_overhead_tokens=24))) == 2


def test_rows_equal_forward_passes_with_registry_patches(tiny: LensModel) -> None:
    tokens = tiny.to_tokens(PROMPT)
    n_pos = tokens.shape[1]
    z0, resid1 = hook_name("z", 0), hook_name("resid_pre", 1)
    base = BaseRun.record(tiny, tokens, capture=[z0, resid1])
    torch.manual_seed(1)
    source_z = torch.randn_like(base.acts[z0])
    source_r = torch.randn_like(base.acts[resid1])
    head_mask = torch.zeros(1, n_pos, tiny.cfg.n_heads, 1, dtype=torch.bool)
    head_mask[:, 6:, 2] = True
    pos_mask = torch.zeros(1, n_pos, 1, dtype=torch.bool)
    pos_mask[:, 4] = True
    rows = [Row((Intervention(z0, source_z, head_mask),)),
            Row((Intervention(resid1, source_r, pos_mask),)),
            Row((Intervention(z0, source_z, head_mask), Intervention(resid1, source_r, pos_mask)))]
    out = run_rows(tiny, base, rows, lambda logits: logits)
    assert out.stats.rows_skipped == 0
    with torch.no_grad():
        with tiny.hooks.patch(z0, source_z, positions=list(range(6, n_pos)), heads=[2]):
            first = tiny(tokens)[:, -1]
        with tiny.hooks.patch(resid1, source_r, positions=[4]):
            second = tiny(tokens)[:, -1]
        with tiny.hooks.patch(z0, source_z, positions=list(range(6, n_pos)), heads=[2]), \
                tiny.hooks.patch(resid1, source_r, positions=[4]):
            both = tiny(tokens)[:, -1]
    for row, expected in enumerate((first, second, both)):
        torch.testing.assert_close(out.values[row], expected, atol=1e-5, rtol=0)
    assert tiny.hooks.attached_count() == 0


def test_a_row_that_changes_nothing_reads_the_base_run(tiny: LensModel) -> None:
    tokens = tiny.to_tokens(PROMPT)
    name = hook_name("resid_pre", 1)
    base = BaseRun.record(tiny, tokens, capture=[name])
    mask = torch.ones(1, tokens.shape[1], 1, dtype=torch.bool)
    out = run_rows(tiny, base, [Row((Intervention(name, base.acts[name].clone(), mask),))],
                   lambda logits: logits)
    assert out.stats.rows_skipped == 1 and out.stats.block_calls == 0
    assert torch.equal(out.values[0], base.logits)


def test_base_run_equals_the_model(tiny: LensModel) -> None:
    tokens = tiny.to_tokens(PROMPT)
    base = BaseRun.record(tiny, tokens)
    with torch.no_grad():
        torch.testing.assert_close(base.logits, tiny(tokens)[:, -1], atol=1e-5, rtol=0)


def test_bad_rows_are_refused_before_any_hook(tiny: LensModel) -> None:
    tokens = tiny.to_tokens(PROMPT)
    name = hook_name("resid_pre", 1)
    base = BaseRun.record(tiny, tokens, capture=[name])
    uncaptured = Row((Intervention(hook_name("z", 0), torch.zeros(1), torch.ones(1, dtype=torch.bool)),))
    with pytest.raises(ValueError, match="did not capture"):
        run_rows(tiny, base, [uncaptured], lambda logits: logits)
    with pytest.raises(ValueError, match="has no intervention"):
        run_rows(tiny, base, [Row(())], lambda logits: logits)
    with pytest.raises(ValueError, match="token_budget"):
        SweepConfig(token_budget=0)
    assert tiny.hooks.attached_count() == 0


def test_captures_equal_the_registry_capture(tiny: LensModel) -> None:
    tokens = tiny.to_tokens(PROMPT)
    n_pos = tokens.shape[1]
    resid1, q1 = hook_name("resid_pre", 1), hook_name("q", 1)
    base = BaseRun.record(tiny, tokens, capture=[resid1, q1])
    source = torch.randn_like(base.acts[resid1])
    mask = torch.zeros(1, n_pos, 1, dtype=torch.bool)
    mask[:, 5] = True
    out = run_rows(tiny, base, [Row((Intervention(resid1, source, mask),))], None, capture=[q1])
    with torch.no_grad(), tiny.hooks.patch(resid1, source, positions=[5]), tiny.hooks.capture(q1) as cap:
        tiny(tokens)
    torch.testing.assert_close(out.captured[q1][0], cap[q1], atol=1e-5, rtol=0)
    assert out.values.numel() == 0


def test_identity_interventions_below_the_first_change_are_skipped(tiny: LensModel) -> None:
    # A row that freezes layer 0 at its base value and changes layer 1 starts at layer 1, in a
    # pass with a row that starts at layer 0; both equal plain forward passes.
    tokens = tiny.to_tokens(PROMPT)
    z0, z1 = hook_name("z", 0), hook_name("z", 1)
    base = BaseRun.record(tiny, tokens, capture=[z0, z1])
    everywhere = torch.ones(1, 1, 1, 1, dtype=torch.bool)
    new_z1 = torch.randn_like(base.acts[z1])
    new_z0 = torch.randn_like(base.acts[z0])
    rows = [Row((Intervention(z0, base.acts[z0], everywhere), Intervention(z1, new_z1, everywhere))),
            Row((Intervention(z0, new_z0, everywhere),))]
    out = run_rows(tiny, base, rows, lambda logits: logits)
    assert out.stats.passes == 1
    with torch.no_grad():
        with tiny.hooks.patch(z1, new_z1):
            first = tiny(tokens)[:, -1]
        with tiny.hooks.patch(z0, new_z0):
            second = tiny(tokens)[:, -1]
    torch.testing.assert_close(out.values[0], first, atol=1e-5, rtol=0)
    torch.testing.assert_close(out.values[1], second, atol=1e-5, rtol=0)

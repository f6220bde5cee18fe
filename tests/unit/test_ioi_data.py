"""IOI prompt generator on the tiny model (SmolLM2's tokenizer): positions, orders, corruptions."""

from __future__ import annotations

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.data.ioi import IOI_TEMPLATES, ioi_dataset, single_token_words
from lmsci_mi.sites import Head


def test_positions_point_at_the_names(tiny: LensModel) -> None:
    data = ioi_dataset(tiny, n_prompts=12, seed=3)
    assert len(data) == 12
    assert len(data.batches) == len(IOI_TEMPLATES)
    for batch in data.batches:
        rows = torch.arange(len(batch))
        toks = batch.tokens
        assert torch.equal(toks[rows, batch.io_pos], batch.io_token)
        assert torch.equal(toks[rows, batch.s1_pos], batch.s_token)
        assert torch.equal(toks[rows, batch.s2_pos], batch.s_token)
        assert bool((batch.s1_plus_1 == batch.s1_pos + 1).all())
        assert bool((batch.end == toks.shape[1] - 1).all())
        assert bool((batch.s2_pos > batch.s1_pos).all()) and bool((batch.io_pos > 0).all())
        for order, io, s1 in zip(batch.orders, batch.io_pos, batch.s1_pos, strict=True):
            assert (io < s1) == (order == "ABBA")
        # position 0 is the sink, never a name
        assert bool((toks[:, 0] == tiny.sink_token_id).all())


def test_both_orders_and_abc_corruption(tiny: LensModel) -> None:
    data = ioi_dataset(tiny, n_prompts=8, seed=0, templates=IOI_TEMPLATES[:2])
    orders = [o for b in data.batches for o in b.orders]
    assert orders.count("ABBA") == orders.count("BABA") == 4
    for batch in data.batches:
        assert batch.abc_tokens.shape == batch.tokens.shape
        for row in range(len(batch)):
            clean_names = {int(batch.io_token[row]), int(batch.s_token[row])}
            abc = batch.abc_tokens[row]
            abc_names = {int(abc[batch.io_pos[row]]), int(abc[batch.s1_pos[row]]),
                         int(abc[batch.s2_pos[row]])}
            assert len(abc_names) == 3  # three different names
            assert not (abc_names & clean_names)
            # everything but the names is unchanged
            same = batch.tokens[row] == abc
            names_at = {int(batch.io_pos[row]), int(batch.s1_pos[row]), int(batch.s2_pos[row])}
            assert {i for i in range(len(same)) if not same[i]} == names_at


def test_seeded_and_single_token(tiny: LensModel) -> None:
    a = ioi_dataset(tiny, n_prompts=6, seed=1)
    b = ioi_dataset(tiny, n_prompts=6, seed=1)
    c = ioi_dataset(tiny, n_prompts=6, seed=2)
    assert a.prompts == b.prompts and a.prompts != c.prompts
    for name in a.names:
        tiny.token_id(" " + name)
    assert single_token_words(tiny, ["Mary", "Xylophonicus"]) == ("Mary",)


def test_bad_requests(tiny: LensModel) -> None:
    with pytest.raises(ValueError, match="n_prompts"):
        ioi_dataset(tiny, n_prompts=0)


@torch.no_grad()
def test_path_patching_and_ablation_identities(tiny: LensModel) -> None:
    from dataclasses import replace

    from lmsci_mi.circuits.ioi import ioi_logit_diff, mean_ablated_logit_diff, path_patch_to_queries

    batch = ioi_dataset(tiny, n_prompts=4, seed=0, templates=IOI_TEMPLATES[:1]).batches[0]
    clean = ioi_logit_diff(tiny(batch.tokens), batch)
    receivers = [Head(1, 0), Head(1, 2)]
    # with the "corrupted" run equal to the clean one, path patching changes nothing
    same = replace(batch, abc_tokens=batch.tokens)
    torch.testing.assert_close(path_patch_to_queries(tiny, same, Head(0, 1), receivers), clean)
    # a real ABC sender changes the receivers' queries, hence the logit difference
    patched = path_patch_to_queries(tiny, batch, Head(0, 1), receivers)
    assert not torch.allclose(patched, clean)
    # keeping every head ablates nothing
    every = [Head(layer, head) for layer in range(2) for head in range(tiny.cfg.n_heads)]
    torch.testing.assert_close(mean_ablated_logit_diff(tiny, batch, keep=every), clean)
    with pytest.raises(ValueError, match="not below"):
        path_patch_to_queries(tiny, batch, Head(1, 1), [Head(1, 0)])
    assert tiny.hooks.attached_count() == 0

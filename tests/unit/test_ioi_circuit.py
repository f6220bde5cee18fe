"""The IOI circuit finder on the tiny model: path patching equals a hand-written TransformerLens
version, the config validates and builds CLI flags, and the result is complete and round-trips."""

from __future__ import annotations

import argparse
import dataclasses

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.circuits.ioi import (
    IOICircuit,
    IOIConfig,
    find_ioi_circuit,
    ioi_logit_diff,
    path_patch_to_queries,
)
from lmsci_mi.data.ioi import IOI_TEMPLATES, ioi_dataset
from lmsci_mi.sites import Head, hook_name


@torch.no_grad()
def test_path_patching_equals_freezing_by_hand(tiny: LensModel) -> None:
    batch = ioi_dataset(tiny, n_prompts=4, seed=2, templates=IOI_TEMPLATES[:1]).batches[0]
    sender, receivers = Head(0, 3), [Head(1, 1), Head(1, 2)]
    ours = path_patch_to_queries(tiny, batch, sender, receivers)

    # Wang et al.'s two steps with TransformerLens hooks only.
    model = tiny.model
    _, clean = model.run_with_cache(batch.tokens)
    _, abc = model.run_with_cache(batch.abc_tokens)
    z0 = hook_name("z", 0)

    def freeze(z: torch.Tensor, hook) -> torch.Tensor:
        frozen = clean[z0].clone()
        frozen[:, :, sender.head] = abc[z0][:, :, sender.head]
        return frozen

    with model.hooks(fwd_hooks=[(z0, freeze)]):
        _, patched_cache = model.run_with_cache(batch.tokens)
    q1 = hook_name("q", 1)
    rows = torch.arange(len(batch))

    def set_queries(q: torch.Tensor, hook) -> torch.Tensor:
        q = q.clone()
        for r in receivers:
            q[rows, batch.end, r.head] = patched_cache[q1][rows, batch.end, r.head]
        return q

    theirs = ioi_logit_diff(model.run_with_hooks(batch.tokens, fwd_hooks=[(q1, set_queries)]), batch)
    torch.testing.assert_close(ours, theirs)
    assert not torch.allclose(ours, ioi_logit_diff(tiny(batch.tokens), batch))


def test_config_validates_and_builds_flags() -> None:
    with pytest.raises(ValueError, match="attention_threshold"):
        IOIConfig(attention_threshold=1.5)
    with pytest.raises(ValueError, match="max_name_movers"):
        IOIConfig(max_name_movers=0)
    parser = argparse.ArgumentParser()
    IOIConfig.add_arguments(parser)
    args = parser.parse_args(["--n-prompts", "12", "--mover-threshold", "0.1"])
    assert IOIConfig.from_args(args) == IOIConfig(n_prompts=12, mover_threshold=0.1)
    assert IOIConfig.from_args(parser.parse_args([])) == IOIConfig()


def test_circuit_result_is_complete_and_round_trips(tiny: LensModel, tmp_path) -> None:
    data = ioi_dataset(tiny, n_prompts=4, seed=0, templates=IOI_TEMPLATES[:1])
    config = IOIConfig(mover_threshold=0.0, n_sender_candidates=2, attention_threshold=0.0)
    circuit = find_ioi_circuit(tiny, data, config)
    assert circuit.meta.params["mover_threshold"] == 0.0
    assert circuit.meta.params["n_prompts_used"] == 4
    movers = circuit.heads_of("name_mover")
    assert movers and all(isinstance(h, Head) for h in movers)
    # movers are the best DLA heads, and top() ranks by DLA with the same Head type
    assert circuit.top(1)[0][0] == movers[0]
    assert circuit.top(1)[0][1] == pytest.approx(float(circuit.values.max()))
    heads = [h.head for h in circuit.heads]
    assert len(heads) == len(set(heads))  # one role per head
    tested = ~circuit.path_patching.isnan()
    assert int(tested.sum()) <= 2
    expected = circuit.logit_diff_circuit / circuit.logit_diff
    assert circuit.faithfulness == pytest.approx(expected)
    loaded = IOICircuit.load(circuit.save(tmp_path / "ioi.json"))
    # (Result.__eq__ and CircuitHead.__eq__ fail on the NaN of heads not path-patched)
    assert [(h.head, h.role, h.dla) for h in loaded.heads] == [
        (h.head, h.role, h.dla) for h in circuit.heads
    ]
    assert loaded.meta == circuit.meta
    torch.testing.assert_close(loaded.path_patching, circuit.path_patching, equal_nan=True)
    assert torch.equal(loaded.values, circuit.values) and loaded.faithfulness == circuit.faithfulness
    assert "L" in circuit.summary().splitlines()[1]
    assert tiny.hooks.attached_count() == 0


def test_no_field_has_a_default() -> None:
    fields = dataclasses.fields(IOICircuit)
    assert [f.name for f in fields if f.default is not dataclasses.MISSING] == []
    assert [f.name for f in fields if f.default_factory is not dataclasses.MISSING] == []


def test_many_senders_in_one_sweep_equal_one_at_a_time(tiny: LensModel) -> None:
    from lmsci_mi.circuits.ioi import path_patch_senders

    batch = ioi_dataset(tiny, 4, seed=3).batches[0]
    senders = [Head(0, h) for h in range(tiny.cfg.n_heads)]
    receivers = [Head(1, 0), Head(1, 3)]
    together = path_patch_senders(tiny, batch, senders, receivers)
    alone = torch.stack([path_patch_to_queries(tiny, batch, s, receivers) for s in senders])
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=0)
    assert tiny.hooks.attached_count() == 0

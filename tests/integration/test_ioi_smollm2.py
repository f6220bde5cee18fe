"""IOI on SmolLM2: the model solves the generated prompts, and the circuit finder's name movers
carry the logit difference."""

from __future__ import annotations

import pytest
import torch

from lmsci_mi import LensModel
from lmsci_mi.circuits.ioi import IOIConfig, find_ioi_circuit, ioi_logit_diff
from lmsci_mi.data.ioi import IOI_TEMPLATES, ioi_dataset

pytestmark = pytest.mark.slow


@torch.no_grad()
def test_logit_difference_positive_on_generated_prompts(clean_smollm2: LensModel) -> None:
    lm = clean_smollm2
    data = ioi_dataset(lm, n_prompts=36, seed=0)
    diffs = torch.cat([ioi_logit_diff(lm(b.tokens), b) for b in data.batches])
    assert len(diffs) == 36
    assert float((diffs > 0).float().mean()) >= 0.9, diffs


def test_circuit_name_movers_carry_the_logit_difference(clean_smollm2: LensModel) -> None:
    lm = clean_smollm2
    before = lm.model.W_O.detach().clone()
    data = ioi_dataset(lm, n_prompts=8, seed=1, templates=IOI_TEMPLATES[:1])
    circuit = find_ioi_circuit(lm, data, IOIConfig(n_sender_candidates=3))
    movers = circuit.heads_of("name_mover")
    assert movers and all(head.layer >= lm.cfg.n_layers // 2 for head in movers)
    for head in circuit.heads:
        if head.role == "name_mover":
            assert head.dla > 0
    assert circuit.logit_diff > 0
    assert circuit.name_mover_removed >= 0.3, circuit.summary()
    assert 0 < circuit.faithfulness < 2
    assert torch.equal(lm.model.W_O, before)

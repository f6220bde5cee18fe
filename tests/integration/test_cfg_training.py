"""A small CFG GPT trained for about a minute already carries the deepest level's NT boundaries
far better than its random-weights twin (the full run is benchmarks/cfg_probes.py)."""

from __future__ import annotations

import pytest

from lmsci_mi.data.cfg import CFGConfig, build_grammar
from lmsci_mi.probes.cfg import CFGModelConfig, CFGProbeConfig, cfg_probe_table, random_cfg_model
from lmsci_mi.probes.cfg.model import _wrap, train_cfg_model


@pytest.mark.slow
def test_a_short_training_run_learns_the_deepest_boundaries() -> None:
    grammar_config = CFGConfig()
    config = CFGModelConfig(n_layers=2, d_model=64, n_heads=4, batch_size=16, steps=150, warmup=20)
    grammar = build_grammar(grammar_config)
    model, record = train_cfg_model(grammar, config)
    trained = _wrap(model, "cfg-short", "test", grammar)
    random = random_cfg_model(grammar_config, config, device="cpu")
    table = cfg_probe_table(
        trained,
        random,
        grammar,
        CFGProbeConfig(n_sequences=150, multihead=False, attention=False, evaluate=False),
    )
    deepest_boundary = table.balanced[-1, :, :, 0, 2].amax(0)  # [model] best layer
    assert deepest_boundary[0] > deepest_boundary[1] + 0.1, (deepest_boundary, record)

"""The circuits benchmarks on the harness: each script imports, builds its flags through
benchmarks/harness.py and parses its defaults; benchmarks/ioi.py's tour draw is the one
`lmsci-mi tour` makes. No model is run beyond the toy's tokenizer."""

from __future__ import annotations

import sys

import pytest
import torch

from lmsci_mi import LensModel
from tests.fixtures import benchmark_script

ON_THE_HARNESS = ("induction", "sink", "causal_trace", "ioi", "heads", "cluster", "aie", "edges", "patching", "peers_auto_circuit")


_script = benchmark_script


@pytest.mark.parametrize("name", ON_THE_HARNESS)
def test_the_script_parses_its_flags_through_the_harness(name: str) -> None:
    module = _script(name)
    harness = sys.modules["harness"]
    assert module.harness is harness and callable(module.main)
    threads = torch.get_num_threads()
    try:
        run = harness.start(module.__doc__, module.__file__, flags=getattr(module, "add_flags", None),
                            argv=["--quick"])
    finally:
        torch.set_num_threads(threads)
    assert run.name == name and run.quick and run.out.parent == harness.QUICK


def test_the_ioi_benchmark_measures_the_tours_own_draw(tiny: LensModel) -> None:
    from lmsci_mi.cli.heads import tour_ioi_inputs

    ours, config = _script("ioi").tour_inputs(tiny)
    tours, tour_config = tour_ioi_inputs(tiny)
    assert config == tour_config
    assert [b.prompts for b in ours.batches] == [b.prompts for b in tours.batches]

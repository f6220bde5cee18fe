"""Probes on SmolLM2 find what the literature says a small LM encodes: a city's country (read at
the city) and a subject's grammatical number (read after an attractor noun), above their control
tasks. The full 30-layer curves are in benchmarks/probes.py and docs/probes.md."""

from __future__ import annotations

import pytest

from lmsci_mi import LensModel
from lmsci_mi.probes import ProbeSweepConfig, ProbeTaskConfig, probe_task

pytestmark = pytest.mark.slow

# Two layers near the measured peaks, in float32: bfloat16 autocast is emulated on this CPU, and
# on one thread (the suite's two workers) it took 333 s for the country probe against 53 s.
FAST = ProbeSweepConfig(layers=(13, 25), bootstrap=100)


def test_country_is_linearly_readable_at_the_city(clean_smollm2: LensModel) -> None:
    sweep = probe_task(clean_smollm2, "country", FAST)
    peak = sweep.peak()
    assert peak.score > 0.8  # 12 classes: the majority class scores about 0.06
    assert peak.selectivity > 0.4  # unseen cities: a token-memorising probe is near chance
    assert peak.baseline < 0.15


def test_subject_number_survives_the_attractor(clean_smollm2: LensModel) -> None:
    sweep = probe_task(clean_smollm2, "subject_number", FAST, ProbeTaskConfig(n_examples=800))
    peak = sweep.peak()
    assert peak.score > 0.9
    assert peak.selectivity > 0.0

"""The shipped LM-Steer of SmolLM2: its files are where train_steer looks for the default steer,
and a small rebuild matches the figures recorded when the shipped one was built."""

from __future__ import annotations

import json

import pytest

from lmsci_mi.artefacts import ARTEFACT_BUILDERS, shipped_artefacts
from lmsci_mi.cache import cache_root

pytestmark = pytest.mark.slow


def test_the_shipped_steer_is_the_default_steer_of_the_bundled_model(smollm2) -> None:
    from lmsci_mi.data.steering_texts import steering_texts
    from lmsci_mi.steering.train import cached_steer_paths

    shipped = {f.path for f in shipped_artefacts()["steer"].files}
    steer, record = cached_steer_paths(smollm2, steering_texts("sentiment"))
    wanted = [steer, record, record.with_suffix(".safetensors")]
    # A change to the model, the texts or a default setting moves the key: rebuild then.
    assert {p.relative_to(cache_root()).as_posix() for p in wanted} == shipped, (
        "the shipped steer is stale: python scripts/build_artefacts.py steer --retrain"
    )


def test_a_small_steer_rebuild_matches_the_recorded_one() -> None:
    import lmsci_mi.steering.shipped  # noqa: F401  (registers the builder)

    recorded = shipped_artefacts()["steer"].small
    rebuilt = ARTEFACT_BUILDERS.get("steer").function(small=True)
    assert json.loads(json.dumps(rebuilt.params)) == recorded["params"]
    for name, value in recorded["figures"].items():
        assert rebuilt.figures[name] == pytest.approx(value, rel=1e-4), name

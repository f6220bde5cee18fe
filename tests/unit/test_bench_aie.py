"""benchmarks/aie.py's windows: the rule that turns a fraction of depth into layers, the trace
cache keyed by the window, where the MLP and attention effects sit (computed by hand on made-up
curves), and the generated tables that read them. No model is run."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from lmsci_mi.circuits.aie import AIEConfig, _cache_folder
from lmsci_mi.circuits.tracing import TraceConfig

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


def _aie() -> ModuleType:
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    if "bench_script_aie" not in sys.modules:
        spec = importlib.util.spec_from_file_location("bench_script_aie", BENCHMARKS / "aie.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_script_aie"] = module
        spec.loader.exec_module(module)
    return sys.modules["bench_script_aie"]


def _run(mlp: list[float], attn: list[float], window: int) -> dict:
    """A run with curves given by hand (bands 0.1), clean 1 and corrupted −1: a gap of 2."""
    band = {k: {"last subject": [0.1] * len(mlp), "last token": [0.1] * len(mlp)} for k in ("mlp", "attn")}
    return {"kinds": ["mlp", "attn"], "window": window, "clean_mean": 1.0, "corrupted_mean": -1.0,
            "curves": {"mlp": {"last subject": mlp}, "attn": {"last token": attn}}, "band95": band}


@pytest.mark.parametrize(("window", "n_layers", "layers"), [(0.2, 30, 6), (0.2, 18, 4), (1, 30, 1), (10, 18, 10)])
def test_the_window_rule(window: float, n_layers: int, layers: int) -> None:
    piece = _aie().Piece("smollm2-135m", "str", 1, None, ("mlp",), window=window)
    assert _aie().window_of(piece, n_layers) == layers


def test_the_trace_cache_is_keyed_by_the_window_and_kinds() -> None:
    folders = {
        _cache_folder("f", AIEConfig(trace=TraceConfig(corruption="str", window=w, kinds=k)), 0.0)
        for w in (1, 6, 10) for k in (("resid", "mlp", "attn"), ("mlp", "attn"))
    }
    assert len(folders) == 6


def test_localisation_finds_a_mid_layer_bump_and_the_best_window_without_layer_0() -> None:
    # 12 layers, middle third 4..8; window 4 leaves layer 0 out from centre 3 on.
    decay = [1.0, 0.9, 0.8, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0, 0.0, 0.0]
    attn = [0.0] * 6 + [0.5, 1.0, 1.8, 2.0, 1.9, 0.3]
    loc = _aie().localisation(_run(decay, attn, window=4))
    assert (loc["mlp_peak"]["layer"], loc["mlp_peak"]["layers"]) == (0, [0, 1])
    assert loc["mlp_peak_without_layer_0"]["layer"] == 3 and loc["mlp_peak_without_layer_0"]["of_gap"] == 0.3
    assert loc["middle"] == [4, 8] and not loc["mlp_middle_bump"]
    assert (loc["attn_peak"]["layer"], loc["attn_half"]["layer"]) == (9, 7)
    bump = [*decay[:5], 1.4, *decay[6:]]  # 1.4 at layer 5 against 1.0 at layer 0: 0.4 > 0.1 + 0.1
    assert _aie().localisation(_run(bump, attn, window=1))["mlp_middle_bump"]
    small = [*decay[:5], 1.15, *decay[6:]]  # 0.15 above layer 0: inside the two bands
    assert not _aie().localisation(_run(small, attn, window=1))["mlp_middle_bump"]
    assert _aie().localisation({**_run(decay, attn, 1), "kinds": ["resid"]}) is None


def test_the_window_tables_read_every_localised_run() -> None:
    _aie()  # benchmarks/ on the path
    from doc_tables import circuits

    data = json.loads((ROOT / "docs" / "data" / "aie.json").read_text())
    localised = [k for k, r in data.items() if isinstance(r, dict) and "localisation" in r]
    assert localised, "aie.json has no localisation: run benchmarks/aie.py --write"
    rows = circuits.aie_windows(data).split("\n")[2:]
    assert len(rows) == len(localised)
    findings = circuits.aie_findings(data)
    for name in localised:
        run = data[name]
        assert f"{run['n_facts']} at window {run['window']}" in findings

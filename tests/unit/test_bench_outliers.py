"""docs/outliers.md's renderers on synthetic data files (a figure changes, the sentence follows), a
block whose data file is not written yet ("not yet: <command>"), and the two benchmarks' --quick runs
on toy-2l (slow)."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _renderers() -> dict:
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    from doc_tables import RENDERERS

    return RENDERERS


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("doc_tables_script_outliers", ROOT / "scripts" / "doc_tables.py")
    assert spec is not None and spec.loader is not None
    if spec.name not in sys.modules:  # its dataclasses look their module up by name
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return sys.modules[spec.name]


def _interval(estimate: float, low: float, high: float, method: str = "percentile bootstrap") -> dict:
    return {"estimate": estimate, "low": low, "high": high, "level": 0.95, "n": 16, "method": method}


def _spread(*draws: float) -> dict:
    return {"draws": list(draws), "mean": sum(draws) / len(draws), "sd": None, "low": min(draws), "high": max(draws)}


ANATOMY = {
    "model": "smollm2-135m", "sink": "<|endoftext|>",
    "massive": {
        "config": {"threshold": 100.0, "ratio": 1000.0}, "n_texts": 32, "seq_len": 128, "sink": "<|endoftext|>",
        "sink_at_zero": 32, "n_paper": 40, "n_ratio_only": 3, "n_absolute_only": 0, "rule_used": "paper",
        "roles": {"sink": [32, 32], "first token": [0, 32], "other": [2, 32]},
        "layers": [{"layer": 0, "top": [5.0, 4.0, 3.0], "median": 0.5, "n_paper": 0, "n_ratio_only": 0}],
        "rows": [{"dim": 7, "role": "sink", "token": "<|endoftext|>", "n_tokens": 1, "layers": [3, 4, 5],
                  "peak_layer": 4, "value": -1234.5, "ratio": 4321.0, "n_texts": 32, "n_role_texts": 32},
                 {"dim": 9, "role": "first newline", "token": "\n", "n_tokens": 1, "layers": [4],
                  "peak_layer": 4, "value": 150.0, "ratio": 1100.0, "n_texts": 3, "n_role_texts": 20}],
        "largest": {"layer": 4, "dim": 7, "token": "<|endoftext|>", "role": "sink", "value": -1234.5,
                    "ratio": 4321.0, "rule": "paper"},
        "ablated": [[3, 7]], "positions": "positions [0]", "exclude": "the sink",
    },
    "super_weights": {
        "prompt": "Apple Inc. is a worldwide tech company.", "rule_used": "threshold", "threshold": 50.0,
        "ratio": 100.0, "stop_reason": "max_candidates (1) reached", "layers": [],
        "candidates": [{"layer": 2, "row": 7, "col": 30, "weight": -1.25, "input_spike": 300.0,
                        "output_spike": -900.0, "position": 0, "token": "<|endoftext|>", "input_ratio": 400.0,
                        "output_ratio": 2000.0, "above_threshold": True, "above_ratio": True, "iteration": 0}],
    },
    "ablations": {
        "config": {}, "text_source": "prose", "n_texts": 16, "seq_len": 128, "n_facts": 109, "n_ioi": 40,
        "clean": {"perplexity": _interval(20.0, 18.0, 22.0), "fact_accuracy": _interval(0.6, 0.5, 0.7, "wilson"),
                  "ioi_accuracy": _interval(0.9, 0.8, 0.95, "wilson")},
        "rows": [{"group": "massive", "intervention": "zero 1 massive", "description": "L3.d7 at positions [0] set to 0",
                  "perplexity_ratio": _interval(800.0, 600.0, 1000.0), "control_ratio": _spread(1.01, 1.02),
                  "fact_accuracy": _interval(0.0, 0.0, 0.03, "wilson"), "control_fact_accuracy": _spread(0.6, 0.6),
                  "ioi_accuracy": _interval(0.5, 0.3, 0.7, "wilson"), "control_ioi_accuracy": _spread(0.9, 0.9)},
                 {"group": "scale sweep", "intervention": "SW (2, 7, 30) x0",
                  "description": "", "perplexity_ratio": _interval(700.0, 500.0, 900.0),
                  "control_ratio": _spread(1.0), "fact_accuracy": _interval(0.0, 0.0, 0.03, "wilson"),
                  "control_fact_accuracy": _spread(0.6), "ioi_accuracy": _interval(0.5, 0.3, 0.7, "wilson"),
                  "control_ioi_accuracy": _spread(0.9)}],
    },
}

RISE = {"length": 9216, "in_context": [64, 8192], "in_context_mean": 2.5, "window": 256, "stride": 256,
        "n_se": 2.0, "window_ends": [8448, 9216], "window_mean": [2.5, 3.1], "excess": [0.0, 0.6], "se": [0.1, 0.1]}
LENGTH = {
    "model": "smollm2-135m", "sink": "<|endoftext|>", "text_source": "prose", "max_length": 16384,
    "trained_context": {"trained_length": 8192, "max_position_embeddings": 8192, "n_ctx": 8192,
                        "rotary_base": 100000.0, "rotary_base_local": None, "sliding_window": None,
                        "pretraining_length": 2048, "source": "the GGUF's metadata"},
    "curves": {"max_logit": {"statistic": "max", "x": [1, 8192, 16383], "layers": ["0", "1"],
                             "mean": [[1.0, 2.0, 3.0], [1.0, 2.0, 2.0]], "std": [[0.0] * 3] * 2, "n_texts": 2},
               "entropy": {"statistic": "entropy", "x": [256, 8192, 16384], "layers": ["0", "1"],
                           "mean": [[1.0, 4.0, 5.0], [1.0, 4.0, 3.5]], "std": [[0.0] * 3] * 2, "n_texts": 2}},
    "separation": {"first_k": 4, "length": 1024, "n_texts": 8, "layers": ["0", "1"], "mean": [1.5, 9.0],
                   "std": [0.1, 0.2]},
    "nll": {"config": {}, "n_texts": 4, "max_length": 16384, "without": RISE,
            "with_mask": {**RISE, "length": None, "window_mean": [2.5, 2.6]},
            "mask": {"layers": [0, 1], "local_window": 8192, "n_global": 100, "distance_cap": 8192}},
}


def _two(doc: dict | None, kind: str = "anatomy") -> dict:
    return {f"outliers_{kind}_smollm2-135m": doc, f"outliers_{kind}_gemma3-270m": None}


def test_the_anatomy_tables_show_each_model_and_say_not_yet_for_a_missing_one() -> None:
    r = _renderers()
    massive = r["outliers_massive"](_two(ANATOMY)).splitlines()
    assert massive[2] == "| SmolLM2-135M | 7 | sink (`<|endoftext|>`) | 3–5 | 4 | -1,234 | 4,321 | 32 of 32 |".replace(
        "<|", "<\\|").replace("|>", "\\|>")
    assert "first newline (`\\n`)" in massive[3]
    assert "not yet: `PYTHONPATH=. python benchmarks/outliers_anatomy.py --model gemma3-270m" in massive[4]
    weights = r["outliers_super_weights"](_two(ANATOMY))
    assert "| (2, 7, 30) | -1.25 | 300 | -900 |" in weights
    table = r["outliers_ablations"](_two(ANATOMY))
    assert "| zero 1 massive | 800.000 [600.000, 1000.000] | 1.015 (1.010–1.020, 2 draws) |" in table


def test_the_ablation_sentence_follows_the_interval_against_the_controls() -> None:
    render = _renderers()["outliers_ablation_findings"]
    assert "above every control draw" in render(ANATOMY)
    assert "→ × 700" in render(ANATOMY)  # the sweep's line
    overlapping = copy.deepcopy(ANATOMY)
    overlapping["ablations"]["rows"][0]["control_ratio"] = _spread(1.0, 900.0)
    assert "not apart from its controls" in render(overlapping)


def test_the_massive_sentence_says_which_rule_was_used() -> None:
    render = _renderers()["outliers_massive_findings"]
    assert "40 entries meet the paper's rule (|a| > 100 and ≥ 1,000 × the median)" in render(ANATOMY)
    ratio = copy.deepcopy(ANATOMY)
    ratio["massive"]["rule_used"] = "ratio"
    assert "no entry meets the paper's rule" in render(ratio) and "the ratio alone is used (3 entries)" in render(ratio)


def test_the_length_tables_follow_the_rise_and_the_curves() -> None:
    r = _renderers()
    rise = r["outliers_nll_rise"](_two(LENGTH, "length"))
    assert "| 4 × 16,384 | 8,192 |" in rise and "| 9,216 | no rise up to 16,384 (window 8,192" in rise
    assert "--max-length 16384" in rise  # Gemma 3's command
    findings = r["outliers_length_findings"](LENGTH)
    assert "grows in 1 of 2 layers (by at most 1.00)" in findings
    assert "at 9,216 without the mask and at no rise up to 16,384 with" in findings
    later = copy.deepcopy(LENGTH)
    later["nll"]["without"]["length"] = 12288
    assert "at 12,288 without the mask" in r["outliers_length_findings"](later)
    curves = r["outliers_curves"](LENGTH)
    assert "| SmolLM2-135M | 1 | 2.00 | 2.00 | 4.00 | 3.50 | 9.00 |" in curves


def test_one_texts_nll_is_shown_without_the_rise_rule() -> None:
    r = _renderers()
    one = copy.deepcopy(LENGTH)
    one["nll"]["n_texts"] = 1
    for key, excess in (("without", [0.5, 1.5]), ("with_mask", [0.0, -0.2])):
        one["nll"][key].update(length=None, se=[], applied=False, excess=excess)
    rise = r["outliers_nll_rise"](_two(one, "length"))
    assert "| 1 × 16,384 |" in rise and "not tested (one text" in rise
    findings = r["outliers_length_findings"](one)
    assert "one text, so the rise rule" in findings
    assert "on average +1.000 nats" in findings and "+0.000 nats" not in findings
    assert "-0.100 with the Λ-mask; the last window +1.500 and -0.200" in findings
    del one["nll"]  # --n-texts 0: the attention curves alone
    assert "| SmolLM2-135M | not run: this model's file holds the attention curves alone" in \
        r["outliers_nll_rise"](_two(one, "length"))
    assert "NLL by position" not in r["outliers_length_findings"](one)


def test_a_block_whose_file_is_not_written_yet_renders_not_yet(tmp_path: Path) -> None:
    dt = _script()
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "outliers_anatomy.py").write_text("")
    command = "PYTHONPATH=. python benchmarks/outliers_anatomy.py --model smollm2-135m --threads 1"
    page = tmp_path / "README.md"
    page.write_text(f"<!-- table: outliers_sink_heads from docs/data/outliers_anatomy_smollm2-135m.json "
                    f"(written by: {command}) -->\n<!-- /table -->\n")
    (block,) = dt.parse_blocks(page, page.read_text(), tmp_path)
    rendered = dt.render(block, tmp_path)
    assert rendered[-1] == f"| SmolLM2-135M | not yet: `{command}` | | | |"
    page.write_text(page.read_text().replace("outliers_sink_heads", "sink"))  # no missing_ok: an error
    (block,) = dt.parse_blocks(page, page.read_text(), tmp_path)
    with pytest.raises(dt.DocTableError, match="does not exist"):
        dt.render(block, tmp_path)


@pytest.mark.slow
def test_both_benchmarks_run_quick_on_the_toy_and_their_files_render(tmp_path: Path, monkeypatch) -> None:
    from tests.fixtures import benchmark_script

    r = _renderers()
    for script, names in (("outliers_anatomy", ("outliers_massive", "outliers_ablations", "outliers_consequences")),
                          ("outliers_length", ("outliers_nll_rise", "outliers_curves", "outliers_length_findings"))):
        out = tmp_path / f"{script}.json"
        monkeypatch.setattr(sys, "argv", [script, "--quick", "--fresh", "--out", str(out)])
        benchmark_script(script).main()
        data = json.loads(out.read_text())
        assert data["model"] == "toy-2l" and data["provenance"]["command"]
        for name in names:
            assert "toy-2l" in r[name](data), name

"""The `lmsci-mi` entry point: the model listing, the quick tour, and clean errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from tour_args import FAST_TOUR

from lmsci_mi.cli import main


def test_models_lists_bundled_and_toys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "smollm2-135m" in out and "toy-2l" in out and "Hugging Face hub" in out


@pytest.mark.slow  # a tour; test_report.py's failing-step tour is the fast suite's
def test_quick_tour_on_a_toy_writes_its_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main([*FAST_TOUR, "--model", "toy-2l", "--device", "cpu", "--out-dir", str(tmp_path)]) == 0
    )
    assert (tmp_path / "report.html").exists()
    assert (tmp_path / "attention_summary.json").exists()
    assert "Tour finished" in capsys.readouterr().out


def test_unknown_model_is_a_clean_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tour", "--quick", "--model", "no-such-model"]) == 2
    err = capsys.readouterr().err
    assert "smollm2-135m" in err and "Traceback" not in err

"""The `lmsci-mi` entry point: the model listing, the quick tour, clean errors, and the one output
path (`--out`, `--plot`, `--export`, `--html`) of every command."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from tour_args import FAST_TOUR

import lmsci_mi.cli.common
from lmsci_mi.cli import build_parser, main
from lmsci_mi.results import Result


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


# ---------------------------------------------------------------------- one output path

TOY = ["--model", "toy-2l", "--device", "cpu"]
HEADS = ["heads", *TOY, "--n-sequences", "2", "--half-length", "6"]
"""The cheapest command that makes a result on a toy model."""


def _commands(
    parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every (sub)command's words and parser, nested ones (`steer svd`, `probe cfg`) included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name), sub
                yield from _commands(sub, (*prefix, name))


OUTPUT_COMMANDS = [
    words
    for words, sub in _commands(build_parser())
    if any(a.dest == "export" for a in sub._actions)
]


def test_every_result_command_has_the_four_output_flags() -> None:
    names = {" ".join(words) for words in OUTPUT_COMMANDS}
    assert {
        "trace",
        "patch",
        "heads",
        "ioi",
        "probe",
        "probe cfg",
        "steer train",
        "steer svd",
        "steer highlight",
        "steer eval",
        "steer transfer",
        "sae train",
        "sae stats",
        "sae features",
    } <= names
    for words, sub in _commands(build_parser()):
        if words in OUTPUT_COMMANDS:
            assert {"out", "plot", "export", "html"} <= {a.dest for a in sub._actions}, words


@pytest.mark.parametrize("words", OUTPUT_COMMANDS, ids=" ".join)
def test_unknown_export_suffix_is_a_usage_error_before_anything_runs(
    words: tuple[str, ...],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lmsci_mi.cli.common, "load_model", _must_not_run)
    with pytest.raises(SystemExit) as stop:
        main([*words, "--export", str(tmp_path / "table.txt")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "--export" in err
    assert ".csv, .parquet, .json" in err  # the message names the choices
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("flag", "name", "message"),
    [
        ("--plot", "p.jpg", ".png"),
        ("--html", "v.txt", ".html"),
        ("--out", "folder", "not a folder"),
        ("--out", "junk.txt/r.json", "is not a folder"),
    ],
)
def test_bad_output_paths_are_usage_errors(
    flag: str,
    name: str,
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "junk.txt").write_text("a file\n")
    monkeypatch.setattr(lmsci_mi.cli.common, "load_model", _must_not_run)
    with pytest.raises(SystemExit) as stop:
        main([*HEADS, flag, str(tmp_path / name)])
    assert stop.value.code == 2 and message in capsys.readouterr().err


def test_out_plot_export_and_html_each_write_their_file(tmp_path: Path) -> None:
    files = {"--out": "h.json", "--plot": "h.png", "--export": "h.parquet", "--html": "h.html"}
    for flag, name in files.items():
        assert main([*HEADS, flag, str(tmp_path / flag.strip("-") / name)]) == 0
    assert type(Result.load(tmp_path / "out" / "h.json")).__name__ == "HeadScores"
    assert (tmp_path / "out" / "h.safetensors").is_file()
    assert (tmp_path / "plot" / "h.png").read_bytes().startswith(b"\x89PNG")
    assert len(pd.read_parquet(tmp_path / "export" / "h.parquet")) == 8  # 2 layers x 4 heads
    page = (tmp_path / "html" / "h.html").read_text(encoding="utf-8")
    assert "HeadScores" in page and "data:image/png;base64," in page and "https://" not in page


def test_two_flags_naming_one_file_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    same = str(tmp_path / "h.json")
    assert main([*HEADS, "--out", same, "--export", same]) == 2
    assert "--out and --export both write" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_failed_analysis_leaves_no_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs = [
        "--out",
        str(tmp_path / "t.json"),
        "--plot",
        str(tmp_path / "t.png"),
        "--export",
        str(tmp_path / "t.csv"),
        "--html",
        str(tmp_path / "t.html"),
    ]
    argv = ["trace", *TOY, "--prompt", "The Eiffel Tower is in", "--subject", "Colosseum"]
    assert main([*argv, *outputs]) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_removes_the_files_written_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def unwritable(result: Result, path: Path) -> Path:
        path.write_text("<html>half a page")
        raise PermissionError(f"cannot write {path}")

    monkeypatch.setattr(lmsci_mi.cli.common, "_write_html", unwritable)
    outputs = [
        "--out",
        str(tmp_path / "h.json"),
        "--export",
        str(tmp_path / "h.csv"),
        "--html",
        str(tmp_path / "h.html"),
    ]
    assert main([*HEADS, *outputs]) == 2
    assert "cannot write" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def _must_not_run(*args: object, **kwargs: object) -> None:
    raise AssertionError("a bad output path must stop the command before the model loads")

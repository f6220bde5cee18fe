"""`lmsci-mi graph`: bad input is one line and exit 2 before any graph is built; a graph on the
toy's transcoders prints its scores and writes the result and the interactive viewer."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmsci_mi.circuits.graphs import AttributionGraph
from lmsci_mi.cli import main
from lmsci_mi.cli.graphs import cfg_sentence_prompt

TOY = ["graph", "--model", "toy-2l", "--device", "cpu"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*TOY, "--sentence", "3"], "--sentence draws a grammar sentence for --model cfg-gpt only"),
        ([*TOY, "--tokens", "0 x 2"], "give integers separated by spaces"),
        ([*TOY, "--prompt", "The cat"], "no transcoders for toy-2l yet: build them with"),
        (["graph", "--model", "cfg-gpt", "--prompt", "a b"], "cfg-gpt has no tokenizer"),
    ],
    ids=["sentence-on-a-text-model", "tokens-not-integers", "no-transcoders", "text-on-the-cfg-gpt"],
)
def test_bad_input_is_one_line_and_exit_2(argv: list[str], message: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    # An empty transcoder cache (the model's own cache stays: a fresh one rebuilds its tokenizer)
    monkeypatch.setattr("lmsci_mi.transcoders.presets.transcoder_folder", lambda *a, **k: tmp_path / "tc")
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_the_cfg_prompt_is_bos_and_a_sentence_without_its_last_token() -> None:
    ids = cfg_sentence_prompt(0)
    assert ids[0] == 0 and len(ids) >= 4 and ids == cfg_sentence_prompt(0) != cfg_sentence_prompt(1)


@pytest.mark.slow  # trains the toy's transcoders (2 s) and builds a graph
def test_a_graph_on_the_toy_prints_scores_and_writes_the_viewer(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("LMSCI_MI_CACHE", str(tmp_path / "cache"))
    out, page = tmp_path / "g.json", tmp_path / "g.html"
    assert main([*TOY, "--build", "--prompt", "The cat sat", "--batch-size", "64",
                 "--out", str(out), "--html", str(page)]) == 0
    printed = capsys.readouterr().out
    assert "replacement score" in printed and "pruned at circuit-tracer's thresholds" in printed
    assert AttributionGraph.load(out).layout.n_pos == 4  # the sink and three tokens
    html = page.read_text()
    assert "lmsciCircuitViewer.mount" in html and "https://" not in html

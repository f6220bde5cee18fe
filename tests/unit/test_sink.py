"""The attention sink is a choice: `load_model(sink=...)`, `LensModel.wrap(sink=...)`, `--sink`,
and every result records it in `meta.sink`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tour_args import FAST_TOUR

from lmsci_mi import LensModel, Result, load_model
from lmsci_mi.circuits.attention import attention_summary
from lmsci_mi.cli import main
from lmsci_mi.cli.common import parse_sink
from lmsci_mi.model import DEFAULT_SINK


def test_sink_can_be_another_token_or_none(tiny: LensModel) -> None:
    text = tiny.encode("The cat")[1:]
    chat = load_model("toy-2l", device="cpu", sink="<|im_start|>")
    assert chat.encode("The cat") == [1, *text] and chat.sink == "<|im_start|>"
    word = load_model("toy-2l", device="cpu", sink=" the")
    assert word.encode("The cat")[1:] == text and word.sink == " the"
    by_id = load_model("toy-2l", device="cpu", sink=2)
    assert by_id.encode("The cat") == [2, *text]
    bare = load_model("toy-2l", device="cpu", sink=None)
    assert bare.encode("The cat") == text and bare.sink is None
    assert bare.top_tokens("The cat", k=2).meta.sink is None
    # Without a sink the subject may start at position 0.
    assert bare.find_subject("The cat", "The") == range(0, 1)
    assert tiny.find_subject("The cat", "The") == range(1, 2)


def test_no_sink_changes_the_logits(tiny: LensModel) -> None:
    bare = load_model("toy-2l", device=tiny.device, sink=None)
    with_sink = tiny(tiny.to_tokens("The cat sat"))[0, -1]
    without = bare(bare.to_tokens("The cat sat"))[0, -1]
    assert not torch.allclose(with_sink, without)


def test_bad_sinks_are_errors() -> None:
    with pytest.raises(ValueError, match="2 tokens"):
        load_model("toy-2l", device="cpu", sink="The cat")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        load_model("toy-2l", device="cpu", sink=10**6)
    with pytest.raises(ValueError, match="not True"):
        load_model("toy-2l", device="cpu", sink=True)  # type: ignore[arg-type]


def test_wrap_takes_a_sink(tiny: LensModel) -> None:
    assert LensModel.wrap(tiny.model).sink_token_id == tiny.tokenizer.bos_token_id
    assert LensModel.wrap(tiny.model, sink="<|endoftext|>").sink_token_id == 0
    assert LensModel.wrap(tiny.model, sink=None).meta().sink is None


def test_results_record_the_sink_and_keep_it_through_save(tiny: LensModel, tmp_path: Path) -> None:
    bare = load_model("toy-2l", device="cpu", sink=None)
    for lm, sink in ((tiny, "<|endoftext|>"), (bare, None)):
        summary = attention_summary(lm, "The cat sat on the mat")
        assert summary.meta.sink == sink
        assert Result.load(summary.save(tmp_path / f"{sink}.json")).meta.sink == sink


@pytest.mark.slow  # two tours
def test_sink_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_sink("default") is DEFAULT_SINK and parse_sink("NONE") is None
    assert parse_sink("12") == 12 and parse_sink(" the") == " the"
    out = tmp_path / "summary"

    def tour(sink: str) -> int:
        args = ["--model", "toy-2l", "--device", "cpu", "--sink", sink, "--out-dir", str(out)]
        return main([*FAST_TOUR, *args])

    assert tour("none") == 0
    assert "(sink None)" in capsys.readouterr().out
    assert Result.load(out / "attention_summary.json").meta.sink is None
    assert tour("The cat") == 2
    assert "sink 'The cat' is 2 tokens" in capsys.readouterr().err

"""`lmsci-mi edit`: flags built from the method configs, and clear errors for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmsci_mi.cli import build_parser, main
from lmsci_mi.cli.editing import method_config
from lmsci_mi.editing import MEMITHyperParams, ROMEHyperParams


def parse(*argv: str):
    return build_parser().parse_args(["edit", *argv])


def test_unset_flags_take_the_chosen_methods_defaults() -> None:
    assert method_config(parse("--method", "rome")) == ROMEHyperParams()
    assert method_config(parse("--method", "memit")) == MEMITHyperParams()  # steps 20, not ROME's 40
    config = method_config(parse("--method", "memit", "--layers", "2,3", "--steps", "7"))
    assert config == MEMITHyperParams(layers=(2, 3), steps=7)
    assert method_config(parse("--layer", "4", "--no-edit-aware")) == ROMEHyperParams(layer=4, edit_aware=False)


def test_a_flag_of_another_method_is_an_error() -> None:
    with pytest.raises(ValueError, match="--layers is not a setting of --method rome"):
        method_config(parse("--method", "rome", "--layers", "2,3"))


def test_a_bad_setting_is_a_usage_error_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["edit", "--prompt", "{} is in", "--subject", "Paris", "--target-new", " Rome",
              "--steps", "0", "--model", "toy-2l"])
    assert stop.value.code == 2 and "argument --steps: must be >= 1, not 0" in capsys.readouterr().err


@pytest.mark.parametrize("content", [b"these are my notes, not an edit\n", b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "])
def test_apply_on_a_file_that_is_not_a_saved_edit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes
) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    code = main(["edit", "--apply", str(path), "--model", "toy-2l"])
    err = capsys.readouterr().err
    assert code == 2
    assert "not a saved edit" in err or "not an lmsci-mi edit file" in err
    assert "--delta-out" in err and "Traceback" not in err

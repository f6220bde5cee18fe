"""`lmsci-mi edit`: flags built from the method configs, and clear errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmsci_mi.cli import build_parser, main
from lmsci_mi.cli.common import NOT_DONE
from lmsci_mi.cli.editing import method_config
from lmsci_mi.editing import MEMITConfig, ROMEConfig


def parse(*argv: str):
    return build_parser().parse_args(["edit", *argv])


def test_unset_flags_take_the_chosen_methods_defaults() -> None:
    assert method_config(parse("--method", "rome")) == ROMEConfig()
    assert method_config(parse("--method", "memit")) == MEMITConfig()
    config = method_config(parse("--method", "memit", "--layers", "2,3", "--steps", "7"))
    assert config == MEMITConfig(layers=(2, 3), steps=7)
    config = method_config(parse("--layer", "4", "--fit", "edit_aware", "--stop-on", "nll"))
    assert config == ROMEConfig(layer=4, fit="edit_aware", stop_on="nll")


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


def _facts(tmp_path: Path, records: list[dict]) -> str:
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(records))
    return str(path)


PARIS = {"prompt": "{} is in", "subject": "Paris", "target_new": " Rome", "target_true": " France"}
FAST = ["--model", "toy-2l", "--n-contexts", "2", "--steps", "2", "--stats-tokens", "256"]


@pytest.mark.parametrize(
    ("records", "extra", "message"),
    [
        ([{**PARIS, "prompt": "The city is in"}], ["--method", "memit"], "'Paris' is not in the prompt"),
        ([PARIS, PARIS], ["--method", "memit"], "requests 0 and 1 both rewrite"),
        ([PARIS], ["--method", "alphaedit", "--nullspace-threshold", "1e-30"], "null space has no dimension"),
        ([PARIS, {**PARIS, "subject": "Berlin"}], ["--method", "rome"], "ROME edits one fact at a time"),
        ([{"subject": "Paris"}], ["--method", "memit"], "each request needs prompt, subject, target_new"),
        ([], ["--method", "memit"], "non-empty JSON list"),
        ([PARIS], ["--method", "memit", "--ge-tokens", "4"], "--ge-tokens sets an evaluation's GE"),
        ([PARIS], ["--method", "memit", "--session-batch", "1", "--ge-tokens", "-1"], "must be 0 or more"),
    ],
)
def test_bad_requests_exit_2_with_the_problem_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], records, extra, message
) -> None:
    code = main(["edit", "--requests", _facts(tmp_path, records), *FAST, *extra,
                 "--delta-out", str(tmp_path / "d.safetensors")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "d.safetensors").exists()


def test_statistics_of_another_model_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from lmsci_mi import load_model
    from lmsci_mi.editing import StatsConfig, key_statistics

    other = key_statistics(load_model("toy-gpt2-2l"), [0], StatsConfig(n_tokens=256), cache_dir=tmp_path)
    saved = other.save(tmp_path / "stats.json")
    code = main(["edit", "--requests", _facts(tmp_path, [PARIS]), *FAST, "--layer", "0",
                 "--stats", str(saved)])
    assert code == 2 and "statistics were computed on toy-gpt2-2l" in capsys.readouterr().err


def test_a_session_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    berlin = {**PARIS, "subject": "Berlin", "target_true": " Germany"}
    code = main(["edit", "--requests", _facts(tmp_path, [PARIS, berlin]), "--method", "memit", *FAST,
                 "--layers", "0,1", "--session-batch", "1", "--session-out", str(tmp_path / "session"),
                 "--ge-tokens", "4"])
    out = capsys.readouterr().out
    assert code == 0 and (tmp_path / "session" / "session.json").exists()
    assert "memit" in out and "specificity" in out


def test_the_command_says_whether_each_edit_installed(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["edit", "--prompt", "{} is in", "--subject", "Paris", "--target-new", " Rome",
            "--target-true", " France", "--layer", "0", "--max-new-tokens", "2", *FAST]
    installed = main([*args, "--steps", "25"])
    out = capsys.readouterr().out
    assert "p(' Rome') " in out and "p(' France') " in out and " -> " in out
    assert installed == 0 and ": installed" in out and "likely cause" not in out
    # A step at a learning rate of 1e-6 cannot move the toy's answer: the command says so and why.
    assert main([*args, "--steps", "1", "--lr", "1e-6"]) == NOT_DONE
    out = capsys.readouterr().out
    assert "NOT installed" in out and "likely cause: " in out and "1 of 1 edit(s) did not install" in out


def test_without_target_true_the_models_own_answer_is_the_one_to_overtake() -> None:
    from lmsci_mi import load_model
    from lmsci_mi.editing import EditRequest
    from lmsci_mi.editing.installed import with_true_targets

    lm = load_model("toy-2l")
    request = EditRequest("{} is in", "Paris", " Rome")
    (filled,) = with_true_targets(lm, [request])
    top = lm.top_tokens(request.rewrite_prompt, 5).axis_labels(0)
    assert filled.target_true == next(t for t in top if t.strip())
    assert with_true_targets(lm, [filled]) == [filled]


@pytest.mark.parametrize(
    ("before", "after", "cause"),
    [((0.01, 0.5), (0.6, 0.3), None),
     ((0.01, 0.5), (0.0102, 0.5), "barely changed p(new)"),
     ((0.01, 0.5), (0.2, 0.5), "rose 20× but stayed below p(true)")],
)
def test_an_install_check_names_the_likely_cause(before, after, cause) -> None:
    from lmsci_mi.editing import EditRequest
    from lmsci_mi.editing.installed import InstallCheck, TargetProbabilities

    check = InstallCheck(EditRequest("{} is in", "Paris", " Rome", target_true=" France"),
                         TargetProbabilities(*before), TargetProbabilities(*after))
    assert check.installed is (cause is None)
    assert (check.likely_cause() is None) if cause is None else cause in check.likely_cause()

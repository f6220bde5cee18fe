"""User errors and bugs no longer look alike: the library raises UserInputError and
UnknownNameError for input the caller can fix, the CLI prints those in one line and exits 2, and
any other exception (a plain KeyError or ValueError too) keeps its traceback."""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import lmsci_mi
import lmsci_mi.cli.core as cli_core
from lmsci_mi import (
    Config,
    MethodRegistry,
    ResultFileError,
    UnknownHookError,
    UnknownNameError,
    UserInputError,
)
from lmsci_mi.cli import USER_ERRORS, main
from lmsci_mi.config import config
from lmsci_mi.sae import SAEMismatchError

ROOT = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------------- the two classes


def test_both_are_exported_from_the_package_and_the_errors_module() -> None:
    import lmsci_mi.errors

    assert lmsci_mi.UserInputError is lmsci_mi.errors.UserInputError
    assert lmsci_mi.UnknownNameError is lmsci_mi.errors.UnknownNameError
    assert {"UserInputError", "UnknownNameError"} <= set(lmsci_mi.__all__)


def test_every_old_except_clause_still_catches_them() -> None:
    # UserInputError replaces ValueError, UnknownNameError both KeyError (registries) and
    # ValueError (name checks that raised one): no caller's except clause stops matching.
    assert issubclass(UserInputError, ValueError)
    assert issubclass(UnknownNameError, KeyError) and issubclass(UnknownNameError, UserInputError)
    # The library's older error types are user errors too, with their old bases kept.
    assert issubclass(UnknownHookError, UnknownNameError) and issubclass(UnknownHookError, LookupError)
    assert issubclass(ResultFileError, UserInputError)
    assert issubclass(SAEMismatchError, UserInputError)


def test_unknown_name_lists_the_closest_names_then_all() -> None:
    error = UnknownNameError.among("site", "resid_prE", ["resid_pre", "resid_post", "z"])
    # str() is the message as written: a plain KeyError would quote it.
    assert str(error) == (
        "unknown site 'resid_prE' (did you mean 'resid_pre', 'resid_post'?); "
        "known: ['resid_post', 'resid_pre', 'z']"
    )
    assert error.name == "resid_prE" and error.known == ("resid_post", "resid_pre", "z")
    far = UnknownNameError.among("site", "xyzzy", ["z"], listed="sites are")
    assert str(far) == "unknown site 'xyzzy'; sites are: ['z']"


def test_unknown_name_survives_pickling() -> None:
    # Sharded runs send a worker's exception back to the driver.
    error = UnknownNameError.among("task", "nope", ["pos", "tense"])
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is UnknownNameError
    assert (str(back), back.name, back.known) == (str(error), error.name, error.known)


def test_a_registry_raises_unknown_name_with_the_closest() -> None:
    methods: MethodRegistry = MethodRegistry("demo")
    methods.register("double", Config)(lambda x, c: 2 * x)
    with pytest.raises(UnknownNameError, match=r"did you mean 'double'\?\); registered: \['double'\]"):
        methods.get("doubel")
    with pytest.raises(KeyError):  # the old contract
        methods.get("triple")


def test_a_config_out_of_bounds_is_user_input() -> None:
    @config
    class Demo(Config):
        n: int = dataclasses.field(default=1, metadata={"help": "n", "ge": 1})

    with pytest.raises(UserInputError, match=r"Demo\.n must be >= 1, not 0"):
        Demo(n=0)


def test_a_bad_value_and_an_unknown_name_in_the_library(tiny: lmsci_mi.LensModel) -> None:
    from lmsci_mi.sites import site

    with pytest.raises(UnknownNameError, match="unknown site"):
        site("resid_middle")
    with pytest.raises(UserInputError, match="one token is needed"):
        tiny.token_id(" Eiffel Tower Paris")
    with pytest.raises(UnknownHookError, match="Did you mean"):
        tiny.hooks.resolve("blocks.0.hook_resid_prex")


# ---------------------------------------------------------------------- the CLI


def test_the_cli_counts_only_the_library_errors_and_user_paths_as_bad_input() -> None:
    assert UserInputError in USER_ERRORS and UnknownNameError in USER_ERRORS
    assert not {ValueError, KeyError, TypeError, RuntimeError} & set(USER_ERRORS)


@pytest.mark.parametrize(
    "bug", [KeyError("bug"), ValueError("bug"), TypeError("bug"), RuntimeError("bug")]
)
def test_a_bug_in_a_command_is_raised_on(
    bug: Exception, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(args: object) -> int:
        raise bug

    monkeypatch.setattr(cli_core, "_run_models", broken)
    with pytest.raises(type(bug), match="bug"):
        main(["models"])
    assert "error:" not in capsys.readouterr().err  # not reported as bad input


@pytest.mark.parametrize(
    "error",
    [UserInputError("--top must be at least 1,\n not 0"), UnknownNameError("unknown task 'x'")],
)
def test_bad_input_in_a_command_is_one_line_and_exit_2(
    error: Exception, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuses(args: object) -> int:
        raise error

    monkeypatch.setattr(cli_core, "_run_models", refuses)
    assert main(["models"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"lmsci-mi models: error: {' '.join(str(error).split())}"]


def test_bad_input_from_the_library_exits_2_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    # Both fail before any model loads: no --task (UserInputError), an unknown task (UnknownNameError).
    assert main(["probe", "--model", "toy-2l", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lmsci-mi probe: error: give --task NAME") and "\n" not in err
    assert main(["probe", "--model", "toy-2l", "--device", "cpu", "--task", "no-such-task"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lmsci-mi probe: error: unknown probe task 'no-such-task'")
    assert "\n" not in err


@pytest.mark.slow  # a fresh interpreter (7 s); the in-process tests above keep the fast part's check
def test_a_bug_shows_its_traceback_on_the_command_line() -> None:
    """As a user sees it: the command's process prints the traceback and exits 1, not 2."""
    script = (
        "import sys\n"
        "import lmsci_mi.cli.core as core\n"
        "from lmsci_mi.cli import main\n"
        "def broken(args):\n"
        "    raise KeyError('a bug, not bad input')\n"
        "core._run_models = broken\n"
        "sys.exit(main(['models']))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback (most recent call last)" in done.stderr
    assert "in broken" in done.stderr and "KeyError: 'a bug, not bad input'" in done.stderr
    assert "lmsci-mi models: error:" not in done.stderr

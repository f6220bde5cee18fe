"""A warm Python for tests that run scripts as a user would: one process imports lmsci-mi and the
heavy libraries once, then forks a fresh child per script, which runs it as ``python script.py``
would (``__main__``, its own folder first on ``sys.path``, ``sys.argv``, its cwd and environment,
its exit status). A fresh interpreter spends 6-7 s on these imports before a script's first line
on the test machine; the example scripts paid it once each.

What a child shares with its parent is only what the imports left (modules, their state); each
child starts from the parent as it was after the imports, never from a sibling.

    with WarmPython(env) as python:
        done = python.run(script, cwd=tmp_path, env=env)   # a subprocess.CompletedProcess

Run as a program, this module is the parent: it reads one JSON request a line on stdin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

PRELOAD = ("lmsci_mi", "matplotlib.pyplot", "sae_lens")
"""What the examples import that costs seconds: lmsci-mi itself (transformer_lens, transformers,
torch under it), matplotlib's pyplot and sae-lens. Only the package's top level of lmsci-mi: a
script that used a submodule without importing it would fail in a fresh interpreter, and must
fail here too."""


class WarmPython:
    """A parent process with :data:`PRELOAD` imported under ``env``; :meth:`run` forks from it.

    ``env`` should be the scripts' environment: variables read at import time (``HF_HUB_OFFLINE``,
    ``TRANSFORMERS_VERBOSITY``, ``OMP_NUM_THREADS``) take effect in the parent.
    """

    def __init__(self, env: Mapping[str, str], preload: Sequence[str] = PRELOAD) -> None:
        # Its own stderr, in a file: a pipe that nobody reads could fill and stall it.
        self._log = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed in close())
        self._proc = subprocess.Popen(
            [sys.executable, __file__, *preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=dict(env),
            text=True,
        )
        assert self._proc.stdout is not None
        if self._proc.stdout.readline().strip() != "ready":
            self.close()
            raise RuntimeError(f"the warm Python did not start:\n{self._errors()}")

    def _errors(self) -> str:
        self._log.seek(0)
        return self._log.read()[-5000:]

    def run(
        self,
        script: Path,
        *,
        cwd: Path,
        env: Mapping[str, str],
        args: Sequence[str] = (),
        timeout: float = 600,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``script`` in a fresh child, as ``python script *args`` in ``cwd`` would.

        Raises:
            subprocess.TimeoutExpired: the script ran past ``timeout`` seconds (it is killed).
        """
        assert self._proc.stdin is not None and self._proc.stdout is not None
        with tempfile.TemporaryDirectory() as folder:
            out, err = Path(folder, "stdout"), Path(folder, "stderr")
            request = {
                "script": str(script), "args": list(args), "cwd": str(cwd), "env": dict(env),
                "stdout": str(out), "stderr": str(err), "timeout": timeout,
            }
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            reply = self._proc.stdout.readline()
            if not reply:
                raise RuntimeError(f"the warm Python died:\n{self._errors()}")
            code = json.loads(reply)["returncode"]
            if code == "timeout":
                raise subprocess.TimeoutExpired(
                    [str(script), *args], timeout, out.read_text(), err.read_text()
                )
            return subprocess.CompletedProcess(
                [sys.executable, str(script), *args], code, out.read_text(), err.read_text()
            )

    def close(self) -> None:
        # Killed, not asked to exit: it holds only imports, and an orderly interpreter shutdown
        # with torch loaded takes a second or more.
        self._proc.kill()
        self._proc.wait()
        for pipe in (self._proc.stdin, self._proc.stdout):
            if pipe is not None:
                pipe.close()
        self._log.close()

    def __enter__(self) -> WarmPython:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _child(request: dict) -> None:
    """In the forked child: become ``python script`` and run it; never returns."""
    code = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 (the process's own stdin)
        script = request["script"]
        sys.argv = [script, *request["args"]]
        sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python script` sets it
        import runpy
        import traceback

        try:
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as stop:  # what the interpreter does with sys.exit(...)
            if stop.code is None or isinstance(stop.code, int):
                code = stop.code or 0
            else:
                print(stop.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _serve(preload: Sequence[str]) -> None:
    import importlib
    import signal
    import time

    # The requests' replies go to the pipe the test reads; anything an import prints goes to
    # stderr instead of into that conversation.
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    for name in preload:
        importlib.import_module(name)
    print("ready", file=protocol, flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            protocol.close()
            _child(request)
        deadline = time.monotonic() + request["timeout"]
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:  # as subprocess.run(timeout=...) would
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                code = "timeout"
                break
            time.sleep(0.05)
        print(json.dumps({"returncode": code}), file=protocol, flush=True)


if __name__ == "__main__":
    _serve(sys.argv[1:])

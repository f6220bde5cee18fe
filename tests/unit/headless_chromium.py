"""Debian's Chromium, headless and offline, for tests that check what a reader's browser shows.

:func:`chromium_or_skip` installs the package with apt-get where it is missing and we may (root);
missing after that, a test fails in CI (``CI`` set, as every CI service sets it) and is skipped
elsewhere. :func:`dump_dom` and :func:`screenshot` run it with no network: a dead proxy and no
name resolution.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

FLAGS = (
    "--headless",
    "--disable-gpu",
    "--no-sandbox",
    "--no-first-run",
    "--disable-background-networking",
    "--proxy-server=127.0.0.1:9",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--virtual-time-budget=5000",
    "--hide-scrollbars",
)


def chromium_or_skip() -> str:
    """The chromium executable; installed first where missing (as root, with apt-get)."""
    found = shutil.which("chromium")
    if found is None and shutil.which("apt-get") and hasattr(os, "geteuid") and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]
        if subprocess.run(install, env=env, capture_output=True, check=False).returncode != 0:
            subprocess.run(["apt-get", "update"], env=env, capture_output=True, check=False)
            subprocess.run(install, env=env, capture_output=True, check=False)
        found = shutil.which("chromium")
    if found is None:
        reason = "needs Chromium (Debian package chromium: apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return found


def dump_dom(chromium: str, page: Path, *, width: int = 900, height: int = 1400) -> str:
    """The page's DOM after its scripts ran (a 5 s virtual-time budget)."""
    return subprocess.run(
        [chromium, *FLAGS, f"--window-size={width},{height}", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    ).stdout


def screenshot(
    chromium: str, page: Path, shot: Path, *, width: int = 900, height: int = 1400
) -> Path:
    """A PNG of the page's first screen, written to ``shot``."""
    subprocess.run(
        [
            chromium,
            *FLAGS,
            f"--window-size={width},{height}",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=False,
    )
    return shot

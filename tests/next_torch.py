"""The second torch of the version-matrix tests (`.venv-torch2.14`, scripts/next-torch.sh). scripts/test.sh installs it
beside the tests (on a fresh machine about 3 minutes, mostly its download), so a test that needs it waits here for
the install to end; the files that need it are handed out late (tests/schedule.py). Run without test.sh, the venv is
expected to exist already."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NEXT_PYTHON = ROOT / ".venv-torch2.14" / "bin" / "python"
PENDING = ROOT / "var" / "next-torch.pending"  # holds the installing shell's pid while it runs
STATUS = ROOT / "var" / "next-torch.rc"
LOG = ROOT / "var" / "next-torch.log"
WAIT_S = 480.0  # within the test's own 600 s limit


def _installer_alive() -> bool:
    try:
        os.kill(int(PENDING.read_text().strip() or "0"), 0)
        return True
    except (OSError, ValueError):
        return False


def next_python() -> Path:
    """The second torch's interpreter, once scripts/test.sh's install of it has ended; a failed or interrupted install
    fails the test with its log's end."""
    deadline = time.monotonic() + WAIT_S
    while PENDING.exists() and _installer_alive() and time.monotonic() < deadline:
        time.sleep(1.0)  # a file another process removes: polled, there is no event to wait on across processes
    tail = LOG.read_text(errors="replace")[-2000:] if LOG.exists() else ""
    if PENDING.exists():
        pytest.fail(f"scripts/next-torch.sh is still installing after {WAIT_S:.0f} s, or ended without saying how "
                    f"(var/next-torch.pending); its log ends:\n{tail}")
    if STATUS.exists() and STATUS.read_text().strip() != "0":
        pytest.fail(f"scripts/next-torch.sh failed (exit {STATUS.read_text().strip()}); its log ends:\n{tail}")
    assert NEXT_PYTHON.exists(), "scripts/next-torch.sh (run by scripts/test.sh) makes .venv-torch2.14"
    return NEXT_PYTHON

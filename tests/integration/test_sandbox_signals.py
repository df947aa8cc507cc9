"""`compile-ci sandbox` told to stop by a signal, as a terminal closing (SIGHUP) or `kill`/systemd/Docker
(SIGTERM) would: it says what happens while jobs run, then leaves no Redis, gunicorn, Celery or job behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest


def processes_of(root: Path) -> list[str]:
    """Processes started for this sandbox: each runs in `root` or names it on its command line."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next(line for line in (entry / "status").read_text().splitlines() if line.startswith("State:"))
        except (OSError, StopIteration):
            continue  # gone meanwhile, or not ours to read
        if "zombie" in state:
            continue
        if cwd.startswith(str(root)) or str(root) in cmdline:
            found.append(f"{entry.name}: {cmdline[:200]}")
    return found


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_stops_the_sandbox_and_every_process_it_started(tmp_path: Path, sig: signal.Signals) -> None:
    """With SIGHUP, the sandbox also makes its own directory (no --dir), as a first run does: it says where the
    check runs and comments are, shows the base run's jobs, and removes that directory when stopped."""
    own_dir = sig == signal.SIGHUP
    root = tmp_path / "sandbox"
    env = {**os.environ, "COMPILE_CI_RUNNER": "local", "PYTHONUNBUFFERED": "1", "TMPDIR": str(tmp_path)}
    sandbox = subprocess.Popen([sys.executable, "-m", "service.cli", "sandbox", *([] if own_dir else
                                                                                    ["--dir", str(root)])],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    seen: list[str] = []
    try:
        assert sandbox.stdout is not None
        deadline = time.monotonic() + 180
        for line in sandbox.stdout:  # progress lines appear while the jobs run
            seen.append(line)
            if line.startswith("compile-ci sandbox in "):
                root = Path(line.removeprefix("compile-ci sandbox in ").strip())
            if any("] PR #" in s and "correctness (cpu)" in s for s in seen) and (
                    not own_dir or any("] base " in s for s in seen)) or time.monotonic() > deadline:
                break
        assert any("] PR #" in line for line in seen), "".join(seen)
        assert processes_of(root), "the stack is running"
        if own_dir:
            assert root.parent == tmp_path and root.name.startswith("compile-ci-sandbox-")
            base = next(line for line in seen if "] base " in line)
            assert "correctness (cpu)" in base and any(state in base for state in ("queued", "running")), base
            for kind in ("check runs as the App wrote them", "pull request comments"):
                url = next(line for line in seen if kind in line).split()[-1]
                with urllib.request.urlopen(url, timeout=10) as answer:  # where a maintainer is told to look
                    assert isinstance(json.loads(answer.read()), list), url
        sandbox.send_signal(sig)
        rest, _ = sandbox.communicate(timeout=240)  # stopping a running job's compile on a loaded host
    finally:
        if sandbox.poll() is None:
            sandbox.kill()
            sandbox.wait()
    assert sandbox.returncode == 128 + sig, "".join(seen) + rest
    left = processes_of(root)
    assert left == [], left
    if own_dir:
        assert not root.exists() and f"Removed {root}." in rest, rest

"""The suite tests' side of tests/suites/fork_server.py: one server per environment (less what a forked run takes
itself), started on first use in this test process and ended with it; `forked_run` stands in for
`subprocess.run([python, "-m", "pytest", *args], capture_output=True, text=True, timeout=...)`, and `entry_run` for
the same of a job's `python -m suites.pytest_entry ...` (through the LocalRunner's warm interpreter, which a job
command needs: its compiler surface is taken before torch is imported). COMPILE_CI_TEST_FRESH_SUITES=1 runs each in a
fresh interpreter instead."""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from runners import warm_start
from runners.warm_start import per_job

REPO = Path(__file__).resolve().parents[2]
SERVER = Path(__file__).with_name("fork_server.py")
FRESH_ENV = "COMPILE_CI_TEST_FRESH_SUITES"
MAX_SERVERS = 3
START_TIMEOUT_S = 120.0
CURRENT_TEST = "PYTEST_CURRENT_TEST"


class Server:
    def __init__(self, env: Mapping[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, str(SERVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=dict(env), cwd=REPO)
        self.lock = threading.Lock()
        self.ready = self._read(START_TIMEOUT_S) == {"ready": True}

    def _read(self, timeout: float) -> dict | None:
        assert self.proc.stdout is not None
        if not select.select([self.proc.stdout], [], [], max(timeout, 0.0))[0]:
            return None
        line = self.proc.stdout.readline()
        return json.loads(line) if line else {"gone": True}

    def run(self, args: Sequence[str], cwd: Path, env: Mapping[str, str],
            timeout: float) -> subprocess.CompletedProcess:
        assert self.proc.stdin is not None
        with tempfile.TemporaryDirectory(prefix="suite-run-") as scratch:
            out, err = Path(scratch) / "stdout", Path(scratch) / "stderr"
            request = {"args": list(args), "cwd": str(cwd), "env": dict(env), "stdout": str(out), "stderr": str(err)}
            deadline = time.monotonic() + timeout
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
            started = self._read(START_TIMEOUT_S) or {}
            if "pid" not in started:
                raise RuntimeError(f"the suite fork server did not start the run: {started}")
            ended = self._read(deadline - time.monotonic())
            if ended is None:  # past the time limit: the run's session killed, its status read so the server goes on
                os.killpg(started["pid"], signal.SIGKILL)
                self._read(START_TIMEOUT_S)
                raise subprocess.TimeoutExpired(["pytest", *args], timeout)
            if "status" not in ended:
                raise RuntimeError(f"the suite fork server ended: {ended}")
            return subprocess.CompletedProcess(["pytest", *args], ended["status"], out.read_text(errors="replace"),
                                               err.read_text(errors="replace"))

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_servers: dict[tuple[tuple[str, str], ...], Server] = {}
_servers_lock = threading.Lock()


def _own(name: str) -> bool:
    """A variable a run takes itself in the child: a job's own (`per_job`) or the test's id pytest keeps in the
    environment (PYTEST_CURRENT_TEST: every test of this process would need a server of its own)."""
    return per_job(name) or name == CURRENT_TEST


def _server(env: Mapping[str, str]) -> Server | None:
    key = tuple(sorted((name, value) for name, value in env.items() if not _own(name)))
    with _servers_lock:
        server = _servers.get(key)
        if server is None or server.proc.poll() is not None:
            if len(_servers) >= MAX_SERVERS:
                _servers.pop(next(iter(_servers))).close()  # the oldest
            server = _servers[key] = Server({name: value for name, value in key})
        return server if server.ready else None


def forked_run(args: Sequence[str], cwd: Path, env: Mapping[str, str], timeout: float) -> subprocess.CompletedProcess:
    """`python -m pytest ARGS` in `cwd` with `env`, forked from this environment's server (a fresh process when the
    server could not start)."""
    server = _server(env)
    if server is None:
        return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=cwd, env=dict(env), capture_output=True,
                              text=True, timeout=timeout)
    with server.lock:
        return server.run(args, cwd, env, timeout)


def entry_run(command: Sequence[str], cwd: Path, env: Mapping[str, str], timeout: float) -> subprocess.CompletedProcess:
    """A job's `python -m suites.pytest_entry ...` as the LocalRunner starts it by default: forked from this test
    process's warm interpreter for the environment (runners/warm_start.py, the product's own; the first such run
    starts it and runs fresh). Its stdout and stderr come as one, as in a job's log; `stderr` is ''."""
    env = {name: value for name, value in env.items() if name != CURRENT_TEST}  # pytest's, set again in the run
    job = None if os.environ.get(FRESH_ENV) == "1" else warm_start.start(sys.executable, command, cwd, env)
    if job is None:
        return subprocess.run(list(command), cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout)
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: job.stdout.read(65536), b"")), daemon=True)
    reader.start()
    try:
        job.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(START_TIMEOUT_S)
        raise
    finally:
        reader.join(START_TIMEOUT_S)
        job.stdout.close()
    return subprocess.CompletedProcess(list(command), job.returncode, b"".join(chunks).decode(errors="replace"), "")


@atexit.register
def _close_all() -> None:
    with _servers_lock:
        while _servers:
            _servers.popitem()[1].close()

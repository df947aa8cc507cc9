"""The tests' own runs of a built-in suite (`python -m pytest suites/...`, tests/suites/suite_run.py) forked from a
zygote that imported torch and pytest once (tests/zygote_server.py), instead of each paying those imports again:
about 2 s of CPU on the 2-core host, 4 s with dynamo's and inductor's, which a built-in suite's pytest makes at its
configure (docs/development.md, "twenty-fourth session").

What a child gets is what the fresh process would have: its command's arguments, directory and environment, and its
own session; Python's, torch's and tempfile's state are made anew after the fork. What it shares is what the
zygote imported, so the zygote's environment must be the run's but for what nothing imported reads: one zygote per
environment but for compile-ci's and pytest's own variables (`PER_RUN`), at most `MAX_ZYGOTES` per test process.
The compiler's modules are imported ahead only for a run that loads no plant of ours (`-p tests.suites.planted...`)
and is not job-like (COMPILE_CI_OUTPUT_DIR, where suites.plugin snapshots the compiler as it is imported): a plant
stands for a repository's compiler patch, made where a fresh process makes it, before those imports.
The first run of an environment waits for its zygote's imports (what a fresh run would pay itself); a zygote that
cannot fork (a thread, a child process, CUDA) and `COMPILE_CI_TEST_FRESH=1` leave every run fresh, so a run of both
ways shows what forking could change.

Run by the tests only: production's jobs fork from runners/warm_start.py's interpreters, by its own rules.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runners import warm_interpreter

MAX_ZYGOTES = 3
READY_S = 300.0
PLANTS = "tests.suites.planted"
counts = {"forked": 0, "fresh": 0, "zygotes": 0}


def per_run(name: str) -> bool:
    """A variable nothing a zygote imports reads (torch, pytest, dynamo, inductor): the child's own."""
    return name.startswith(("COMPILE_CI_", "PYTEST_"))


class _Zygote:
    def __init__(self, kind: str, env: Mapping[str, str]) -> None:
        here, there = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.zygote_server", str(there.fileno()), kind],
                                     env=dict(env), cwd=str(Path(__file__).resolve().parents[1]),
                                     pass_fds=(there.fileno(),), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        there.close()
        here.settimeout(None)
        self.sock = here
        self.ready = threading.Event()
        self.why = "starting"
        self.lock = threading.Lock()
        self.next_id = 0
        self.waiting: dict[int, dict[str, Any]] = {}
        self.events: dict[int, threading.Event] = {}
        threading.Thread(target=self._read, name="zygote-reader", daemon=True).start()

    def _read(self) -> None:
        for message in warm_interpreter.answers(self.sock):
            if message.get("ready"):
                self.why = str(message.get("why", ""))
                self.ready.set()
                continue
            with self.lock:
                self.waiting.setdefault(message["id"], {}).update(message)
                event = self.events.get(message["id"])
            if event is not None:
                event.set()
        self.why = self.why if self.why not in ("", "starting") else "the zygote ended"
        self.ready.set()
        with self.lock:
            for number, event in self.events.items():
                self.waiting.setdefault(number, {}).setdefault("status", -9)
                event.set()

    def run(self, argv: list[str], cwd: Path, env: dict[str, str],
            timeout: float | None) -> subprocess.CompletedProcess[str] | None:
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        with self.lock:
            self.next_id += 1
            number = self.next_id
            event = self.events[number] = threading.Event()
        try:
            socket.send_fds(self.sock, [json.dumps({"id": number, "argv": argv, "cwd": str(cwd),
                                                    "env": env}).encode()], [out_write, err_write])
        except OSError:
            for fd in (out_read, err_read):
                os.close(fd)
            return None
        finally:
            os.close(out_write)
            os.close(err_write)
        chunks: dict[int, list[bytes]] = {out_read: [], err_read: []}
        readers = [threading.Thread(target=_drain, args=(fd, chunks[fd]), daemon=True) for fd in chunks]
        for reader in readers:
            reader.start()
        pid = 0
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                if not event.wait(None if deadline is None else max(deadline - time.monotonic(), 0)):
                    with self.lock:
                        pid = int(self.waiting.get(number, {}).get("pid", 0))
                    _kill(pid)
                    for reader in readers:
                        reader.join(30)
                    raise subprocess.TimeoutExpired(argv, timeout or 0)
                with self.lock:
                    answer = dict(self.waiting.get(number, {}))
                    event.clear()
                if "status" in answer:
                    break
                pid = int(answer.get("pid", 0))
        finally:
            with self.lock:
                self.events.pop(number, None)
                self.waiting.pop(number, None)
        for reader in readers:
            reader.join()
        decode = [b"".join(chunks[fd]).decode(errors="replace") for fd in (out_read, err_read)]
        return subprocess.CompletedProcess(argv, int(answer["status"]), decode[0], decode[1])

    def close(self) -> None:
        warm_interpreter.stop(self.proc, self.sock)


def _drain(fd: int, into: list[bytes]) -> None:
    with os.fdopen(fd, "rb") as stream:
        into.extend(iter(lambda: stream.read(65536), b""))


def _kill(pid: int) -> None:
    if pid:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


_pool: dict[tuple[Any, ...], _Zygote] = {}
_lock = threading.Lock()


def run(command: Sequence[str], *, cwd: Path, env: Mapping[str, str],
        timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """`subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)`, forked from a
    zygote when `command` is this interpreter's `-m pytest ...`."""
    command, env = list(command), dict(env)
    zygote = None
    if command[:3] == [sys.executable, "-m", "pytest"] and os.environ.get("COMPILE_CI_TEST_FRESH") != "1":
        zygote = _zygote(command, env)
    if zygote is not None:
        done = zygote.run(command[3:], Path(cwd), env, timeout)
        if done is not None:
            counts["forked"] += 1
            return subprocess.CompletedProcess(command, done.returncode, done.stdout, done.stderr)
    counts["fresh"] += 1
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def kind_of(command: Sequence[str], env: Mapping[str, str]) -> str:
    """`compiler` (dynamo's and inductor's modules imported ahead) or `torch`: for a run that loads a plant or is
    job-like (suites.plugin snapshots the compiler at its import), which a fresh process does after torch's import and
    before the compiler's."""
    first = any(arg.startswith(PLANTS) for arg in command) or bool(env.get("COMPILE_CI_OUTPUT_DIR"))
    return "torch" if first else "compiler"


def _zygote(command: list[str], env: dict[str, str]) -> _Zygote | None:
    kind = kind_of(command, env)
    shared = {k: v for k, v in env.items() if not per_run(k)}
    key = (kind, tuple(sorted(shared.items())))
    with _lock:
        zygote = _pool.pop(key, None)  # put back last: the pool drops the zygote used longest ago
        if zygote is not None:
            _pool[key] = zygote
        if zygote is None or (zygote.ready.is_set() and zygote.why):
            if zygote is not None:
                _pool.pop(key).close()
            idle = [k for k, z in _pool.items() if not z.events]
            if len(_pool) >= MAX_ZYGOTES and idle:
                _pool.pop(idle[0]).close()
            zygote = _pool[key] = _Zygote(kind, shared)
            counts["zygotes"] += 1
    if not zygote.ready.wait(READY_S) or zygote.why:
        return None
    return zygote


@atexit.register
def close_all() -> None:
    with _lock:
        for zygote in _pool.values():
            zygote.close()
        _pool.clear()

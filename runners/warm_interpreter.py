"""One LocalRunner warm interpreter (suites/warm_process.py) as the worker sees it: its process, its socket, the jobs
it forked that have not ended (runners/warm_start.py keeps the pool and says which job takes which).

Its HOME, TMPDIR and caches are an empty directory of its own; a job that leaves anything there (something imported
kept a path of the warm interpreter's) retires it. It is told the environment it was given (given.json), so that what
the runner's python (a wrapper script) and its imports set reaches each job as it would a fresh one. The handle a job
gets stands in for a `subprocess.Popen`: `pid` (its own session and process group), `stdout`, `wait()`,
`returncode`; `lost` when the warm interpreter died under it (the job's process group is then killed by the runner, as
on any end). Its socket is blocking whatever `socket.setdefaulttimeout` says (a Celery worker's shutdown sets one
process-wide).
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

log = logging.getLogger("runners.warm_start")  # the name operators know its lines by (the pool's)

# The job's user name as inductor spells it in its default cache directory (getpass, sanitised as inductor does).
JOB_USER = re.sub(r'[\\/:*?"<>|]', "_", pwd.getpwuid(os.getuid()).pw_name)
MESSAGE_MAX = 1 << 20
START_TIMEOUT_S = 60.0


class WarmJob:
    """A job's process forked by a warm interpreter; what the runner needs of a `subprocess.Popen`."""

    def __init__(self, stdout: IO[bytes]) -> None:
        self.pid = 0
        self.stdout = stdout
        self.returncode: int | None = None
        self.lost = False
        self.compiler = False  # from one that made the compiler's imports too
        self.started = threading.Event()
        self._done = threading.Event()

    def finish(self, status: int, lost: bool = False) -> None:
        self.returncode, self.lost = status, lost
        self.started.set()
        self._done.set()

    def wait(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(f"warm job {self.pid}", timeout or 0)
        assert self.returncode is not None
        return self.returncode


class Warm:
    """One warm interpreter: its process, its socket, the jobs it started that have not ended."""

    def __init__(self, python: str, env: Mapping[str, str], compiler: bool = False) -> None:
        self.python = python
        self.compiler = compiler
        self.home = Path(tempfile.mkdtemp(prefix="compile-ci-warm-"))
        (self.home / "home").mkdir()
        here, there = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        own = {**env, "HOME": str(self.home / "home"), "TMPDIR": str(self.home / "home"),
               "TORCHINDUCTOR_CACHE_DIR": str(self.home / "home" / "inductor"),
               "TRITON_CACHE_DIR": str(self.home / "home" / "triton"), **({"USER": JOB_USER} if compiler else {})}
        # What it was given, told from what its interpreter (a wrapper script) and imports then set, which a forked
        # job's environment gets as a fresh job's would.
        given = self.home / "given.json"
        given.write_text(json.dumps({"given": dict(env), "own": sorted(set(own) - set(env))}))
        with open(self.home / "warm.log", "wb") as output:
            self.proc = subprocess.Popen([python, "-m", "suites.warm_process", str(there.fileno()), str(given),
                                          *(["compiler"] if compiler else [])],
                                         env=own,
                                         cwd=self.home, pass_fds=(there.fileno(),), stdin=subprocess.DEVNULL,
                                         stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        there.close()
        # Blocking, whatever `socket.setdefaulttimeout` the process has now: Celery's teardown sets one for the
        # whole process for a while (celery.utils.threads.default_socket_timeout), and a recv that timed out read
        # as the warm interpreter's end, which lost the job that ran from it.
        here.settimeout(None)
        self.sock = here
        self.ready = threading.Event()
        self.why = "starting"
        self.late: frozenset[str] = frozenset()
        self.jobs: dict[int, WarmJob] = {}
        self.next_id = 0
        self.retired = False
        self.baseline: set[str] = set()
        self.lock = threading.Lock()
        threading.Thread(target=self._read, name="warm-start-reader", daemon=True).start()

    def _read(self) -> None:
        for message in answers(self.sock):
            if message.get("ready"):
                self.why, self.late = str(message.get("why", "")), frozenset(message.get("late", ()))
                self.baseline = set(os.listdir(self.home / "home"))  # what its own imports wrote there
                self.ready.set()
                if self.why:
                    log.info("warm start: jobs start fresh: %s", self.why)
                continue
            with self.lock:
                job = self.jobs.get(message.get("id", -1))
            if job is None:
                continue
            if "pid" in message:
                job.pid = int(message["pid"])
                job.started.set()
            elif "status" in message or "error" in message:
                with self.lock:
                    self.jobs.pop(message["id"], None)
                job.finish(int(message.get("status", 1)))
                self._after_job()
        self.why = self.why if self.why != "starting" else "the warm interpreter ended while it imported"
        self.ready.set()
        with self.lock:
            left, self.jobs = list(self.jobs.values()), {}
        if left or not self.retired:
            try:
                said = (self.home / "warm.log").read_text(errors="replace")[-2000:]
            except OSError:
                said = ""
            log.warning("warm start: the warm interpreter %d ended (status %s) with %d job(s) running; its output: %s",
                        self.proc.pid, self.proc.poll(), len(left), said)
        for job in left:
            job.finish(-9, lost=True)
        # Ended (or closed): reaped and its directory removed here, whoever holds the object, and never used again.
        self.retired = True
        self.close()

    def _after_job(self) -> None:
        """A job that left anything in the warm interpreter's own directory retires it: no job starts from it again,
        and it ends once its last job has."""
        try:
            written = sorted(set(os.listdir(self.home / "home")) - self.baseline)
        except OSError:
            written = ["(its directory is gone)"]
        if written and not self.retired:
            self.retired, self.why = True, "a job wrote to the warm interpreter's own directory"
            log.warning("warm start: retired: %s (%s)", self.why, ", ".join(written)[:300])
        if self.retired:
            self.retire(self.why)

    def retire(self, why: str) -> None:
        """No job starts from it again; it ends once its last job has."""
        self.retired, self.why = True, why
        with self.lock:
            idle = not self.jobs
        if idle:
            self.close()

    def start(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str],
              step: list[str] | None = None) -> WarmJob | None:
        request = {"argv": list(argv), "cwd": str(cwd), "env": dict(env), "step": step, "python": self.python}
        read, write = os.pipe()
        job = WarmJob(os.fdopen(read, "rb"))
        with self.lock:
            self.next_id += 1
            request["id"] = self.next_id
            payload = json.dumps(request).encode()
            if len(payload) > MESSAGE_MAX or self.why:
                os.close(write)
                job.stdout.close()
                return None
            self.jobs[self.next_id] = job
            job.compiler = self.compiler
            try:
                socket.send_fds(self.sock, [payload], [write])
            except OSError:
                self.jobs.pop(self.next_id, None)
                job.stdout.close()
                return None
            finally:
                os.close(write)
        if not job.started.wait(START_TIMEOUT_S):
            self.retire("the warm interpreter did not answer")
        return job if job.pid else None

    def close(self) -> None:
        self.retired = True  # closed on purpose: its end is not news
        stop(self.proc, self.sock)
        shutil.rmtree(self.home, ignore_errors=True)


def answers(sock: socket.socket) -> Iterator[dict[str, Any]]:
    """A fork server's messages (one JSON object each) until it closes its end or the socket fails."""
    while True:
        try:
            data = sock.recv(MESSAGE_MAX)
        except OSError:
            return
        if not data:
            return
        yield json.loads(data)


def stop(proc: subprocess.Popen[bytes], sock: socket.socket) -> None:
    """A fork server ended: its socket shut (it stops taking jobs), then its process terminated (killed after 10 s)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    sock.close()

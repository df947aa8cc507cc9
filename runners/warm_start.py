"""LocalRunner's warm interpreters: a job's process forked from one that imported torch and pytest once for the host
(suites/warm_process.py), instead of a fresh interpreter paying them for every job and shard.

Which jobs: the job's own command (`<the runner's python> -m suites.pytest_entry ...`), alone or behind the install
step (`<python> -c STEP ... -- <that command>`: the child does the step's work, suites/warm_install.py), and only
from a warm interpreter whose environment equals the job's but for the variables a forked child takes itself
(JOB_VARIABLES: its directories, caches, GPUs and compile-ci's per-job settings), so whatever torch read at import
is what it would read in the job. One interpreter per such environment and runner python (at most MAX_WARM, the
oldest retired), started by the first job that finds none, which itself runs fresh, as does every job while the
interpreter imports, when it says it cannot be forked (a thread, a CUDA driver loaded), when the checkout has a
top-level module of the name of one imported after torch (a fresh process could import the checkout's); none
unless the worker's `COMPILE_CI_WARM_START` is true (LocalRunner's `warm`; the default, `false` turns it off).
A built-in suite's job, which runs no code of its repository before pytest's configure hooks (runners/first_code.py),
takes an interpreter that also made those hooks' dynamo and inductor imports, one per GPU it may see
(suites/warm_compiler.py: the job's process checks it may take them, or starts afresh); when that one cannot be
used, the plain kind.

The warm interpreter's HOME, TMPDIR and caches are an empty directory of its own; a job that leaves anything there
(something imported kept a path of the warm interpreter's) retires it. It is told the environment it was given
(given.json), so that what the runner's python (a wrapper script) and its imports set reaches each job as it would
a fresh one. The handle a job gets stands in for a `subprocess.Popen`: `pid` (its own session and process group),
`stdout`, `wait()`, `returncode`; `lost` when the warm interpreter died under it (the job's process group is then
killed by the runner, as on any end). Its socket is blocking whatever `socket.setdefaulttimeout` says (a Celery
worker's shutdown sets one process-wide).
"""

from __future__ import annotations

import atexit
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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from runners import first_code

log = logging.getLogger(__name__)

ENTRY = "suites.pytest_entry"
JOB_VARIABLES = frozenset({"HOME", "TMPDIR", "USER", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR",
                           "CUDA_VISIBLE_DEVICES"})
SHARED_COMPILE_CI = frozenset({"COMPILE_CI_SOURCE_KEYS"})  # compile-ci variables read before the fork: host-wide
# The job's user name as inductor spells it in its default cache directory (getpass, sanitised as inductor does).
JOB_USER = re.sub(r'[\\/:*?"<>|]', "_", pwd.getpwuid(os.getuid()).pw_name)
MAX_WARM = 8
MESSAGE_MAX = 1 << 20
START_TIMEOUT_S = 60.0


def per_job(name: str) -> bool:
    return name in JOB_VARIABLES or (name.startswith("COMPILE_CI_") and name not in SHARED_COMPILE_CI)


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
        while True:
            try:
                data = self.sock.recv(MESSAGE_MAX)
            except OSError:
                data = b""
            if not data:
                break
            message: dict[str, Any] = json.loads(data)
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
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.sock.close()
        shutil.rmtree(self.home, ignore_errors=True)


_pool: dict[tuple[str, tuple[tuple[str, str], ...], str], Warm] = {}
_pool_lock = threading.Lock()


def start(python: str, command: Sequence[str], cwd: Path, env: Mapping[str, str]) -> WarmJob | None:
    """The job forked from a warm interpreter, or None: start it fresh (the first job of an environment starts the
    interpreter for the next ones). A job no code of whose repository runs before pytest's configure hooks
    (runners/first_code.py) takes one that made the compiler's imports too, one per GPU it may see
    (suites/warm_compiler.py); the others, and those when it cannot be used, one that imported torch and pytest."""
    step, job = _split(command)
    if list(job[:3]) != [python, "-m", ENTRY] or not env.get("COMPILE_CI_OUTPUT_DIR"):
        return None
    shared = tuple(sorted((k, v) for k, v in env.items() if not per_job(k)))
    checkout = env.get("COMPILE_CI_CHECKOUT", "")
    kinds = ["torch"]
    if not first_code.repository_code_first(command, python, env, checkout):
        kinds.insert(0, f"compiler:{env.get('CUDA_VISIBLE_DEVICES', '')}")
    unusable = False  # the compiler's kind is ready and cannot take this job: the torch kind may be started for it
    for kind in kinds:
        compiler = kind.startswith("compiler:")
        with _pool_lock:
            warm = _pool.get((python, shared, kind))
            if warm is None or warm.retired:
                if not (compiler or len(kinds) == 1 or unusable):
                    return None  # the compiler's kind is starting: this job runs fresh
                if len(_pool) >= MAX_WARM:
                    _pool.pop(next(iter(_pool))).retire("more environments than MAX_WARM")
                visible = {"CUDA_VISIBLE_DEVICES": kind.partition(":")[2]} if compiler and kind != "compiler:" else {}
                _pool[(python, shared, kind)] = Warm(python, {**dict(shared), **visible}, compiler)
                return None
        if not warm.ready.is_set():
            continue  # while the compiler's kind imports, the torch kind (if there is one) takes the job
        if warm.why or first_code.shadows(checkout, warm.late):
            unusable = True
            continue
        return warm.start(job[3:], cwd, env, step)
    return None


def _split(command: Sequence[str]) -> tuple[list[str] | None, list[str]]:
    """(the install step's source and arguments, or None; the job's own command). A wrapped job is `python -c
    STEP CHECKOUT SITE PACKAGE -- COMMAND` (service/jobs/install.py)."""
    if len(command) > 3 and command[1] == "-c" and "--" in command[3:]:
        cut = list(command).index("--", 3)
        return [*command[2:cut], "--", *command[cut + 1:]], list(command[cut + 1:])
    return None, list(command)


def wait_until_ready(timeout: float) -> bool:
    """Whether every warm interpreter started has finished its imports within `timeout` (tests, benches)."""
    with _pool_lock:
        started = list(_pool.values())
    return all(warm.ready.wait(timeout) for warm in started)


@atexit.register
def close_all() -> None:
    with _pool_lock:
        for warm in _pool.values():
            warm.close()
        _pool.clear()

"""LocalRunner's warm interpreters: a job's process forked from one that imported torch and pytest once for the host
(suites/warm_process.py), instead of a fresh interpreter paying them for every job and shard.

Which jobs: the job's own command (`<the runner's python> -m suites.pytest_entry ...`), alone or behind the install
step (`<python> -c STEP ... -- <that command>`: the child does the step's work, suites/warm_install.py), and only
from a warm interpreter whose environment equals the job's but for the variables a forked child takes itself
(JOB_VARIABLES: its directories, caches, GPUs and compile-ci's per-job settings), so whatever torch read at import
is what it would read in the job. One interpreter per such environment and runner python (at most MAX_WARM, the
oldest retired), started by the first job that finds none, which itself runs fresh (a worker starts the built-in
suites' kind as it starts, `prestart`, so that its first job forks too), as does every job while the interpreter
imports, when it says it cannot be forked (a thread, a CUDA driver loaded), when the checkout has a
top-level module of the name of one imported after torch (a fresh process could import the checkout's); none
unless the worker's `COMPILE_CI_WARM_START` is true (LocalRunner's `warm`; the default, `false` turns it off).
A built-in suite's job, which runs no code of its repository before pytest's configure hooks (runners/first_code.py),
takes an interpreter that also made those hooks' dynamo and inductor imports, one per GPU it may see
(suites/warm_compiler.py: the job's process checks it may take them, or starts afresh); when that one cannot be
used, the plain kind.

The interpreters themselves: runners/warm_interpreter.py.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from runners import first_code
from runners.warm_interpreter import JOB_USER, Warm, WarmJob

__all__ = ["JOB_USER", "WarmJob", "close_all", "per_job", "prestart", "start", "wait_until_ready"]

ENTRY = "suites.pytest_entry"
JOB_VARIABLES = frozenset({"HOME", "TMPDIR", "USER", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR",
                           "CUDA_VISIBLE_DEVICES"})
SHARED_COMPILE_CI = frozenset({"COMPILE_CI_SOURCE_KEYS"})  # compile-ci variables read before the fork: host-wide
MAX_WARM = 8


def per_job(name: str) -> bool:
    return name in JOB_VARIABLES or (name.startswith("COMPILE_CI_") and name not in SHARED_COMPILE_CI)


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
    shared = _shared(env)
    checkout = env.get("COMPILE_CI_CHECKOUT", "")
    kinds = ["torch"]
    if not first_code.repository_code_first(command, python, env, checkout):
        kinds.insert(0, _compiler_kind(env))
    unusable = False  # the compiler's kind is ready and cannot take this job: the torch kind may be started for it
    for kind in kinds:
        with _pool_lock:
            warm = _pool.get((python, shared, kind))
            if warm is None or warm.retired:
                if kind.startswith("compiler:") or len(kinds) == 1 or unusable:
                    _new(python, shared, kind)
                return None  # while the compiler's kind is starting, this job runs fresh
        if not warm.ready.is_set():
            continue  # while the compiler's kind imports, the torch kind (if there is one) takes the job
        if warm.why or first_code.shadows(checkout, warm.late):
            unusable = True
            continue
        return warm.start(job[3:], cwd, env, step)
    return None


def prestart(python: str, env: Mapping[str, str]) -> bool:
    """Start now, before any job, the interpreter that a built-in suite's job with `env` (but for its own
    variables) takes, so that the worker's first such job forks too; False when there is one."""
    shared, kind = _shared(env), _compiler_kind(env)
    with _pool_lock:
        warm = _pool.get((python, shared, kind))
        if warm is not None and not warm.retired:
            return False
        _new(python, shared, kind)
    return True


def _shared(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in env.items() if not per_job(k)))


def _compiler_kind(env: Mapping[str, str]) -> str:
    return f"compiler:{env.get('CUDA_VISIBLE_DEVICES', '')}"


def _new(python: str, shared: tuple[tuple[str, str], ...], kind: str) -> None:
    """A warm interpreter of `kind` started for the pool (its lock held), the oldest retired past MAX_WARM."""
    if len(_pool) >= MAX_WARM:
        _pool.pop(next(iter(_pool))).retire("more environments than MAX_WARM")
    compiler = kind.startswith("compiler:")
    visible = {"CUDA_VISIBLE_DEVICES": kind.partition(":")[2]} if compiler and kind != "compiler:" else {}
    _pool[(python, shared, kind)] = Warm(python, {**dict(shared), **visible}, compiler)


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

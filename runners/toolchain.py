"""The C++ toolchain a job's inductor uses: its linker (the one owner of COMPILER_PATH) and whether it may skip
inductor's vector-ISA probe (the one owner of TORCHINDUCTOR_VEC_ISA_OK).

On CPU, inductor builds every kernel into its own shared object with one `g++ ... -shared -ltorch -ltorch_cpu
-ltorch_python` run, and GNU ld (bfd) spends about 0.3 s of each run resolving libtorch's symbols: a third of the
kernel's build. LLVM's lld links the same object in about 0.06 s. g++ takes its `ld` from the directories in
COMPILER_PATH before its own (GCC's documented search order), so pointing COMPILER_PATH at a directory that holds
only `ld -> ld.lld` changes the linker and nothing else: no compiler flag, no inductor setting, so no cache key
and no generated code moves. The runner images do the same (`ENV COMPILER_PATH` in their Dockerfiles).

COMPILE_CI_LINKER=system (in the worker's environment) keeps g++'s default linker (GNU ld), for both runners.

The vector-ISA probe (runners/isa_check.py says what it costs and why checking it once is exact) is checked when a
runner image is built, whose Dockerfile then sets TORCHINDUCTOR_VEC_ISA_OK=1; for the LocalRunner, once per worker
process and interpreter, before its first job: only a passed check lets that runner's jobs skip the probe.
Likewise inductor's source keys (suites/source_keys.py): an image's build computes them, the LocalRunner's worker
once per interpreter.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger(__name__)
ISA_CHECK = Path(__file__).resolve().with_name("isa_check.py")
ISA_CHECK_TIMEOUT_S = 300
_isa_verdicts: dict[tuple[str, str, str], bool] = {}
_isa_lock = threading.Lock()


def _after_fork() -> None:
    """A process forked while a worker's preparation held the lock (service/jobs/tasks.py starts it before Celery
    forks its pool) would wait on it forever: the child takes a new one and checks again what it lacks."""
    global _isa_lock
    _isa_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)

LINKER_DIR = Path(__file__).resolve().with_name("linker")  # holds one entry: ld -> /usr/bin/ld.lld
CHOICES = ("lld", "system")


def linker_env(*, in_image: bool, choice: str | None = None) -> dict[str, str]:
    """What a job's environment gets for its linker. `in_image`: a runner image's job, whose image already sets
    COMPILER_PATH to its lld; a LocalRunner job gets this checkout's `linker/` when the host has lld."""
    choice = choice or os.environ.get("COMPILE_CI_LINKER", "lld")
    if choice not in CHOICES:
        raise ValueError(f"COMPILE_CI_LINKER must be one of {', '.join(CHOICES)}, got {choice!r}")
    if choice == "system":
        return {"COMPILER_PATH": ""}  # empty: g++ searches only its own directories, where GNU ld is
    if in_image or not (LINKER_DIR / "ld").exists():  # exists() follows the link: false when lld is missing
        return {}
    return {"COMPILER_PATH": str(LINKER_DIR)}


def vec_isa_env(python: str, env: Mapping[str, str]) -> dict[str, str]:
    """A LocalRunner job's TORCHINDUCTOR_VEC_ISA_OK: "1" once isa_check.py passed with `python` and the toolchain
    `env` selects (its COMPILER_PATH and CXX); checked at the first job of each worker process, which waits for it.
    Kept in memory only: a verdict on disk would be something an earlier job could have written."""
    key = (python, env.get("COMPILER_PATH", ""), env.get("CXX", ""))
    with _isa_lock:
        if key not in _isa_verdicts:
            _isa_verdicts[key] = _isa_check(python, env)
    return {"TORCHINDUCTOR_VEC_ISA_OK": "1"} if _isa_verdicts[key] else {}


def _isa_check(python: str, env: Mapping[str, str]) -> bool:
    try:
        done = subprocess.run([python, str(ISA_CHECK), "--this-cpu"], env=dict(env), capture_output=True, text=True,
                              timeout=ISA_CHECK_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("vector-ISA check could not run (%s): jobs keep inductor's own probe", exc)
        return False
    if done.returncode != 0:
        log.warning("vector-ISA check failed (exit %s): jobs keep inductor's own probe: %s", done.returncode,
                    (done.stdout + done.stderr)[-2000:])
    return done.returncode == 0


_source_keys: dict[str, str] = {}


def source_keys_env(python: str, env: Mapping[str, str]) -> dict[str, str]:
    """A LocalRunner job's COMPILE_CI_SOURCE_KEYS: inductor's source keys computed by `python` once per worker
    process (suites/source_keys.py says why and when a job uses them), as an image's build does for its jobs. Kept in
    memory, like the ISA verdict: a value on disk would be something an earlier job could have written."""
    with _isa_lock:
        if python not in _source_keys:
            _source_keys[python] = _compute_source_keys(python, env)
    return {"COMPILE_CI_SOURCE_KEYS": _source_keys[python]} if _source_keys[python] else {}


def _compute_source_keys(python: str, env: Mapping[str, str]) -> str:
    try:
        done = subprocess.run([python, "-m", "suites.source_keys"], env=dict(env), capture_output=True, text=True,
                              timeout=ISA_CHECK_TIMEOUT_S, cwd=Path(__file__).resolve().parent.parent)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("inductor's source keys could not be computed (%s): jobs compute their own", exc)
        return ""
    if done.returncode != 0:
        log.warning("inductor's source keys could not be computed (exit %s): jobs compute their own: %s",
                    done.returncode, done.stderr[-2000:])
        return ""
    return done.stdout.strip()


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

A host that runs several worker processes (or a test run that starts many) may check once for all of them:
`python -m runners.toolchain PYTHON...` prints COMPILE_CI_HOST_CHECKS, both verdicts for each interpreter in the
environment a LocalRunner gives its jobs; a worker started with that variable takes them from it for those
interpreters and toolchains, on a CPU of the same flags, and checks the rest itself. It is the operator's, like the
rest of the worker's environment, which no job can write; a stale one can only make inductor probe (a verdict of
false) or compute its own keys (source keys of another torch are ignored, suites/source_keys.py), except a true ISA
verdict for a toolchain changed in place since: as an image's verdict, it holds for the toolchain it was checked with.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

log = logging.getLogger(__name__)
ISA_CHECK = Path(__file__).resolve().with_name("isa_check.py")
ISA_CHECK_TIMEOUT_S = 300
_isa_verdicts: dict[tuple[str, str, str], bool] = {}
HOST_CHECKS_ENV = "COMPILE_CI_HOST_CHECKS"
PASSTHROUGH_ENV = ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME")
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
            given = _given().get("isa", {}).get(given_key(python, env))
            _isa_verdicts[key] = given if isinstance(given, bool) else _isa_check(python, env)
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
            given = _given().get("source_keys", {}).get(python)
            _source_keys[python] = given if isinstance(given, str) else _compute_source_keys(python, env)
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


def _given() -> dict[str, dict[str, object]]:
    """The worker's COMPILE_CI_HOST_CHECKS; {} when unset or not what `host_checks` writes."""
    try:
        given = json.loads(os.environ.get(HOST_CHECKS_ENV, "") or "{}")
    except ValueError:
        log.warning("%s is not JSON: every check runs here", HOST_CHECKS_ENV)
        return {}
    if not isinstance(given, dict):
        return {}
    return {part: value for part, value in given.items() if isinstance(value, dict)}


def given_key(python: str, env: Mapping[str, str]) -> str:
    """An ISA verdict's key in COMPILE_CI_HOST_CHECKS: the interpreter, the toolchain and this CPU's flags (a value
    carried to a host whose CPU declares other ISAs, AMX say, is not taken there: the check covered only these)."""
    return json.dumps((python, env.get("COMPILER_PATH", ""), env.get("CXX", ""), _cpu_flags()))


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            flags = next((line for line in handle if line.startswith("flags")), "")
    except OSError:
        flags = ""
    return hashlib.sha256(" ".join(sorted(flags.split(":", 1)[-1].split())).encode()).hexdigest()[:16]


def host_env() -> dict[str, str]:
    """A LocalRunner job's environment before its own variables: what it may pass through and its linker."""
    env = {k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ}
    env.update(linker_env(in_image=False))
    return env


def host_checks(pythons: list[str]) -> str:
    """COMPILE_CI_HOST_CHECKS for `pythons`: each one's ISA verdict and source keys, checked here as a worker would,
    the checks at once (each is a child process of its own; one after another they left all but one core idle)."""
    env = host_env()
    with ThreadPoolExecutor(max_workers=max(1, min(2 * len(pythons), os.cpu_count() or 1))) as pool:
        isa = {python: pool.submit(_isa_check, python, env) for python in pythons}
        keys = {python: pool.submit(_compute_source_keys, python, env) for python in pythons}
        return json.dumps({"isa": {given_key(python, env): isa[python].result() for python in pythons},
                           "source_keys": {python: keys[python].result() for python in pythons}},
                          separators=(",", ":"))


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: python -m runners.toolchain PYTHON... (prints COMPILE_CI_HOST_CHECKS for those interpreters)")
    print(host_checks(sys.argv[1:]))

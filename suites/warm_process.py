"""A warm interpreter for a host's jobs: torch and pytest imported once, each job a fork of it.

Every job's process pays the same imports first (about 5 s of CPU on the 2-core host, 3.8 s of a shard's wall:
docs/benchmarks.md, "a job's fixed cost"). A LocalRunner (runners/warm_start.py) starts this module with the
environment every job of its host shares and a socket; it imports what `suites.pytest_entry` would (its
`prepare()`: the compiler surface's snapshot of torch as torch defines it, the source keys), then pytest and the
plugin's modules under that snapshot's import hook (dynamo and inductor stay the job's: `warm_up`), and says whether
it can be forked (no Python thread, no CUDA driver
loaded). For each job the runner sends the job's arguments, directory and environment with its output pipe; this
process forks, and the child becomes the job: its own session, the pipe as stdout and stderr, no other descriptor,
the job's directory and environment (the variables the runner keys warm interpreters by are the same by
construction; what the runner's python and the imports here set is set again), its install step's work if it has
one (suites/warm_install.py), the random generators seeded afresh, `tempfile` told to look again, the surface's
per-process parts taken again (`compiler_surface.forked()`), and then `pytest_entry.main()`. The runner gets the
child's pid and, once this process has reaped it, its exit status.

Nothing of a repository ever runs here before a fork, and a job cannot reach back: this process is not dumpable
(no ptrace, no /proc/<pid>/mem for the job's uid), each child is made dumpable again, and the socket is closed in
it. Protocol (SOCK_SEQPACKET, one JSON object per message): to the runner `{"ready": true, "why": "", "late":
[...]}` (why: '' when forkable; late: the top-level modules imported after torch, which a checkout must not shadow),
`{"id": N, "pid": P}`, `{"id": N, "status": S}`; from it `{"id": N, "argv": [...], "cwd": "...", "env": {...},
"step": [...] or null, "python": "..."}` with the job's output descriptor. Run as `python -m suites.warm_process FD
GIVEN [compiler]` (GIVEN: a JSON file of the environment the runner gave it and the variables it set for this process
only, in the interpreter's own directory; `compiler`: the compiler's imports made too, suites/warm_compiler.py).
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import shutil
import socket
import sys
import threading
import traceback
from typing import Any

from suites import warm_install
from suites.fork_child import detach, fresh_state

MESSAGE_MAX = 1 << 20
PR_SET_DUMPABLE = 4
_WRAPPER: dict[str, str | None] = {}  # what the runner's python set (None: unset) at this interpreter's start
_IMPORTS: dict[str, str | None] = {}  # what the warm-up's imports set
_PYTHONPATH = ""  # this interpreter's at its start: its path's entries from it are the job's to set
_SHOWN: list[str] = []  # what the warm-up's imports warned, shown again in each job's output as a fresh one shows it
_AHEAD: Any = None  # what the compiler's imports made ahead depended on (suites/warm_compiler.py), or None


def send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.send(json.dumps(message).encode())


def warm_up(compiler: str = "") -> tuple[str, list[str], list[str]]:
    """Import what a fresh job's process has imported when the repository's first code runs, and nothing more (its
    lazy imports, dynamo's and inductor's among them, stay the job's: a repository's conftest may set their
    variables or register what they read at import, and their warnings belong to its tests), and with `compiler`
    (this interpreter's own directory) the compiler's imports a built-in suite's job makes before any code of its
    repository runs (suites/warm_compiler.py); (why this process cannot be forked or '', the modules imported after
    torch, the warnings these imports showed)."""
    global _AHEAD
    import warnings

    sys.meta_path.append(warm_install.LOOKED_FOR)  # what these imports look for and do not find
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("default")
        from suites import pytest_entry

        pytest_entry.prepare()
        import torch

        before = {name.partition(".")[0] for name in sys.modules}
        import pytest  # noqa: F401

        # suites.plugin's own imports (not the plugin: it reads the job's variables when imported)
        from suites import device_context, job_files, log_sections, naming, reruns, sharding  # noqa: F401

        why = ""
        if compiler:
            from suites import warm_compiler

            _AHEAD, why = warm_compiler.import_ahead(compiler)
    late = sorted({name.partition(".")[0] for name in sys.modules} - before)
    text = [warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line) for w in shown]
    return why or _unforkable(torch), late, text


def _unforkable(torch: Any) -> str:
    children = [name for task in os.listdir("/proc/self/task")
                for name in _read(f"/proc/self/task/{task}/children").split()]
    if children:
        return f"the imports started {len(children)} process(es) of their own"
    if threading.active_count() > 1:
        return f"{threading.active_count() - 1} Python thread(s) run in the warm interpreter"
    if torch.cuda.is_initialized():
        return "CUDA is initialised in the warm interpreter"
    # The driver's library may be loaded (torch maps libcuda at import on a CUDA host); a fork is unsafe only once
    # the driver was initialised, which opens and maps the /dev/nvidia* devices, whoever called it.
    with open("/proc/self/maps") as maps:
        mapped = any("/dev/nvidia" in line for line in maps)
    opened = any("/dev/nvidia" in _link(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd"))
    return "the CUDA driver is initialised in the warm interpreter" if mapped or opened else ""


def _read(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


def _link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def _set_dumpable(value: int) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, value, 0, 0, 0)


def serve(sock: socket.socket) -> None:
    jobs: dict[int, int] = {}  # pid -> the runner's id
    open_ = True
    while open_ or jobs:
        ready, _, _ = select.select([sock] if open_ else [], [], [], 0.05)
        if ready:
            try:
                data, fds, _flags, _addr = socket.recv_fds(sock, MESSAGE_MAX, 1)
            except OSError:
                data, fds = b"", []
            if not data:
                open_ = False  # the runner is gone: its jobs' statuses have no one to go to
                for fd in fds:
                    os.close(fd)
                break
            _start(sock, json.loads(data), fds, jobs)
        reap(sock, jobs)


def _start(sock: socket.socket, request: dict[str, Any], fds: list[int], jobs: dict[int, int]) -> None:
    if len(fds) != 1:
        for fd in fds:
            os.close(fd)
        send(sock, {"id": request.get("id"), "error": "no output descriptor"})
        return
    pid = os.fork()
    if pid == 0:
        _become(sock, request, fds[0])  # never returns
    os.close(fds[0])
    jobs[pid] = request["id"]
    send(sock, {"id": request["id"], "pid": pid})


def reap(sock: socket.socket, jobs: dict[int, int]) -> None:
    while jobs:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in jobs:
            try:
                send(sock, {"id": jobs.pop(pid), "status": os.waitstatus_to_exitcode(status)})
            except OSError:
                pass


def _become(sock: socket.socket, request: dict[str, Any], out: int) -> None:
    status = 1
    try:
        sock.close()
        detach(out, out)
        _set_dumpable(1)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(_as_started(request["env"]))
        sys.path[0] = request["cwd"]
        fresh_state()
        imported = {name.partition(".")[0] for name in sys.modules}
        sys.meta_path[:] = [finder for finder in sys.meta_path if finder is not warm_install.LOOKED_FOR]
        argv = (warm_install.run_step(request["step"], imported, request.get("python", ""), _imports_on,
                                      _PYTHONPATH) if request.get("step") else request["argv"])
        if _AHEAD is not None:
            _take_ahead(request, argv)
        sys.stderr.write("".join(_SHOWN))
        from suites import pytest_entry

        sys.argv = [pytest_entry.__file__, *argv]
        status = pytest_entry.main(forked=True)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - the job's process ends here whatever happened
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(status)


def _take_ahead(request: dict[str, Any], argv: list[str]) -> None:
    """The compiler's imports made ahead, taken with the job's own paths; or, when anything they depended on differs
    for this job, its command started afresh in this process (the install step's work, if any, done)."""
    from suites import warm_compiler

    why = warm_compiler.unsure(_AHEAD, os.environ)
    if not why:
        warm_compiler.retake(_AHEAD, os.environ)
        sys.orig_argv = [sys.executable, "-m", "suites.pytest_entry", *argv]  # as a fresh one's, not this one's
        return
    print(f"[compile-ci] the job starts a fresh interpreter: {why}", flush=True)
    python = request.get("python") or sys.executable
    env = dict(os.environ) if request.get("step") else request["env"]
    os.execvpe(python, [python, "-m", "suites.pytest_entry", *argv], env)


def _as_started(env: dict[str, str], imports: bool = True) -> dict[str, str]:
    """`env` as this interpreter's start made its own: what the runner's python (a wrapper script may set
    variables) and, with `imports`, the warm-up's imports set or unset, over the job's."""
    ended = dict(env)
    for changes in (_WRAPPER, _IMPORTS) if imports else (_WRAPPER,):
        for name, value in changes.items():
            if value is None:
                ended.pop(name, None)
            else:
                ended[name] = value
    return ended


def _imports_on(env: dict[str, str]) -> dict[str, str]:
    return {**env, **{k: v for k, v in _IMPORTS.items() if v is not None}}


def _changes(before: dict[str, str], after: dict[str, str], ignore: set[str]) -> dict[str, str | None]:
    changed: dict[str, str | None] = {k: v for k, v in after.items() if k not in ignore and before.get(k) != v}
    changed.update({k: None for k in before if k not in after and k not in ignore})
    return changed


def _started_with(given_file: str, startup: dict[str, str]) -> None:
    """What the runner gave this interpreter (runners/warm_start.py writes it), against its environment at its
    start (the runner's python set that) and now (the warm-up's imports set that)."""
    global _WRAPPER, _IMPORTS
    with open(given_file) as handle:
        start = json.load(handle)
    _WRAPPER = _changes(start["given"], startup, set(start["own"]))
    _IMPORTS = _changes(startup, dict(os.environ), set())


def main() -> int:
    sock = socket.socket(fileno=int(sys.argv[1]))
    sock.settimeout(None)  # blocking, as the runner's end is (runners/warm_start.py)
    global _PYTHONPATH
    _PYTHONPATH = os.environ.get("PYTHONPATH", "")
    startup = dict(os.environ)
    own = os.path.dirname(sys.argv[2])
    why, late, shown = warm_up(own if sys.argv[3:4] == ["compiler"] else "")
    _started_with(sys.argv[2], startup)
    try:
        send(sock, {"ready": True, "why": why, "late": late})
    except OSError:  # the runner is gone already
        return _left(own)
    global _SHOWN
    _SHOWN = shown
    if why:
        sock.recv(1)  # unforkable: wait for the runner to let go
        return _left(own)
    _set_dumpable(0)
    serve(sock)
    return _left(own)


def _left(own: str) -> int:
    """The runner let go of this interpreter (closed it, or died): its own directory goes with it, which the runner
    removes too when it lives to (runners/warm_interpreter.py); a runner killed mid-job left it behind before."""
    shutil.rmtree(own, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The tests' zygote (tests/zygote.py): imports once what every `python -m pytest suites/...` the tests start
imports before its own code runs, then forks one child per request, which becomes that command.

`python -m tests.zygote_server FD KIND`: FD is a SOCK_SEQPACKET socket to the test process; KIND is `torch` (torch
and pytest imported) or `compiler` (dynamo's and inductor's modules too, which a built-in suite's pytest imports at
its configure anyway; only for runs that load no plugin of ours that patches torch first: tests/zygote.py says which).
A request is JSON (argv, cwd, env) with two descriptors, the child's stdout and stderr; the answers are
`{"id", "pid"}` when it started and `{"id", "status"}` when it ended.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import threading
import traceback
from typing import Any

from suites import fork_child
from suites.warm_process import reap, send  # the job protocol's answers, as the warm interpreter sends them

MESSAGE_MAX = 1 << 20
COMPILER_MODULES = ("torch._dynamo", "torch._inductor.compile_fx", "torch._inductor.lowering",
                    "torch._inductor.decomposition")


def warm_up(kind: str) -> str:
    """The imports; why this process cannot be forked, or ''."""
    import importlib

    import pytest  # noqa: F401
    import torch

    if kind == "compiler":
        for name in COMPILER_MODULES:
            importlib.import_module(name)
    if threading.active_count() > 1:
        return f"{threading.active_count() - 1} Python thread(s) run in the zygote"
    children = [name for task in os.listdir("/proc/self/task")
                for name in open(f"/proc/self/task/{task}/children").read().split()]
    if children:
        return f"the imports started {len(children)} process(es)"
    if torch.cuda.is_initialized():
        return "CUDA is initialised in the zygote"
    return ""


def _become(request: dict[str, Any], out: int, err: int) -> None:
    """The child: the request's command from here on, as `python -m pytest ARGS` started in its directory with its
    environment would run it; its exit skips the interpreter's teardown (pytest's results are written by then)."""
    status = 1
    try:
        fork_child.detach(out, err)  # as production's warm interpreter makes its children
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[0] = request["cwd"]  # `python -m` puts the current directory first
        import pytest

        fork_child.fresh_state()  # Python's, numpy's and torch's generators seeded afresh, tempfile's directory
        sys.argv = [os.path.join(os.path.dirname(pytest.__file__), "__main__.py"), *request["argv"]]
        sys.orig_argv = [sys.executable, "-m", "pytest", *request["argv"]]  # as a fresh one's
        status = int(pytest.main())
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - the child ends here whatever happened
        traceback.print_exc()
    finally:
        try:
            from suites import pytest_entry

            pytest_entry.finish()  # threads joined, atexit handlers run, streams flushed: a normal exit's effects
        finally:
            os._exit(status)


def serve(sock: socket.socket) -> None:
    jobs: dict[int, int] = {}  # pid -> request id
    open_ = True
    while open_ or jobs:
        ready, _, _ = select.select([sock] if open_ else [], [], [], 0.05 if jobs else None)
        if ready:
            try:
                data, fds, _flags, _addr = socket.recv_fds(sock, MESSAGE_MAX, 2)
            except OSError:
                data, fds = b"", []
            if not data:
                open_ = False
                for fd in fds:
                    os.close(fd)
                continue
            request = json.loads(data)
            if len(fds) != 2:
                for fd in fds:
                    os.close(fd)
                send(sock, {"id": request.get("id"), "status": 1, "error": "two descriptors are needed"})
                continue
            pid = os.fork()
            if pid == 0:
                sock.close()
                _become(request, *fds)  # never returns
            for fd in fds:
                os.close(fd)
            jobs[pid] = request["id"]
            send(sock, {"id": request["id"], "pid": pid})
        reap(sock, jobs)


def main() -> int:
    sock = socket.socket(fileno=int(sys.argv[1]))
    sock.settimeout(None)
    why = warm_up(sys.argv[2])
    send(sock, {"ready": True, "why": why})
    if why:
        sock.recv(1)
        return 0
    serve(sock)
    return 0


if __name__ == "__main__":
    sys.exit(main())

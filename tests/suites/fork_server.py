"""`python -m pytest ARGS` for the suite tests (tests/suites/suite_run.py), forked from an interpreter that imported
torch and pytest once, instead of a fresh interpreter paying them for every run (about 2 s of CPU each on the 2-core
host: docs/development.md, "Forked suite runs").

What a fresh `python -m pytest` has imported when the first conftest runs is pytest, and torch is imported by the
suites' conftest before any test: this process imports both and nothing of compile-ci, dynamo or inductor (they stay
each run's, as in the LocalRunner's warm interpreter, suites/warm_process.py, which this mirrors for the tests). One
server per environment (suite_run keys them by it, so what torch read at import is what a fresh run would read); for
each request it forks, and the child becomes the run: its own session, stdin from /dev/null, stdout and stderr to the
request's files, the request's directory as its working directory and first path entry, `sys.argv` as pytest's own
(suites/plugin.py reads it at import), numpy's global generator seeded afresh if the server imported it (Python's
`random` is reseeded at a fork), `tempfile` told to look again; then `pytest.main(ARGS)`, the atexit handlers, and
`os._exit` with pytest's status. The server waits for the child and answers its status; one run at a time.

Protocol, one JSON object a line: the server says `{"ready": true}`; then for each `{"args": [...], "cwd": "...", "env":
{...}, "stdout": PATH, "stderr": PATH}` (env: the run's whole environment, which differs from the server's only in what
`runners.warm_start.per_job` says a forked job may take itself: its directories, caches and compile-ci's settings) it
answers `{"pid": P}` and then `{"status": S}` (S as `subprocess` gives it). Run as a file: `python
tests/suites/fork_server.py` (its own directory is replaced by the request's on the path).
"""

from __future__ import annotations

import json
import os
import sys


def _child(request: dict, null: int) -> int:
    import atexit
    import signal
    import tempfile

    import pytest

    os.setsid()
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    os.dup2(null, 0)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.path[0] = request["cwd"]  # as `python -m` puts the working directory first
    sys.argv = [os.path.join(os.path.dirname(pytest.__file__), "__main__.py"), *request["args"]]
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(number, signal.SIG_DFL)
    generator = sys.modules.get("numpy.random")
    if generator is not None:  # its global state, seeded once at its import (Python's `random` reseeds at a fork)
        generator.seed()
    tempfile.tempdir = None
    try:
        status = int(pytest.main(request["args"]))
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    return status


def serve() -> None:
    import pytest  # noqa: F401
    import torch  # noqa: F401

    requests = os.fdopen(os.dup(0), "rb")
    answers = os.fdopen(os.dup(1), "wb", buffering=0)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)  # a run's output goes to its files, never into the answers

    def answer(message: dict) -> None:
        answers.write((json.dumps(message) + "\n").encode())

    answer({"ready": True})
    for line in requests:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            status = 70
            try:
                requests.close()
                answers.close()
                status = _child(request, null)
            except BaseException:  # noqa: BLE001 - said on the run's stderr, its status 70
                import traceback

                traceback.print_exc()
            finally:
                os._exit(status)
        answer({"pid": pid})
        _, raw = os.waitpid(pid, 0)
        answer({"status": os.waitstatus_to_exitcode(raw)})


if __name__ == "__main__":
    sys.path[0] = os.getcwd()  # not this file's directory: nothing of the tests is importable by that path
    serve()

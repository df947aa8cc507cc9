"""How a job starts pytest: `python -m suites.pytest_entry ARGS...` is `python -m pytest ARGS...` with the compiler
surface's snapshot of torch as torch defines it (suites/compiler_surface.py) taken first.

pytest imports plugins before any hook of ours can run: the `-p` options of the repository's `addopts` (put before
the command line's own, so before `-p suites.plugin`) and the `pytest11` entry points of every installed
distribution (the repository's editable install, its dependencies). A patch of torch's compiler made there would be
taken for torch's own. Here nothing of the repository has run yet but what the interpreter itself runs at its start
(`.pth` files, `sitecustomize`); torch's modules imported later are taken by the surface's import hook.

Two parts of every job's fixed cost are cut here too (docs/benchmarks.md, "a job's fixed cost"): inductor's
source keys come precomputed (suites/source_keys.py), and the process ends without tearing down its heap. Once
pytest has returned (its JUnit XML, the plugin's files and the summary written), the interpreter's finalization
frees every module and object of torch one by one: 1.2-1.3 s of a one-test job on the 2-core host, for nothing a
job keeps. What a normal exit does that anyone could notice still happens, in its order: the job's non-daemon
threads are waited for, the atexit handlers run (logging's flush, inductor's compile workers' shutdown), and the
standard streams are flushed; then `os._exit` with pytest's status. Inductor's compile workers are the one thing
ended sooner than a normal exit would: killed, not waited for (suites/compile_workers.py).
"""

from __future__ import annotations

import os
import sys


def prepare() -> None:
    """What a job's process does before anything of the repository runs: the surface's snapshot, the source keys."""
    from suites import compiler_surface, source_keys

    compiler_surface.install()
    keys = source_keys.load()
    if keys is not None:
        compiler_surface.after_import("torch._inductor.codecache", lambda codecache: source_keys.apply(keys, codecache))


def main(forked: bool = False) -> int:
    """`forked`: this process was forked from a warm interpreter that ran `prepare()` (suites/warm_process.py)."""
    in_job = bool(os.environ.get("COMPILE_CI_OUTPUT_DIR"))  # suites/plugin.py's OUTPUT_ENV
    if in_job:  # the job's share of the host's CPUs: pinned before torch is imported, its threads sized after
        from suites import cpu_share

        cpu_share.pin()
    if in_job and forked:
        from suites import compiler_surface

        compiler_surface.forked()
    elif in_job:
        prepare()
    if in_job:
        sys.stdout.write(cpu_share.size_threads())
        sys.stdout.flush()
    import pytest

    if in_job:  # a session that loses its device context leaves its tests to fresh processes (suites/continuation.py)
        from suites import continuation

        status = continuation.run(lambda: int(pytest.main()), finish)
    else:
        status = int(pytest.main())  # pytest's console script, without console_main (deprecated in pytest 9.2)
    if in_job:
        exit_now(status)
    return status


def exit_now(status: int) -> None:
    """A normal exit's visible effects (threads joined, atexit handlers, flushed streams), without finalization."""
    finish()
    os._exit(status)


def finish() -> None:
    """What a normal exit does that anyone could notice, in its order; before ``os._exit`` or an ``exec``."""
    import atexit
    import threading

    # What the interpreter's own exit calls first: the threading module's exit hooks (a ThreadPoolExecutor's idle
    # workers are told to stop there: joined without it, they wait for work forever), then every non-daemon thread
    # joined.
    threading._shutdown()  # type: ignore[attr-defined]
    # Inductor's compile workers are killed, not shut down: its atexit handler waits for each worker's own exit
    # (1.3-5 s of a CUDA job on a 16-core host), and no compile is left to need them (suites/compile_workers.py).
    from suites import compile_workers

    compile_workers.end()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # a closed or broken pipe: nothing more can reach it


if __name__ == "__main__":
    sys.exit(main())

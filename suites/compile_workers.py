"""Inductor's compile workers, ended at once when a job's process ends (suites/pytest_entry.py `finish`).

Where triton is installed (every CUDA host), a job's first compile starts inductor's `SubprocPool`: a sidecar
process (`python -m torch._inductor.compile_worker`) and, under it, one worker process per compile thread (16 on a
16-core GPU host). Inductor's atexit handler shuts the pool down by asking the sidecar to stop and waiting for it,
and the sidecar waits for each worker's own exit: 1.3-5.0 s of a CUDA job's process exit on an H200 host (the
process exit was 2.5 s of a one-test job's 9.2 s; docs/benchmarks.md, "a job's fixed cost"), 1.1 s for four workers
on the 2-core host. The job's tests are over when this runs: every compile has returned and what the workers built
is in the cache already (inductor writes a cache entry to a temporary name and renames it), so nothing they hold is
needed. They are killed instead: the sidecar's children, then the sidecar, which is reaped here; the pool is marked
closed first, so its reader thread takes the pipe's end for the shutdown it is, and the atexit handler finds no pool
left. A pool of another kind (a plain process pool, no sidecar) is left to that handler.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


def end() -> None:
    """Kill every inductor compile-worker sidecar this process started, and the workers under it."""
    module = sys.modules.get("torch._inductor.async_compile")
    pools = getattr(module, "_pool_set", None)
    if not pools:
        return
    for pool in list(pools):
        process = getattr(pool, "process", None)
        if not isinstance(process, subprocess.Popen) or process.poll() is not None:
            continue
        lock = getattr(pool, "write_lock", None)
        if lock is not None:
            with lock:
                pool.running = False
        for pid in [*children(process.pid), process.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass  # not dead yet (stuck in the kernel): the runner ends the job's process group or container after it
        pools.discard(pool)


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (its threads' `children` lists; a scan of /proc where the kernel has
    none)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        tasks = []
    if tasks and (tasks[0] / "children").exists():
        listed: set[int] = set()
        for task in tasks:
            try:
                listed.update(int(child) for child in (task / "children").read_text().split())
            except OSError:
                continue  # a thread that ended meanwhile
        return sorted(listed)
    return scan(pid)


def scan(pid: int) -> list[int]:
    """The processes whose parent is `pid`, from every process's /proc stat line."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after its last ")".
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found

"""The job's side of its share of the host's CPUs (runners/cpu_shares.py): run on the CPUs the runner leased it and
size torch's threads to them, before anything of the repository runs.

A fresh job was put on its CPUs by its runner (LocalRunner: the process's affinity; DockerRunner: the container's
cpuset) and pins itself again here, before torch is imported; a job forked from a warm interpreter (LocalRunner's
warm start) pins itself here. torch sizes its intra-op threads from the host's cores, not from the CPUs it may
use, so they are set from COMPILE_CI_JOB_THREADS once torch is imported (unless the job's environment sets
OMP_NUM_THREADS itself); inductor's compile workers come from TORCHINDUCTOR_COMPILE_THREADS, which it reads when
its config is imported (set here too when that happened before the fork).
"""

from __future__ import annotations

import contextlib
import os
import sys

JOB_CPUS_ENV = "COMPILE_CI_JOB_CPUS"
JOB_THREADS_ENV = "COMPILE_CI_JOB_THREADS"


def _cpus(text: str) -> set[int]:
    cpus: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def pin() -> None:
    """Run on the job's CPUs (nothing when the runner leased none)."""
    text = os.environ.get(JOB_CPUS_ENV, "")
    if text:
        with contextlib.suppress(ValueError, OSError):
            os.sched_setaffinity(0, _cpus(text))


def size_threads() -> str:
    """torch's threads (and inductor's compile workers, if its config was imported already) to the job's share;
    the line the job's log shows, or '' when the runner leased no CPUs."""
    text, threads = os.environ.get(JOB_CPUS_ENV, ""), os.environ.get(JOB_THREADS_ENV, "")
    if not (text and threads.isdigit() and int(threads) > 0):
        return ""
    import torch

    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(int(threads))
    config = sys.modules.get("torch._inductor.config")
    compile_threads = os.environ.get("TORCHINDUCTOR_COMPILE_THREADS", "")
    if config is not None and compile_threads.isdigit():
        config.compile_threads = int(compile_threads)  # type: ignore[attr-defined]
    return (f"[compile-ci] this job runs on CPUs {text}: {torch.get_num_threads()} torch threads, "
            f"{compile_threads or 'inductor-chosen'} compile workers\n")

"""How the jobs a worker runs at once share its CPUs: each gets its own part, and sizes its threads to it.

A worker with N slots (COMPILE_CI_JOB_SLOTS; `compile-ci worker --concurrency N` sets it) deals its CPUs
(COMPILE_CI_CPUS, else the CPUs the worker itself may run on: `taskset`, a container's cpuset) into N disjoint
parts, whole cores together where the host has SMT siblings. A job leases the part the fewest running jobs hold
(each its own while no more than N run) and runs on it: LocalRunner sets the process's affinity, DockerRunner the
container's cpuset. The job's torch threads and inductor's compile workers are sized to the part
(COMPILE_CI_JOB_THREADS, TORCHINDUCTOR_COMPILE_THREADS; suites/cpu_share.py applies them in the job).

Why (docs/benchmarks.md, "Slots on one host"): torch sizes its OpenMP threads from the host's cores and inductor
its compile workers from the CPUs a process may use, so four warm jobs at once on a 16-core GPU host each ran 16
threads and 16 compile workers: 185.8 s each against 25.5 s alone, 2,817 s of CPU against 113 s. On a quarter of
the host each, 25.6 s. One slot (the default) is every job on all of the worker's CPUs, as before.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

JOB_CPUS_ENV = "COMPILE_CI_JOB_CPUS"  # the job's CPUs, spelled as a cpuset ("0-3,8")
JOB_THREADS_ENV = "COMPILE_CI_JOB_THREADS"  # torch's intra-op threads in the job
COMPILE_THREADS_ENV = "TORCHINDUCTOR_COMPILE_THREADS"
MAX_CPU = 4095
_RANGE = re.compile(r"^(\d{1,4})(?:-(\d{1,4}))?$")


def parse_cpus(text: str) -> tuple[int, ...]:
    """A cpuset list ("0-3,8,10-11") as sorted CPU numbers; ValueError when malformed, empty or repeated."""
    cpus: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        match = _RANGE.match(part)
        if not match:
            raise ValueError(f"not a CPU number or range: {part!r}")
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        if last < first or last > MAX_CPU:
            raise ValueError(f"not a CPU range: {part!r}")
        cpus.extend(range(first, last + 1))
    if len(set(cpus)) != len(cpus):
        raise ValueError("a CPU is listed twice")
    return tuple(sorted(cpus))


def spell(cpus: Iterable[int]) -> str:
    """CPU numbers as a cpuset list, ranges joined: (0, 1, 2, 3, 8) -> "0-3,8"."""
    runs: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def core_order(cpus: Iterable[int], sysfs: Path = Path("/sys/devices/system/cpu")) -> list[int]:
    """The CPUs with SMT siblings side by side (by package, then core), so that a part made of neighbours holds
    whole cores; in number order where the topology cannot be read."""
    def key(cpu: int) -> tuple[int, int, int]:
        try:
            topology = sysfs / f"cpu{cpu}" / "topology"
            return (int((topology / "physical_package_id").read_text()), int((topology / "core_id").read_text()),
                    cpu)
        except (OSError, ValueError):
            return (0, cpu, cpu)
    return sorted(cpus, key=key)


def deal(cpus: Sequence[int], slots: int) -> list[tuple[int, ...]]:
    """`cpus` (in core order) into `slots` parts of neighbours, sizes differing by at most one; with fewer CPUs
    than slots, one CPU each, and the parts are fewer (jobs beyond them share)."""
    count = min(max(1, slots), max(1, len(cpus)))
    size, extra = divmod(len(cpus), count)
    parts, start = [], 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        parts.append(tuple(sorted(cpus[start:end])))
        start = end
    return parts


class CpuShares:
    """The worker's CPUs dealt into `slots` parts; `lease()` holds one for a job's run."""

    def __init__(self, slots: int = 1, cpus: Sequence[int] | None = None,
                 sysfs: Path = Path("/sys/devices/system/cpu")) -> None:
        own = sorted(cpus if cpus else os.sched_getaffinity(0))
        self.slots = max(1, slots)
        self.cpus = tuple(own)
        self.parts = deal(core_order(own, sysfs), self.slots)
        self._holders = [0] * len(self.parts)
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def lease(self) -> Iterator[tuple[int, ...]]:
        with self._lock:
            index = min(range(len(self.parts)), key=lambda i: (self._holders[i], i))
            self._holders[index] += 1
        try:
            yield self.parts[index]
        finally:
            with self._lock:
                self._holders[index] -= 1

    def describe(self, part: Sequence[int]) -> str:
        return (f"CPUs {spell(part)} ({len(part)} of the worker's {len(self.cpus)}, one of {self.slots} "
                f"slot{'s' if self.slots != 1 else ''})")


def job_env(part: Sequence[int], cpu_limit: float | None = None) -> dict[str, str]:
    """What a job on `part` is told: its CPUs, and its threads (at most its CPU limit, rounded up, where the runner
    also caps its CPU time)."""
    threads = len(part) if cpu_limit is None else max(1, min(len(part), math.ceil(cpu_limit)))
    return {JOB_CPUS_ENV: spell(part), JOB_THREADS_ENV: str(threads), COMPILE_THREADS_ENV: str(threads)}


def pin(pid: int, part: Sequence[int]) -> None:
    """Put a started process on `part` (it pins itself again before it imports torch: suites/cpu_share.py)."""
    with contextlib.suppress(OSError):  # it may have ended already
        os.sched_setaffinity(pid, part)

"""The runner contract: run(RunSpec) -> RunResult, shared by every runner."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from runners.compile_cache import CacheScope
from runners.grants import GrantChannel
from runners.outbox import Limits, OutputReport

DEFAULT_OUTPUT_MB = 1024


@dataclass(frozen=True)
class RunSpec:
    job_id: str
    command: tuple[str, ...]
    checkout_dir: Path  # the repository at the head sha; read-only for the job
    # Where the job's results land: the runner writes log.txt here, and copies in what the job left in its own
    # output directory (the job writes to a private directory this path is mapped to, never to this one).
    output_dir: Path
    timeout_s: float
    device: str = "cpu"
    env: Mapping[str, str] = field(default_factory=dict)  # never secrets: PR code reads all of it
    memory_mb: int = 8192
    cpus: float = 2.0
    pids: int = 4096
    # Which compile cache (inductor, triton) outlives the job: the runner resolves it to its repository's
    # directory, read-write for trusted jobs, a throwaway layer over it for untrusted ones (runners/compile_cache.py).
    cache: CacheScope | None = None
    # The built-in suites the command names; container runners use the copy installed in their image.
    suites_dir: Path | None = None
    # The repository's installed requirements (prepared by the worker); container runners mount it read-only.
    deps_dir: Path | None = None
    output_mb: int = DEFAULT_OUTPUT_MB  # the job's output quota, enforced while it runs
    log_mb: int = 128  # what the job prints, kept up to this (runners/job_log.py)
    # A shard that takes its tests while it runs (runners/grants.py): its requests are read from what it prints,
    # answered in this directory (container runners mount it read-only; the job finds it in COMPILE_CI_GRANTS).
    grants: GrantChannel | None = None

    @property
    def log_path(self) -> Path:
        return self.output_dir / "log.txt"

    @property
    def output_limits(self) -> Limits:
        return Limits(total_bytes=self.output_mb * 1024 * 1024)


@dataclass(frozen=True)
class RunResult:
    exit_code: int | None
    duration_s: float
    timed_out: bool = False
    oom: bool = False
    cancelled: bool = False
    infra_error: str | None = None  # the runner itself failed: not the PR's fault
    cache_over_cap: bool = False  # an untrusted job's compile-cache layer passed its cap, so it was stopped
    output: OutputReport = field(default_factory=OutputReport)  # what was copied out of the job's output, refused


def map_paths(text: str, pairs: Sequence[tuple[str, str]]) -> str:
    """A worker path in a command or variable -> where the job sees it (`pairs` longest first)."""
    for worker, job in pairs:
        text = re.sub(re.escape(worker) + r"(?=/|$|[\s\"',:;=])", job, text)
    return text


# Called about once a second while the job runs; returning True cancels it.
ShouldCancel = Callable[[], bool]


class Runner(Protocol):
    """Commands and environments in a RunSpec use the worker's paths; a container runner maps them to its mounts."""

    name: str
    python: str  # the interpreter a job's command starts, as the job sees it

    def cache_key(self, device: str) -> str:
        """Names the runner build's cache tree: caches are only valid for one interpreter/torch build."""
        ...

    def torch_version(self, device: str) -> str:
        """The torch its jobs on `device` import (`2.13.0+cpu`); "" when it cannot tell (no image, no torch)."""
        ...

    def build_id(self, device: str) -> str:
        """What a test result depends on of the runner (service/planning/reuse_keys.py): the image's content id and
        its torch, not a tag that a rebuild moves; "" when it cannot tell (no result is then ever reused)."""
        ...

    def run(self, spec: RunSpec, should_cancel: ShouldCancel | None = None) -> RunResult: ...

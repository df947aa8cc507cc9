"""The runner contract: run(RunSpec) -> RunResult, shared by every runner."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from runners.compile_cache import CacheScope


@dataclass(frozen=True)
class RunSpec:
    job_id: str
    command: tuple[str, ...]
    checkout_dir: Path  # the repository at the head sha; read-only for the job
    output_dir: Path  # junit.xml, log.txt and per-test artifacts land here
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

    @property
    def log_path(self) -> Path:
        return self.output_dir / "log.txt"


@dataclass(frozen=True)
class RunResult:
    exit_code: int | None
    duration_s: float
    timed_out: bool = False
    oom: bool = False
    cancelled: bool = False
    infra_error: str | None = None  # the runner itself failed: not the PR's fault


# Called about once a second while the job runs; returning True cancels it.
ShouldCancel = Callable[[], bool]


class Runner(Protocol):
    """Commands and environments in a RunSpec use the worker's paths; a container runner maps them to its mounts."""

    name: str
    python: str  # the interpreter a job's command starts, as the job sees it

    def cache_key(self, device: str) -> str:
        """Names the runner build's cache tree: caches are only valid for one interpreter/torch build."""
        ...

    def run(self, spec: RunSpec, should_cancel: ShouldCancel | None = None) -> RunResult: ...

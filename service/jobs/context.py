"""What the workers' tasks get: the worker's parts, typed by the small Protocols the jobs package needs.

Built once per worker process (service.jobs.tasks.build_context); every task re-reads the store through it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from runners.checkout import Checkout
from runners.protocol import Runner
from service.config import Settings
from service.github.api import GitHubApp
from service.store import Run, Store


class JobQueue(Protocol):
    """The queue as its producers see it: ids only, every task re-reads the store (service.celery_app)."""

    def plan_run(self, run_id: str, *, retry_of: int | None = None, delay_s: float = 0.0) -> None: ...

    def run_job(self, job_id: str, queue: str, *, first: bool = False, again: bool = False,
                low: bool = False) -> None: ...

    def run_shard(self, shard_id: str, device: str, *, first: bool = False, low: bool = False) -> None: ...

    def report_job(self, job_id: str) -> None: ...

    def handle_comment(self, request: dict[str, Any]) -> None: ...

    def served_queues(self) -> frozenset[str] | None: ...

    def worker_slots(self) -> dict[str, int] | None: ...


class Leases(Protocol):
    """Who runs a job now, and memos of what a retried task already did (service.store.claims)."""

    def acquire_lease(self, job_id: str, owner: str, ttl_seconds: int) -> bool: ...

    def lease_holder(self, job_id: str) -> str | None: ...

    def refresh_lease(self, job_id: str, owner: str, ttl_seconds: int) -> bool: ...

    def release_lease(self, job_id: str, owner: str) -> None: ...

    def report_lock(self, job_id: str) -> AbstractContextManager[object]: ...

    def recall(self, key: str) -> str | None: ...

    def remember(self, key: str, value: str) -> None: ...

    def pending_tasks(self, queues: tuple[str, ...]) -> Iterator[tuple[str, list[object]]]: ...

    def count(self, key: str) -> int: ...

    def grant_unit(self, attempt: str, shard: int, request: int, units: int) -> int: ...

    def nothing_left(self, attempt: str, shard: int) -> bool: ...


@dataclass
class WorkerContext:
    settings: Settings
    store: Store
    claims: Leases
    github: GitHubApp
    queue: JobQueue
    runner: Runner
    checkout: Checkout
    suites_dir: Path

    def job_url(self, job_id: str) -> str:
        return f"{self.settings.public_url}/jobs/{job_id}"

    def fetch(self, run: Run) -> Path:
        """Make the run's head sha present locally; the token (if any) lives only in this call."""
        return self.fetch_commit(run, run.head_sha)

    def fetch_commit(self, run: Run, sha: str) -> Path:
        """Make a commit of the run's repository present in its mirror (the head, or a pull request's base)."""
        template = self.settings.clone_url_template
        url = template.format(full_name=run.repo_full_name) if template else run.clone_url
        token = self.github.installation_token(run.installation_id) if url.startswith("https://") else None
        return self.checkout.fetch(url, sha, key=str(run.repo_id), token=token)

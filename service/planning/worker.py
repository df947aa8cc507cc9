"""What deciding what runs needs of a worker (service.jobs.context.WorkerContext is one): its parts, as small
Protocols, so that planning imports nothing of the jobs package that runs what it decides."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from runners.checkout import Checkout
from runners.protocol import Runner
from service.config import Settings
from service.store import Run, Store


class PlanQueue(Protocol):
    def plan_run(self, run_id: str, *, retry_of: int | None = None, delay_s: float = 0.0) -> None: ...


class Planner(Protocol):
    settings: Settings
    store: Store
    checkout: Checkout
    runner: Runner
    queue: PlanQueue
    suites_dir: Path

    def fetch(self, run: Run) -> Path: ...

    def fetch_commit(self, run: Run, sha: str) -> Path: ...

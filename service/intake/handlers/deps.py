"""What webhook handlers may touch: the store and the queue, never GitHub (it is called from workers)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from service.intake.router import field
from service.jobs.context import JobQueue
from service.jobs.lifecycle import RunState
from service.store import NewRun, Run, Store


@dataclass(frozen=True)
class HandlerDeps:
    store: Store
    queue: JobQueue
    app_id: int = 0
    devices: tuple[str, ...] = ("cpu", "cuda")

    def start_run(self, new: NewRun) -> Run:
        """Create the run once per (repo, PR or branch, sha) and hand it to the planner."""
        run, created = self.store.create_run_if_absent(new)
        if created or run.state == RunState.PLANNING:
            # Planning is idempotent, so re-enqueueing a run that is still planning is harmless
            # and recovers one whose first plan message was lost.
            self.queue.plan_run(run.id)
        return run


def repository_of(payload: dict[str, Any]) -> dict[str, Any]:
    """The repository and installation a run belongs to, as every event that starts one carries them."""
    return {
        "repo_full_name": field(payload, "repository.full_name", str),
        "repo_id": field(payload, "repository.id", int),
        "installation_id": field(payload, "installation.id", int),
        "clone_url": field(payload, "repository.clone_url", str),
        "private": bool(payload["repository"].get("private", False)),
    }

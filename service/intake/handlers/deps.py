"""What webhook handlers may touch: the store and the queue, never GitHub (it is called from workers)."""

from __future__ import annotations

from dataclasses import dataclass

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

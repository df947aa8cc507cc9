"""Re-running, cancelling and approving existing work: store writes plus ids on the queue, never GitHub calls.

Shared by the webhook handlers (buttons on check runs) and the comment-command task, so a `/rerun` and a
click on "Re-run" do exactly the same thing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from service.jobs import lifecycle
from service.jobs.context import JobQueue
from service.jobs.lifecycle import Cancel, JobState
from service.planning.plan import job_queue
from service.store import APPROVAL_SUITE, Job, Run, Store

log = logging.getLogger(__name__)

@dataclass
class Reruns:
    started: list[Job] = field(default_factory=list)
    skipped: list[tuple[Job, str]] = field(default_factory=list)


def rerun_jobs(store: Store, queue: JobQueue, devices: tuple[str, ...], jobs: Iterable[Job]) -> Reruns:
    """A new attempt of each finished job, reported as a new check run (the finished one stays as history)."""
    outcome = Reruns()
    for job in jobs:
        reason = _not_rerunnable(store, devices, job)
        if reason is not None:
            outcome.skipped.append((job, reason))
            continue
        fresh = lifecycle.rerun(store, job.id)
        if fresh is None:  # it finished being re-run between our read and the write
            outcome.skipped.append((job, "it is already queued or running"))
            continue
        outcome.started.append(fresh)
        queue.report_job(fresh.id)
        queue.run_job(fresh.id, job_queue(fresh.suite, fresh.device))
    return outcome


def _not_rerunnable(store: Store, devices: tuple[str, ...], job: Job) -> str | None:
    if job.suite == APPROVAL_SUITE:
        return "approval is given with `/ok-to-test`"
    if job.state != JobState.COMPLETED:
        return "it is already queued or running"
    if job.device not in devices:
        return f"this deployment has no {job.device} runner"
    run = store.get_run(job.run_id)
    if run is not None and run.config_error:
        return "the commit's .compile-ci.toml is invalid; push a fix"
    return None


def cancel_run(store: Store, queue: JobQueue, run: Run, reason: str) -> list[Job]:
    """Stop a run's queued and running jobs: queued ones complete as cancelled here, running ones when their
    runner sees the flag (it polls about once a second). A run still being planned gets no jobs at all."""
    lifecycle.mark_run_cancelled(store, run.id, reason)
    stopped = []
    for job in store.jobs_of(run.id):
        if job.suite == APPROVAL_SUITE:
            continue
        what = lifecycle.cancel(store, job.id, reason)
        if what is not None:
            stopped.append(job)
        if what == Cancel.CANCELLED:
            queue.report_job(job.id)
    if stopped:
        log.info("run %s: cancelled %d job(s): %s", run.id, len(stopped), reason)
    return stopped


def approve(store: Store, queue: JobQueue, run: Run, approver: str) -> bool:
    """`/ok-to-test`: this run (one head sha) may run; False when it was not waiting."""
    if not lifecycle.approve(store, run.id, approver):
        return False
    queue.plan_run(run.id)
    return True

"""The reaper (Celery beat, github queue): no job stays queued, running or unreported forever.

A worker that dies mid-job leaves its job `running` with a lease that lapses; a lost message leaves a job
`queued` or a finished job unreported. Each pass finds those past their time limit plus a grace period and
re-queues them once, or completes them as an infrastructure failure, and (re)reports them.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from service.jobs import lifecycle
from service.jobs.context import WorkerContext
from service.jobs.lifecycle import JobState
from service.store import Job, utcnow

log = logging.getLogger(__name__)


def reap(ctx: WorkerContext, now: datetime | None = None) -> list[str]:
    """One pass; what it did, one line per job (also logged)."""
    now = now or utcnow()
    grace = timedelta(seconds=ctx.settings.reaper_grace_seconds)
    did: list[str] = []
    for job in ctx.store.jobs_in_state(JobState.COMPLETED):
        if job.reported != JobState.COMPLETED and job.finished_at and job.finished_at + grace <= now:
            ctx.queue.report_job(job.id)
            did.append(f"{job.id}: finished but never reported; reporting it")
    for job in ctx.store.jobs_in_state(JobState.RUNNING, JobState.QUEUED):
        if job.device not in ctx.settings.devices:
            continue
        since = job.started_at if job.state == JobState.RUNNING and job.started_at else job.queued_at
        if since + timedelta(seconds=job.timeout_s) + grace > now:
            continue
        did.append(_overdue(ctx, job))
    for line in did:
        log.warning("reaper: %s", line)
    return did


def _overdue(ctx: WorkerContext, job: Job) -> str:
    if ctx.claims.lease_holder(job.id) is not None:
        # Its worker is alive but the runner did not stop it at the time limit: ask it to.
        lifecycle.cancel(ctx.store, job.id, "Stopped by the reaper: still running long after its time limit.")
        return f"{job.id}: alive past its time limit; asked its runner to stop"
    if job.state == JobState.QUEUED or job.infra_failures == 0:
        # Never started (lost message) or its worker died: one more go, the same as an infrastructure retry.
        if lifecycle.requeue_lost(ctx.store, job, "Retrying: its worker was lost"):
            ctx.queue.run_job(job.id, job.device)
            ctx.queue.report_job(job.id)
        return f"{job.id}: {job.state} past its time limit with no worker; re-queued"
    lifecycle.give_up_lost(ctx.store, job, "The worker running this job was lost twice; see the worker logs.")
    ctx.queue.report_job(job.id)
    return f"{job.id}: its worker was lost again; completed as an infrastructure failure"

"""The reaper (Celery beat, github queue, every few seconds): no job stays queued, running or unreported forever.

- A running job whose lease lapsed lost its worker (killed, its host gone): re-queued once, then failed. The lease
  must be missing on two passes in a row, because a live worker whose lease vanished with a Redis restart takes it
  again within a quarter of its TTL.
- A queued job with no message in the broker (lost with a Redis restart, or a send that failed) is sent again; one
  that merely waits in a backlog has its message there and is left alone. A run still planning with no plan
  message is planned again (three times at most: planning that keeps failing is its own task's retries' business);
  one whose planning retry is scheduled (its head could not be fetched yet) is left to that retry until it is
  overdue, so a run never has two retry chains.
- Webhook messages committed with their delivery but never sent (the web worker died, the broker was down) are sent.
- A job still running long past its time limit (its worker alive, its runner not stopping it) is asked to stop.
- A finished job that was never reported is reported again.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from service.celery_app import PLAN_RUN, RUN_JOB, all_queues
from service.jobs import lease, lifecycle, outbox, shard_reaper
from service.jobs.context import WorkerContext
from service.jobs.lease import MESSAGE_IN_FLIGHT, held_by_a_dead_process_here
from service.jobs.lifecycle import JobState, RunState
from service.planning.plan import job_queue
from service.store import Job, Run, utcnow
from service.store.rows import INTERNAL_TRIGGERS

log = logging.getLogger(__name__)
REPORT_AGAIN_AFTER = timedelta(seconds=30)
MAX_REPLANS = 3
# A scheduled planning retry runs at its time give or take a busy worker; one this late had its message lost (a Redis
# restart). Sent again too early, it only makes a second try of the same number, which counts once.
RETRY_OVERDUE = timedelta(seconds=30)


def reap(ctx: WorkerContext, now: datetime | None = None) -> list[str]:
    """One pass; what it did, one line per job (also logged)."""
    now = now or utcnow()
    did = outbox.send_left_behind(ctx.store, ctx.queue, timedelta(seconds=ctx.settings.delivery_ttl_seconds), now)
    did += _unreported(ctx, now)
    pending = [(task, str(args[0])) for task, args in ctx.claims.pending_tasks(all_queues(ctx.settings)) if args]
    planning = {run_id for task, run_id in pending if task == PLAN_RUN}
    unplanned = ctx.store.runs_in_state(RunState.PLANNING)
    did += [line for run in unplanned if (line := _planning(ctx, run, now, planning))]
    waiting = {job_id for task, job_id in pending if task == RUN_JOB}
    shown = {run.id for run in unplanned}  # its jobs are only shown, while its head could not be fetched
    for job in ctx.store.jobs_in_state(JobState.RUNNING, JobState.QUEUED):
        if job.device not in ctx.settings.devices or (job.state == JobState.RUNNING and job.shards > 1):
            continue  # a sharded job's shards hold the leases: they are reaped one by one, below
        if job.run_id in shown:
            continue
        line = _running(ctx, job, now) if job.state == JobState.RUNNING else _queued(ctx, job, now, waiting)
        if line:
            did.append(line)
    did += shard_reaper.reap_shards(ctx, now, pending)
    for line in did:
        log.warning("reaper: %s", line)
    return did


def recover_jobs_of_dead_workers_here(ctx: WorkerContext) -> list[str]:
    """At worker start: a running job whose lease a process of this host holds that no longer exists lost its worker
    (this worker's killed predecessor, say). It runs again at once, first in line, instead of after its lease lapses."""
    did = []
    for job in ctx.store.jobs_in_state(JobState.RUNNING):
        holder = ctx.claims.lease_holder(job.id)
        if job.device not in ctx.settings.devices or holder is None or not held_by_a_dead_process_here(holder):
            continue
        ctx.claims.release_lease(job.id, holder)
        if job.infra_failures == 0 and lifecycle.requeue_lost(ctx.store, job, "Retrying: its worker was lost"):
            ctx.queue.run_job(job.id, job_queue(job.suite, job.device), first=True)
            ctx.queue.report_job(job.id)
            did.append(f"{job.id}: its worker on this host is gone; re-queued first")
    for line in did:
        log.warning("worker start: %s", line)
    return did


def _unreported(ctx: WorkerContext, now: datetime) -> list[str]:
    did = []
    for job in ctx.store.jobs_in_state(JobState.COMPLETED):
        if job.reported != JobState.COMPLETED and job.finished_at and job.finished_at + REPORT_AGAIN_AFTER <= now:
            ctx.queue.report_job(job.id)
            did.append(f"{job.id}: finished but never reported; reporting it")
    return did


def _planning(ctx: WorkerContext, run: Run, now: datetime, planning: set[str]) -> str | None:
    if run.cancelled_reason or run.created_at + MESSAGE_IN_FLIGHT > now:
        return None
    # A scheduled retry is in no queue a worker has not taken yet (Celery holds it until its time): judge it by
    # its time, not by the broker, or it would be sent a second time and become two chains.
    retrying = run.plan_retry_at is not None
    if run.plan_retry_at is not None and now < run.plan_retry_at + RETRY_OVERDUE:
        return None
    if not retrying and run.id in planning:
        return None
    if ctx.store.is_uninstalled(run.repo_full_name):
        return None  # dropped on purpose: the App was removed from the repository
    if ctx.claims.count(f"replanned:{run.id}") > MAX_REPLANS:
        return None
    ctx.queue.plan_run(run.id, retry_of=run.plan_tries if retrying else None)
    if retrying:
        return f"run {run.id}: its planning retry {run.plan_tries + 1} is overdue (message lost); sent again"
    return f"run {run.id}: planning with no message in the broker; sent again"


def _running(ctx: WorkerContext, job: Job, now: datetime) -> str | None:
    limit_s = job.timeout_s + ctx.settings.reaper_grace_seconds
    state = lease.running_state(ctx.claims, job, limit_s, now)
    if state in (lease.ALIVE, lease.JUST_LAPSED):
        return None
    if state == lease.OVERDUE:
        # Its worker is alive but the runner did not stop it at the time limit: ask it to.
        lifecycle.cancel(ctx.store, job.id, "Stopped by the reaper: still running long after its time limit.")
        return f"{job.id}: alive past its time limit; asked its runner to stop"
    if job.infra_failures == 0:
        if lifecycle.requeue_lost(ctx.store, job, "Retrying: its worker was lost"):
            ctx.queue.run_job(job.id, job_queue(job.suite, job.device), first=True)
            ctx.queue.report_job(job.id)
        return f"{job.id}: running with its lease lapsed (its worker is gone); re-queued"
    if lifecycle.give_up_lost(ctx.store, job, "The worker running this job was lost twice; see the worker logs."):
        ctx.queue.report_job(job.id)
    return f"{job.id}: its worker was lost again; completed as an infrastructure failure"


def _queued(ctx: WorkerContext, job: Job, now: datetime, waiting: set[str]) -> str | None:
    if job.id in waiting or job.queued_at + MESSAGE_IN_FLIGHT > now:
        return None
    if lifecycle.requeue_lost(ctx.store, job, ""):
        run = ctx.store.get_run(job.run_id)
        base = run is not None and run.trigger in INTERNAL_TRIGGERS  # a base run's (a canary's) place is last
        # Its message was lost, not its place in line.
        ctx.queue.run_job(job.id, job_queue(job.suite, job.device), again=not base, low=base)
    return f"{job.id}: queued with no message in the broker; sent again"

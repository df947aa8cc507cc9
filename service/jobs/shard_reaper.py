"""The reaper's view of shards (called from service/jobs/reaper.py each pass): a shard lost is retried alone.

- A running shard whose lease lapsed (on two passes) lost its worker: re-queued alone, first in line; lost twice, it
  completes as an infrastructure failure and the job is merged with it. Its siblings' results are kept.
- A queued shard with no message in the broker is sent again; one of a job cancelled or re-run meanwhile completes.
- A shard alive long past its job's time limit stops the job (every shard of it).
- A sharded job whose shards all completed but was never merged (its last shard's worker died) is merged; one
  running with no shards at all (its fan-out's worker died) is re-queued whole, once, like a lost job.
"""

from __future__ import annotations

import logging
from datetime import datetime

from service.celery_app import RUN_SHARD
from service.jobs import lease, lifecycle
from service.jobs.context import WorkerContext
from service.jobs.lease import MESSAGE_IN_FLIGHT, held_by_a_dead_process_here
from service.jobs.lifecycle import JobState
from service.store import Job, Shard
from service.store.shards import shards_in_state, shards_of

log = logging.getLogger(__name__)


def reap_shards(ctx: WorkerContext, now: datetime, pending: list[tuple[str, str]]) -> list[str]:
    waiting = {shard_id for task, shard_id in pending if task == RUN_SHARD}
    did = []
    for shard in shards_in_state(ctx.store, JobState.RUNNING, JobState.QUEUED):
        job = ctx.store.get_job(shard.job_id)
        if job is None or job.device not in ctx.settings.devices:
            continue
        if job.state != JobState.RUNNING or job.attempt != shard.job_attempt:
            if shard.state == JobState.QUEUED and lifecycle.cancel_shard(ctx.store, shard.id, "Its job ended."):
                did.append(f"{shard.id}: its job ended; completed without running")
            continue
        line = _running(ctx, job, shard, now) if shard.state == JobState.RUNNING else _queued(ctx, shard, now, waiting)
        if line:
            did.append(line)
    for job in ctx.store.jobs_in_state(JobState.RUNNING):
        line = _unmerged(ctx, job, now, waiting) if job.shards > 1 else None
        if line:
            did.append(line)
    return did


def recover_shards_of_dead_workers_here(ctx: WorkerContext) -> list[str]:
    """At worker start: a running shard whose lease a dead process of this host holds runs again at once."""
    did = []
    for shard in shards_in_state(ctx.store, JobState.RUNNING):
        job = ctx.store.get_job(shard.job_id)
        holder = ctx.claims.lease_holder(shard.id)
        if job is None or job.device not in ctx.settings.devices or holder is None \
                or not held_by_a_dead_process_here(holder):
            continue
        ctx.claims.release_lease(shard.id, holder)
        if shard.infra_failures == 0 and lifecycle.requeue_lost_shard(ctx.store, shard):
            ctx.queue.run_shard(shard.id, job.device, first=True)
            did.append(f"{shard.id}: its worker on this host is gone; re-queued alone, first")
    for line in did:
        log.warning("worker start: %s", line)
    return did


def _running(ctx: WorkerContext, job: Job, shard: Shard, now: datetime) -> str | None:
    limit_s = job.timeout_s + ctx.settings.reaper_grace_seconds
    state = lease.running_state(ctx.claims, shard, limit_s, now)
    if state in (lease.ALIVE, lease.JUST_LAPSED):
        return None
    if state == lease.OVERDUE:
        lifecycle.cancel(ctx.store, job.id, "Stopped by the reaper: a shard still ran long after its time limit.")
        return f"{shard.id}: alive past its time limit; asked its job's shards to stop"
    if shard.infra_failures == 0:
        if lifecycle.requeue_lost_shard(ctx.store, shard):
            ctx.queue.run_shard(shard.id, job.device, first=True)
        return f"{shard.id}: running with its lease lapsed (its worker is gone); re-queued alone"
    if lifecycle.give_up_lost_shard(ctx.store, shard, "The worker running this shard was lost twice."):
        ctx.queue.run_shard(shard.id, job.device, first=True)  # completed: its message merges the job
    return f"{shard.id}: its worker was lost again; completed as an infrastructure failure"


def _queued(ctx: WorkerContext, shard: Shard, now: datetime, waiting: set[str]) -> str | None:
    if shard.id in waiting or shard.queued_at + MESSAGE_IN_FLIGHT > now:
        return None
    job = ctx.store.get_job(shard.job_id)
    if job is not None and lifecycle.requeue_lost_shard(ctx.store, shard):
        ctx.queue.run_shard(shard.id, job.device, first=True)
    return f"{shard.id}: queued with no message in the broker; sent again"


def _unmerged(ctx: WorkerContext, job: Job, now: datetime, waiting: set[str]) -> str | None:
    shards = shards_of(ctx.store, job.id, job.attempt)
    if not shards:
        if (job.started_at or job.queued_at) + MESSAGE_IN_FLIGHT > now:
            return None
        if job.infra_failures == 0 and lifecycle.requeue_lost(ctx.store, job, "Retrying: its worker was lost"):
            ctx.queue.run_job(job.id, job.device, first=True)
            return f"{job.id}: running as shards, but none was made (its worker is gone); re-queued"
        if lifecycle.give_up_lost(ctx.store, job, "The worker splitting this job into shards was lost twice."):
            ctx.queue.report_job(job.id)
        return f"{job.id}: lost again while splitting into shards; completed as an infrastructure failure"
    last = max((s.finished_at for s in shards if s.finished_at), default=None)
    if any(s.state != JobState.COMPLETED for s in shards) or last is None or last + MESSAGE_IN_FLIGHT > now:
        return None
    if shards[-1].id in waiting:
        return None
    ctx.queue.run_shard(shards[-1].id, job.device, first=True)  # a completed shard's message merges its job
    return f"{job.id}: every shard completed but the job was never merged; merging it"

"""Before a job is reported: its reused results taken from their source (service/planning/reuse_check.py); when they
do not hold, its check run says so and the job runs again whole, as a new check run. After a job is reported: the
jobs that reuse its results are judged again, so a job and its source may finish in either order."""

from __future__ import annotations

import logging

from service.github.api import GoneError
from service.github.checks import CheckRunView
from service.github.reporting import attempt_url
from service.jobs import lifecycle
from service.jobs.context import WorkerContext
from service.planning.plan import job_queue
from service.planning.reuse_check import Taken, take_from_source
from service.store import Job, Run
from service.store.attempts import record_finished
from service.store.reuse import consumers_of
from service.store.rows import INTERNAL_TRIGGERS

log = logging.getLogger(__name__)
RUN_AGAIN = "Run again: its reused results did not hold"


def judge_reused(ctx: WorkerContext, job_id: str) -> None:
    job = ctx.store.get_job(job_id)
    run = ctx.store.get_run(job.run_id) if job else None
    if job is None or run is None:
        return
    taken = take_from_source(ctx.store, run, job)
    if taken.state != Taken.REFUTED:
        return
    _close(ctx, run, job, taken.why)
    again = lifecycle.rerun(ctx.store, job.id)
    if again is None:
        return  # re-run or cancelled meanwhile: that generation decides again
    log.warning("job %s: reuse refuted (%s); running it again whole as generation %d", job.id, taken.why,
                again.rerun)
    ctx.queue.run_job(job.id, job_queue(job.suite, job.device), low=run.trigger in INTERNAL_TRIGGERS)


def _close(ctx: WorkerContext, run: Run, job: Job, why: str) -> None:
    """The check run of the attempt that reused says why it is not the last word, and points to the next one."""
    summary = (f"This job reused results of another job whose inputs were the same as far as the planner could tell "
               f"before it ran, but they are not: {why}. The run-time answer wins: compile-ci runs every test of this "
               f"job again, as a new check run.")
    record_finished(ctx.store, job, "neutral", RUN_AGAIN)
    if run.trigger in INTERNAL_TRIGGERS or job.check_run_id is None:
        return
    view = CheckRunView(name=job.check_name, head_sha=run.head_sha, external_id=job.external_id,
                        details_url=attempt_url(ctx.job_url(job.id), job), status="completed", conclusion="neutral",
                        title=RUN_AGAIN, summary=summary)
    try:
        ctx.github.update_check_run(run.installation_id, run.repo_full_name, job.check_run_id, view)
    except GoneError as exc:
        log.info("job %s: its check run is gone (%s)", job.id, exc)


def tell_consumers(ctx: WorkerContext, job_id: str) -> None:
    """A finished job's results are reused elsewhere: those jobs are judged (and reported) again."""
    job = ctx.store.get_job(job_id)
    if job is None or job.state != "completed":
        return
    for consumer in consumers_of(ctx.store, job.id):
        found = ctx.store.get_job(consumer)
        if found is not None and found.state == "completed":
            ctx.queue.report_job(consumer)

"""Planning a run (github queue): read the head's config, create its jobs and their check runs, or wait for approval."""

from __future__ import annotations

import logging

from runners.checkout import CheckoutError
from service.github import reporting
from service.github.api import TransientGitHubError
from service.github.markdown import code_block
from service.jobs import lifecycle, plan_retries
from service.jobs.context import WorkerContext
from service.jobs.lifecycle import Conclusion, Gate, JobState, RunState
from service.jobs.queue_order import queue_order
from service.planning import base_runs, torch_matrix
from service.planning.plan import PlannedJob, builtin_suites, default_devices, job_queue, plan_jobs, served_queues
from service.repo_config import CONFIG_FILE, default_config, parse_repo_config
from service.store import Job, Run, utcnow
from service.store.rows import INTERNAL_TRIGGERS

log = logging.getLogger(__name__)
WAITING_DETAIL = (
    "Nothing has run: @{author} is not a member or collaborator of this repository, so their code runs only "
    "after someone with write access has read it and commented `/ok-to-test`. That approves commit {sha} only; "
    "a later push needs a new approval."
)


def plan_run(ctx: WorkerContext, run_id: str, retry_of: int | None = None) -> None:
    """`retry_of`: the failed try this message retries (plan_retries), None for a first request."""
    run = ctx.store.get_run(run_id)
    if run is None:
        log.warning("plan_run: run %s does not exist", run_id)
        return
    if dropped(ctx, run):
        return
    if run.gate == Gate.WAITING:
        _await_approval(ctx, run)
        return
    if run.state == RunState.PLANNING:
        if plan_retries.retry_pending(run, retry_of, utcnow()):
            log.info("plan_run %s: try %d is due at %s; this message is not that retry", run.id, run.plan_tries + 1,
                     run.plan_retry_at)
            return
        if not _plan(ctx, run):
            return  # the head could not be fetched: a retry is scheduled, or another planner has it
    if run.trigger in INTERNAL_TRIGGERS:  # a base run or the canary: no check runs, and behind every head job
        for job in queue_order(ctx, run, ctx.store.jobs_of(run.id)):
            if job.state == JobState.QUEUED:
                ctx.queue.run_job(job.id, job_queue(job.suite, job.device), low=True)
        return
    for job in queue_order(ctx, run, ctx.store.jobs_of(run.id)):
        # A job shown while its head could not be fetched has its check run, which now says how it was planned.
        if job.check_run_id is None or (job.state == JobState.COMPLETED and job.reported != JobState.COMPLETED):
            # Created here, before the job can be started: every check run shows "queued" first. A GitHub error
            # retries this task; jobs whose check run exists are then only (re-)enqueued, which their lease dedupes.
            reporting.report_job(ctx, job.id)
        if job.state == JobState.QUEUED:
            ctx.queue.run_job(job.id, job_queue(job.suite, job.device))
    current = ctx.store.get_run(run.id)
    if current is not None:
        base_runs.plan_base(ctx, current)


def dropped(ctx: WorkerContext, run: Run) -> bool:
    """Work for a repository the App was removed from, or for a head that a newer push replaced, is dropped."""
    if ctx.store.is_uninstalled(run.repo_full_name):
        log.info("run %s: %s is no longer installed; dropping its work", run.id, run.repo_full_name)
        return True
    if run.cancelled_reason:
        log.info("run %s: cancelled (%s); not planning it", run.id, run.cancelled_reason)
        return True
    return False


def _await_approval(ctx: WorkerContext, run: Run) -> None:
    """One check run says the PR waits for a maintainer; nothing is fetched or run until /ok-to-test."""
    detail = WAITING_DETAIL.format(author=run.author or "the author", sha=run.head_sha[:12])
    job = lifecycle.wait_for_approval(ctx.store, run, detail)
    ctx.queue.report_job(job.id)


def _plan(ctx: WorkerContext, run: Run) -> bool:
    """Plan the run's jobs from its head's config; False when the head could not be fetched and it is not planned."""
    suites = builtin_suites(ctx.suites_dir)
    if run.trigger in INTERNAL_TRIGGERS:
        text = run.config_text or None  # the head's config (a base run), the push's (the canary)
    else:
        try:
            text = ctx.checkout.read_file(ctx.fetch(run), run.head_sha, CONFIG_FILE)
        except (CheckoutError, TransientGitHubError) as exc:
            return plan_retries.fetch_failed(ctx, run, exc)
        # The key a push run's results serve as a pull request's base under (base_runs.link_base).
        ctx.store.record_config(run.id, text or "", base_runs.base_key(text or "", base_runs.runner_builds(ctx)))
    parsed = parse_repo_config(text, suites, torch_matrix.names(ctx.settings))
    live = ctx.queue.served_queues()
    served = served_queues(ctx.settings.devices, live)
    config_error = None
    if isinstance(parsed, list):
        # Still one check run per default job, each saying what is wrong: the author sees the error
        # where the results would have been, and nothing runs on a config we cannot read.
        config_error = "\n".join(p.render() for p in parsed)
        parsed = default_config(suites)
    parsed = default_devices(parsed, served, has_file=text is not None)
    planned = torch_matrix.expand(plan_jobs(parsed, served, ctx.settings.max_job_minutes, has_file=text is not None),
                                  torch_matrix.versions_of(run, parsed, ctx.settings), ctx.settings, live)
    rows = [_job_row(run, p, config_error) for p in planned]
    if run.plan_tries:  # the jobs shown while its head could not be fetched become these (plan_retries)
        lifecycle.settle_fetching(ctx.store, run, rows, f"Nothing ran: {CONFIG_FILE} at {run.head_sha[:12]} does not "
                                  "ask for this job. It was shown while the commit could not be fetched yet.")
    lifecycle.plan(ctx.store, run, rows, config_error)
    if config_error is None:
        base_runs.link_base(ctx, run, text or "")
    if run.gate == Gate.APPROVED:
        approval = lifecycle.record_approval(ctx.store, run)
        if approval is not None:
            ctx.queue.report_job(approval.id)
    return True


def _job_row(run: Run, planned: PlannedJob, config_error: str | None) -> Job:
    job = torch_matrix.on_version(lifecycle.new_job(run, planned.suite, planned.device, planned.timeout_s), planned)
    if config_error is not None:
        return lifecycle.settled_at_planning(job, Conclusion.FAILURE, f"Invalid {CONFIG_FILE}",
                                             f"Nothing ran: {CONFIG_FILE} has problems.\n\n{code_block(config_error)}")
    if planned.skip_reason is not None:
        return lifecycle.settled_at_planning(job, Conclusion.NEUTRAL, f"Not run: no {planned.runner}",
                                             planned.skip_reason)
    return job

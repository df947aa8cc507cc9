"""A head that cannot be fetched (force-pushed away, the git host or GitHub failing): nothing waits unseen.

At the first failed try the run's default jobs are shown at once, queued, "Fetching the head" (its config, which
says which jobs it has, is in the head). Each failed try is counted in the store and retried by one chain of
messages, only while the error can still pass (GitHub or the network failing; a commit git cannot find only for a
short grace, the time a just-pushed commit may take to show) and within MAX_FETCH_S of the event: then those check
runs complete as failed, saying why. A later successful try plans the run for real (lifecycle.settle_fetching)."""

from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta

from runners.checkout import CheckoutError
from service.config import Settings
from service.jobs import lifecycle
from service.jobs.context import WorkerContext
from service.jobs.lifecycle import Conclusion
from service.planning.plan import builtin_suites, default_devices, plan_jobs, served_devices
from service.repo_config import default_config
from service.store import Job, Run, utcnow

log = logging.getLogger(__name__)
# What git says when the remote no longer has the commit (file remotes, GitHub): it was force-pushed away.
MISSING = re.compile(r"not our ref|unadvertised object|couldn't find remote ref", re.IGNORECASE)
# What no retry mends: the repository is gone or the token may not read it.
FINAL = re.compile(r"repository not found|authentication failed|could not read username|403|401", re.IGNORECASE)
MAX_WAIT_S = 300
MAX_FETCH_S = 120  # from the event: a head not fetched by then is concluded as such
MISSING_GRACE_S = 30  # a commit git cannot find may be one just pushed, for this long after the event
TRY_S = 10  # what one more try may take (a fetch that times out): kept within MAX_FETCH_S


def retry_pending(run: Run, retry_of: int | None, now: datetime) -> bool:
    """A retry of this run's planning is scheduled and this message is not it (a redelivered webhook, a plan sent
    again): planning now would start a second chain of retries."""
    return run.plan_retry_at is not None and retry_of != run.plan_tries and now < run.plan_retry_at


def wait_before(settings: Settings, tries: int, retry_after: float | None = None) -> float:
    """Seconds before the next try: doubling from plan_retry_seconds, at most 300, at least what GitHub asked."""
    backoff = min(MAX_WAIT_S, settings.plan_retry_seconds * 2 ** (tries - 1))
    return max(float(backoff), retry_after or 0.0)


def can_pass(exc: Exception, elapsed_s: float) -> bool:
    """Whether trying again may fetch it: GitHub's errors and the network's may pass; a commit git cannot find only
    within the grace after the event; a repository gone or a token refused never do."""
    if isinstance(exc, CheckoutError) and MISSING.search(str(exc)):
        return elapsed_s < MISSING_GRACE_S
    return not (isinstance(exc, CheckoutError) and FINAL.search(str(exc)))


def next_try(settings: Settings, tries: int, elapsed_s: float, exc: Exception) -> float | None:
    """Seconds until the next try after `tries` failed ones, `elapsed_s` after the event; None: conclude now."""
    asked = getattr(exc, "retry_after", None) or 0.0  # GitHub's own wait: never shortened
    room = MAX_FETCH_S - TRY_S - elapsed_s  # the last try is moved up to fit, not dropped
    if tries >= settings.plan_tries or not can_pass(exc, elapsed_s) or room < max(asked, 1.0):
        return None
    return min(wait_before(settings, tries, asked), room)


def fetch_failed(ctx: WorkerContext, run: Run, exc: Exception) -> bool:
    """Count this failed try, show the run's default jobs queued (the first time), then schedule the next try or
    conclude: plan the run with those jobs failed. True when the run is planned now (its check runs are to be
    created or completed)."""
    tries, limit = run.plan_tries + 1, ctx.settings.plan_tries
    now = utcnow()
    wait = next_try(ctx.settings, tries, max(0.0, (now - run.created_at).total_seconds()), exc)
    log.warning("run %s: fetching %s failed (try %d of %d%s): %s", run.id, run.head_sha[:12], tries, limit,
                "" if wait is not None else ", the last", exc)
    # The last try keeps the reaper away too, while its failed check runs are being created.
    if lifecycle.planning_failed(ctx.store, run, now + timedelta(seconds=TRY_S if wait is None else wait)) is None:
        log.info("run %s: try %d was counted by another planner; its retries go on, not these", run.id, tries)
        return False
    if tries == 1:
        shown = fetching_jobs(ctx, run, exc)
        ctx.store.add_jobs_if_absent(shown)
        for job in shown:
            ctx.queue.report_job(job.id)  # queued check runs now, not after the last try
    if wait is not None:
        ctx.queue.plan_run(run.id, retry_of=tries, delay_s=wait)
        return False
    title, detail = not_fetched(run, exc, tries)
    failed = failed_jobs(ctx, run, title, detail)
    lifecycle.settle_fetching(ctx.store, run, failed, detail)
    lifecycle.plan(ctx.store, run, failed, None)
    return True


def not_fetched(run: Run, exc: Exception, tries: int) -> tuple[str, str]:
    """The check runs' title and text: what failed, and what the author can do."""
    sha = run.head_sha[:7]
    if isinstance(exc, CheckoutError) and MISSING.search(str(exc)):
        title = f"Commit {sha} not found: force-pushed?"
    elif isinstance(exc, CheckoutError):
        title = f"Commit {sha} could not be fetched"
    else:
        title = f"Commit {sha} not checked: GitHub did not answer"
    detail = (f"Nothing ran: compile-ci tried {tries} times to fetch commit {run.head_sha} and gave up. If it was "
              "force-pushed away, the new head has check runs of its own; if it still exists, comment `/rerun`."
              f"\n\nThe last error:\n```\n{str(exc)[-2000:]}\n```")
    return title, detail


def default_jobs(ctx: WorkerContext, run: Run) -> list[Job]:
    """The jobs of a run whose head's config cannot be read: the defaults, on the devices this deployment serves."""
    served = served_devices(ctx.settings.devices, ctx.queue.served_queues())
    config = default_devices(default_config(builtin_suites(ctx.suites_dir)), served, has_file=False)
    return [lifecycle.new_job(run, p.suite, p.device, p.timeout_s)
            for p in plan_jobs(config, served, ctx.settings.max_job_minutes)]


def failed_jobs(ctx: WorkerContext, run: Run, title: str, detail: str) -> list[Job]:
    """The default jobs, each completed as failed with `title`."""
    return [lifecycle.settled_at_planning(job, Conclusion.FAILURE, title, detail) for job in default_jobs(ctx, run)]


def fetching_jobs(ctx: WorkerContext, run: Run, exc: Exception) -> list[Job]:
    """The default jobs, queued, saying what is being waited for."""
    error = (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:300]
    detail = (f"compile-ci could not fetch commit {run.head_sha} yet ({error}), so it cannot read which jobs this "
              f"commit's .compile-ci.toml asks for: these are the default ones. It tries again for up to "
              f"{MAX_FETCH_S} s after the event while the error can pass; then these check runs say what happened.")
    jobs = default_jobs(ctx, run)
    for job in jobs:
        job.title, job.detail = lifecycle.FETCHING, detail
    return jobs

"""A head that cannot be fetched (force-pushed away, the git host or GitHub failing): each failed try is counted in
the store and retried by one chain of messages; after `plan_tries` tries the run's check runs complete as failed,
saying why, instead of the run staying in planning for good."""

from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta

from runners.checkout import CheckoutError
from service.config import Settings
from service.jobs import lifecycle
from service.jobs.context import WorkerContext
from service.jobs.lifecycle import Conclusion
from service.jobs.planning import builtin_suites, default_devices, plan_jobs, served_devices
from service.repo_config import default_config
from service.store import Job, Run, utcnow

log = logging.getLogger(__name__)
# What git says when the remote no longer has the commit (file remotes, GitHub): it was force-pushed away.
MISSING = re.compile(r"not our ref|unadvertised object|couldn't find remote ref", re.IGNORECASE)
MAX_WAIT_S = 300


def retry_pending(run: Run, retry_of: int | None, now: datetime) -> bool:
    """A retry of this run's planning is scheduled and this message is not it (a redelivered webhook, a plan sent
    again): planning now would start a second chain of retries."""
    return run.plan_retry_at is not None and retry_of != run.plan_tries and now < run.plan_retry_at


def wait_before(settings: Settings, tries: int, retry_after: float | None = None) -> float:
    """Seconds before the next try: doubling from plan_retry_seconds, at most 300, at least what GitHub asked."""
    backoff = min(MAX_WAIT_S, settings.plan_retry_seconds * 2 ** (tries - 1))
    return max(float(backoff), retry_after or 0.0)


def fetch_failed(ctx: WorkerContext, run: Run, exc: Exception) -> bool:
    """Count this failed try, then schedule the next or, after the last, plan the run with failed jobs. True when
    the run is planned now (its check runs are to be created)."""
    tries, limit = run.plan_tries + 1, ctx.settings.plan_tries
    log.warning("run %s: fetching %s failed (try %d of %d): %s", run.id, run.head_sha[:12], tries, limit, exc)
    wait = wait_before(ctx.settings, tries, getattr(exc, "retry_after", None))
    # The last try keeps the reaper away too, while its failed check runs are being created.
    if lifecycle.planning_failed(ctx.store, run, utcnow() + timedelta(seconds=wait)) is None:
        log.info("run %s: try %d was counted by another planner; its retries go on, not these", run.id, tries)
        return False
    if tries < limit:
        ctx.queue.plan_run(run.id, retry_of=tries, delay_s=wait)
        return False
    title, detail = not_fetched(run, exc, tries)
    lifecycle.plan(ctx.store, run, failed_jobs(ctx, run, title, detail), None)
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


def failed_jobs(ctx: WorkerContext, run: Run, title: str, detail: str) -> list[Job]:
    """The default jobs (the head's config could not be read), each completed as failed with `title`."""
    served = served_devices(ctx.settings.devices, ctx.queue.served_queues())
    config = default_devices(default_config(builtin_suites(ctx.suites_dir)), served, has_file=False)
    return [lifecycle.settled_at_planning(lifecycle.new_job(run, p.suite, p.device, p.timeout_s), Conclusion.FAILURE,
                                          title, detail)
            for p in plan_jobs(config, served, ctx.settings.max_job_minutes)]

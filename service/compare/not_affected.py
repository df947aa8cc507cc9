"""Tests a pull request cannot affect (service/jobs/affected.py) take their base job's results: copied into the head
job's rows whenever it is judged, so the check run, the comment and the pages show them, marked "not affected"."""

from __future__ import annotations

from service.store import Job, Run, Store, job_id_for
from service.store.shards import not_affected_results, take_base_results


def take_from_base(store: Store, run: Run, job: Job) -> int:
    """Fill a finished head job's not-affected tests from its base job, once that has results (again each time:
    the base may have been re-run). How many have a base result now."""
    if run.trigger != "pull_request" or not run.base_run_id or job.state != "completed":
        return 0
    if not not_affected_results(store, job.id, job.attempt):
        return 0
    base_job = store.get_job(job_id_for(run.base_run_id, job.suite, job.device, job.torch))
    if base_job is None or base_job.state != "completed" or base_job.conclusion not in ("success", "failure"):
        return 0  # pending: judged again when it finishes; broken: they stay not run, and the summary says why
    base = {r.nodeid: r for r in store.results_of(base_job.id, base_job.attempt) if not r.not_affected}
    return take_base_results(store, job.id, job.attempt, base)

"""GitHub's own buttons: "Re-run" on a check run or a whole suite, and our requested actions."""

from __future__ import annotations

from service.intake.handlers.deps import HandlerDeps
from service.intake.router import Event, Outcome, Router, field
from service.jobs.job_control import Reruns, rerun_jobs
from service.store import job_id_of_external

router = Router()
ACTIONS = ("rerun",)  # identifiers of the requested actions our check runs offer (service/checks.py)


def _ours(event: Event, deps: HandlerDeps, key: str) -> bool:
    # Every app installed on the repository receives these events; only our own check runs concern us.
    return field(event.payload, f"{key}.app.id", int) == deps.app_id


@router.register("check_run", "rerequested")
def check_run_rerun_requested(event: Event, deps: HandlerDeps) -> Outcome:
    if not _ours(event, deps, "check_run"):
        return Outcome("check run of another app")
    return _rerun_one(event, deps)


@router.register("check_run", "requested_action")
def check_run_action_requested(event: Event, deps: HandlerDeps) -> Outcome:
    if not _ours(event, deps, "check_run"):
        return Outcome("check run of another app")
    identifier = field(event.payload, "requested_action.identifier", str)
    if identifier not in ACTIONS:
        return Outcome(f"unknown requested action {identifier!r}")
    return _rerun_one(event, deps)


@router.register("check_suite", "rerequested")
def check_suite_rerun_requested(event: Event, deps: HandlerDeps) -> Outcome:
    if not _ours(event, deps, "check_suite"):
        return Outcome("check suite of another app")
    repo = field(event.payload, "repository.full_name", str)
    sha = field(event.payload, "check_suite.head_sha", str)
    runs = deps.store.runs_at_sha(repo, sha)
    jobs = [job for run in runs for job in deps.store.jobs_of(run.id)]
    return _said(rerun_jobs(deps.store, deps.queue, deps.devices, jobs), f"{repo}@{sha[:12]}")


def _rerun_one(event: Event, deps: HandlerDeps) -> Outcome:
    external_id = field(event.payload, "check_run.external_id", str)
    job = deps.store.get_job(job_id_of_external(external_id))
    if job is None:
        return Outcome(f"no job for external_id {external_id!r}")
    return _said(rerun_jobs(deps.store, deps.queue, deps.devices, [job]), job.id)


def _said(reruns: Reruns, what: str) -> Outcome:
    skipped = "; ".join(f"{job.check_name}: {reason}" for job, reason in reruns.skipped)
    message = f"re-running {len(reruns.started)} job(s) of {what}" + (f" (not: {skipped})" if skipped else "")
    return Outcome(message, reruns.started[0].run_id if reruns.started else None)

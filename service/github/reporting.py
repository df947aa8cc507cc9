"""Reporting a job to GitHub: one check run per job generation, created once, never moved back from completed."""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any, Protocol

from service.compare.bisection import Bisection, read_bisections
from service.compare.inputs import judge_job
from service.compare.judgement import Judgement
from service.config import Settings
from service.github.annotations import MAX_PER_REQUEST
from service.github.api import GitHubApp, GoneError
from service.github.checks import CheckRunView, render_check_run
from service.github.sticky_comment import update_sticky_comment
from service.store import APPROVAL_SUITE, Job, Run, Store, TestResult, job_id_for
from service.store.attempts import record_finished
from service.store.rows import INTERNAL_TRIGGERS

log = logging.getLogger(__name__)


class ReportLocks(Protocol):
    def report_lock(self, job_id: str) -> AbstractContextManager[object]: ...


class Reporter(Protocol):
    """What reporting needs of a worker (service.jobs.context.WorkerContext is one): no import of the jobs package."""

    store: Store
    claims: ReportLocks
    github: GitHubApp
    settings: Settings
    queue: ReportQueue

    def job_url(self, job_id: str) -> str: ...


class ReportQueue(Protocol):
    def report_job(self, job_id: str) -> None: ...


def report_job(ctx: Reporter, job_id: str) -> None:
    # One report of a job at a time, so a slow in_progress PATCH can never land after completed.
    with ctx.claims.report_lock(job_id):
        job = ctx.store.get_job(job_id)
        run = ctx.store.get_run(job.run_id) if job else None
        if job is None or run is None:
            return
        if ctx.store.is_uninstalled(run.repo_full_name):
            log.info("report_job %s: %s is no longer installed; not reporting", job_id, run.repo_full_name)
            return
        if run.trigger in INTERNAL_TRIGGERS:  # nothing on GitHub; heads judged against a base are judged again
            if job.state == "completed" and job.reported != "completed":
                ctx.store.record_report(job.id, job.rerun, reported="completed")
            _judge_heads_again(ctx, run, job)
            return
        results = ctx.store.results_of(job.id, job.attempt) if job.state == "completed" else []
        finished = job.state == "completed"
        finished_job = job
        culprits = _culprits(ctx, run, job, results) if finished else {}
        judgement = _judgement(ctx, run, job, results, culprits) if finished else None
        view = render_check_run(run, job, results, attempt_url(ctx.job_url(job.id), job), judgement, culprits)
        if view.status == "completed":
            ctx.store.record_shown(job, view.conclusion or "", view.title)
            record_finished(ctx.store, job, view.conclusion or "", view.title)  # its page outlives a re-run
        try:
            if job.reported == "completed" and view.status == "completed" and view.digest != job.reported_digest:
                # Its base finished: the verdict may change. What was sent first was judged without it.
                unjudged = render_check_run(run, job, results, attempt_url(ctx.job_url(job.id), job)).annotations
                job = _send_judged_again(ctx, run, job, view, unjudged)
            elif job.reported != "completed" and view.digest != job.reported_digest:
                job = _send_status(ctx, run, job, view)
            if job is not None and view.status == "completed":
                _send_remaining_annotations(ctx, run, job, view)
        except GoneError as exc:
            log.info("report_job %s: %s; not reporting further", job_id, exc)
            ctx.store.record_report(job_id, job.rerun if job else 0, reported="completed")
    if finished and run.trigger == "push":
        _judge_heads_again(ctx, run, finished_job)  # a push run is the base of pull requests on its sha
    if finished:
        update_sticky_comment(ctx, run)


def _culprits(ctx: Reporter, run: Run, job: Job, results: list[TestResult]) -> dict[str, Bisection]:
    """The failing tests' bisections, as the job left them beside their artifacts."""
    tests = ctx.settings.artifacts_dir / run.id / job.id / str(job.attempt) / "tests"
    return read_bisections(tests, [r.nodeid for r in results if r.outcome in ("failed", "error")])


def _judgement(ctx: Reporter, run: Run, job: Job, results: list[TestResult],
               culprits: dict[str, Bisection]) -> Judgement | None:
    judgement = judge_job(ctx.store, ctx.settings.artifacts_dir, run, job, results, ctx.job_url, culprits)
    if judgement is not None:
        ctx.store.record_verdicts(job.id, job.attempt, {t.nodeid: (t.verdict.value, t.detail, bool(t.violations))
                                                         for t in judgement.tests})
    return judgement


def _judge_heads_again(ctx: Reporter, base_run: Run, base_job: Job) -> None:
    """A base job finished: the pull-request jobs of its suite and device judged without it are judged again."""
    if base_job.state != "completed":
        return
    for head in ctx.store.runs_based_on(base_run.id):
        head_job = ctx.store.get_job(job_id_for(head.id, base_job.suite, base_job.device, base_job.torch))
        if head_job is not None and head_job.state == "completed":
            ctx.queue.report_job(head_job.id)


def _send_judged_again(ctx: Reporter, run: Run, job: Job, view: CheckRunView,
                       sent_before: list[dict[str, Any]]) -> Job | None:
    """PATCH a completed check run with its new verdict and summary. GitHub appends annotations and never
    replaces them, so only those the first report could not have sent go now (budget violations, flaky notices);
    a failure sent before that turns out to fail at the base too keeps its first level."""
    if job.check_run_id is None:
        return job
    known = {_where(a) for a in sent_before}
    new = [a for a in view.annotations if _where(a) not in known][:MAX_PER_REQUEST]
    ctx.github.update_check_run(run.installation_id, run.repo_full_name, job.check_run_id, view, new)
    saved = ctx.store.record_report(job.id, job.rerun, reported_digest=view.digest,
                                    annotations_sent=len(view.annotations))
    return ctx.store.get_job(job.id) if saved else None


def attempt_url(job_url: str, job: Job) -> str:
    """Each check run's Details link opens its own attempt (1 for the first check run, 2 for the first re-run)."""
    return f"{job_url}/attempts/{job.rerun + 1}"


def _where(note: dict[str, Any]) -> tuple[object, ...]:
    return note.get("path"), note.get("start_line"), note.get("title"), note.get("message")


def _send_status(ctx: Reporter, run: Run, job: Job, view: CheckRunView) -> Job | None:
    """Create or PATCH the check run with the view's status and the first annotations; the updated row."""
    first = view.annotations[:MAX_PER_REQUEST] if view.status == "completed" else []
    check_run_id = job.check_run_id
    if check_run_id is None:
        # A create GitHub applied but answered with an error has left a check run we do not know: find it.
        check_run_id = ctx.github.find_check_run(run.installation_id, run.repo_full_name, view)
        if check_run_id is None and job.started_at is not None and job.suite != APPROVAL_SUITE:
            # A worker took the job before its queued report went out (a re-run is queued and started at
            # once): GitHub still shows it queued first, then where it is now.
            queued = replace(view, status="queued", conclusion=None, title="Queued", text="", annotations=[],
                             actions=[], summary=f"Waiting for a {job.device} runner.")
            check_run_id = ctx.github.create_check_run(run.installation_id, run.repo_full_name, queued, [])
            ctx.github.update_check_run(run.installation_id, run.repo_full_name, check_run_id, view, first)
        elif check_run_id is None:
            check_run_id = ctx.github.create_check_run(run.installation_id, run.repo_full_name, view, first)
        else:
            ctx.github.update_check_run(run.installation_id, run.repo_full_name, check_run_id, view, first)
    else:
        ctx.github.update_check_run(run.installation_id, run.repo_full_name, check_run_id, view, first)
    saved = ctx.store.record_report(job.id, job.rerun, check_run_id=check_run_id, reported=view.status,
                                    reported_digest=view.digest, annotations_sent=len(first))
    # Re-run meanwhile: this was the previous generation's last word; the new one gets its own check run.
    return ctx.store.get_job(job.id) if saved else None


def _send_remaining_annotations(ctx: Reporter, run: Run, job: Job, view: CheckRunView) -> None:
    """GitHub takes 50 annotations per request and appends each batch, so the rest go in later PATCHes."""
    sent = job.annotations_sent
    while job.check_run_id is not None and sent < len(view.annotations):
        batch = view.annotations[sent:sent + MAX_PER_REQUEST]
        ctx.github.update_check_run(run.installation_id, run.repo_full_name, job.check_run_id, view, batch,
                                    output_only=True)
        sent += len(batch)
        if not ctx.store.record_report(job.id, job.rerun, annotations_sent=sent):
            return

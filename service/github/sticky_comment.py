"""One pull-request comment per head summarising all its check runs: created once, then edited in place."""

from __future__ import annotations

import hashlib
import logging
from contextlib import AbstractContextManager
from typing import Protocol

from service.compare.comment import CheckSummary, render_comment, worth_a_comment
from service.compare.inputs import NULL_SHA, config_table, judge_job
from service.config import Settings
from service.github.api import GitHubApp, GoneError
from service.github.checks import test_url, verdict_of
from service.github.markdown import fit
from service.store import APPROVAL_SUITE, Run, Store

log = logging.getLogger(__name__)
MAX_BODY = 65_000  # GitHub refuses comments over 65,536 characters (counted here in bytes, which is never fewer)
CUT = "\n\n… cut to fit GitHub's limit on a comment: every check run lists all of its tests."


class Commenter(Protocol):
    store: Store
    github: GitHubApp
    settings: Settings

    @property
    def claims(self) -> _Locks: ...

    def job_url(self, job_id: str) -> str: ...


class _Locks(Protocol):
    def report_lock(self, job_id: str) -> AbstractContextManager[object]: ...


def update_sticky_comment(ctx: Commenter, run: Run) -> None:
    """Once every job of the head has finished (and again whenever a verdict changes, e.g. its base finished)."""
    if run.trigger != "pull_request" or run.pr_number is None or not run.base_sha or run.base_sha == NULL_SHA:
        return  # no base to judge against (GitHub always sends one): judged, and commented, as before
    jobs = [j for j in ctx.store.jobs_of(run.id) if j.suite != APPROVAL_SUITE]
    if not jobs or any(j.state != "completed" for j in jobs):
        return
    # Two jobs finishing together must not both create the comment.
    with ctx.claims.report_lock(f"comment-{run.id}"):
        checks = []
        for job in jobs:
            results = ctx.store.results_of(job.id, job.attempt)
            judgement = judge_job(ctx.store, ctx.settings.artifacts_dir, run, job, results, ctx.job_url)
            url = ctx.job_url(job.id)
            checks.append(CheckSummary(job.check_name, verdict_of(job, judgement), url, judgement,
                                       lambda nodeid, url=url: test_url(url, nodeid)))
        body = fit(render_comment(run.head_sha, run.base_sha, checks), MAX_BODY, CUT)
        digest = hashlib.sha256(body.encode()).hexdigest()
        existing = ctx.store.pull_comment(run.id)
        if existing is not None and existing.digest == digest:
            return
        always = config_table(run.config_text, "comment").get("always") is True
        if existing is None and not (always or worth_a_comment(checks)):
            return  # all green and nothing changed: no comment unless asked for
        try:
            if existing is None:
                comment_id = ctx.github.create_comment(run.installation_id, run.repo_full_name, run.pr_number, body)
            else:
                comment_id = existing.comment_id
                ctx.github.edit_comment(run.installation_id, run.repo_full_name, comment_id, body)
        except GoneError as exc:
            log.info("sticky comment of run %s: %s", run.id, exc)
            return
        ctx.store.save_pull_comment(run.id, comment_id, digest)

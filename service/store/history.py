"""A test's results across a repository's runs (default branch, base runs, every pull request): the rows the
history page, the failure rate and the "known flaky" rule (service/compare/history.py) read."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, select

from service.store.rows import Job, Run, TestResult
from service.store.store import Store

MAX_ROWS = 5000  # one page or one judgement never reads more than this


@dataclass(frozen=True)
class TestRun:
    """One result of a test in one run of the repository."""

    __test__ = False  # not a pytest class
    nodeid: str
    run_id: str
    job_id: str
    attempt: int
    trigger: str  # push | pull_request | base
    pr_number: int | None
    head_sha: str
    created_at: datetime
    finished_at: datetime | None
    outcome: str
    metrics: dict | None
    verdict: str

    @property
    def default_branch(self) -> bool:
        return self.trigger in ("push", "base", "canary")


def results_across_runs(store: Store, repo: str, suite: str, device: str, nodeids: Collection[str] | None = None,
              since: datetime | None = None, before: datetime | None = None,
              limit: int = MAX_ROWS, torch: str = "") -> list[TestRun]:
    """Newest first; `nodeids` None: every test of the suite and device; `before`: only jobs finished by then;
    `torch`: on that version of the deployment ("" the default): each version has its own history."""
    # A result copied from a base for a test a pull request could not affect is the base's, counted there.
    where = [Run.repo_full_name == repo, Job.suite == suite, Job.device == device, Job.torch == torch,
             Job.state == "completed", TestResult.not_affected.is_(False)]
    if nodeids is not None:
        where.append(TestResult.nodeid.in_(list(nodeids)[:1000]))
    if since is not None:
        where.append(Run.created_at >= since)
    if before is not None:
        where.append(Job.finished_at <= before)
    query = (select(TestResult.nodeid, Run.id, Job.id, Job.attempt, Run.trigger, Run.pr_number, Run.head_sha,
                    Run.created_at, Job.finished_at, TestResult.outcome, TestResult.metrics, TestResult.verdict)
             .join(Job, and_(Job.id == TestResult.job_id, Job.attempt == TestResult.attempt))
             .join(Run, Run.id == Job.run_id)
             .where(*where).order_by(Run.created_at.desc(), Run.id).limit(limit))
    with store.session() as s:
        return [TestRun(*row) for row in s.execute(query)]


def nodeids_of(store: Store, repo: str, suite: str, device: str, limit: int = 20_000, torch: str = "") -> list[str]:
    """The tests a repository's suite and device ever reported (to resolve a history page's test name)."""
    query = (select(TestResult.nodeid).distinct()
             .join(Job, and_(Job.id == TestResult.job_id, Job.attempt == TestResult.attempt))
             .join(Run, Run.id == Job.run_id)
             .where(Run.repo_full_name == repo, Job.suite == suite, Job.device == device, Job.torch == torch)
             .limit(limit))
    with store.session() as s:
        return list(s.scalars(query))

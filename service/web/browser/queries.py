"""Read-only store queries of the browser: filtered, paginated runs; a run's status; running jobs; a test's history."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, exists, false, func, not_, or_, select
from sqlalchemy.sql.elements import ColumnElement

from service.compare.job_verdict import badges_of
from service.store import Artifact, Job, Run, Store, TestResult

PAGE_SIZE = 50
FAILED_CONCLUSIONS = ("failure", "timed_out", "cancelled", "action_required", "startup_failure")
STATUSES = ("running", "failure", "success")


@dataclass(frozen=True)
class RunFilter:
    repo: str = ""
    pr: int | None = None
    branch: str = ""
    sha: str = ""
    status: str = ""  # one of STATUSES, or "" for all

    def conditions(self) -> list[ColumnElement[bool]]:
        conditions: list[ColumnElement[bool]] = []
        if self.repo:
            conditions.append(Run.repo_full_name == self.repo)
        if self.pr is not None:
            conditions.append(Run.pr_number == self.pr)
        if self.branch:
            conditions.append(Run.branch == self.branch)
        if self.sha:
            conditions.append(Run.head_sha.startswith(self.sha.lower(), autoescape=True))
        if self.status == "running":
            conditions.append(_unfinished())
        elif self.status == "failure":
            conditions.append(_failed())
        elif self.status == "success":
            conditions.append(and_(not_(_unfinished()), not_(_failed())))
        return conditions


def _unfinished() -> ColumnElement[bool]:
    return or_(Run.state == "planning", exists().where(Job.run_id == Run.id, Job.state != "completed"))


def _shown_conclusion() -> ColumnElement[str]:
    """What a job's check run says (its judged verdict once reported), as Job.shown_conclusion does in Python."""
    return func.coalesce(func.nullif(Job.verdict_conclusion, ""), Job.conclusion)


def _failed() -> ColumnElement[bool]:
    return or_(Run.config_error.is_not(None),
               exists().where(Job.run_id == Run.id, _shown_conclusion().in_(FAILED_CONCLUSIONS)))


@dataclass(frozen=True)
class RunsPage:
    runs: list[Run]
    statuses: dict[str, str]
    page: int
    pages: int
    total: int


def runs_page(store: Store, wanted: RunFilter, page: int, readable_private: list[str]) -> RunsPage:
    visible = or_(Run.private == false(), Run.repo_full_name.in_(readable_private))
    where = [visible, *wanted.conditions()]
    with store.session() as s:
        total = s.scalar(select(func.count()).select_from(Run).where(*where)) or 0
        pages = max(1, -(-total // PAGE_SIZE))
        page = min(max(1, page), pages)
        query = select(Run).where(*where).order_by(Run.created_at.desc(), Run.id)
        runs = list(s.scalars(query.offset((page - 1) * PAGE_SIZE).limit(PAGE_SIZE)))
        jobs = s.execute(select(Job.run_id, Job.state, _shown_conclusion())
                         .where(Job.run_id.in_([r.id for r in runs])))
        statuses = {run.id: ("failure" if run.config_error else "running" if run.state == "planning" else "")
                    for run in runs}
        for run_id, state, conclusion in jobs:
            statuses[run_id] = _worse(statuses[run_id], state, conclusion)
    return RunsPage(runs, {k: v or "success" for k, v in statuses.items()}, page, pages, total)


def _worse(current: str, state: str, conclusion: str | None) -> str:
    if current == "failure" or conclusion in FAILED_CONCLUSIONS:
        return "failure"
    return "running" if current == "running" or state != "completed" else current


def running_jobs(store: Store) -> list[tuple[Job, Run]]:
    with store.session() as s:
        rows = s.execute(select(Job, Run).join(Run, Run.id == Job.run_id).where(Job.state == "running")
                         .order_by(Job.started_at))
        return [(job, run) for job, run in rows]


@dataclass(frozen=True)
class HistoryPoint:
    job_id: str
    attempt: int
    run_id: str
    head_sha: str
    created_at: datetime
    outcome: str
    duration_s: float
    compile_time_s: float | None  # from the stored metrics; None when the row has none
    baseline: bool  # a default-branch run (a push, or a pull request's base run); else this pull request's


def _compile_time(metrics: object) -> float | None:
    value = metrics.get("compile_time_s") if isinstance(metrics, dict) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def history_of_test(store: Store, run: Run, job: Job, nodeid: str, limit: int = 30) -> list[HistoryPoint]:
    """This test in the same suite and device, oldest first: the repository's latest default-branch runs (push
    runs and base runs), and the latest runs of this pull request (of this run, for a push), `limit` of each."""
    base_runs = select(Run.base_run_id).where(Run.repo_full_name == run.repo_full_name, Run.base_run_id.is_not(None))
    baseline = or_(Run.trigger != "pull_request", Run.id.in_(base_runs))
    own = and_(Run.trigger == "pull_request", Run.pr_number == run.pr_number) if run.pr_number else Run.id == run.id
    query = (
        select(TestResult.outcome, TestResult.duration_s, TestResult.metrics, Job.id, Job.attempt, Run.id,
               Run.head_sha, Run.created_at)
        .join(Job, and_(Job.id == TestResult.job_id, Job.attempt == TestResult.attempt))
        .join(Run, Run.id == Job.run_id)
        .where(Run.repo_full_name == run.repo_full_name, Job.suite == job.suite, Job.device == job.device,
               Job.torch == job.torch, TestResult.nodeid == nodeid)
        .order_by(Run.created_at.desc())
    )
    points: list[HistoryPoint] = []
    with store.session() as s:
        mine = and_(own, not_(baseline)) if run.pr_number else own
        groups = ((True, and_(baseline, Run.id != run.id)), (False, mine))
        for is_base, group in groups:
            for outcome, duration, metrics, job_id, attempt, run_id, sha, created in s.execute(
                    query.where(group).limit(limit)):
                points.append(HistoryPoint(job_id, attempt, run_id, sha, created, outcome, duration,
                                           _compile_time(metrics), is_base))
    return sorted(points, key=lambda p: (p.created_at, p.run_id))


@dataclass(frozen=True)
class ResultRow:
    nodeid: str
    outcome: str
    duration_s: float
    message: str
    details: str
    metrics: dict | None
    verdict: str = ""  # against the base (service/compare/verdicts.py), "" until judged
    over_budget: int = 0
    reused_from: str = ""  # the job that ran it, for a result reused, not run (service/planning/)

    @property
    def badges(self) -> list[str]:
        return badges_of(self.verdict, bool(self.over_budget))


def results_of(store: Store, job_id: str, attempt: int) -> list[ResultRow]:
    """Plain rows, not ORM objects: a job may have thousands of tests and the job page shows them all."""
    columns = (TestResult.nodeid, TestResult.outcome, TestResult.duration_s, TestResult.message,
               TestResult.details, TestResult.metrics, TestResult.verdict, TestResult.over_budget,
               TestResult.reused_from)
    with store.session() as s:
        rows = s.execute(select(*columns).where(TestResult.job_id == job_id, TestResult.attempt == attempt)
                         .order_by(TestResult.id))
        return [ResultRow(*row) for row in rows]


def artifact_files(store: Store, job_id: str, attempt: int, per_test: bool = True) -> list[tuple[str, int]]:
    """(path, size) of the attempt's files; without `per_test`, only those outside tests/ (a job page needs
    those, and a job of thousands of tests has several files per test)."""
    query = select(Artifact.path, Artifact.size).where(Artifact.job_id == job_id, Artifact.attempt == attempt)
    if not per_test:
        query = query.where(Artifact.path.not_like("tests/%"))
    with store.session() as s:
        return [(path, size) for path, size in s.execute(query.order_by(Artifact.path))]

"""The store's rows: runs, jobs, test results, artifacts and installed repositories, and their deterministic ids."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import JSON, DateTime, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from service.torch_versions import check_name, job_suffix


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


APPROVAL_SUITE = "approval"  # the one job of a run that waits for /ok-to-test
APPROVAL_CHECK = "compile-ci: approval"
RERUN_SEP = "#"
# Runs compile-ci makes itself, which report nothing to GitHub: a pull request's base (service/planning/base_runs.py)
# and the daily canary of a default branch on the advisory torch (service/jobs/canary.py).
CANARY_TRIGGER = "canary"
INTERNAL_TRIGGERS = ("base", CANARY_TRIGGER)


class Base(DeclarativeBase):
    pass


class Run(Base):
    """One head sha of one PR (or one push to the default branch) being checked."""

    __tablename__ = "runs"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    repo_full_name: Mapped[str] = mapped_column(String(200), index=True)
    repo_id: Mapped[int] = mapped_column(Integer)
    installation_id: Mapped[int] = mapped_column(Integer)
    clone_url: Mapped[str] = mapped_column(String(500))
    private: Mapped[bool] = mapped_column(default=False)
    trigger: Mapped[str] = mapped_column(String(40))  # pull_request | push | base (compile-ci's own, at a PR's base)
    pr_number: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    branch: Mapped[str] = mapped_column(String(300), default="")
    head_sha: Mapped[str] = mapped_column(String(40), index=True)
    sender: Mapped[str] = mapped_column(String(100), default="")
    author: Mapped[str] = mapped_column(String(100), default="")
    # trusted: runs at once | waiting: an untrusted author, nothing runs | approved: /ok-to-test for this sha
    gate: Mapped[str] = mapped_column(String(20), default="trusted")
    approved_by: Mapped[str] = mapped_column(String(100), default="")
    cancelled_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    state: Mapped[str] = mapped_column(String(20), default="planning")  # lifecycle.RunState
    config_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    # A pull request's base commit (the payload's pull_request.base.sha), and the run whose results serve as its
    # base: the default branch's push run at that sha, else a base run compile-ci scheduled (service/compare/).
    base_sha: Mapped[str | None] = mapped_column(String(40), nullable=True)
    base_run_id: Mapped[str | None] = mapped_column(String(40), nullable=True, index=True)
    # The .compile-ci.toml text the run was planned with ("" for none); a base run runs with its head's, not its own.
    config_text: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The key under which a push run's results serve as a pull request's base (service/planning/base_runs.py: its config
    # but [install], and the runner builds that planned it); "" for a run planned before keys were recorded.
    base_key: Mapped[str] = mapped_column(String(64), default="", server_default="")
    # A push's previous tip of its branch (the payload's `before`): the push whose results it may reuse.
    before_sha: Mapped[str] = mapped_column(String(40), default="", server_default="")
    # Failed tries at planning (the head could not be fetched, GitHub failed), and when the next one is due: while
    # it is pending the reaper leaves the run alone, so a run has one retry chain (service/jobs/run_planning.py).
    plan_tries: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    plan_retry_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


class Job(Base):
    """One (suite, device) of a run: one check run on GitHub."""

    __tablename__ = "jobs"
    id: Mapped[str] = mapped_column(String(80), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    suite: Mapped[str] = mapped_column(String(50))
    device: Mapped[str] = mapped_column(String(10))
    # The torch version it runs on when not the deployment's default ("" for that), and whether that version was
    # advisory when the job was planned: its verdict is then never red (service/compare/job_verdict.py).
    torch: Mapped[str] = mapped_column(String(20), default="", server_default="")
    torch_advisory: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # 1: advisory
    timeout_s: Mapped[int] = mapped_column(Integer)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    # Re-runs asked for (/rerun, the Re-run button): each one is reported as a new check run.
    rerun: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[str] = mapped_column(String(20), default="queued")  # lifecycle.JobState
    cancel_requested: Mapped[bool] = mapped_column(default=False)
    infra_failures: Mapped[int] = mapped_column(Integer, default=0)
    progress_done: Mapped[int] = mapped_column(Integer, default=0)
    progress_total: Mapped[int] = mapped_column(Integer, default=0)
    progress_current: Mapped[str] = mapped_column(Text, default="")
    conclusion: Mapped[str | None] = mapped_column(String(20), nullable=True)
    title: Mapped[str] = mapped_column(Text, default="")
    detail: Mapped[str] = mapped_column(Text, default="")
    passed: Mapped[int] = mapped_column(Integer, default=0)
    failed: Mapped[int] = mapped_column(Integer, default=0)
    skipped: Mapped[int] = mapped_column(Integer, default=0)
    errors: Mapped[int] = mapped_column(Integer, default=0)
    xfailed: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    xpassed: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    torch_version: Mapped[str] = mapped_column(String(60), default="")
    runner: Mapped[str] = mapped_column(String(60), default="")
    check_run_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    reported: Mapped[str] = mapped_column(String(20), default="")  # last status sent to GitHub
    reported_digest: Mapped[str] = mapped_column(String(64), default="")  # of the last output sent
    annotations_sent: Mapped[int] = mapped_column(Integer, default=0)
    # What its completed check run says (service/compare/job_verdict.py), kept when it is reported: the pages show
    # these, so they never contradict GitHub ("" until then, and for runs nothing is reported of).
    verdict_conclusion: Mapped[str] = mapped_column(String(20), default="", server_default="")
    verdict_title: Mapped[str] = mapped_column(Text, default="", server_default="")
    # How many shards its current attempt runs as (service/jobs/sharding.py); 1: the whole suite in one runner.
    shards: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    queued_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)

    @property
    def duration_s(self) -> float | None:
        return duration_between(self.started_at, self.finished_at)

    @property
    def check_name(self) -> str:
        return check_name_of(self.suite, self.device, self.torch)

    @property
    def shown_conclusion(self) -> str:
        """The conclusion every page shows: its check run's, once judged and reported; else its own."""
        return self.verdict_conclusion or self.conclusion or ""

    @property
    def shown_title(self) -> str:
        return self.verdict_title or self.title

    @property
    def external_id(self) -> str:
        # The first check run of a job carries the job id; each re-run is a new check run, told apart by
        # its number so a lookup by external_id finds this generation's run and never an older one.
        return f"{self.id}{RERUN_SEP}{self.rerun}" if self.rerun else self.id


def check_name_of(suite: str, device: str, torch: str = "") -> str:
    """The check run's name on GitHub: `<suite> (<device>)`, `<suite> (<device>, torch 2.14)` for a version other
    than the deployment's default, or the approval check."""
    return APPROVAL_CHECK if suite == APPROVAL_SUITE else check_name(suite, device, torch)


def duration_between(started: datetime | None, finished: datetime | None) -> float | None:
    return (finished - started).total_seconds() if started and finished else None


def job_id_of_external(external_id: str) -> str:
    return external_id.split(RERUN_SEP, 1)[0]


class InstalledRepo(Base):
    """Repositories the App was added to or removed from (installation and installation_repositories events)."""

    __tablename__ = "installed_repos"
    full_name: Mapped[str] = mapped_column(String(200), primary_key=True)
    installation_id: Mapped[int] = mapped_column(Integer)
    installed: Mapped[bool] = mapped_column(default=True)
    changed_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class TestResult(Base):
    __tablename__ = "test_results"
    __test__ = False  # not a pytest class
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    nodeid: Mapped[str] = mapped_column(Text)
    outcome: Mapped[str] = mapped_column(String(10))  # passed | failed | error | skipped
    duration_s: Mapped[float] = mapped_column(Float, default=0.0)
    message: Mapped[str] = mapped_column(Text, default="")
    details: Mapped[str] = mapped_column(Text, default="")
    file: Mapped[str] = mapped_column(Text, default="")
    line: Mapped[int | None] = mapped_column(Integer, nullable=True)
    metrics: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    # Where the failure is in the repository's own code (from the traceback), for the check run annotation.
    repo_path: Mapped[str] = mapped_column(Text, default="")
    repo_line: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Against the base (service/compare/verdicts.py): new_failure | failing_at_base | fixed | flaky | skipped |
    # unchanged | failed | passed ("" until judged; failed / passed: no base result to compare with).
    verdict: Mapped[str] = mapped_column(String(20), default="", server_default="")
    verdict_detail: Mapped[str] = mapped_column(Text, default="", server_default="")
    over_budget: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # broke a [budgets] limit
    shard: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # which shard of the attempt ran it
    # Reused, not run: nothing it depends on changed since its source job (service/planning/), whose result it
    # carries (not_run until that job has one), and the job that ran it (service/planning/reuse_check.py copies).
    not_affected: Mapped[bool] = mapped_column(default=False, server_default="0")
    reused_from: Mapped[str] = mapped_column(String(80), default="", server_default="")


class Shard(Base):
    """One part of a sharded job's attempt, run by one worker; its states are service.jobs.lifecycle's."""

    __tablename__ = "job_shards"
    id: Mapped[str] = mapped_column(String(120), primary_key=True)  # shard_id_for(job, attempt, index)
    job_id: Mapped[str] = mapped_column(String(80), index=True)
    job_attempt: Mapped[int] = mapped_column(Integer)
    index: Mapped[int] = mapped_column(Integer)
    count: Mapped[int] = mapped_column(Integer)
    # What every shard of the attempt selects by (suites/sharding.py): durations and the targets not affected, fixed
    # once for all of them, so that they split the same collected tests the same way.
    plan: Mapped[str] = mapped_column(Text, default="")
    state: Mapped[str] = mapped_column(String(20), default="queued")  # lifecycle.JobState
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    infra_failures: Mapped[int] = mapped_column(Integer, default=0)
    conclusion: Mapped[str | None] = mapped_column(String(20), nullable=True)
    title: Mapped[str] = mapped_column(Text, default="")
    detail: Mapped[str] = mapped_column(Text, default="")
    kind: Mapped[str] = mapped_column(String(10), default="")  # tests | none (no tests ran) | other (see merge)
    torch_version: Mapped[str] = mapped_column(String(60), default="")
    progress_done: Mapped[int] = mapped_column(Integer, default=0)
    progress_total: Mapped[int] = mapped_column(Integer, default=0)
    queued_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)

    @property
    def duration_s(self) -> float | None:
        return duration_between(self.started_at, self.finished_at)


def shard_id_for(job_id: str, job_attempt: int, index: int) -> str:
    """Names its lease, container, compile-cache layer and work tree: unique per attempt, so a container an earlier
    attempt's lost worker left running never holds the name a retry needs."""
    return f"{job_id}-a{job_attempt}s{index}"


class PullComment(Base):
    """The sticky comment of a pull request's head: created once, edited in place (service/github/sticky_comment)."""

    __tablename__ = "pull_comments"
    run_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    comment_id: Mapped[int] = mapped_column(Integer)
    digest: Mapped[str] = mapped_column(String(64), default="")


class Artifact(Base):
    __tablename__ = "artifacts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    path: Mapped[str] = mapped_column(Text)  # relative to the attempt's artifact directory
    size: Mapped[int] = mapped_column(Integer)


def run_id_for(repo_full_name: str, trigger_ref: str, head_sha: str) -> str:
    """Deterministic, so a redelivered webhook maps onto the run it already created."""
    digest = hashlib.sha256(f"{repo_full_name}\0{trigger_ref}\0{head_sha}".encode()).hexdigest()
    return digest[:16]


def job_id_for(run_id: str, suite: str, device: str, torch: str = "") -> str:
    return f"{run_id}-{suite}-{device}{job_suffix(torch)}"


@dataclass(frozen=True)
class NewRun:
    repo_full_name: str
    repo_id: int
    installation_id: int
    clone_url: str
    private: bool
    trigger: str
    trigger_ref: str  # "pr/<n>" or "refs/heads/<branch>": what makes two runs of one sha distinct
    pr_number: int | None
    branch: str
    head_sha: str
    sender: str
    author: str = ""
    gate: str = "trusted"
    base_sha: str | None = None
    config_text: str | None = None
    before_sha: str = ""

    @property
    def run_id(self) -> str:
        return run_id_for(self.repo_full_name, self.trigger_ref, self.head_sha)


@dataclass(frozen=True)
class TestRecord:
    __test__ = False
    nodeid: str
    outcome: str
    duration_s: float
    message: str = ""
    details: str = ""
    file: str = ""
    line: int | None = None
    metrics: dict | None = None
    repo_path: str = ""
    repo_line: int | None = None



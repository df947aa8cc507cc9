"""A pull-request run's base as pages see it: the base run, the same suite and device's job there, and the runs
a base run serves.

The run row names its base (`base_run_id`, set when the base run is chosen or scheduled); until one is chosen, a
finished push run of the same repository at `base_sha` stands in. Only the same repository's runs count, so a
base can never show a page of a run the reader was not already allowed to read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import and_, or_, select

from runners.untrusted_files import is_folder
from service.compare.job_verdict import badges_of
from service.store import Job, Run, Store, TestResult
from service.store.rows import job_id_for
from service.web.browser.lookup import TEST_NAME

BASED_ON_SHOWN = 50


@dataclass(frozen=True)
class BaseSide:
    """The base's counterpart of one job; `reason` says why there is nothing to compare with ("" when there is)."""

    run: Run | None
    job: Job | None
    directory: Path | None  # the base job's newest attempt's artifact directory
    reason: str

    def test_folder(self, name: str) -> Path | None:
        """The base's artifact folder of a test (its sanitised node id), when the base has one."""
        if self.directory is None or not TEST_NAME.fullmatch(name):
            return None
        # An older attempt's job could have left `tests` itself as a link: no component may be one.
        return self.directory / "tests" / name if is_folder(self.directory, f"tests/{name}") else None


def base_run_of(store: Store, run: Run) -> Run | None:
    if run.base_run_id:
        base = store.get_run(run.base_run_id)
        if base is not None and base.id != run.id and base.repo_full_name == run.repo_full_name:
            return base
    if run.base_sha and has_base(run):
        pushes = [r for r in store.runs_at_sha(run.repo_full_name, run.base_sha)
                  if r.trigger != "pull_request" and r.id != run.id]
        return pushes[-1] if pushes else None
    return None


def base_of(store: Store, artifacts_dir: Path, run: Run, suite: str, device: str, torch: str = "") -> BaseSide:
    """The job of `suite`, `device` and `torch` in the base run, finished, with its artifact directory."""
    if not has_base(run):
        return BaseSide(None, None, None, "This run has no base: it is not a pull request's run, "
                                          "or it started before compile-ci compared runs with their base.")
    base = base_run_of(store, run)
    if base is None:
        return BaseSide(None, None, None, f"No run of the base commit {(run.base_sha or '')[:12]} yet.")
    job = store.get_job(job_id_for(base.id, suite, device, torch))
    if job is None:
        return BaseSide(base, None, None, f"The base run has no {suite} job on {device}.")
    if job.state != "completed" or job.attempt < 1:
        return BaseSide(base, job, None, f"The base run's {suite} ({device}) job has not finished ({job.state}).")
    return BaseSide(base, job, artifacts_dir / base.id / job.id / str(job.attempt), "")


def runs_based_on(store: Store, run: Run) -> list[Run]:
    """Pull-request runs whose base is this run: named by `base_run_id`, or (a push run) at its sha with no base
    run chosen yet. Newest first, at most BASED_ON_SHOWN."""
    named = Run.base_run_id == run.id
    conditions = [named]
    if run.trigger != "pull_request":
        conditions.append(and_(Run.base_run_id.is_(None), Run.base_sha == run.head_sha))
    query = (select(Run).where(Run.repo_full_name == run.repo_full_name, Run.id != run.id, or_(*conditions))
             .order_by(Run.created_at.desc()).limit(BASED_ON_SHOWN))
    with store.session() as s:
        return list(s.scalars(query))


def has_base(run: Run) -> bool:
    """A pull request's run with a base commit (all zeros: GitHub's "no commit") or a named base run."""
    return bool(run.base_run_id or (run.base_sha and run.base_sha.strip("0")))


def classification_of(store: Store, job_id: str, attempt: int, nodeid: str) -> list[str]:
    """The test's verdict badges (NEW, AT BASE, FLAKY, FIXED, BUDGET: service/compare/job_verdict.py) from what the
    base-judge stored; none before it judged. The test page and the diff page show them as the job page does."""
    with store.session() as s:
        row = s.execute(select(TestResult.verdict, TestResult.over_budget).where(
            TestResult.job_id == job_id, TestResult.attempt == attempt, TestResult.nodeid == nodeid).limit(1)).first()
    return badges_of(str(row[0] or ""), bool(row[1])) if row else []

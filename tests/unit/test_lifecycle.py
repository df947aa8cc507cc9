"""The lifecycle's transitions: conditional, so races and stale workers lose instead of overwriting."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from sqlalchemy import event

from service.jobs import lifecycle
from service.jobs.lifecycle import Cancel, Conclusion, Gate, JobState, Outcome, RunState
from service.store import NewRun, Run, Store

SERVICE = Path(__file__).resolve().parents[2] / "service"
STATE_FIELDS = {"state", "gate", "conclusion", "attempt", "rerun", "cancel_requested", "infra_failures"}


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'ci.db'}")


def _run(store: Store, gate: str = Gate.TRUSTED) -> Run:
    run, _ = store.create_run_if_absent(NewRun(
        repo_full_name="octo/zoo", repo_id=1, installation_id=2, clone_url="file:///x", private=False,
        trigger="pull_request", trigger_ref="pr/1", pr_number=1, branch="b", head_sha="a" * 40, sender="o",
        gate=gate))
    return run


def _planned(store: Store) -> str:
    run = _run(store)
    assert lifecycle.plan(store, run, [lifecycle.new_job(run, "correctness", "cpu", 60)], None)
    assert store.get_run(run.id).state == RunState.PLANNED
    (job,) = store.jobs_of(run.id)
    return job.id


def test_one_of_two_workers_starts_a_job_and_a_stale_attempt_cannot_complete_it(store: Store) -> None:
    job_id = _planned(store)
    first = lifecycle.start(store, job_id, "docker")
    assert first is not None and (first.state, first.attempt) == (JobState.RUNNING, 1)
    second = lifecycle.start(store, job_id, "docker")  # its worker was lost; a new attempt takes over
    assert second is not None and second.attempt == 2
    assert lifecycle.complete(store, first, Outcome(Conclusion.SUCCESS, "stale")) is None
    done = lifecycle.complete(store, second, Outcome(Conclusion.FAILURE, "1 failed", counts={"failed": 1}))
    assert done is not None and (done.state, done.conclusion, done.failed) == (JobState.COMPLETED, "failure", 1)
    assert lifecycle.start(store, job_id, "docker") is None  # completed jobs start only through a re-run


def test_infrastructure_retry_happens_once_per_generation(store: Store) -> None:
    job_id = _planned(store)
    job = lifecycle.start(store, job_id, "docker")
    assert lifecycle.retry_after_infra_error(store, job, "engine unreachable")
    job = lifecycle.start(store, job_id, "docker")
    assert not lifecycle.retry_after_infra_error(store, job, "engine unreachable again")
    assert store.get_job(job_id).state == JobState.RUNNING


def test_cancel_completes_a_queued_job_and_asks_a_running_one(store: Store) -> None:
    job_id = _planned(store)
    job = lifecycle.start(store, job_id, "docker")
    assert lifecycle.cancel(store, job_id, "superseded") == Cancel.REQUESTED
    assert lifecycle.cancel(store, job_id, "superseded") is None  # asked once
    assert not lifecycle.retry_after_infra_error(store, job, "no retry for a cancelled job")
    lifecycle.complete(store, job, Outcome(Conclusion.CANCELLED, "Cancelled"))
    rerun = lifecycle.rerun(store, job_id)
    assert rerun is not None and (rerun.state, rerun.rerun, rerun.cancel_requested) == (JobState.QUEUED, 1, False)
    assert lifecycle.rerun(store, job_id) is None  # already queued
    assert lifecycle.cancel(store, job_id, "/cancel") == Cancel.CANCELLED
    assert store.get_job(job_id).conclusion == Conclusion.CANCELLED


def test_approval_is_given_once_and_recorded_once(store: Store) -> None:
    run = _run(store, Gate.WAITING)
    waiting = lifecycle.wait_for_approval(store, run, "waits for /ok-to-test")
    assert store.get_run(run.id).state == RunState.WAITING
    assert lifecycle.approve(store, run.id, "maintainer")
    assert not lifecycle.approve(store, run.id, "someone-else")
    run = store.get_run(run.id)
    assert (run.gate, run.state, run.approved_by) == (Gate.APPROVED, RunState.PLANNING, "maintainer")
    approved = lifecycle.record_approval(store, run)
    assert approved is not None and approved.id == waiting.id and approved.conclusion == Conclusion.SUCCESS
    assert lifecycle.record_approval(store, run) is None  # a retried plan does not add a third check run


def _state_writes(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and node.attr in STATE_FIELDS:
            found.append(f"line {node.lineno}: .{node.attr} =")
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "transition":
            found.append(f"line {node.lineno}: transition()")
    return found


def test_only_the_lifecycle_writes_state_fields() -> None:
    offenders = {}
    for path in SERVICE.rglob("*.py"):
        if path.name == "lifecycle.py" or "devkit" in path.parts:
            continue
        writes = _state_writes(ast.parse(path.read_text()))
        if writes:
            offenders[str(path.relative_to(SERVICE))] = writes
    assert offenders == {}


def test_a_database_made_by_an_older_version_gains_the_new_columns(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old.db"
    Store(f"sqlite:///{path}")
    with sqlite3.connect(path) as db:  # what the previous release created: no xfailed / xpassed counters
        db.execute("ALTER TABLE jobs DROP COLUMN xfailed")
        db.execute("ALTER TABLE jobs DROP COLUMN xpassed")
    store = Store(f"sqlite:///{path}")
    job_id = _planned(store)
    assert store.get_job(job_id).xfailed == 0


def test_two_workers_planning_the_same_jobs_at_once_both_succeed(store: Store, tmp_path: Path) -> None:
    # Two pull requests on one base commit plan the same base run's job from two workers. Replayed exactly: the
    # second worker's insert lands between the first one's read (no such job) and its commit.
    run = _run(store)
    jobs = [lifecycle.new_job(run, suite, "cpu", 60) for suite in ("correctness", "fusion")]
    other = Store(f"sqlite:///{tmp_path / 'ci.db'}")
    raced = []

    def other_worker_inserts(conn, cursor, statement, *args) -> None:  # noqa: ANN001
        if not raced and statement.lstrip().upper().startswith("SELECT") and "FROM jobs" in statement:
            raced.append(True)
            other.add_jobs_if_absent([lifecycle.new_job(run, "correctness", "cpu", 60)])

    event.listen(store.engine, "after_cursor_execute", other_worker_inserts)
    store.add_jobs_if_absent(jobs)  # raised IntegrityError (UNIQUE constraint failed: jobs.id) before the fix
    assert raced, "the race was not replayed"
    assert sorted(job.suite for job in store.jobs_of(run.id)) == ["correctness", "fusion"]

"""Reporting against the strict fake GitHub when it misbehaves: never a duplicate, never stuck, never back."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.celery_app import create_celery
from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.stack import INSTALLATION_ID
from service.github import reporting
from service.github.api import GoneError, TransientGitHubError
from service.jobs import lifecycle
from service.jobs.context import WorkerContext
from service.jobs.tasks import build_context
from service.store import Job, NewRun, TestRecord, utcnow
from service.store.attempts import attempts_of
from tests.rows import force_job

REPO = "octo/faults"
SHA = "c" * 40


@pytest.fixture
def ctx(settings: Settings, emulator: GitHubEmulator, tmp_path: Path) -> Iterator[WorkerContext]:
    emulator.add_installation(INSTALLATION_ID, repos=[REPO])
    yield build_context(settings, create_celery(settings), suites_dir=tmp_path)


def _job(ctx: WorkerContext, **fields: object) -> Job:
    run, _ = ctx.store.create_run_if_absent(NewRun(
        repo_full_name=REPO, repo_id=1, installation_id=INSTALLATION_ID, clone_url="https://x", private=False,
        trigger="pull_request", trigger_ref="pr/1", pr_number=1, branch="b", head_sha=SHA, sender="octocat"))
    job = Job(id=f"{run.id}-correctness-cpu", run_id=run.id, suite="correctness", device="cpu", timeout_s=60,
              attempt=1, state="queued", reported="", passed=0, failed=0, skipped=0, errors=0, title="", detail="")
    ctx.store.add_jobs_if_absent([job])
    if fields:
        force_job(ctx.store, job.id, **fields)
    return job


def test_a_create_applied_then_answered_502_is_not_duplicated(ctx: WorkerContext, emulator: GitHubEmulator) -> None:
    job = _job(ctx)
    emulator.inject("POST", r"/check-runs$", 502, apply=True)
    with pytest.raises(TransientGitHubError):
        reporting.report_job(ctx, job.id)
    reporting.report_job(ctx, job.id)  # what Celery's retry does
    (check_run,) = emulator.check_runs(REPO)
    assert check_run["external_id"] == job.id
    assert ctx.store.get_job(job.id).check_run_id == check_run["id"]
    force_job(ctx.store, job.id, state="completed", conclusion="success", finished_at=utcnow())
    reporting.report_job(ctx, job.id)
    (check_run,) = emulator.check_runs(REPO)
    assert check_run["conclusion"] == "success"


def test_rate_limit_is_retried_at_githubs_reset_time(ctx: WorkerContext, emulator: GitHubEmulator) -> None:
    job = _job(ctx)
    reset = int(time.time()) + 120
    emulator.inject("POST", r"/check-runs$", 403, headers={"X-RateLimit-Remaining": "0",
                                                          "X-RateLimit-Reset": str(reset)},
                    body={"message": "API rate limit exceeded", "documentation_url": "https://docs.github.com"})
    with pytest.raises(TransientGitHubError) as raised:
        reporting.report_job(ctx, job.id)
    assert raised.value.retry_after is not None and 100 < raised.value.retry_after <= 120
    emulator.inject("POST", r"/check-runs$", 429, headers={"Retry-After": "7"})
    with pytest.raises(TransientGitHubError) as raised:
        reporting.report_job(ctx, job.id)
    assert raised.value.retry_after == 7
    assert emulator.check_runs(REPO) == []
    reporting.report_job(ctx, job.id)
    assert len(emulator.check_runs(REPO)) == 1


def test_posts_are_never_retried_by_the_transport(ctx: WorkerContext, emulator: GitHubEmulator) -> None:
    job = _job(ctx)
    emulator.inject("POST", r"/check-runs$", 502, times=3)
    with pytest.raises(TransientGitHubError):
        reporting.report_job(ctx, job.id)
    assert sum(1 for method, path, _ in emulator.requests if method == "POST" and path.endswith("/check-runs")) == 1


def test_a_vanished_sha_stops_quietly(ctx: WorkerContext, emulator: GitHubEmulator) -> None:
    job = _job(ctx)
    emulator.inject("POST", r"/check-runs$", 422, body={"message": "No commit found for SHA",
                                                        "documentation_url": "https://docs.github.com"})
    reporting.report_job(ctx, job.id)  # no exception, so no Celery retry
    assert ctx.store.get_job(job.id).reported == "completed"
    reporting.report_job(ctx, job.id)
    assert emulator.check_runs(REPO) == []


def test_more_than_50_annotations_go_in_batches(ctx: WorkerContext, emulator: GitHubEmulator) -> None:
    job = _job(ctx, state="completed", conclusion="failure", failed=120, finished_at=utcnow())
    ctx.store.replace_results(job.id, 1, [TestRecord(nodeid=f"t.py::test_{i}", outcome="failed", duration_s=0.1,
                                                     message=f"boom {i}", file="t.py", line=i + 1)
                                          for i in range(120)])
    reporting.report_job(ctx, job.id)
    reporting.report_job(ctx, job.id)  # a redelivered report adds nothing
    (check_run,) = emulator.check_runs(REPO)
    assert len(check_run["annotations"]) == 120
    assert sorted(a["start_line"] for a in check_run["annotations"]) == list(range(1, 121))
    writes = [body for method, path, body in emulator.requests if "/check-runs" in path and method != "GET"]
    assert [len(body["output"].get("annotations", [])) for body in writes] == [50, 50, 20]
    assert [a["identifier"] for a in check_run["actions"]] == ["rerun"]
    assert check_run["status"] == "completed" and all(s == "completed" for s, _ in check_run["history"])


def test_a_completed_check_run_is_never_moved_back(ctx: WorkerContext, emulator: GitHubEmulator) -> None:
    job = _job(ctx, state="completed", conclusion="failure", finished_at=utcnow())
    reporting.report_job(ctx, job.id)
    force_job(ctx.store, job.id, state="running")  # a late, reordered state change
    reporting.report_job(ctx, job.id)
    (check_run,) = emulator.check_runs(REPO)
    assert [s for s, _ in check_run["history"]] == ["completed"]


def test_gone_error_is_what_404_means(ctx: WorkerContext) -> None:
    with pytest.raises(GoneError):
        ctx.github.pull_request(INSTALLATION_ID, REPO, 404)


def test_a_rerun_started_before_its_first_report_still_shows_queued_first(ctx: WorkerContext,
                                                                          emulator: GitHubEmulator) -> None:
    job = _job(ctx, state="completed", conclusion="cancelled", finished_at=utcnow())
    reporting.report_job(ctx, job.id)
    rerun = lifecycle.rerun(ctx.store, job.id)
    assert rerun is not None
    assert lifecycle.start(ctx.store, job.id, "worker-1")  # the worker won the race with the report
    reporting.report_job(ctx, job.id)
    first, second = emulator.check_runs(REPO)
    assert [s for s, _ in second["history"]] == ["queued", "in_progress"]
    # Each check run's Details link opens its own attempt, and keeps doing so after the re-run.
    assert first["details_url"].endswith(f"/jobs/{job.id}/attempts/1")
    assert second["details_url"].endswith(f"/jobs/{job.id}/attempts/2")
    (record,) = attempts_of(ctx.store, job.id)
    assert (record.rerun, record.conclusion) == (0, "cancelled")

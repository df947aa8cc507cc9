"""While a job runs as shards, its one check run shows the sum of their progress: each shard's watch records its
own count and publishes its siblings' total into the job, and asks for the check run to be updated."""

from __future__ import annotations

from pathlib import Path

from service.celery_app import REPORT_JOB, create_celery
from service.config import Settings
from service.github.checks import render_check_run
from service.jobs import lifecycle
from service.jobs.context import WorkerContext
from service.jobs.lease import LeaseKeeper, owner_of
from service.jobs.sharding import _ShardWatch
from service.jobs.tasks import build_context
from service.store import NewRun, Shard
from service.store.shards import add_shards_if_absent, shards_of

BASE_ENV = {"COMPILE_CI_WEBHOOK_SECRET": "s", "COMPILE_CI_GITHUB_APP_ID": "1",
            "COMPILE_CI_GITHUB_PRIVATE_KEY": "-----BEGIN RSA PRIVATE KEY-----\nx\n-----END RSA PRIVATE KEY-----"}


def _context(tmp_path: Path, redis_url: str) -> WorkerContext:
    settings = Settings.from_env({**BASE_ENV, "COMPILE_CI_DATA_DIR": str(tmp_path), "COMPILE_CI_RUNNER": "local",
                                  "COMPILE_CI_REDIS_URL": redis_url,
                                  "COMPILE_CI_DATABASE_URL": f"sqlite:///{tmp_path / 'ci.db'}"})
    return build_context(settings, create_celery(settings), suites_dir=tmp_path)


def _watch(ctx: WorkerContext, shard: Shard, tmp_path: Path) -> _ShardWatch:
    job = ctx.store.get_job(shard.job_id)
    assert job is not None
    return _ShardWatch(ctx, job, shard, LeaseKeeper(ctx.claims, shard.id, owner_of(shard.id)), tmp_path)


def test_the_check_run_shows_the_sum_of_the_shards_progress(tmp_path: Path, redis_url: str) -> None:
    ctx = _context(tmp_path, redis_url)
    run, _ = ctx.store.create_run_if_absent(NewRun(
        repo_full_name="octo/zoo", repo_id=1, installation_id=2, clone_url="file:///x", private=False,
        trigger="pull_request", trigger_ref="pull_request/a", pr_number=1, branch="b", head_sha="a" * 40, sender="o"))
    lifecycle.plan(ctx.store, run, [lifecycle.new_job(run, "correctness", "cpu", 60)], None)
    (job,) = ctx.store.jobs_of(run.id)
    started = lifecycle.start_sharded(ctx.store, job.id, "local", 3)
    assert started is not None
    add_shards_if_absent(ctx.store, lifecycle.new_shards(started, "{}"))
    first, second, _third = shards_of(ctx.store, job.id, 1)  # the third is still queued: it adds nothing yet
    first, second = (lifecycle.start_shard(ctx.store, s.id, "local") for s in (first, second))
    assert first is not None and second is not None

    _watch(ctx, second, tmp_path).publish((4, 10, ""))
    _watch(ctx, first, tmp_path).publish((3, 12, "correctness/test_correctness.py::test_mlp"))

    now = ctx.store.get_job(job.id)
    assert now is not None
    view = render_check_run(run, now, [], "http://ci/jobs/x")
    assert (view.status, view.title) == ("in_progress", "Running: 7 / 22 tests")
    assert "as 3 shards" in view.summary
    assert "correctness/test_correctness.py::test_mlp (shard 1 of 3)" in view.summary
    sent = [args for task, args in ctx.claims.pending_tasks(("github",)) if task == REPORT_JOB]
    assert sent and all(args == [job.id] for args in sent)

    # A shard attempt given up on (its worker lost, the shard re-run) no longer counts: the newer attempt does.
    again = lifecycle.start_shard(ctx.store, second.id, "local")
    assert again is not None
    _watch(ctx, second, tmp_path).publish((9, 10, ""))  # the old attempt's watch, late
    assert ctx.store.get_job(job.id).progress_done == 7
    _watch(ctx, again, tmp_path).publish((1, 10, ""))
    assert (ctx.store.get_job(job.id).progress_done, ctx.store.get_job(job.id).progress_total) == (4, 22)

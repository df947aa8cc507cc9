"""The reaper and sharded jobs, with a real Redis: a shard whose lease lapsed is re-queued alone (never its job or its
siblings), then failed; a killed predecessor's shard runs again at a worker's start; a shard message lost is sent
again; a fan-out lost midway is re-queued whole; a job never merged is merged."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import redis

from service.celery_app import create_celery
from service.config import Settings
from service.jobs import lifecycle
from service.jobs.context import WorkerContext
from service.jobs.lifecycle import Conclusion, Outcome
from service.jobs.reaper import reap
from service.jobs.shard_reaper import recover_shards_of_dead_workers_here
from service.jobs.tasks import build_context
from service.store import NewRun, Shard, utcnow
from service.store.claims import PRIORITY_SEP
from service.store.shards import add_shards_if_absent, shards_of


def queued(settings: Settings, queue: str = "cpu") -> list[tuple[str, list[Any]]]:
    broker = redis.Redis.from_url(settings.redis_url)
    names = [queue, *(f"{queue}{PRIORITY_SEP}{step}" for step in range(1, 10))]
    messages = [json.loads(m) for name in names for m in broker.lrange(name, 0, -1)]
    return [(m["headers"]["task"], json.loads(base64.b64decode(m["body"]))[0]) for m in messages]


def sharded_job(settings: Settings, tmp_path: Path, count: int = 3, make_shards: bool = True
                ) -> tuple[WorkerContext, str, list[Shard]]:
    ctx = build_context(settings, create_celery(settings), suites_dir=tmp_path)
    run, _ = ctx.store.create_run_if_absent(NewRun(
        repo_full_name="octo/zoo", repo_id=99, installation_id=7, clone_url="file:///x", private=False,
        trigger="push", trigger_ref="refs/heads/main", pr_number=None, branch="main", head_sha="e" * 40,
        sender="o"))
    lifecycle.plan(ctx.store, run, [lifecycle.new_job(run, "correctness", "cpu", 3600)], None)
    job = lifecycle.start_sharded(ctx.store, f"{run.id}-correctness-cpu", "local", count)
    assert job is not None
    if make_shards:
        add_shards_if_absent(ctx.store, lifecycle.new_shards(job, "{}"))
    return ctx, job.id, shards_of(ctx.store, job.id, 1)


def test_a_shard_whose_lease_lapsed_is_requeued_alone_then_failed(settings: Settings, tmp_path: Path) -> None:
    ctx, job_id, (lost, done, waiting) = sharded_job(settings, tmp_path)
    ctx.queue.run_shard(waiting.id, "cpu")  # the third waits in the queue
    for shard in (lost, done):
        lifecycle.start_shard(ctx.store, shard.id, "local")
    assert ctx.claims.acquire_lease(lost.id, "worker-1", 15)
    lifecycle.complete_shard(ctx.store, shards_of(ctx.store, job_id, 1)[1], Outcome(Conclusion.SUCCESS, "no tests"),
                             "tests")
    assert reap(ctx) == []  # its worker holds the lease; the job itself holds none and is not "lost"
    ctx.claims.release_lease(lost.id, "worker-1")  # the worker was SIGKILLed: its lease lapsed
    assert reap(ctx) == []  # once: a live worker whose lease vanished with Redis takes it again meanwhile
    assert reap(ctx) == [f"{lost.id}: running with its lease lapsed (its worker is gone); re-queued alone"]
    shards = shards_of(ctx.store, job_id, 1)
    assert [(s.state, s.attempt) for s in shards] == [("queued", 1), ("completed", 1), ("queued", 0)]
    assert ("compile_ci.run_shard", [lost.id]) in queued(settings)
    job = ctx.store.get_job(job_id)
    assert (job.state, job.attempt, job.infra_failures) == ("running", 1, 0)  # the job is not run again

    lifecycle.start_shard(ctx.store, lost.id, "local")  # lost a second time
    assert reap(ctx) == []
    assert reap(ctx) == [f"{lost.id}: its worker was lost again; completed as an infrastructure failure"]
    assert shards_of(ctx.store, job_id, 1)[0].title == lifecycle.INFRA_TITLE
    assert queued(settings).count(("compile_ci.run_shard", [lost.id])) == 2  # this one merges the job


def test_a_lost_shard_message_is_sent_again(settings: Settings, tmp_path: Path) -> None:
    ctx, _job_id, (first, second) = sharded_job(settings, tmp_path, count=2)
    ctx.queue.run_shard(first.id, "cpu")
    assert reap(ctx, utcnow() + timedelta(minutes=5)) == [f"{second.id}: queued with no message in the broker; "
                                                          "sent again"]
    assert sorted(args[0] for _task, args in queued(settings)) == sorted([first.id, second.id])


def test_a_fan_out_lost_before_its_shards_existed_is_requeued_whole(settings: Settings, tmp_path: Path) -> None:
    ctx, job_id, shards = sharded_job(settings, tmp_path, make_shards=False)
    assert shards == [] and reap(ctx) == []  # its fan-out may still be writing them
    (line,) = reap(ctx, utcnow() + timedelta(minutes=5))
    assert line == f"{job_id}: running as shards, but none was made (its worker is gone); re-queued"
    assert ctx.store.get_job(job_id).state == "queued" and ("compile_ci.run_job", [job_id]) in queued(settings)


def test_a_restarted_worker_runs_its_killed_predecessors_shard_again_alone(settings: Settings, tmp_path: Path
                                                                           ) -> None:
    ctx, job_id, (lost, alive) = sharded_job(settings, tmp_path, count=2)
    for shard in (lost, alive):
        lifecycle.start_shard(ctx.store, shard.id, "local")
    gone = subprocess.Popen(["true"])
    gone.wait()  # a process of this host that no longer exists held the lease: the killed worker
    assert ctx.claims.acquire_lease(lost.id, f"{socket.gethostname()}:{gone.pid}:1:{lost.id}", 15)
    assert ctx.claims.acquire_lease(alive.id, f"{socket.gethostname()}:{os.getpid()}:1:{alive.id}", 15)
    assert recover_shards_of_dead_workers_here(ctx) == [
        f"{lost.id}: its worker on this host is gone; re-queued alone, first"]
    assert [s.state for s in shards_of(ctx.store, job_id, 1)] == ["queued", "running"]
    assert queued(settings) == [("compile_ci.run_shard", [lost.id])]


def test_a_job_whose_shards_all_completed_but_never_merged_is_merged(settings: Settings, tmp_path: Path) -> None:
    ctx, job_id, shards = sharded_job(settings, tmp_path, count=2)
    for shard in shards:
        started = lifecycle.start_shard(ctx.store, shard.id, "local")
        lifecycle.complete_shard(ctx.store, started, Outcome(Conclusion.SUCCESS, "no tests"), "tests")
    assert reap(ctx) == []  # the worker of the last one is merging it now
    assert reap(ctx, utcnow() + timedelta(minutes=5)) == [
        f"{job_id}: every shard completed but the job was never merged; merging it"]
    assert queued(settings) == [("compile_ci.run_shard", [shards[-1].id])]  # a completed shard's message merges

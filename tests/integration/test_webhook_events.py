"""The webhook side of comments, check-run buttons and installations: parse and queue, never call GitHub."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient

from service.celery_app import create_celery
from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.deliveries import fixture, issue_comment_event, pull_request_event, signed
from service.jobs.context import WorkerContext
from service.jobs.pipeline import run_job
from service.jobs.reaper import reap, recover_jobs_of_dead_workers_here
from service.jobs.run_planning import plan_run
from service.jobs.tasks import build_context
from service.store import Job, Store, utcnow
from service.store.claims import PRIORITY_SEP
from service.web.app import create_app
from tests.rows import force_job, force_run

REPO = {"full_name": "octo/zoo", "repo_id": 99, "clone_url": "https://github.com/octo/zoo.git", "installation_id": 7}


@pytest.fixture
def client(settings: Settings) -> FlaskClient:
    return create_app(settings).test_client()


def deliver(client: FlaskClient, event: str, payload: Any):
    headers, body = signed("test-webhook-secret", event, payload)
    return client.post("/webhook", data=body, headers=headers)


def _lists(queue: str) -> list[str]:
    """kombu keeps one list per priority step: the queue's name, then the name + separator + step."""
    return [queue, *(f"{queue}{PRIORITY_SEP}{step}" for step in range(1, 10))]


def queued(settings: Settings, queue: str = "github") -> list[tuple[str, list[Any]]]:
    broker = redis.Redis.from_url(settings.redis_url)
    messages = [json.loads(m) for name in _lists(queue) for m in broker.lrange(name, 0, -1)]
    return [(m["headers"]["task"], json.loads(base64.b64decode(m["body"]))[0]) for m in messages]


def drop(settings: Settings, queue: str) -> None:
    """What a Redis restart without persistence does to a queue."""
    redis.Redis.from_url(settings.redis_url).delete(*_lists(queue))


def comment(body: str, **extra: Any) -> dict[str, Any]:
    return issue_comment_event("created", number=5, body=body, commenter="maria", **{**REPO, **extra})


@pytest.mark.parametrize(("payload", "message"), [
    (comment("/rerun cuda", on_pull_request=False), "comment on an issue, not a pull request"),
    (comment("/rerun", commenter_type="Bot"), "comment by a bot"),
    (comment("> /rerun\nthanks!"), "no commands"),
])
def test_comments_that_do_nothing(client: FlaskClient, settings: Settings, emulator: GitHubEmulator,
                                  payload: dict[str, Any], message: str) -> None:
    response = deliver(client, "issue_comment", payload)
    assert response.status_code == 202 and response.json["messages"] == [message]
    assert queued(settings) == [] and emulator.requests == []


def test_a_command_is_queued_for_the_github_worker(client: FlaskClient, settings: Settings,
                                                   emulator: GitHubEmulator) -> None:
    response = deliver(client, "issue_comment", comment("/ok-to-test\n/rerun cuda", comment_id=77))
    assert response.status_code == 202
    ((task, (request,)),) = queued(settings)
    assert task == "compile_ci.handle_comment"
    assert (request["comment_id"], request["commenter"], request["lines"]) == (77, "maria",
                                                                                ["/ok-to-test", "/rerun cuda"])
    assert emulator.requests == []  # the permission check happens in the worker


@pytest.mark.parametrize("action", ["edited", "deleted"])
def test_edited_and_deleted_comments_do_nothing(client: FlaskClient, settings: Settings, action: str) -> None:
    payload = fixture("issue_comment", action)
    payload["comment"]["body"] = "/rerun"
    assert deliver(client, "issue_comment", payload).status_code == 204
    assert queued(settings) == []


def test_check_runs_of_other_apps_are_ignored(client: FlaskClient, settings: Settings) -> None:
    payload = fixture("check_run", "rerequested")  # app.id 2, not ours
    payload["installation"] = {"id": 7}
    response = deliver(client, "check_run", payload)
    assert response.json["messages"] == ["check run of another app"] and queued(settings) == []


def test_untrusted_author_waits_and_removed_repositories_run_nothing(client: FlaskClient, settings: Settings,
                                                                    tmp_path: Path) -> None:
    outsider = pull_request_event("opened", number=6, head_sha="d" * 40, head_ref="f", base_sha="b" * 40,
                                  author="eve", association="CONTRIBUTOR", **REPO)
    response = deliver(client, "pull_request", outsider)
    assert "(waiting for approval)" in response.json["messages"][0]
    store = Store(settings.database_url)
    (run,) = store.recent_runs()
    assert (run.gate, run.author) == ("waiting", "eve")

    removed = fixture("installation_repositories", "removed")
    removed["repositories_removed"][0]["full_name"] = "octo/zoo"
    assert deliver(client, "installation_repositories", removed).status_code == 202
    assert store.is_uninstalled("octo/zoo")
    ctx = build_context(settings, create_celery(settings), suites_dir=tmp_path)
    drop(settings, "github")
    plan_run(ctx, run.id)  # dropped with a log line: no approval check run, nothing queued
    assert store.jobs_of(run.id) == [] and queued(settings) == []

    # A job queued before the removal is dropped when a worker takes it, and completed so the reaper leaves it be.
    job_id = f"{run.id}-correctness-cpu"
    store.add_jobs_if_absent([Job(id=job_id, run_id=run.id, suite="correctness", device="cpu", timeout_s=60,
                                  attempt=0, state="queued")])
    run_job(ctx, job_id)
    job = store.get_job(job_id)
    assert (job.state, job.conclusion) == ("completed", "cancelled") and "removed" in job.detail
    assert reap(ctx, utcnow() + timedelta(days=1)) == [] and queued(settings, "cpu") == []


def _running_job(settings: Settings, tmp_path: Path, client: FlaskClient, state: str = "running",
                 queued_at: timedelta = timedelta(0)) -> tuple[WorkerContext, str]:
    deliver(client, "pull_request", pull_request_event("opened", number=8, head_sha="e" * 40, head_ref="f",
                                                       base_sha="b" * 40, **REPO))
    ctx = build_context(settings, create_celery(settings), suites_dir=tmp_path)
    (run,) = ctx.store.recent_runs()
    force_run(ctx.store, run.id, state="planned")  # its jobs were planned (a planning run's are only shown)
    job_id = f"{run.id}-correctness-cpu"
    ctx.store.add_jobs_if_absent([Job(id=job_id, run_id=run.id, suite="correctness", device="cpu", timeout_s=3600,
                                      attempt=1 if state == "running" else 0, state=state, started_at=utcnow(),
                                      queued_at=utcnow() - queued_at)])
    return ctx, job_id


def test_reaper_requeues_a_job_whose_lease_lapsed_then_fails_it(settings: Settings, tmp_path: Path,
                                                                client: FlaskClient) -> None:
    ctx, job_id = _running_job(settings, tmp_path, client)
    store = ctx.store
    assert ctx.claims.acquire_lease(job_id, "worker-1", 15)
    assert reap(ctx) == []  # its worker holds the lease: alive, however long the job is
    ctx.claims.release_lease(job_id, "worker-1")  # the worker was SIGKILLed: its lease lapsed
    assert reap(ctx) == []  # once: a live worker whose lease vanished with Redis takes it again meanwhile
    assert reap(ctx) == [f"{job_id}: running with its lease lapsed (its worker is gone); re-queued"]
    assert store.get_job(job_id).state == "queued"  # seconds after the death, not at the hour-long time limit
    assert ("compile_ci.run_job", [job_id]) in queued(settings, "cpu")
    force_job(store, job_id, state="running", attempt=2, started_at=utcnow())
    assert reap(ctx) == []
    (line,) = reap(ctx)
    assert "completed as an infrastructure failure" in line
    job = store.get_job(job_id)
    assert (job.state, job.conclusion, job.title) == ("completed", "failure",
                                                     "Infrastructure error — not a test failure")


def test_reaper_resends_a_lost_message_but_not_one_waiting_in_a_backlog(settings: Settings, tmp_path: Path,
                                                                        client: FlaskClient) -> None:
    ctx, job_id = _running_job(settings, tmp_path, client, state="queued", queued_at=timedelta(minutes=5))
    drop(settings, "cpu")
    ctx.queue.run_job(job_id, "cpu")  # waits behind a long backlog: its message is in the broker
    assert reap(ctx) == []
    drop(settings, "cpu")  # lost with a Redis restart
    assert reap(ctx) == [f"{job_id}: queued with no message in the broker; sent again"]
    assert queued(settings, "cpu") == [("compile_ci.run_job", [job_id])]
    assert reap(ctx) == []  # sent once, not once per pass


def test_a_job_just_queued_is_not_resent(settings: Settings, tmp_path: Path, client: FlaskClient) -> None:
    ctx, _job_id = _running_job(settings, tmp_path, client, state="queued")
    drop(settings, "cpu")
    assert reap(ctx) == []  # its first message may still be on its way


def test_reaper_plans_again_a_run_whose_plan_message_was_lost(settings: Settings, tmp_path: Path,
                                                              client: FlaskClient) -> None:
    deliver(client, "pull_request", pull_request_event("opened", number=8, head_sha="e" * 40, head_ref="f",
                                                       base_sha="b" * 40, **REPO))
    ctx = build_context(settings, create_celery(settings), suites_dir=tmp_path)
    (run,) = ctx.store.recent_runs()
    force_run(ctx.store, run.id, created_at=utcnow() - timedelta(minutes=5))
    assert not [line for line in reap(ctx) if "planning" in line]  # its plan message waits in the queue
    drop(settings, "github")  # lost with a Redis restart
    assert f"run {run.id}: planning with no message in the broker; sent again" in reap(ctx)
    assert ("compile_ci.plan_run", [run.id]) in queued(settings)


def test_a_message_stranded_with_a_dead_worker_is_sent_again(settings: Settings, tmp_path: Path,
                                                             client: FlaskClient) -> None:
    ctx, job_id = _running_job(settings, tmp_path, client, state="queued", queued_at=timedelta(minutes=5))
    broker = redis.Redis.from_url(settings.redis_url)
    drop(settings, "cpu")
    ctx.queue.run_job(job_id, "cpu", first=True)
    message = broker.rpop("cpu")  # a worker took it (kombu keeps it as unacknowledged) ...
    broker.hset("unacked", "tag-1", json.dumps([json.loads(message), "cpu", "cpu"]))
    broker.zadd("unacked_index", {"tag-1": time.time()})
    assert reap(ctx) == []  # ... and is about to start it
    broker.zadd("unacked_index", {"tag-1": time.time() - 120})  # ... and died before it could: hours until redelivery
    assert reap(ctx) == [f"{job_id}: queued with no message in the broker; sent again"]


def test_a_restarted_worker_runs_its_killed_predecessors_job_first(settings: Settings, tmp_path: Path,
                                                                   client: FlaskClient) -> None:
    ctx, job_id = _running_job(settings, tmp_path, client)
    gone = subprocess.Popen(["true"])
    gone.wait()  # a process of this host that no longer exists held the lease: the killed worker
    assert ctx.claims.acquire_lease(job_id, f"{socket.gethostname()}:{gone.pid}:1:{job_id}", 15)
    drop(settings, "cpu")
    ctx.queue.run_job("some-other-job", "cpu")  # already waiting when the worker restarts
    assert recover_jobs_of_dead_workers_here(ctx) == [f"{job_id}: its worker on this host is gone; re-queued first"]
    assert ctx.store.get_job(job_id).state == "queued" and ctx.claims.lease_holder(job_id) is None
    # kombu takes the lowest priority step's list first: the recovered job runs before the one that was waiting.
    broker = redis.Redis.from_url(settings.redis_url)
    first = [json.loads(m)["headers"]["argsrepr"] for m in broker.lrange("cpu", 0, -1)]
    assert first == [repr([job_id])] and ("compile_ci.run_job", ["some-other-job"]) in queued(settings, "cpu")


def test_a_live_or_remote_worker_keeps_its_job(settings: Settings, tmp_path: Path, client: FlaskClient) -> None:
    ctx, job_id = _running_job(settings, tmp_path, client)
    assert ctx.claims.acquire_lease(job_id, f"{socket.gethostname()}:{os.getpid()}:1:{job_id}", 15)
    assert recover_jobs_of_dead_workers_here(ctx) == []
    ctx.claims.release_lease(job_id, f"{socket.gethostname()}:{os.getpid()}:1:{job_id}")
    assert ctx.claims.acquire_lease(job_id, f"another-host:{os.getpid() + 1}:1:{job_id}", 15)
    assert recover_jobs_of_dead_workers_here(ctx) == []  # a pid of another host says nothing here
    assert ctx.store.get_job(job_id).state == "running"

"""A delivery is recorded in full or not at all: a web worker killed mid-write leaves nothing, so GitHub's redelivery
is handled, exactly once; messages committed but not sent (broker down, process gone) are sent by the reaper.

The kill is replayed with real gunicorn and PostgreSQL: the worker is SIGKILLed in the middle of handling the
delivery, its transaction waiting to write the run (a row another transaction is writing). That is where the claim,
then a Redis key set before any write, survived the worker and answered the redelivery "duplicate delivery: already
handled"; now the claim is a row of that same transaction, and goes with it."""

from __future__ import annotations

import base64
import dataclasses
import http.client
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlparse

import pytest
import redis
from sqlalchemy import text
from sqlalchemy.orm import Session

from service.celery_app import create_celery
from service.config import Settings
from service.devkit.postgres import LocalPostgres
from service.devkit.sandbox.deliveries import pull_request_event, signed
from service.devkit.sandbox.stack import Stack
from service.jobs.reaper import reap
from service.jobs.tasks import build_context
from service.store import Run, Store, run_id_for, utcnow
from service.web.app import create_app

REPO = {"full_name": "octo/once", "repo_id": 77, "clone_url": "https://github.com/octo/once.git", "installation_id": 7}


def opened(sha: str) -> dict[str, object]:
    return pull_request_event("opened", number=3, head_sha=sha, head_ref="f", base_sha="b" * 40, **REPO)


def plan_messages(redis_url: str) -> list[list[object]]:
    broker = redis.Redis.from_url(redis_url)
    return [json.loads(base64.b64decode(json.loads(m)["body"]))[0] for m in broker.lrange("github", 0, -1)]


@pytest.fixture
def stack(tmp_path: Path, postgres: LocalPostgres, postgres_url: str) -> Iterator[tuple[Stack, LocalPostgres]]:
    with Stack(tmp_path, web_workers=1, workers=False, database_url=postgres_url) as started:
        yield started, postgres


def _post(url: str, headers: dict[str, str], body: bytes) -> int:
    target = urlparse(url)
    conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
    try:
        conn.request("POST", "/webhook", body=body, headers=headers)
        return conn.getresponse().status
    except (ConnectionError, http.client.HTTPException):
        return 0  # the worker died under the request
    finally:
        conn.close()


def _wait_for(condition: object, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_worker_killed_mid_delivery_leaves_nothing_and_the_redelivery_runs_once(
    stack: tuple[Stack, LocalPostgres],
) -> None:
    web, postgres = stack
    headers, body = signed(web.webhook_secret, "pull_request", opened("a" * 40), "delivery-killed")
    store = Store(web.database_url)
    try:
        _kill_mid_write_then_redeliver(web, postgres, store, headers, body)
    finally:
        store.engine.dispose()


def _kill_mid_write_then_redeliver(web: Stack, postgres: LocalPostgres, store: Store, headers: dict[str, str],
                                   body: bytes) -> None:
    blocker = Session(store.engine)  # another transaction writing the same run: the worker's write waits on it
    blocker.add(Run(id=run_id_for("octo/once", "pr/3", "a" * 40), repo_full_name="octo/once", repo_id=77,
                    installation_id=7, clone_url="x", trigger="pull_request", pr_number=3, head_sha="a" * 40))
    blocker.flush()
    answers: list[int] = []
    first = threading.Thread(target=lambda: answers.append(_post(web.web_url, headers, body)))
    first.start()

    def waiting_on_the_run_row() -> bool:
        waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        return postgres.sql(waiting, database=web.database_url.rsplit("/", 1)[1]).strip() == "1"

    _wait_for(waiting_on_the_run_row, "the web worker to be mid-delivery, waiting to write the run")
    (worker_pid,) = subprocess.run(["pgrep", "-P", str(web.process("web").pid)], capture_output=True, text=True,
                                   check=True).stdout.split()
    os.kill(int(worker_pid), signal.SIGKILL)
    first.join(timeout=30)
    blocker.rollback()
    blocker.close()
    assert answers == [0]  # GitHub saw the delivery fail: it will be redelivered

    assert _post(web.web_url, headers, body) == 202  # handled, not "already handled"
    assert _post(web.web_url, headers, body) == 200  # and now, once handled, a duplicate
    assert [r.head_sha for r in store.recent_runs()] == ["a" * 40]
    assert plan_messages(web.redis_url) == [[store.recent_runs()[0].id]]
    with store.engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM deliveries")).scalar() == 1


def test_messages_the_broker_refused_are_kept_with_the_delivery_and_sent_by_the_reaper(
    settings: Settings, tmp_path: Path,
) -> None:
    down = dataclasses.replace(settings, redis_url="redis://127.0.0.1:9/0")  # nothing listens on port 9
    headers, body = signed("test-webhook-secret", "pull_request", opened("c" * 40), "delivery-broker-down")
    response = create_app(down).test_client().post("/webhook", data=body, headers=headers)
    assert response.status_code == 202  # the run is recorded: GitHub need not redeliver
    store = Store(settings.database_url)
    (run,) = store.recent_runs()
    assert plan_messages(settings.redis_url) == []
    ctx = build_context(settings, create_celery(settings), suites_dir=tmp_path)
    assert reap(ctx) == []  # a webhook may still be sending them
    did = [line for line in reap(ctx, utcnow() + timedelta(minutes=1)) if "delivery" in line]
    assert did == ["delivery delivery-broker-down: 1 message(s) left unsent; sent now"]
    assert plan_messages(settings.redis_url) == [[run.id]]
    assert [line for line in reap(ctx, utcnow() + timedelta(minutes=2)) if "delivery" in line] == []  # once

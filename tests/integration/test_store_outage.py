"""The database unavailable: the webhook answers 503 + Retry-After + JSON (nothing half-recorded, the redelivery is
handled), pages say "Database unavailable" instead of a bare 500, and web, worker and beat start anyway and say
what is wrong. Faults are real: SQLite's own read-only and full errors, a PostgreSQL server that is stopped."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient
from sqlalchemy import event

from service.config import Settings
from service.devkit.postgres import LocalPostgres
from service.devkit.sandbox.deliveries import pull_request_event, signed
from service.store import Store
from service.web.app import create_app

REPO = {"full_name": "octo/down", "repo_id": 5, "clone_url": "https://github.com/octo/down.git", "installation_id": 7}


def deliver(client: FlaskClient, number: int, delivery: str) -> Any:
    payload = pull_request_event("opened", number=number, head_sha=f"{number:040x}", head_ref="f", base_sha="b" * 40,
                                 **REPO)
    headers, body = signed("test-webhook-secret", "pull_request", payload, delivery)
    return client.post("/webhook", data=body, headers=headers)


def assert_redeliver_later(response: Any) -> None:
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "30" and response.is_json
    assert response.json["error"] == "database unavailable: redeliver later"


def _with_pragma(store: Store, pragma: str) -> Callable[[], None]:
    """Every new connection of the app's engine gets `pragma` (SQLite reports it as its real error); the undo."""
    def apply(connection: Any, _record: object) -> None:
        connection.execute(pragma)

    event.listen(store.engine, "connect", apply)
    store.engine.dispose()

    def undo() -> None:
        event.remove(store.engine, "connect", apply)
        store.engine.dispose()

    return undo


def test_sqlite_read_only_answers_503_and_the_redelivery_is_handled(settings: Settings,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    app = create_app(settings)
    client, store = app.test_client(), app.extensions["compile_ci"].store
    undo = _with_pragma(store, "PRAGMA query_only = ON")
    assert_redeliver_later(deliver(client, 1, "d-ro"))
    assert "attempt to write a readonly database" in caplog.text  # the operator's log says which fault
    assert client.get("/").status_code == 200 and client.get("/status").status_code == 200  # reading still works
    undo()
    assert deliver(client, 1, "d-ro").status_code == 202  # nothing was claimed: GitHub's redelivery is handled
    assert [r.pr_number for r in store.recent_runs()] == [1]


def test_sqlite_full_answers_503_with_nothing_half_recorded(settings: Settings,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    app = create_app(settings)
    client, store = app.test_client(), app.extensions["compile_ci"].store
    with store.engine.connect() as connection:
        pages = connection.exec_driver_sql("PRAGMA page_count").scalar()
    undo = _with_pragma(store, f"PRAGMA max_page_count = {pages}")  # the disk holds no page more
    answers = [deliver(client, number, f"d-{number}") for number in range(1, 200)]
    full = next(i for i, a in enumerate(answers) if a.status_code != 202)  # once the free space is used up
    assert_redeliver_later(answers[full])
    assert "database or disk is full" in caplog.text
    recorded = {r.pr_number for r in store.recent_runs(limit=500)}
    assert full + 1 not in recorded and recorded == set(range(1, full + 1))
    undo()
    assert deliver(client, full + 1, f"d-{full + 1}").status_code == 202


def test_postgres_down_webhook_503_pages_say_so_and_all_recovers(settings: Settings, postgres: LocalPostgres,
                                                                 postgres_url: str) -> None:
    on_postgres = dataclasses.replace(settings, database_url=postgres_url)
    postgres.stop_server()
    app = create_app(on_postgres)  # the web starts without its database
    client = app.test_client()
    try:
        assert_redeliver_later(deliver(client, 1, "d-pg"))
        for page in ("/", "/status"):
            response = client.get(page)
            assert response.status_code == 503 and response.headers["Retry-After"] == "30"
            assert "Database unavailable" in response.get_data(as_text=True)
        assert client.get("/healthz").status_code == 200
    finally:
        postgres.start()
    assert deliver(client, 1, "d-pg").status_code == 202  # its schema is made once it answers
    assert client.get("/").status_code == 200
    app.extensions["compile_ci"].store.engine.dispose()


@pytest.mark.parametrize("role", ["beat", "worker"])
def test_beat_and_worker_start_without_data_dir_or_database_and_say_why(settings: Settings, tmp_path: Path,
                                                                        role: str) -> None:
    data_dir = tmp_path / "not-yet" / "data"
    key = tmp_path / "app-key.pem"
    key.write_text(settings.github_private_key.reveal())
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "COMPILE_CI_WEBHOOK_SECRET": "s", "COMPILE_CI_GITHUB_APP_ID": "1",
           "COMPILE_CI_GITHUB_PRIVATE_KEY_FILE": str(key), "COMPILE_CI_REDIS_URL": settings.redis_url,
           "COMPILE_CI_DATA_DIR": str(data_dir), "COMPILE_CI_RUNNER": "local",
           "COMPILE_CI_REAPER_INTERVAL_SECONDS": "1",
           # Nothing listens there: the database is down (and, being PostgreSQL, creates no data directory).
           "COMPILE_CI_DATABASE_URL": "postgresql+psycopg://compileci@127.0.0.1:9/compileci"}
    args = ["beat"] if role == "beat" else ["worker", "--queues", "github"]
    log = tmp_path / f"{role}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "service.cli", *args], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    broker = redis.Redis.from_url(settings.redis_url)
    ready = (lambda: broker.llen("github") > 0) if role == "beat" else (lambda: b"ready." in log.read_bytes())
    try:
        deadline = time.monotonic() + 60
        while not ready():
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        assert data_dir.is_dir()
        assert "database unavailable: OperationalError: connection failed" in log.read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=30)

"""A head that cannot be fetched (force-pushed away): a few tries, one retry chain, then check runs that say so.

Replayed with an embedded real Celery worker, the webhook, Redis, git and the GitHub emulator, while the reaper
passes and a redelivered event try to start more chains (which is how one run once had three, and 23 fetches)."""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from celery.contrib.testing.worker import start_worker

from service.celery_app import create_celery
from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.deliveries import pull_request_event, signed
from service.devkit.sandbox.sample_repo import commit_file
from service.devkit.sandbox.stack import INSTALLATION_ID
from service.jobs import lifecycle, plan_retries
from service.jobs.reaper import reap
from service.jobs.tasks import build_context, create_worker_celery
from service.store import Store, utcnow
from service.web.app import create_app
from tests.rows import force_run

FULL_NAME = "octo/pushy"
TRIES = 3


@pytest.fixture
def quick(settings: Settings) -> Settings:
    return dataclasses.replace(settings, plan_tries=TRIES, plan_retry_seconds=1)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repos" / FULL_NAME
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    commit_file(path, "main", "README.md", "hello\n", "base")
    return path


@pytest.fixture
def suites_dir(tmp_path: Path) -> Path:
    for name in ("correctness", "layout"):  # the defaults a run shows while its config cannot be read
        suite = tmp_path / "suites" / name
        suite.mkdir(parents=True)
        (suite / "test_tiny.py").write_text("def test_ok():\n    assert True\n")
    return tmp_path / "suites"


def deliver_opened(settings: Settings, sha: str, delivery: str) -> None:
    payload = pull_request_event("opened", full_name=FULL_NAME, repo_id=4002, installation_id=INSTALLATION_ID,
                                 clone_url=f"https://github.com/{FULL_NAME}.git", number=9, head_sha=sha,
                                 head_ref="gone", base_sha="0" * 40)
    headers, body = signed("test-webhook-secret", "pull_request", payload, delivery)
    response = create_app(settings).test_client().post("/webhook", data=body, headers=headers)
    assert response.status_code == 202, response.json


@pytest.fixture
def worker(quick: Settings, suites_dir: Path, emulator: GitHubEmulator) -> Iterator[None]:
    emulator.add_repo(FULL_NAME)
    emulator.add_installation(INSTALLATION_ID, repos=[FULL_NAME])
    app = create_worker_celery(quick, suites_dir=suites_dir)
    with start_worker(app, pool="threads", concurrency=4, perform_ping_check=False, shutdown_timeout=30,
                      queues=["cpu", "github"]):
        yield


def test_a_force_pushed_head_gets_failed_check_runs_once_after_a_few_tries_of_one_chain(
    quick: Settings, repo: Path, suites_dir: Path, worker: None, emulator: GitHubEmulator,
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.WARNING, logger="service.jobs.plan_retries")
    # The grace for a commit git cannot find counts from the event (30 s): on a loaded host the tries of one chain
    # can start that late, and the chain then ends after fewer tries (tests/unit/test_plan_retries.py proves the
    # grace). Here the tries are bounded by their number alone, within the two minutes every chain keeps.
    monkeypatch.setattr(plan_retries, "MISSING_GRACE_S", plan_retries.MAX_FETCH_S)
    sha = "c0ffee" + "1" * 34  # never pushed: what a head force-pushed away looks like to git
    deliver_opened(quick, sha, "d-first")
    reaper = build_context(quick, create_celery(quick), suites_dir=suites_dir)
    store = Store(quick.database_url)
    deadline = time.monotonic() + plan_retries.MAX_FETCH_S + 30  # a retry message lost is sent again after 30 s
    redelivered = False
    while not (runs := [r for r in emulator.check_runs(FULL_NAME) if r["head_sha"] == sha]) or any(
            r["status"] != "completed" for r in runs):
        assert time.monotonic() < deadline, "no completed check run for the unfetchable head"
        (run,) = store.recent_runs()
        if run.plan_tries == 1 and not redelivered:
            deliver_opened(quick, sha, "d-again")  # the same event again: it must not start a second chain
            redelivered = True
        reap(reaper)  # while the retry waits in the worker, not in the queue
        time.sleep(0.1)
    assert redelivered
    assert sorted(r["name"] for r in runs) == ["correctness (cpu)", "layout (cpu)"]
    for check_run in runs:  # shown queued at the first failed try, then concluded
        assert GitHubEmulator.status_sequence(check_run) == ["queued", "completed"]
        assert check_run["conclusion"] == "failure"
        assert check_run["output"]["title"] == "Commit c0ffee1 not found: force-pushed?"
        assert "tried 3 times" in check_run["output"]["summary"] + (check_run["output"].get("text") or "")
    fetches = [r for r in caplog.records if "fetching" in r.getMessage()]
    assert [f"try {n} of {TRIES}" in r.getMessage() for n, r in enumerate(fetches, 1)] == [True] * TRIES
    (run,) = store.recent_runs()
    assert (run.state, run.plan_tries) == ("planned", TRIES)
    time.sleep(2 * quick.plan_retry_seconds)  # long enough for a second chain's next try to show
    assert len([r for r in caplog.records if "fetching" in r.getMessage()]) == TRIES
    assert len([r for r in emulator.check_runs(FULL_NAME) if r["head_sha"] == sha]) == 2


def test_a_head_fetched_on_a_retry_is_planned_from_its_config_and_what_it_does_not_ask_for_says_so(
    quick: Settings, repo: Path, tmp_path: Path, worker: None, emulator: GitHubEmulator,
) -> None:
    elsewhere = tmp_path / "elsewhere"  # the commit exists, but not yet where compile-ci fetches from
    subprocess.run(["git", "clone", "-q", str(repo), str(elsewhere)], check=True)
    sha = commit_file(elsewhere, "main", ".compile-ci.toml", '[suites]\nrun = ["correctness"]\n', "config")
    deliver_opened(quick, sha, "d-late")
    store = Store(quick.database_url)
    deadline = time.monotonic() + 30
    while len(shown := [r for r in emulator.check_runs(FULL_NAME) if r["head_sha"] == sha]) < 2:
        assert time.monotonic() < deadline, "the default jobs were not shown while the head could not be fetched"
        time.sleep(0.05)
    assert {(r["status"], r["output"]["title"]) for r in shown} == {("queued", "Fetching the head")}
    (run,) = store.recent_runs()
    assert run.state == "planning"
    subprocess.run(["git", "-C", str(elsewhere), "push", "-q", str(repo), "main:pr"], check=True)
    runs = emulator.check_runs(FULL_NAME)
    while any(r["status"] != "completed" for r in runs):
        assert time.monotonic() < deadline + 60, [(r["name"], r["status"], r["output"]["title"]) for r in runs]
        time.sleep(0.1)
        runs = emulator.check_runs(FULL_NAME)
    by_name = {r["name"]: r for r in runs}
    assert (by_name["correctness (cpu)"]["conclusion"], by_name["correctness (cpu)"]["output"]["title"]) == (
        "success", "1 passed")  # planned from its config, and run
    assert (by_name["layout (cpu)"]["conclusion"], by_name["layout (cpu)"]["output"]["title"]) == (
        "neutral", "Not run: not asked for")


def test_the_reaper_leaves_a_scheduled_planning_retry_alone_until_it_is_overdue(
    quick: Settings, repo: Path, suites_dir: Path, emulator: GitHubEmulator,
) -> None:
    import redis

    deliver_opened(quick, "d" * 40, "d-1")
    broker = redis.Redis.from_url(quick.redis_url)
    broker.delete("github")  # the first try ran: its message was taken
    ctx = build_context(quick, create_celery(quick), suites_dir=suites_dir)
    (run,) = ctx.store.recent_runs()
    force_run(ctx.store, run.id, created_at=utcnow() - timedelta(minutes=5))
    assert lifecycle.planning_failed(ctx.store, run, utcnow() + timedelta(seconds=40)) is not None
    # The retry is held by the worker that scheduled it (Celery keeps a countdown message until its time): nothing
    # in the queue, which is exactly when the reaper used to send planning again and start a second chain.
    assert not [line for line in reap(ctx) if run.id in line]
    assert broker.llen("github") == 0
    (line,) = [line for line in reap(ctx, utcnow() + timedelta(minutes=5)) if run.id in line]
    assert "overdue" in line and broker.llen("github") == 1

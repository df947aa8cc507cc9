"""A suite job split over workers: webhook -> Redis -> embedded Celery workers -> LocalRunner -> the emulator.

The same commit of two identical repositories, once on a deployment that runs one shard and once on one whose cpu
worker runs two jobs at once: one check run each, and what it says (conclusion, title, failing tests, annotations,
every test's outcome) is the same. A verdict is a fact about code, not about how many workers ran it.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker

from service.celery_app import CeleryQueue, create_celery, slots_by_queue
from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.deliveries import push_event, signed
from service.devkit.sandbox.sample_repo import commit_file
from service.devkit.sandbox.stack import INSTALLATION_ID
from service.jobs.job_control import cancel_run
from service.jobs.reaper import reap
from service.jobs.tasks import build_context, create_worker_celery
from service.store import Store, job_id_of_external
from service.store.shards import shards_of
from service.web.app import create_app
from tests.conftest import make_settings

ROOT = Path(__file__).resolve().parents[2]
SUITE = '''
import os, pathlib, time
import pytest

def _knob(name):
    path = pathlib.Path(os.environ["COMPILE_CI_CHECKOUT"]) / name
    return path.read_text().strip() if path.exists() else ""

@pytest.mark.parametrize("size", [1, 2, 3, 4, 5])
def test_sizes(size):
    time.sleep(0.2)
    assert size != int(_knob("broken_size.txt") or 0), f"size {size} is broken in this commit"

def test_follows_the_commit():
    assert _knob("verdict.txt") == "pass", "the commit asked this test to fail"

def test_skipped_on_purpose():
    pytest.skip("not applicable here")

def test_writes_an_artifact():
    out = pathlib.Path(os.environ["COMPILE_CI_OUTPUT_DIR"]) / "tests" / "extra-note"
    out.mkdir(parents=True, exist_ok=True)
    (out / "note.txt").write_text("kept")
'''


@pytest.fixture
def settings(tmp_path: Path, redis_url: str, emulator: GitHubEmulator, app_keys: tuple[str, str],
             checkout_python: Path) -> Settings:
    # The job imports `suites` (its plugin selects a shard's share) from this checkout (tests/conftest.py).
    return make_settings(tmp_path, redis_url, emulator.url, app_keys[0], COMPILE_CI_RUNNER_PYTHON=str(checkout_python))


def make_repo(root: Path, full_name: str) -> str:
    path = root / "repos" / full_name
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    commit_file(path, "main", ".compile-ci.toml", '[suites]\ndevices = ["cpu"]\nflaky_reruns = 0\n', "cpu only")
    commit_file(path, "main", "verdict.txt", "fail\n", "one test fails")
    return commit_file(path, "main", "broken_size.txt", "4\n", "one size fails")


@contextmanager
def cpu_worker(settings: Settings, suites: Path, emulator: GitHubEmulator, repos: list[str],
               threads: int, queues: tuple[str, ...] = ("cpu", "github")) -> Iterator[None]:
    for name in repos:
        emulator.add_repo(name)
    emulator.add_installation(INSTALLATION_ID, repos=repos)
    app = create_worker_celery(settings, suites_dir=suites)
    with start_worker(app, pool="threads", concurrency=threads, perform_ping_check=False, shutdown_timeout=60,
                      queues=list(queues), hostname=f"cpu-{uuid.uuid4().hex[:8]}@localhost"):
        deadline = time.monotonic() + 60
        while slots_by_queue(app, timeout=2.0).get("cpu", 0) < threads:  # its consumer is up: it answers broadcasts
            assert time.monotonic() < deadline, "the worker never answered a broadcast"
        yield


def push(settings: Settings, full_name: str, repo_id: int, sha: str) -> None:
    payload = push_event(full_name=full_name, repo_id=repo_id, installation_id=INSTALLATION_ID,
                         clone_url=f"https://github.com/{full_name}.git", branch="main", before="0" * 40, after=sha)
    headers, body = signed("test-webhook-secret", "push", payload)
    assert create_app(settings).test_client().post("/webhook", data=body, headers=headers).status_code == 202


def completed_check_run(emulator: GitHubEmulator, full_name: str, timeout_s: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        runs = emulator.check_runs(full_name)
        if len(runs) == 1 and runs[0]["status"] == "completed":
            return runs[0]
        assert time.monotonic() < deadline, f"no completed check run for {full_name}: {runs}"
        time.sleep(0.1)


def said(check_run: dict[str, Any]) -> dict[str, Any]:
    """What a maintainer reads, without what differs by nature (the job page's address, the wall time)."""
    summary = "\n".join(re.sub(r"/jobs/[^)]*", "/jobs/…", line) for line in check_run["output"]["summary"].splitlines()
                        if "| cpu |" not in line)
    notes = sorted((a["path"], a["annotation_level"], a["message"]) for a in check_run["annotations"])
    return {"name": check_run["name"], "conclusion": check_run["conclusion"], "title": check_run["output"]["title"],
            "summary": summary, "text": check_run["output"].get("text"), "annotations": notes}


def outcomes(store: Store, check_run: dict[str, Any]) -> list[tuple[str, str]]:
    job = store.get_job(job_id_of_external(check_run["external_id"]))
    assert job is not None
    return [(r.nodeid, r.outcome) for r in store.results_of(job.id, job.attempt)]


def test_two_shards_on_two_worker_threads_give_the_check_run_of_one(
    settings: Settings, tmp_path: Path, emulator: GitHubEmulator
) -> None:
    suites = tmp_path / "suites"
    (suites / "correctness").mkdir(parents=True)
    (suites / "correctness" / "test_split.py").write_text(textwrap.dedent(SUITE))
    whole_sha, split_sha = make_repo(tmp_path, "octo/whole"), make_repo(tmp_path, "octo/split")
    store = Store(settings.database_url)

    with cpu_worker(settings, suites, emulator, ["octo/whole", "octo/split"], threads=2):
        push(settings, "octo/whole", 4101, whole_sha)  # COMPILE_CI_MAX_SHARDS=1: one shard, as before sharding
        whole = completed_check_run(emulator, "octo/whole")
    sharded = dataclasses.replace(settings, max_shards=4, shard_min_seconds=0)
    with cpu_worker(sharded, suites, emulator, ["octo/whole", "octo/split"], threads=2):
        push(sharded, "octo/split", 4102, split_sha)  # two worker slots: two shards
        split = completed_check_run(emulator, "octo/split")

    assert said(split) == said(whole)
    assert split["conclusion"] == "failure" and split["output"]["title"] == "2 failed, 5 passed, 1 skipped"
    assert GitHubEmulator.status_sequence(split) == ["queued", "in_progress", "completed"]
    assert outcomes(store, split) == outcomes(store, whole)  # and in the same order: pytest's
    job = store.get_job(job_id_of_external(split["external_id"]))
    assert job is not None and (job.shards, job.attempt) == (2, 1)
    shards = shards_of(store, job.id, job.attempt)
    assert [(s.index, s.state, s.attempt) for s in shards] == [(0, "completed", 1), (1, "completed", 1)]
    # A first push has no recorded times: its shards took their tests while they ran (suites/claiming.py), each
    # test once, whichever shard started first (which took how many is the hosts' timing, not the verdict's).
    assert {r.shard for r in store.results_of(job.id, job.attempt)} <= {0, 1}

    client = create_app(sharded).test_client()  # the job page reads like one runner's
    page = client.get(split["details_url"].removeprefix(sharded.public_url)).get_data(as_text=True)
    assert "test_sizes[4]" in page and "shards" in page
    log = client.get(split["details_url"].removeprefix(sharded.public_url) + "/files/log.txt").get_data(as_text=True)
    assert "===== shard 1 of 2" in log and "===== shard 2 of 2" in log
    note = client.get(split["details_url"].removeprefix(sharded.public_url) + "/files/tests/extra-note/note.txt")
    assert note.get_data(as_text=True) == "kept"  # each shard's test artifacts where an unsharded job has them



WAITING_SUITE = '''
import pathlib, time
import pytest

@pytest.mark.parametrize("n", range(4))
def test_waits(n):
    deadline = time.time() + 120
    while not pathlib.Path({release!r}).exists() and time.time() < deadline:
        time.sleep(0.05)
'''


def test_a_sharded_job_shows_its_shards_progress_together_and_stops_them_all_when_cancelled(
    settings: Settings, tmp_path: Path, emulator: GitHubEmulator
) -> None:
    suites = tmp_path / "suites"
    (suites / "correctness").mkdir(parents=True)
    release = tmp_path / "release"
    (suites / "correctness" / "test_wait.py").write_text(textwrap.dedent(WAITING_SUITE.format(release=str(release))))
    sha = make_repo(tmp_path, "octo/cancel")
    sharded = dataclasses.replace(settings, max_shards=2, shard_min_seconds=0, progress_interval_seconds=1)
    store = Store(settings.database_url)
    with cpu_worker(sharded, suites, emulator, ["octo/cancel"], threads=3):  # two shards, and one for reports
        push(sharded, "octo/cancel", 4104, sha)
        until(lambda: [r["output"]["title"] for r in emulator.check_runs("octo/cancel")] == ["Running: 0 / 4 tests"],
              "the check run shows both shards' tests")
        (run,) = store.runs_at_sha("octo/cancel", sha)
        cancel_run(store, CeleryQueue(create_celery(sharded)), run, "Cancelled by /cancel from @maintainer.")
        check_run = completed_check_run(emulator, "octo/cancel")
    release.write_text("")
    assert (check_run["conclusion"], check_run["output"]["title"]) == ("cancelled", "Cancelled")
    (job,) = store.jobs_of(run.id)
    assert [(s.state, s.conclusion) for s in shards_of(store, job.id, 1)] == [("completed", "cancelled")] * 2


BLOCKING_SUITE = '''
import os, pathlib, time
import pytest

MARKS = pathlib.Path({marks!r})

@pytest.mark.parametrize("n", range(4))
def test_quick(n):
    pass

def test_blocks_the_first_time():
    started = MARKS / "started"
    if started.exists():
        return
    started.write_text(str(os.getpid()))
    deadline = time.time() + 120
    while not (MARKS / "release").exists() and time.time() < deadline:
        time.sleep(0.05)
    os._exit(3)  # the run whose worker was killed ends here, leaving nothing
'''
WORKER_MODULE = '''
import os
from pathlib import Path

from service.config import Settings
from service.jobs.job_control import cancel_run
from service.jobs.reaper import reap
from service.jobs.tasks import build_context, create_worker_celery

celery = create_worker_celery(Settings.from_env(), suites_dir=Path(os.environ["SHARD_TEST_SUITES"]))
'''


def worker_env(settings: Settings, suites: Path) -> dict[str, str]:
    """The settings as a separate worker process reads them (COMPILE_CI_*)."""
    import os

    return {**os.environ, "PYTHONPATH": f"{suites.parent}{os.pathsep}{ROOT}", "SHARD_TEST_SUITES": str(suites),
            "COMPILE_CI_WEBHOOK_SECRET": settings.webhook_secret.reveal(),
            "COMPILE_CI_GITHUB_APP_ID": str(settings.github_app_id),
            "COMPILE_CI_GITHUB_PRIVATE_KEY": settings.github_private_key.reveal(),
            "COMPILE_CI_GITHUB_API_URL": settings.github_api_url, "COMPILE_CI_GITHUB_THROTTLE": "false",
            "COMPILE_CI_REDIS_URL": settings.redis_url, "COMPILE_CI_DATA_DIR": str(settings.data_dir),
            "COMPILE_CI_DATABASE_URL": settings.database_url, "COMPILE_CI_PUBLIC_URL": settings.public_url,
            "COMPILE_CI_CLONE_URL_TEMPLATE": settings.clone_url_template, "COMPILE_CI_DEVICES": "cpu",
            "COMPILE_CI_RUNNER": "local", "COMPILE_CI_RUNNER_PYTHON": settings.runner_python,
            "COMPILE_CI_MAX_SHARDS": "4", "COMPILE_CI_SHARD_MIN_SECONDS": "0"}


def until(condition: Any, what: str, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.1)


def test_a_shard_whose_worker_is_killed_runs_again_alone(
    settings: Settings, tmp_path: Path, emulator: GitHubEmulator
) -> None:
    import os
    import signal

    marks, suites = tmp_path / "marks", tmp_path / "worker" / "suites"
    marks.mkdir()
    (suites / "correctness").mkdir(parents=True)
    (suites / "correctness" / "test_lost.py").write_text(textwrap.dedent(BLOCKING_SUITE.format(marks=str(marks))))
    (suites.parent / "shard_worker.py").write_text(WORKER_MODULE)
    sha = make_repo(tmp_path, "octo/lost")
    sharded = dataclasses.replace(settings, max_shards=4, shard_min_seconds=0)
    store = Store(settings.database_url)
    emulator.add_repo("octo/lost")
    emulator.add_installation(INSTALLATION_ID, repos=["octo/lost"])
    github = create_worker_celery(sharded, suites_dir=suites)
    # Two cpu workers of their own processes (one job each), so that one can be killed like a host that goes away.
    workers = [subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "shard_worker", "worker", "-Q", "cpu", "-P", "threads", "-c", "1",
         "-n", f"cpu{n}-{os.getpid()}@%h", "--without-gossip", "--without-mingle", "--loglevel", "WARNING"],
        cwd=suites.parent, env=worker_env(sharded, suites), start_new_session=True) for n in range(2)]
    try:
        with start_worker(github, pool="threads", concurrency=2, perform_ping_check=False, shutdown_timeout=60,
                          queues=["github"], hostname=f"github-{uuid.uuid4().hex[:8]}@localhost"):
            until(lambda: slots_by_queue(github, timeout=2.0).get("cpu", 0) >= 2, "both cpu workers answer")
            push(sharded, "octo/lost", 4103, sha)
            until(lambda: store.runs_at_sha("octo/lost", sha), "the push makes a run")
            job_id = f"{store.runs_at_sha('octo/lost', sha)[0].id}-correctness-cpu"
            until(lambda: (marks / "started").exists(), "a shard runs the blocking test")
            lost, kept = shards_of(store, job_id, 1)
            ctx = build_context(sharded, create_celery(sharded), suites_dir=suites)
            holder = ctx.claims.lease_holder(lost.id)
            assert holder is not None
            os.killpg(int(holder.split(":")[1]), signal.SIGKILL)  # the worker running it dies: no clean-up at all
            orphan = int((marks / "started").read_text())
            (marks / "release").write_text("")  # the killed worker's job process ends by itself
            until(lambda: not Path(f"/proc/{orphan}").exists(), "the killed worker's job process ends")
            until(lambda: shards_of(store, job_id, 1)[1].state == "completed", "the other shard completes")
            until(lambda: ctx.claims.lease_holder(lost.id) is None, "the lost shard's lease lapses", 60)
            assert reap(ctx) == []  # once: a live worker whose lease vanished with Redis would take it again
            assert reap(ctx) == [f"{lost.id}: running with its lease lapsed (its worker is gone); re-queued alone"]
            check_run = completed_check_run(emulator, "octo/lost")  # the surviving worker runs it
    finally:
        for process in workers:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=60)
    assert (check_run["conclusion"], check_run["output"]["title"]) == ("success", "5 passed")
    job = store.get_job(job_id)
    assert job is not None and (job.attempt, job.shards, job.infra_failures) == (1, 2, 0)  # never the whole job
    lost, kept = shards_of(store, job_id, 1)
    assert (lost.attempt, lost.infra_failures, kept.attempt) == (2, 1, 1)  # only the lost shard ran again
    assert sorted(r.shard for r in store.results_of(job_id, 1)) == [0, 0, 0, 1, 1]

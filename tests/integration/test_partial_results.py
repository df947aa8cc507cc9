"""A job that dies mid-run (OOM kill, a crash) still reports the tests that finished before it."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery.contrib.testing.worker import start_worker

from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.sample_repo import commit_file
from service.devkit.sandbox.stack import INSTALLATION_ID
from service.jobs.tasks import create_worker_celery
from service.store import Store, job_id_of_external
from tests.integration.test_pipeline import FULL_NAME, await_check_runs, open_pr, repo  # noqa: F401 - fixture

DYING_SUITE = '''
import os, signal

def test_first():
    pass

def test_second():
    assert False, "a real failure before the crash"

def test_third_kills_the_process():
    os.kill(os.getpid(), signal.SIGKILL)  # what the kernel's OOM killer does

def test_never_reached():
    pass
'''


@pytest.fixture
def dying_worker(settings: Settings, tmp_path: Path, emulator: GitHubEmulator) -> Iterator[None]:
    suite = tmp_path / "dying-suites" / "correctness"
    suite.mkdir(parents=True)
    (suite / "test_dying.py").write_text(textwrap.dedent(DYING_SUITE))
    emulator.add_repo(FULL_NAME)
    emulator.add_installation(INSTALLATION_ID, repos=[FULL_NAME])
    app = create_worker_celery(settings, suites_dir=suite.parent)
    with start_worker(app, pool="threads", concurrency=4, perform_ping_check=False, shutdown_timeout=30,
                      queues=["cpu", "github"]):
        yield


def test_tests_finished_before_a_crash_are_reported(settings: Settings, repo: Path,  # noqa: F811
                                                    dying_worker: None, emulator: GitHubEmulator) -> None:
    sha = commit_file(repo, "crash", "notes.md", "x\n", "crash")
    open_pr(settings, 9, sha, "crash")
    (check_run,) = await_check_runs(emulator, sha, 1)
    assert check_run["conclusion"] == "failure"
    assert check_run["output"]["title"] == "pytest exited with code -9"
    assert "2 test(s) finished before it: 1 failed, 1 passed." in check_run["output"]["summary"]
    assert "test_dying.py::test_second" in check_run["output"]["summary"]
    job = Store(settings.database_url).get_job(job_id_of_external(check_run["external_id"]))
    assert job is not None and (job.passed, job.failed) == (1, 1)
    outcomes = {r.nodeid.rsplit("::", 1)[1]: r.outcome for r in Store(settings.database_url).results_of(job.id, 1)}
    assert outcomes == {"test_first": "passed", "test_second": "failed"}

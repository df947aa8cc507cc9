"""A job that dies mid-run (OOM kill, a crash) still reports the tests that finished before it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.sample_repo import commit_file
from service.store import Store, job_id_of_external
from tests.integration.suite_worker import worker_running_suite
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
    with worker_running_suite(settings, tmp_path, emulator, "test_dying.py", DYING_SUITE):
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

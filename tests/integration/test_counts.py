"""The check run counts what pytest counts: xfailed, xpassed, errors and skips each as such, in pytest's words."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from celery.contrib.testing.worker import start_worker

from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.sample_repo import commit_file
from service.devkit.sandbox.stack import INSTALLATION_ID
from service.jobs.tasks import create_worker_celery
from service.store import Store, job_id_of_external
from tests.integration.test_pipeline import FULL_NAME, await_check_runs, open_pr, repo  # noqa: F401 - fixture

EVERY_OUTCOME = '''
import pytest

@pytest.mark.xfail(reason="known bug")
def test_expected_failure():
    assert False

@pytest.mark.xfail(reason="maybe fixed")
def test_unexpected_pass():
    pass

@pytest.mark.xfail(reason="must fail", strict=True)
def test_strict_unexpected_pass():
    pass

def test_fails():
    assert 1 == 2

@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")

def test_errors_in_setup(broken):
    pass

def test_skipped():
    pytest.skip("not here")

def test_passes():
    pass
'''


@pytest.fixture
def outcomes_worker(settings: Settings, tmp_path: Path, emulator: GitHubEmulator) -> Iterator[None]:
    suite = tmp_path / "outcome-suites" / "correctness"
    suite.mkdir(parents=True)
    (suite / "test_outcomes.py").write_text(textwrap.dedent(EVERY_OUTCOME))
    emulator.add_repo(FULL_NAME)
    emulator.add_installation(INSTALLATION_ID, repos=[FULL_NAME])
    app = create_worker_celery(settings, suites_dir=suite.parent)
    with start_worker(app, pool="threads", concurrency=4, perform_ping_check=False, shutdown_timeout=30,
                      queues=["cpu", "github"]):
        yield


def test_the_title_is_pytests_own_summary_line(settings: Settings, repo: Path,  # noqa: F811
                                               outcomes_worker: None, emulator: GitHubEmulator) -> None:
    sha = commit_file(repo, "outcomes", "notes.md", "x\n", "every outcome")
    open_pr(settings, 11, sha, "outcomes")
    (check_run,) = await_check_runs(emulator, sha, 1)
    job = Store(settings.database_url).get_job(job_id_of_external(check_run["external_id"]))
    assert job is not None
    log = (settings.artifacts_dir / job.run_id / job.id / "1" / "log.txt").read_text()
    pytest_says = re.search(r"^=*\s*(\d+ failed.*?) in [\d.]+s", log, re.M)
    assert pytest_says is not None, log[-2000:]
    tests_line = re.sub(r", \d+ warnings?", "", pytest_says.group(1))  # warnings are not test outcomes
    assert check_run["output"]["title"] == tests_line == (
        "2 failed, 1 passed, 1 skipped, 1 xfailed, 1 xpassed, 1 error")
    assert (job.passed, job.failed, job.errors, job.skipped, job.xfailed, job.xpassed) == (1, 2, 1, 1, 1, 1)
    # Not a built-in suite (no compile-ci conftest): the plugin alone records the environment, as for a repo suite.
    assert job.torch_version == torch.__version__
    assert "| correctness | cpu | 1 | 2 | 1 | 1 | 1 | 1 |" in check_run["output"]["summary"]
    outcomes = {r.nodeid.rsplit("::", 1)[1]: r.outcome for r in Store(settings.database_url).results_of(job.id, 1)}
    assert outcomes["test_expected_failure"] == "xfailed" and outcomes["test_unexpected_pass"] == "xpassed"
    assert outcomes["test_strict_unexpected_pass"] == "failed" and outcomes["test_errors_in_setup"] == "error"

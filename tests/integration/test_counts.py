"""The check run counts what pytest counts: xfailed, xpassed, errors and skips each as such, in pytest's words."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.sample_repo import commit_file
from service.store import Store, job_id_of_external
from tests.integration.suite_worker import worker_running_suite
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
    with worker_running_suite(settings, tmp_path, emulator, "test_outcomes.py", EVERY_OUTCOME):
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

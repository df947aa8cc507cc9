"""Webhook -> Redis -> an embedded real Celery worker -> LocalRunner -> the emulator's check runs.

The suite here is a tiny pytest suite (no torch) whose verdict the pull request's content decides,
so the pipeline's behaviour is tested in seconds; the e2e tests run the real torch.compile suites.
"""

from __future__ import annotations

import contextlib
import dataclasses
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker

from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.deliveries import pull_request_event, signed
from service.devkit.sandbox.sample_repo import commit_file, init_repo
from service.devkit.sandbox.stack import INSTALLATION_ID
from service.jobs.tasks import create_worker_celery
from service.store import Store, job_id_of_external
from service.web.app import create_app

FULL_NAME = "octo/widgets"
TINY_SUITE = '''
import os, pathlib

def _verdict():
    return (pathlib.Path(os.environ["COMPILE_CI_CHECKOUT"]) / "verdict.txt").read_text().strip()

def test_always_passes():
    assert 1 + 1 == 2

def test_follows_the_pull_request():
    assert _verdict() == "pass", "the pull request asked this test to fail"

def test_skipped_on_purpose():
    import pytest
    pytest.skip("not applicable here")
'''


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repos" / FULL_NAME
    init_repo(path, {"verdict.txt": "pass\n", ".compile-ci.toml": '[suites]\ndevices = ["cpu"]\n'})
    return path


@pytest.fixture
def suites_dir(tmp_path: Path) -> Path:
    suite = tmp_path / "suites" / "correctness"
    suite.mkdir(parents=True)
    (suite / "test_tiny.py").write_text(textwrap.dedent(TINY_SUITE))
    return suite.parent


@pytest.fixture
def worker(settings: Settings, suites_dir: Path, emulator: GitHubEmulator) -> Iterator[None]:
    emulator.add_repo(FULL_NAME)
    emulator.add_installation(INSTALLATION_ID, repos=[FULL_NAME])
    app = create_worker_celery(settings, suites_dir=suites_dir)
    with start_worker(app, pool="threads", concurrency=4, perform_ping_check=False, shutdown_timeout=30,
                      queues=["cpu", "github"]):
        yield


def open_pr(settings: Settings, number: int, sha: str, branch: str) -> None:
    payload = pull_request_event("opened", full_name=FULL_NAME, repo_id=4001, installation_id=INSTALLATION_ID,
                                 clone_url=f"https://github.com/{FULL_NAME}.git", number=number, head_sha=sha,
                                 head_ref=branch, base_sha="0" * 40)
    headers, body = signed("test-webhook-secret", "pull_request", payload)
    response = create_app(settings).test_client().post("/webhook", data=body, headers=headers)
    assert response.status_code == 202, response.json


def await_check_runs(emulator: GitHubEmulator, sha: str, count: int, timeout_s: float = 300) -> list[dict[str, Any]]:
    def done(runs: list[dict[str, Any]]) -> bool:
        return len(runs) >= count and all(r["status"] == "completed" for r in runs)

    deadline = time.monotonic() + timeout_s
    while True:
        runs = [r for r in emulator.check_runs(FULL_NAME) if r["head_sha"] == sha]
        if done(runs) or time.monotonic() > deadline:
            return sorted(runs, key=lambda r: r["name"])
        time.sleep(0.1)


def test_passing_pull_request(settings: Settings, repo: Path, worker: None, emulator: GitHubEmulator) -> None:
    sha = commit_file(repo, "good", "notes.md", "hello\n", "docs")
    open_pr(settings, 1, sha, "good")
    (check_run,) = await_check_runs(emulator, sha, 1)
    assert check_run["name"] == "correctness (cpu)"
    assert GitHubEmulator.status_sequence(check_run) == ["queued", "in_progress", "completed"]
    assert check_run["conclusion"] == "success"
    assert check_run["output"]["title"] == "2 passed, 1 skipped"
    assert check_run["details_url"].startswith("http://ci.example.test/jobs/")
    assert check_run["external_id"] in check_run["details_url"]


def test_failing_pull_request_names_the_failing_test(settings: Settings, repo: Path, worker: None,
                                                     emulator: GitHubEmulator) -> None:
    sha = commit_file(repo, "bad", "verdict.txt", "fail\n", "break it")
    open_pr(settings, 2, sha, "bad")
    (check_run,) = await_check_runs(emulator, sha, 1)
    assert check_run["conclusion"] == "failure"
    assert check_run["output"]["title"] == "1 failed, 1 passed, 1 skipped"
    assert "test_tiny.py::test_follows_the_pull_request" in check_run["output"]["summary"]
    assert "the pull request asked this test to fail" in check_run["output"]["text"]
    job_page = create_app(settings).test_client().get(check_run["details_url"].removeprefix("http://ci.example.test"))
    assert job_page.status_code == 200
    page = job_page.get_data(as_text=True)
    assert "test_follows_the_pull_request" in page and "junit.xml" in page and "1 failed" in page


def test_broken_config_fails_every_check_run_with_file_line_and_problem(
    settings: Settings, repo: Path, worker: None, emulator: GitHubEmulator
) -> None:
    sha = commit_file(repo, "cfg", ".compile-ci.toml", '[suites]\ndevices = ["cpu"]\nrun = ["corectness"]\n', "cfg")
    open_pr(settings, 3, sha, "cfg")
    runs = await_check_runs(emulator, sha, 2)
    assert [r["name"] for r in runs] == ["correctness (cpu)", "correctness (cuda)"]
    for check_run in runs:
        assert check_run["conclusion"] == "failure"
        assert check_run["output"]["title"] == "Invalid .compile-ci.toml"
        assert ".compile-ci.toml:3: [suites] run: unknown value 'corectness'" in check_run["output"]["summary"]


def test_devices_without_a_runner_complete_as_neutral(settings: Settings, repo: Path, worker: None,
                                                      emulator: GitHubEmulator) -> None:
    sha = commit_file(repo, "both", ".compile-ci.toml", '[suites]\ndevices = ["cpu", "cuda"]\n', "both devices")
    open_pr(settings, 4, sha, "both")
    cpu, cuda = await_check_runs(emulator, sha, 2)
    assert (cpu["name"], cpu["conclusion"]) == ("correctness (cpu)", "success")
    assert (cuda["name"], cuda["conclusion"]) == ("correctness (cuda)", "neutral")
    assert "no cuda runner" in cuda["output"]["title"]


def test_infrastructure_error_is_retried_once_then_reported_as_not_the_prs_fault(
    settings: Settings, repo: Path, suites_dir: Path, emulator: GitHubEmulator
) -> None:
    # The Docker engine answers but the runner image does not exist: an infrastructure error, not a test failure.
    docker = pytest.importorskip("docker")
    try:
        with contextlib.closing(docker.from_env()) as engine:  # its socket closed, not left to a later test
            engine.ping()
    except Exception as exc:  # noqa: BLE001 - any reason the engine does not answer
        pytest.skip(f"no Docker engine: {exc}")
    broken = dataclasses.replace(settings, runner="docker", runner_image_cpu="compile-ci/no-such-image:never")
    emulator.add_repo(FULL_NAME)
    emulator.add_installation(INSTALLATION_ID, repos=[FULL_NAME])
    app = create_worker_celery(broken, suites_dir=suites_dir)
    with start_worker(app, pool="threads", concurrency=4, perform_ping_check=False, shutdown_timeout=30,
                      queues=["cpu", "github"]):
        sha = commit_file(repo, "infra", "notes.md", "hello\n", "docs")
        open_pr(broken, 5, sha, "infra")
        (check_run,) = await_check_runs(emulator, sha, 1)
    assert check_run["conclusion"] == "failure"
    assert check_run["output"]["title"] == "Infrastructure error — not a test failure"
    assert "runner image missing" in check_run["output"]["summary"] + (check_run["output"].get("text") or "")
    job = Store(broken.database_url).get_job(job_id_of_external(check_run["external_id"]))
    assert job is not None and job.infra_failures == 1 and job.attempt == 2, job


def test_without_config_a_repository_runs_on_the_devices_with_live_workers(
    settings: Settings, repo: Path, suites_dir: Path, emulator: GitHubEmulator
) -> None:
    # COMPILE_CI_DEVICES names cuda too, but only a cpu worker runs (the sandbox's and many first deployments').
    both = dataclasses.replace(settings, devices=("cpu", "cuda"))
    emulator.add_repo(FULL_NAME)
    emulator.add_installation(INSTALLATION_ID, repos=[FULL_NAME])
    app = create_worker_celery(both, suites_dir=suites_dir)
    with start_worker(app, pool="threads", concurrency=4, perform_ping_check=False, shutdown_timeout=30,
                      queues=["cpu", "github"]):
        import subprocess

        subprocess.run(["git", "-C", str(repo), "checkout", "-q", "-b", "noconfig", "main"], check=True)
        subprocess.run(["git", "-C", str(repo), "rm", "-q", ".compile-ci.toml"], check=True)
        sha = commit_file(repo, "noconfig", "notes.md", "no config here\n", "drop the config")
        open_pr(both, 6, sha, "noconfig")
        (check_run,) = await_check_runs(emulator, sha, 1)
        assert (check_run["name"], check_run["conclusion"]) == ("correctness (cpu)", "success")

        asked = commit_file(repo, "asks-cuda", ".compile-ci.toml", '[suites]\ndevices = ["cpu", "cuda"]\n', "cuda")
        open_pr(both, 7, asked, "asks-cuda")
        _cpu, cuda = await_check_runs(emulator, asked, 2)
    assert (cuda["name"], cuda["conclusion"]) == ("correctness (cuda)", "neutral")
    client = create_app(both).test_client()
    page = client.get(cuda["details_url"].removeprefix(both.public_url)).get_data(as_text=True)
    assert "asks for cuda ([suites] devices), but no worker of this deployment runs cuda jobs" in page
    assert "never ran" in page and "download.zip" not in page  # no link to a zip that cannot exist

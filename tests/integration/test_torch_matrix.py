"""One suite on two torch versions through the service: a deployment with torch 2.13 (its default) and 2.14 (advisory),
a worker per version (LocalRunner: the shared .venv's 2.13.0 and `.venv-torch2.14`'s 2.14.1, made by scripts/setup.sh),
webhook -> Celery -> runner -> the emulator's check runs; and the daily canary of a default branch on 2.14.

The repository's own tests fail on one version each for a real reason, an API that moved between the releases:
it tunes `torch._inductor.config.partitioned_scatter_memory_budget`, which 2.14 removed, and uses
`torch.compiler.nonstrict_trace`, which 2.14 added. Nothing in compile-ci tells a job which torch it has: a failure can
only land on the check run of the version whose worker ran the job, so each failure on exactly its own check run (and
the torch each job recorded from inside, in its summary) is the proof of routing and of per-version reporting.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker

from service.celery_app import START_CANARIES, create_celery, workers_by_queue
from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.deliveries import pull_request_event, push_event, signed
from service.devkit.sandbox.sample_repo import commit_file
from service.devkit.sandbox.stack import INSTALLATION_ID
from service.jobs.tasks import create_worker_celery
from service.store import Store
from service.web.app import create_app
from tests.conftest import make_settings, settings_env

ROOT = Path(__file__).resolve().parents[2]
NEXT_PYTHON = ROOT / ".venv-torch2.14" / "bin" / "python"
MATRIX_ENV = {"COMPILE_CI_TORCH_VERSIONS": "2.13, 2.14 advisory"}
FULL_NAME, CANARY_REPO, OPTED_OUT = "octo/matrix", "octo/tuned", "octo/quiet"
OWN_TESTS = '''
import torch


def scatter_sum(index, values):
    return torch.zeros(4).index_add(0, index, values)


def test_scatter_under_our_inductor_tuning():
    # This repository's tuned inductor setting: torch 2.14 removed it.
    with torch._inductor.config.patch(partitioned_scatter_memory_budget=0.5):
        compiled = torch.compile(scatter_sum)
        index, values = torch.tensor([0, 1, 1, 3]), torch.ones(4)
        torch.testing.assert_close(compiled(index, values), scatter_sum(index, values))


def test_helper_traced_nonstrictly():
    @torch.compiler.nonstrict_trace  # new in torch 2.14
    def double(x):
        return x * 2

    compiled = torch.compile(lambda x: double(x) + 1)
    x = torch.arange(4.0)
    torch.testing.assert_close(compiled(x), x * 2 + 1)
'''
CONFIG = '[suites]\nrun = ["repo"]\nrepo_tests = ["tests"]\ndevices = ["cpu"]\n'
SCATTER = "tests/test_torch_api.py::test_scatter_under_our_inductor_tuning"
NONSTRICT = "tests/test_torch_api.py::test_helper_traced_nonstrictly"
REPO_IDS = {FULL_NAME: 4301, CANARY_REPO: 4302, OPTED_OUT: 4303}


def make_repo(tmp_path: Path, full_name: str, config: str) -> Path:
    path = tmp_path / "repos" / full_name
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    commit_file(path, "main", "tests/test_torch_api.py", OWN_TESTS, "our tests")
    commit_file(path, "main", ".compile-ci.toml", config, "config")
    return path


@pytest.fixture
def matrix_settings(tmp_path: Path, redis_url: str, emulator: GitHubEmulator, app_keys: tuple[str, str]) -> Settings:
    return make_settings(tmp_path, redis_url, emulator.url, app_keys[0], **MATRIX_ENV)


@pytest.fixture
def workers(tmp_path: Path, redis_url: str, emulator: GitHubEmulator, app_keys: tuple[str, str],
            matrix_settings: Settings) -> Iterator[None]:
    """The default version's worker (cpu, github; embedded) and the 2.14 worker: a worker process of its own, as
    `compile-ci worker --queues cpu --torch 2.14` starts it, whose LocalRunner runs `.venv-torch2.14`'s python."""
    assert NEXT_PYTHON.exists(), "scripts/setup.sh makes .venv-torch2.14 (torch 2.14.1) for this test"
    for name in REPO_IDS:
        emulator.add_repo(name)
    emulator.add_installation(INSTALLATION_ID, repos=list(REPO_IDS))
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPILE_CI_")}
    env.update(settings_env(tmp_path, redis_url, emulator.url, app_keys[0], **MATRIX_ENV,
                            COMPILE_CI_WORKER_TORCH="2.14", COMPILE_CI_RUNNER_PYTHON=str(NEXT_PYTHON)))
    env["PYTHONPATH"] = str(ROOT)
    with (tmp_path / "worker-torch2.14.log").open("wb") as log:
        next_worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "service.worker", "worker", "-Q", "cpu-torch2.14", "-c", "1",
             "-P", "threads", "--without-heartbeat", "--without-mingle", "--without-gossip", "--loglevel", "INFO"],
            env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        _await_queue_served(matrix_settings, "cpu-torch2.14", next_worker)
        with start_worker(create_worker_celery(matrix_settings), pool="threads", concurrency=3,
                          perform_ping_check=False, shutdown_timeout=60, queues=["cpu", "github"]):
            yield
    finally:
        next_worker.terminate()
        try:
            next_worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            next_worker.kill()
            next_worker.wait()


def _await_queue_served(settings: Settings, queue: str, proc: subprocess.Popen[bytes]) -> None:
    """Planning asks which queues have workers: the 2.14 worker must answer before the first run is planned."""
    app, deadline = create_celery(settings), time.monotonic() + 120
    while queue not in workers_by_queue(app):
        assert proc.poll() is None, "the torch 2.14 worker exited; see worker-torch2.14.log"
        assert time.monotonic() < deadline, f"no worker consumes {queue}"
        time.sleep(0.2)


def deliver(settings: Settings, event: str, payload: dict[str, Any]) -> None:
    headers, body = signed("test-webhook-secret", event, payload)
    response = create_app(settings).test_client().post("/webhook", data=body, headers=headers)
    assert response.status_code == 202, response.json


def await_completed(emulator: GitHubEmulator, full_name: str, sha: str, count: int,
                    timeout_s: float = 420) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while True:
        runs = [r for r in emulator.check_runs(full_name) if r["head_sha"] == sha]
        if len(runs) >= count and all(r["status"] == "completed" for r in runs):
            return {r["name"]: r for r in runs}
        assert time.monotonic() < deadline, f"check runs of {full_name}@{sha[:12]} never completed: {runs}"
        time.sleep(0.2)


def test_one_suite_on_two_torch_versions_each_failure_on_its_own_check_run(
    tmp_path: Path, matrix_settings: Settings, workers: None, emulator: GitHubEmulator
) -> None:
    repo = make_repo(tmp_path, FULL_NAME, CONFIG + 'torch = ["2.13", "2.14"]\n')
    sha = commit_file(repo, "pr1", "notes.md", "hello\n", "docs")
    deliver(matrix_settings, "pull_request", pull_request_event(
        "opened", full_name=FULL_NAME, repo_id=REPO_IDS[FULL_NAME], installation_id=INSTALLATION_ID,
        clone_url=f"https://github.com/{FULL_NAME}.git", number=1, head_sha=sha, head_ref="pr1", base_sha="0" * 40))
    checks = await_completed(emulator, FULL_NAME, sha, 2)
    assert sorted(checks) == ["repo (cpu)", "repo (cpu, torch 2.14)"]  # the default's name is unchanged

    default, advisory = checks["repo (cpu)"], checks["repo (cpu, torch 2.14)"]
    # 2.13: the API 2.14 added is missing. Red: the default version is the one pull requests answer to.
    assert (default["conclusion"], default["output"]["title"]) == ("failure", "1 failed, 1 passed")
    assert NONSTRICT in default["output"]["summary"] and SCATTER not in default["output"]["summary"]
    assert "| 2.13.0" in default["output"]["summary"]  # the torch the job itself recorded
    # 2.14: the inductor setting it removed. Advisory: neutral, with the failure listed and annotated as a warning.
    assert advisory["conclusion"] == "neutral"
    assert advisory["output"]["title"] == "Advisory torch, not blocking — 1 failed, 1 passed"
    assert SCATTER in advisory["output"]["summary"] and NONSTRICT not in advisory["output"]["summary"]
    assert "partitioned_scatter_memory_budget does not exist" in advisory["output"]["summary"]
    assert "| 2.14.1" in advisory["output"]["summary"] and "torch 2.14 is advisory" in advisory["output"]["summary"]
    assert {a["annotation_level"] for a in advisory["annotations"]} == {"warning"}
    # The default version's job id is what it always was; the other one names its version.
    assert advisory["external_id"] == default["external_id"] + "-torch2.14"

    client = create_app(matrix_settings).test_client()
    page = client.get(f"/jobs/{advisory['external_id']}").get_data(as_text=True)
    assert "repo (cpu, torch 2.14)" in page and "2.14.1" in page
    status = client.get("/status").get_data(as_text=True)
    assert "cpu-torch2.14" in status and "advisory" in status


def test_the_canary_runs_each_default_branch_on_the_advisory_torch_and_lists_what_it_breaks(
    tmp_path: Path, matrix_settings: Settings, workers: None, emulator: GitHubEmulator
) -> None:
    # Neither repository asks for 2.14: the canary is what tells them about it.
    shas = {}
    for name, extra in ((CANARY_REPO, ""), (OPTED_OUT, "[canary]\nenabled = false\n")):
        repo = make_repo(tmp_path, name, CONFIG + extra)
        shas[name] = subprocess.run(["git", "-C", str(repo), "rev-parse", "main"], check=True, capture_output=True,
                                    text=True).stdout.strip()
        deliver(matrix_settings, "push", push_event(
            full_name=name, repo_id=REPO_IDS[name], installation_id=INSTALLATION_ID,
            clone_url=f"https://github.com/{name}.git", branch="main", before="0" * 40, after=shas[name]))
    for name in REPO_IDS.keys() - {FULL_NAME}:
        assert sorted(await_completed(emulator, name, shas[name], 1)) == ["repo (cpu)"]

    # What beat sends once a day; sent twice, it still starts one canary per repository.
    sender = create_celery(matrix_settings)
    for _ in range(2):
        sender.send_task(START_CANARIES, queue="github")
    store = Store(matrix_settings.database_url)
    deadline = time.monotonic() + 420
    while True:
        canaries = [r for r in store.recent_runs(20) if r.trigger == "canary"]
        jobs = [j for run in canaries for j in store.jobs_of(run.id)]
        if jobs and all(j.state == "completed" for j in jobs):
            break
        assert time.monotonic() < deadline, f"the canary never finished: {jobs}"
        time.sleep(0.5)
    assert [(r.repo_full_name, r.head_sha) for r in canaries] == [(CANARY_REPO, shas[CANARY_REPO])]
    assert [(j.check_name, j.torch, j.torch_advisory) for j in jobs] == [("repo (cpu, torch 2.14)", "2.14", 1)]
    assert jobs[0].torch_version.startswith("2.14.1")
    # Internal: nothing on GitHub beyond the push's own check run.
    assert len(emulator.check_runs(CANARY_REPO)) == 1

    page = create_app(matrix_settings).test_client().get("/canary").get_data(as_text=True)
    assert CANARY_REPO in page and OPTED_OUT not in page
    assert "1 new failure" in page and f"/jobs/{jobs[0].id}/tests/" in page
    assert SCATTER in page and NONSTRICT not in page  # fixed on 2.14 is not something it breaks
    assert "canary-ratio" in page  # compile time on 2.14 ÷ 2.13, from the test both compiled

"""One suite on two torch versions through the service: a deployment with torch 2.13 (its default) and 2.14 (advisory),
a worker per version (LocalRunner: the shared .venv's 2.13.0 and `.venv-torch2.14`'s 2.14.1, which
scripts/next-torch.sh makes), webhook -> Celery -> runner -> the emulator's check runs; and the daily canary of a
default branch on 2.14.

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
from collections.abc import Callable, Iterator
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker

from service.celery_app import PLAN_RUN, START_CANARIES, create_celery, workers_by_queue
from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.deliveries import pull_request_event, push_event, signed
from service.devkit.sandbox.sample_repo import commit_file
from service.devkit.sandbox.stack import INSTALLATION_ID
from service.jobs import canary, lifecycle
from service.jobs.tasks import build_context, create_worker_celery
from service.store import Job, NewRun, Store, utcnow
from service.web.app import create_app
from tests.conftest import make_settings, settings_env
from tests.next_torch import NEXT_PYTHON, next_python
from tests.rows import force_run

ROOT = Path(__file__).resolve().parents[2]
MATRIX_ENV = {"COMPILE_CI_TORCH_VERSIONS": "2.13, 2.14 advisory"}
FULL_NAME, REPO_ID = "octo/matrix", 4301
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
    next_python()  # installed beside the tests by scripts/test.sh: waits for it
    emulator.add_repo(FULL_NAME)
    emulator.add_installation(INSTALLATION_ID, repos=[FULL_NAME])
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPILE_CI_")}
    env.update(settings_env(tmp_path, redis_url, emulator.url, app_keys[0], **MATRIX_ENV,
                            COMPILE_CI_WORKER_TORCH="2.14", COMPILE_CI_RUNNER_PYTHON=str(NEXT_PYTHON)))
    env["PYTHONPATH"] = str(ROOT)
    # Two at a time: the pull request's and the canary's 2.14 jobs side by side (109 s for the module, not 163 s).
    with (tmp_path / "worker-torch2.14.log").open("wb") as log:
        next_worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "service.worker", "worker", "-Q", "cpu-torch2.14", "-c", "2",
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


def await_completed(emulator: GitHubEmulator, sha: str, count: int, timeout_s: float = 420) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        runs = [r for r in emulator.check_runs(FULL_NAME) if r["head_sha"] == sha]
        if len(runs) >= count and all(r["status"] == "completed" for r in runs):
            return {r["name"]: r for r in runs}
        assert time.monotonic() < deadline, f"check runs of {sha[:12]} never completed: {runs}"
        time.sleep(0.2)


def test_one_suite_on_two_torch_versions_each_failure_on_its_own_check_run_and_the_canary(
    tmp_path: Path, matrix_settings: Settings, workers: None, emulator: GitHubEmulator
) -> None:
    # The default branch runs the default torch only; pull request #1 adds 2.14 to the repository's matrix.
    repo = make_repo(tmp_path, FULL_NAME, CONFIG)
    main = commit_file(repo, "main", "notes.md", "main\n", "docs")
    pr = commit_file(repo, "pr1", ".compile-ci.toml", CONFIG + 'torch = ["2.13", "2.14"]\n', "also on torch 2.14")
    deliver(matrix_settings, "push", push_event(
        full_name=FULL_NAME, repo_id=REPO_ID, installation_id=INSTALLATION_ID,
        clone_url=f"https://github.com/{FULL_NAME}.git", branch="main", before="0" * 40, after=main))
    deliver(matrix_settings, "pull_request", pull_request_event(
        "opened", full_name=FULL_NAME, repo_id=REPO_ID, installation_id=INSTALLATION_ID,
        clone_url=f"https://github.com/{FULL_NAME}.git", number=1, head_sha=pr, head_ref="pr1", base_sha="0" * 40))
    store = Store(matrix_settings.database_url)
    await_true(lambda: any(r.trigger == "push" and r.state == "planned" for r in store.recent_runs(5)), "push planned")
    # What beat sends once a day (sent twice here: it still starts one canary per repository and day).
    sender = create_celery(matrix_settings)
    for _ in range(2):
        sender.send_task(START_CANARIES, queue="github")

    checks = await_completed(emulator, pr, 2)
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

    # The canary: the default branch, which never asked for 2.14, on 2.14; nothing of it on GitHub.
    def canary_jobs() -> list[Job]:
        return [j for r in store.recent_runs(10) if r.trigger == "canary" for j in store.jobs_of(r.id)]

    await_true(lambda: bool(canary_jobs()) and all(j.state == "completed" for j in canary_jobs()), "canary done")
    (job,) = canary_jobs()
    assert (job.check_name, job.torch, job.torch_advisory, store.get_run(job.run_id).head_sha) == (
        "repo (cpu, torch 2.14)", "2.14", 1, main)
    assert job.torch_version.startswith("2.14.1")
    assert sorted(r["name"] for r in emulator.check_runs(FULL_NAME) if r["head_sha"] == main) == ["repo (cpu)"]

    client = create_app(matrix_settings).test_client()
    canary = client.get("/canary").get_data(as_text=True)
    assert FULL_NAME in canary and "1 new failure" in canary and f"/jobs/{job.id}/tests/" in canary
    assert SCATTER in canary and NONSTRICT not in canary  # fixed on 2.14 is not something it breaks
    assert "canary-ratio" in canary  # compile time on 2.14 ÷ 2.13, from the test both compiled
    page = client.get(f"/jobs/{advisory['external_id']}").get_data(as_text=True)
    assert "repo (cpu, torch 2.14)" in page and "2.14.1" in page
    grid = client.get(f"/runs/{default['external_id'].split('-')[0]}").get_data(as_text=True)
    assert "<th>cpu, torch 2.14</th>" in grid and f"/jobs/{default['external_id']}" in grid
    status = client.get("/status").get_data(as_text=True)
    assert "cpu-torch2.14" in status and "advisory" in status


def await_true(condition: Callable[[], bool], what: str, timeout_s: float = 420) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.2)


def test_the_daily_canary_starts_one_run_per_repository_and_day_and_leaves_out_who_opted_out(
    tmp_path: Path, redis_url: str, emulator: GitHubEmulator, app_keys: tuple[str, str]
) -> None:
    """Which default branches the beat's task starts, through the real store and broker (no worker needed)."""
    settings = make_settings(tmp_path, redis_url, emulator.url, app_keys[0], **MATRIX_ENV)
    ctx = build_context(settings, create_celery(settings))
    pushes = {"octo/plain": "", "octo/quiet": "[canary]\nenabled = false\n", "octo/broken": "[suites]\nrun = 3\n",
              "octo/gone": ""}
    for number, (name, config) in enumerate(pushes.items()):
        for age, sha in ((1, f"{number:x}" * 40), (0, f"{number + 8:x}" * 40)):  # its last push is what runs
            run, _ = ctx.store.create_run_if_absent(NewRun(name, 5000 + number, INSTALLATION_ID, f"https://x/{name}.git",
                                                           False, "push", "refs/heads/main", None, "main", sha, "me"))
            ctx.store.record_config(run.id, config)
            lifecycle.plan(ctx.store, run, [], "invalid" if "= 3" in config else None)
            force_run(ctx.store, run.id, created_at=utcnow() - timedelta(hours=age))
    ctx.store.set_installed("octo/gone", INSTALLATION_ID, False)

    said = canary.start_canaries(ctx, date(2026, 11, 26))
    started = [r for r in ctx.store.recent_runs(20) if r.trigger == "canary"]
    assert [(r.repo_full_name, r.head_sha, r.branch) for r in started] == [("octo/plain", "8" * 40, "main")]
    assert said == ["octo/broken: no canary (its .compile-ci.toml is invalid at its last push)",
                    "octo/gone: no canary (the App was removed from it)",
                    f"octo/plain: canary {started[0].id} on torch 2.14 at {'8' * 12}",
                    "octo/quiet: no canary (opted out: [canary] enabled = false)"]
    # The beat firing again the same day starts nothing; the next day is a new canary.
    again = canary.start_canaries(ctx, date(2026, 11, 26))
    assert "(already started today)" in " ".join(again)
    canary.start_canaries(ctx, date(2026, 11, 27))
    assert len([r for r in ctx.store.recent_runs(20) if r.trigger == "canary"]) == 2
    planned = [args[0] for task, args in ctx.claims.pending_tasks(("github",)) if task == PLAN_RUN]
    assert sorted(planned) == sorted(r.id for r in ctx.store.recent_runs(20) if r.trigger == "canary")
    # A deployment without an advisory version has no canary to run.
    plain = make_settings(tmp_path, redis_url, emulator.url, app_keys[0])
    assert canary.start_canaries(build_context(plain, create_celery(plain))) == []

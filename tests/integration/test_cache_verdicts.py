"""Issues 27 and 38 through the whole service (webhook -> Celery worker -> DockerRunner -> real torch.compile -> check
runs): a repository whose own package changes inductor at run time — a lowering, a decomposition, a custom pass with
a constant uuid, a codegen override (issue 27), and, at its import, a function of a module of inductor, a method of a
class that is no override, a decomposition's `__code__` and a lowering's closure cell (issue 38: no list of known
places has them). A warm trusted cache must not bend a verdict: a pull request that breaks any of the eight patches
is red although the default branch warmed the cache (one kind in the default run, all eight with -m heavy; and red
on a cold cache too), one that changes nothing else hits
the cache, and a member's pull request that plants files in its compile cache reaches neither its base run (which
starts after the pull request's job finished: one job at a time) nor the default branch."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker

from service.config import Settings
from service.devkit.embedded_workers import own_loop_worker
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.deliveries import pull_request_event, push_event
from service.devkit.sandbox.sample_repo import commit_file
from service.devkit.sandbox.stack import INSTALLATION_ID
from service.jobs.tasks import create_worker_celery
from service.planning.base_runs import NULL_SHA
from service.store import Store, job_id_of_external
from tests.integration.surface_repo import (
    BROKEN,
    BROKEN_REBINDS,
    CONFIG,
    CONFTEST,
    CUSTOM_PASS,
    DECOMPOSITION,
    LOWERING,
    OVERRIDE,
    REBINDS,
    TESTS,
)
from tests.integration.test_base_judgement import deliver, head_of
from tests.integration.test_pipeline import FULL_NAME, await_check_runs

pytestmark = pytest.mark.e2e
REPO_ID = 4027
COLD_NAME, COLD_ID = "octo/widgets-cold", 4028  # the same repository under another name: its trusted cache is cold


def _sample_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    for name, text in ((".compile-ci.toml", CONFIG), ("compilerpatch/__init__.py", ""),
                       ("compilerpatch/lowering.py", LOWERING), ("compilerpatch/decomposition.py", DECOMPOSITION),
                       ("compilerpatch/custom_pass.py", CUSTOM_PASS), ("compilerpatch/override.py", OVERRIDE),
                       *REBINDS.items(), ("tests/conftest.py", CONFTEST), ("tests/test_surface.py", TESTS)):
        commit_file(path, "main", name, text, f"add {name}")
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return _sample_repo(tmp_path / "repos" / FULL_NAME)


@pytest.fixture
def docker_worker(settings: Settings, tmp_path: Path, emulator: GitHubEmulator) -> Iterator[Settings]:
    docker = pytest.importorskip("docker")
    try:
        with contextlib.closing(docker.from_env()) as engine:  # its socket closed, not left to a later test
            engine.ping()
    except Exception as exc:  # noqa: BLE001 - any reason the engine does not answer
        pytest.skip(f"no Docker engine: {exc}")
    # A build under another tag (suites this tree changed) is run by naming it; the tests never rebuild :latest.
    image = os.environ.get("COMPILE_CI_TEST_RUNNER_IMAGE", settings.runner_image_cpu)
    settings = dataclasses.replace(settings, runner="docker", runner_image_cpu=image)
    (tmp_path / "suites" / "correctness").mkdir(parents=True)
    for name in (FULL_NAME, COLD_NAME):
        emulator.add_repo(name)
    emulator.add_installation(INSTALLATION_ID, repos=[FULL_NAME, COLD_NAME])
    # One job at a time (the cpu worker), planning and reports beside it: a pull request's base run, queued behind
    # its head job, starts only once that finished, so the poisoning order is the one replayed, not left to a race.
    github, cpu = (create_worker_celery(settings, suites_dir=tmp_path / "suites") for _ in range(2))
    with start_worker(github, pool="threads", concurrency=2, perform_ping_check=False, shutdown_timeout=60,
                      queues=["github"], hostname="github@cache-verdicts"):
        # A second worker in this process: an event loop of its own (service/devkit/embedded_workers.py says why).
        with own_loop_worker(cpu, pool="threads", concurrency=1, perform_ping_check=False, shutdown_timeout=60,
                             queues=["cpu"], hostname="cpu@cache-verdicts"):
            yield settings


def _push(settings: Settings, before: str, after: str) -> None:
    deliver(settings, "push", push_event(full_name=FULL_NAME, repo_id=REPO_ID, clone_url=f"https://github.com/"
                                         f"{FULL_NAME}.git", installation_id=INSTALLATION_ID, branch="main",
                                         before=before, after=after))


def _pull_request(settings: Settings, number: int, head: str, base: str, name: str = FULL_NAME,
                  repo_id: int = REPO_ID) -> None:
    deliver(settings, "pull_request", pull_request_event(
        "opened", full_name=name, repo_id=repo_id, installation_id=INSTALLATION_ID,
        clone_url=f"https://github.com/{name}.git", number=number, head_sha=head, head_ref=f"pr{number}",
        base_sha=base, association="MEMBER"))


def _done(emulator: GitHubEmulator, sha: str, name: str = FULL_NAME) -> dict[str, Any]:
    if name == FULL_NAME:
        (check_run,) = await_check_runs(emulator, sha, 1, timeout_s=300)
    else:
        deadline = time.monotonic() + 300
        while not [r for r in emulator.check_runs(name) if r["head_sha"] == sha and r["status"] == "completed"] \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        (check_run,) = [r for r in emulator.check_runs(name) if r["head_sha"] == sha]
    assert check_run["status"] == "completed", check_run
    return check_run


def _compiled_test(settings: Settings, check_run: dict[str, Any]) -> dict[str, Any]:
    store = Store(settings.database_url)
    job = store.get_job(job_id_of_external(check_run["external_id"]))
    assert job is not None
    (result,) = [r for r in store.results_of(job.id, job.attempt) if r.nodeid.endswith("test_compiled_matches_eager")]
    return result.metrics


def _branch(repo: Path, name: str, start: str) -> None:
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "-b", name, start], check=True)


# The kind the default run breaks against a warm cache: issue 38's closure cell, which no list of known places has
# (the fingerprint's own tests cover every place cheaply: tests/suites/test_compiler_surface*.py;
# test_each_rebind_is_red_cold_and_each_patch_red_warm runs all eight, issue 27's lowering among them; one kind fewer
# here is one Docker job fewer in CI, 2026-11-29).
WARM_KINDS = ("closure cell",)


@pytest.mark.timeout(1800)  # eight jobs, one at a time
def test_patches_key_the_cache_and_no_pull_request_writes_it(repo: Path, docker_worker: Settings,
                                                             emulator: GitHubEmulator, tmp_path: Path) -> None:
    settings = docker_worker
    unpushed = head_of(repo)  # a base with no push run: its pull request gets a base run of its own
    first = commit_file(repo, "main", "README.md", "compiler patches\n", "docs")
    _push(settings, unpushed, first)
    warm = _done(emulator, first)
    assert (warm["conclusion"], warm["output"]["title"]) == ("success", "2 passed"), warm["output"]
    assert _compiled_test(settings, warm)["fx_graph_cache_misses"] >= 1  # the default branch fills the cache

    # Cold: where nothing warmed the trusted cache (the same repository under another name), a pull request that
    # breaks the four rebinds is red (no base: its failures are new).
    cold_repo = _sample_repo(tmp_path / "repos" / COLD_NAME)
    for kind, (path, text) in BROKEN_REBINDS.items():
        cold = commit_file(cold_repo, "cold", path, text, f"break the {kind}")
    _pull_request(settings, 100, cold, NULL_SHA, COLD_NAME, COLD_ID)
    red = _done(emulator, cold, COLD_NAME)
    assert red["conclusion"] == "failure" and "test_compiled_matches_eager" in red["output"]["summary"], red["output"]
    assert _compiled_test(settings, red)["fx_graph_cache_hits"] == 0, "a cold cache hit"

    # A member's pull request plants a file in its cache; its base run (at an unpushed sha) runs after it.
    _branch(repo, "plant", unpushed)
    planting = commit_file(repo, "plant", "tests/PLANT", "", "plant a file in the compile cache")
    _pull_request(settings, 1, planting, unpushed)
    planted = _done(emulator, planting)
    assert planted["conclusion"] == "success", planted["output"]

    # Each broken patch is red although the default branch warmed the cache for the very same graph: here issue
    # 38's closure cell; every kind in the heavy test below.
    for number, (kind, (path, text)) in enumerate(BROKEN.items(), start=2):
        if kind not in WARM_KINDS:
            continue
        _branch(repo, f"broken{number}", first)
        head = commit_file(repo, f"broken{number}", path, text, f"break the {kind}")
        _pull_request(settings, number, head, first)
        red = _done(emulator, head)
        assert red["conclusion"] == "failure", (kind, red["output"])
        assert "test_compiled_matches_eager" in red["output"]["summary"], (kind, red["output"])

    # Nothing of the compiler changed: the pull request hits what the default branch compiled.
    _branch(repo, "docs", first)
    docs = commit_file(repo, "docs", "README.md", "compiler patches, documented\n", "more docs")
    _pull_request(settings, 20, docs, first)
    hit = _done(emulator, docs)
    assert hit["conclusion"] == "success", hit["output"]
    assert _compiled_test(settings, hit)["fx_graph_cache_hits"] >= 1, _compiled_test(settings, hit)

    # After all those pull requests, the default branch is still served only what it compiled itself.
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "main"], check=True)
    later = commit_file(repo, "main", "README.md", "compiler patches, pushed again\n", "docs again")
    _push(settings, first, later)
    again = _done(emulator, later)
    assert (again["conclusion"], again["output"]["title"]) == ("success", "2 passed"), again["output"]
    assert _compiled_test(settings, again)["fx_graph_cache_hits"] >= 1
    # The planting pull request's base run started after the pull request's job had finished (its writes done) and
    # was not served the plant either.
    store = Store(settings.database_url)
    (pull,) = store.runs_of_pr(FULL_NAME, 1)
    (head_job,) = store.jobs_of(pull.id)
    deadline = time.monotonic() + 300
    while True:
        base_jobs = store.jobs_of(pull.base_run_id or "")
        if base_jobs and all(j.state == "completed" for j in base_jobs) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert base_jobs and all((j.conclusion, j.passed) == ("success", 2) for j in base_jobs), base_jobs
    assert head_job.finished_at is not None and all(
        j.started_at is not None and j.started_at >= head_job.finished_at for j in base_jobs), \
        [(j.id, j.started_at, head_job.finished_at) for j in base_jobs]


# Fourteen jobs; the default run proves cold red with one pull request that breaks all four rebinds at once, and warm
# red with two kinds (WARM_KINDS).
@pytest.mark.heavy
@pytest.mark.timeout(1800)
def test_each_rebind_is_red_cold_and_each_patch_red_warm(repo: Path, docker_worker: Settings,
                                                         emulator: GitHubEmulator) -> None:
    settings = docker_worker
    unpushed = head_of(repo)
    for number, (kind, (path, text)) in enumerate(BROKEN_REBINDS.items(), start=1):
        _branch(repo, f"cold{number}", unpushed)
        head = commit_file(repo, f"cold{number}", path, text, f"break the {kind}")
        _pull_request(settings, number, head, NULL_SHA)
        red = _done(emulator, head)
        assert red["conclusion"] == "failure", (kind, "cold", red["output"])
    first = commit_file(repo, "main", "README.md", "compiler patches\n", "docs")
    _push(settings, unpushed, first)
    assert _done(emulator, first)["conclusion"] == "success"
    for number, (kind, (path, text)) in enumerate(BROKEN.items(), start=11):
        _branch(repo, f"warm{number}", first)
        head = commit_file(repo, f"warm{number}", path, text, f"break the {kind}")
        _pull_request(settings, number, head, first)
        red = _done(emulator, head)
        assert red["conclusion"] == "failure", (kind, "warm", red["output"])
        assert "test_compiled_matches_eager" in red["output"]["summary"], (kind, red["output"])


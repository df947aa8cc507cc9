"""The whole product as deployed: gunicorn, Redis, Celery workers, LocalRunner, real torch.compile."""

from __future__ import annotations

import contextlib
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runners.docker_container import DEPLOYMENT_LABEL
from service.compare.job_verdict import BASE_PENDING
from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.main import CHECK_RUNS, FULL_NAME, open_sample_pull_requests, wait_for_check_runs
from service.devkit.sandbox.stack import Stack

# The module's flow (its fixture) runs inside its first test: 201 s on a quiet host, 582 s with one core busy
# elsewhere, so its limit is more than twice the slower (pyproject's 600 s per test once failed every e2e test).
FLOW_S = 1500
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(FLOW_S + 300)]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, dict[str, Any]]]:
    # Two cpu slots, so each head's correctness job runs as two shards side by side (as on a deployment with two).
    with Stack(tmp_path_factory.mktemp("stack"), cpu_slots=2) as stack:
        repo, _pulls = open_sample_pull_requests(stack)
        # The jobs' own words: a run judged before its base finished says so, and is not waited for (the base run
        # is a full correctness job; the sandbox command itself waits for it).
        runs = wait_for_check_runs(stack, CHECK_RUNS, timeout_s=FLOW_S, final=False)
        by_key = {(r["head_sha"], r["name"]): r for r in runs}
        yield stack, {"good": by_key[(repo.good_sha, "correctness (cpu)")],
                      "buggy": by_key[(repo.buggy_sha, "correctness (cpu)")],
                      "cuda": by_key[(repo.good_sha, "correctness (cuda)")],
                      "own": by_key[(repo.good_sha, "repo (cpu)")], "all": runs}
        assert stack.emulator.errors == []
        deployment = Settings.from_env(stack.env()).deployment
    # A stopped stack leaves no job container behind, pre-started ones (made for pull requests' jobs) included.
    assert _containers_of(deployment) == []


def _containers_of(deployment: str) -> list[str]:
    docker = pytest.importorskip("docker")
    try:
        with contextlib.closing(docker.from_env()) as engine:
            found = engine.containers.list(all=True, filters={"label": f"{DEPLOYMENT_LABEL}={deployment}"})
            return [c.name for c in found]
    except docker.errors.DockerException:
        return []  # no engine: the stack's jobs ran on the LocalRunner


def test_clean_pull_request_goes_queued_in_progress_success(finished: tuple[Stack, dict[str, Any]]) -> None:
    _stack, runs = finished
    good = runs["good"]
    assert GitHubEmulator.status_sequence(good) == ["queued", "in_progress", "completed"]
    assert good["conclusion"] == "success", good["output"]
    assert "0 failed" not in good["output"]["title"] and "passed" in good["output"]["title"]
    assert "| correctness | cpu |" in good["output"]["summary"]
    assert "2.13.0" in good["output"]["summary"]  # the torch version the job really used


def test_the_repositorys_own_tests_import_its_package_and_dependency(finished: tuple[Stack, dict[str, Any]]) -> None:
    _stack, runs = finished
    own = runs["own"]
    assert own["conclusion"] == "success", own["output"]
    assert own["output"]["title"] in ("1 passed", f"1 passed{BASE_PENDING}"), own["output"]


def test_pull_request_with_a_model_bug_fails_naming_the_model(finished: tuple[Stack, dict[str, Any]]) -> None:
    _stack, runs = finished
    buggy = runs["buggy"]
    assert buggy["conclusion"] == "failure"
    assert "1 failed" in buggy["output"]["title"]
    assert "test_declared_model[counting_scale]" in buggy["output"]["summary"]


def test_cuda_check_is_neutral_without_a_cuda_runner(finished: tuple[Stack, dict[str, Any]]) -> None:
    _stack, runs = finished
    assert runs["cuda"]["conclusion"] == "neutral"
    assert len(runs["all"]) == CHECK_RUNS
    assert {r["head_sha"] for r in runs["all"]} and all(r["app"] for r in runs["all"])


def test_details_link_opens_the_job_page_with_log_and_results(finished: tuple[Stack, dict[str, Any]]) -> None:
    stack, runs = finished
    with urllib.request.urlopen(runs["buggy"]["details_url"], timeout=10) as response:
        page = response.read().decode()
    assert "test_declared_model[counting_scale]" in page
    assert "junit.xml" in page and "log.txt" in page
    assert FULL_NAME in page
    job_dir = Path(stack.root) / "data" / "artifacts"
    assert any(job_dir.rglob("meta.json"))


def test_job_page_links_each_tests_generated_code(finished: tuple[Stack, dict[str, Any]]) -> None:
    _stack, runs = finished
    job_url = runs["good"]["details_url"]
    with urllib.request.urlopen(job_url, timeout=10) as response:
        page = response.read().decode()
    links = re.findall(r'href="(/jobs/[^"]+/tests/[^"]+)">(\d+) graph', page)
    assert links and any(int(count) >= 1 for _href, count in links)
    href = next(h for h, count in links if int(count) >= 1)
    with urllib.request.urlopen(job_url.split("/jobs/")[0] + href, timeout=10) as response:
        test_page = response.read().decode()
    # inductor's CPU output: a Python wrapper around C++ kernels, highlighted, with the compile metrics
    assert "output_code_0.py" in test_page and "<th>compile time</th>" in test_page
    assert "<th>kernels generated</th>" in test_page and "compile_time_s" not in test_page  # named in words
    assert "cpp_fused" in test_page or "extern" in test_page

"""Run what a change can affect, through the webhook, a real Celery worker, LocalRunner and the emulator.

A model repository declares two targets in their own modules. A pull request that changes one model runs that
model's tests and shows the other's as its base's result ("not affected"); one that changes a file patching the
compiler runs everything; a push to the default branch always runs everything.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.sample_repo import commit_file
from service.store import Store, job_id_of_external
from service.web.app import create_app
from tests.conftest import make_settings
from tests.integration.suite_worker import worker_running_suite
from tests.integration.test_base_judgement import deliver, head_of
from tests.integration.test_shards import ROOT

FULL_NAME = "octo/zoo"
SUITE = '''
import importlib, json, os, sys
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class Declared:  # as suites/targets.py hands a declared model to a test: with the spec it came from
    name: str
    spec: str
    value: str


def _declared():
    sys.path.insert(0, os.environ["COMPILE_CI_CHECKOUT"])
    found = []
    for spec in json.loads(os.environ.get("COMPILE_CI_TARGETS") or "{}").get("models", []):
        module, _, attr = spec.partition(":")
        found += [Declared(name, spec, value) for name, value in getattr(importlib.import_module(module), attr)()]
    return found


@pytest.mark.parametrize("model", _declared(), ids=lambda m: m.name)
def test_declared_model(model):
    assert model.value == "ok", f"{model.name} is broken"


def test_builtin_corpus():
    pass
'''
CONFIG = '''[suites]
devices = ["cpu"]
flaky_reruns = 0
[targets]
models = ["zoo.resnet:examples", "zoo.vit:examples"]
'''


@pytest.fixture
def settings(tmp_path: Path, redis_url: str, emulator: GitHubEmulator, app_keys: tuple[str, str]) -> Settings:
    python = tmp_path / "python"  # the job imports `suites` (its plugin leaves tests out) from this checkout
    python.write_text(f'#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return make_settings(tmp_path, redis_url, emulator.url, app_keys[0], COMPILE_CI_RUNNER_PYTHON=str(python))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repos" / FULL_NAME
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    commit_file(path, "main", "zoo/__init__.py", "", "package")
    commit_file(path, "main", "zoo/blocks.py", "SCALE = 1\n", "shared blocks")
    commit_file(path, "main", "zoo/resnet.py", 'from .blocks import SCALE\n\n\ndef examples():\n'
                '    return [("resnet", "ok" if SCALE == 1 else "broken")]\n', "resnet")
    commit_file(path, "main", "zoo/vit.py", 'def examples():\n    return [("vit", "ok")]\n', "vit")
    commit_file(path, "main", "zoo/patches.py", "import torch._inductor.lowering  # replaces a lowering\n", "patch")
    commit_file(path, "main", ".compile-ci.toml", CONFIG, "declare the zoo")
    return path


@pytest.fixture
def worker(settings: Settings, tmp_path: Path, emulator: GitHubEmulator) -> Iterator[None]:
    with worker_running_suite(settings, tmp_path, emulator, "test_zoo.py", SUITE, FULL_NAME):
        yield


def open_pr(settings: Settings, number: int, sha: str, base: str) -> None:
    from service.devkit.sandbox.deliveries import pull_request_event
    from service.devkit.sandbox.stack import INSTALLATION_ID

    deliver(settings, "pull_request", pull_request_event(
        "opened", full_name=FULL_NAME, repo_id=4031, installation_id=INSTALLATION_ID,
        clone_url=f"https://github.com/{FULL_NAME}.git", number=number, head_sha=sha, head_ref=f"pr{number}",
        base_sha=base))


def push(settings: Settings, sha: str, before: str) -> None:
    from service.devkit.sandbox.deliveries import push_event
    from service.devkit.sandbox.stack import INSTALLATION_ID

    deliver(settings, "push", push_event(full_name=FULL_NAME, repo_id=4031, installation_id=INSTALLATION_ID,
                                         clone_url=f"https://github.com/{FULL_NAME}.git", branch="main",
                                         before=before, after=sha))


def results(settings: Settings, check_run: dict[str, Any]) -> dict[str, tuple[str, bool, str]]:
    store = Store(settings.database_url)
    job = store.get_job(job_id_of_external(check_run["external_id"]))
    assert job is not None
    return {r.nodeid.split("::")[-1]: (r.outcome, r.not_affected, r.verdict) for r in store.results_of(job.id,
                                                                                                         job.attempt)}


def finished(emulator: GitHubEmulator, sha: str, timeout_s: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        runs = [r for r in emulator.check_runs(FULL_NAME) if r["head_sha"] == sha]
        if len(runs) == 1 and runs[0]["status"] == "completed":
            return runs[0]
        assert time.monotonic() < deadline, f"check run of {sha[:12]} never completed: {runs}"
        time.sleep(0.1)


def test_a_pull_request_runs_what_it_can_affect_and_takes_the_rest_from_its_base(
    settings: Settings, repo: Path, worker: None, emulator: GitHubEmulator
) -> None:
    base = head_of(repo)
    push(settings, base, "0" * 40)
    assert finished(emulator, base)["conclusion"] == "success"

    # One model changed: its test runs (and fails, red); the other model's test is its base's result.
    vit = commit_file(repo, "pr1", "zoo/vit.py", 'def examples():\n    return [("vit", "broken")]\n', "break vit")
    open_pr(settings, 1, vit, base)
    check_run = finished(emulator, vit)
    assert check_run["conclusion"] == "failure"
    assert check_run["output"]["title"] == "1 new failure, 1 not affected (base result) — 1 failed, 1 passed"
    assert results(settings, check_run) == {
        "test_declared_model[resnet]": ("passed", True, "not_affected"),  # the base's, not run here
        "test_declared_model[vit]": ("failed", False, "new_failure"),
        "test_builtin_corpus": ("passed", False, "unchanged"),
    }
    summary = check_run["output"]["summary"]
    assert "**Not affected by this change, so not run: the base's results**" in summary
    assert "test_declared_model[resnet]" in summary and "the base's result: passed" in summary
    assert [a["message"].split(": ")[0].split("::")[-1] for a in check_run["annotations"]] == [
        "test_declared_model[vit]"]
    client = create_app(settings).test_client()
    path = check_run["details_url"].removeprefix(settings.public_url)
    assert "NOT AFFECTED" in client.get(path).get_data(as_text=True)
    log = client.get(path + "/files/log.txt").get_data(as_text=True)
    assert "not affected by this change, so not run" in log and "zoo.resnet:examples" in log

    # A shared module of one model: that model runs, the other does not.
    blocks = commit_file(repo, "pr2", "zoo/blocks.py", "SCALE = 1  # documented\n", "touch resnet's blocks")
    open_pr(settings, 2, blocks, base)
    check_run = finished(emulator, blocks)
    assert {k: v[1] for k, v in results(settings, check_run).items()} == {
        "test_declared_model[resnet]": False, "test_declared_model[vit]": True, "test_builtin_corpus": False}

    # A file that patches the compiler: every test runs, whatever it imports.
    patch = commit_file(repo, "pr3", "zoo/patches.py", "import torch._inductor.lowering  # v2\n", "patch v2")
    open_pr(settings, 3, patch, base)
    check_run = finished(emulator, patch)
    assert (check_run["conclusion"], check_run["output"]["title"]) == ("success", "3 passed")
    assert not any(left for _outcome, left, _verdict in results(settings, check_run).values())

    # The default branch always runs everything, whatever changed.
    pushed = commit_file(repo, "main", "zoo/vit.py", 'def examples():\n    return [("vit", "ok")]  # docs\n', "vit")
    push(settings, pushed, base)
    check_run = finished(emulator, pushed)
    assert check_run["output"]["title"] == "3 passed"
    assert not any(left for _outcome, left, _verdict in results(settings, check_run).values())

"""Signal, not noise, with real torch.compile through the pipeline: the default branch's push run compiles cold and
fills the trusted cache; a README-only pull request then runs warm (its graphs loaded from that cache, forwards and
backwards written in another order) and is judged against that push run: nothing "changed", compile times not
compared and no comment. A pull request that really changes the generated code is still "changed"."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.compare.ledger import ledger_of
from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.deliveries import pull_request_event, push_event
from service.devkit.sandbox.sample_repo import commit_file
from service.devkit.sandbox.stack import INSTALLATION_ID
from service.store import Store
from tests.conftest import make_settings
from tests.integration.suite_worker import worker_running_suite
from tests.integration.test_base_judgement import deliver

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
FULL_NAME = "octo/signal"
SUITE = '''
import os, sys

import pytest
import torch

sys.path.insert(0, os.environ["COMPILE_CI_CHECKOUT"])
from signalpkg import model


class Target:
    """The repository's code these tests run, named as the built-in suites' declared-target parameters name it: a
    test of no such parameter is the built-in corpus, which a change outside the compiler cannot reach."""

    spec = "signalpkg.model"


pytestmark = pytest.mark.parametrize("target", [Target()], ids=["signalpkg"])


def test_forward(target):
    torch._dynamo.reset()
    x = torch.randn(4, 8)
    torch.testing.assert_close(torch.compile(model.forward)(x), model.forward(x))


def test_training_with_a_graph_break(target):
    torch._dynamo.reset()
    torch.manual_seed(0)
    torch.compile(model.Net())(torch.randn(4, 8)).sum().backward()
'''
MODEL = '''
import torch
from torch import nn


def forward(x):
    return torch.tanh(x) * 2


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.first, self.second = nn.Linear(8, 8), nn.Linear(8, 4)

    def forward(self, x):
        h = torch.tanh(self.first(x))
        torch._dynamo.graph_break()  # two graphs, each with its backward
        return torch.sigmoid(self.second(h))
'''


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repos" / FULL_NAME
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    commit_file(path, "main", "signalpkg/__init__.py", "", "package")
    commit_file(path, "main", "signalpkg/model.py", MODEL, "a model")
    commit_file(path, "main", ".compile-ci.toml", '[suites]\ndevices = ["cpu"]\nflaky_reruns = 0\n', "cpu only")
    return path


@pytest.fixture
def settings(tmp_path: Path, redis_url: str, emulator: GitHubEmulator, app_keys: tuple[str, str],
             checkout_python: Path) -> Settings:
    # The job's interpreter imports `suites` (the capture plugin) from this checkout (tests/conftest.py).
    return make_settings(tmp_path, redis_url, emulator.url, app_keys[0], COMPILE_CI_RUNNER_PYTHON=str(checkout_python))


@pytest.fixture
def worker(settings: Settings, tmp_path: Path, emulator: GitHubEmulator) -> Iterator[None]:
    with worker_running_suite(settings, tmp_path, emulator, "test_signal.py", SUITE, FULL_NAME):
        yield


def _rev(repo: Path, ref: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "rev-parse", ref], check=True, capture_output=True,
                          text=True).stdout.strip()


def _completed(emulator: GitHubEmulator, sha: str, timeout_s: float = 540, compared: bool = True) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        runs = [r for r in emulator.check_runs(FULL_NAME) if r["head_sha"] == sha]
        if len(runs) == 1 and runs[0]["status"] == "completed" and \
                (not compared or "Compared with the base" in runs[0]["output"]["summary"]):
            return runs[0]
        assert time.monotonic() < deadline, f"{sha[:12]}: {runs}"
        time.sleep(0.2)


def _metrics(store: Store, sha: str, name: str) -> dict[str, Any]:
    (run,) = store.runs_at_sha(FULL_NAME, sha)
    (job,) = store.jobs_of(run.id)
    (result,) = [r for r in store.results_of(job.id, job.attempt) if name in r.nodeid]
    return result.metrics or {}


def test_a_readme_only_pull_request_changes_nothing_and_a_code_change_still_does(
    settings: Settings, repo: Path, worker: None, emulator: GitHubEmulator
) -> None:
    base = _rev(repo, "main")
    deliver(settings, "push", push_event(full_name=FULL_NAME, repo_id=4005, installation_id=INSTALLATION_ID,
                                         clone_url=f"https://github.com/{FULL_NAME}.git", branch="main",
                                         before="0" * 40, after=base))
    assert _completed(emulator, base, compared=False)["conclusion"] == "success"
    readme = commit_file(repo, "pr51", "README.md", "# signal\n\nWords only.\n", "docs")
    sigmoid = MODEL.replace("torch.tanh(x) * 2", "torch.sigmoid(x) * 2")
    changed = commit_file(repo, "pr52", "signalpkg/model.py", sigmoid, "sigmoid")
    for number, sha in ((51, readme), (52, changed)):
        deliver(settings, "pull_request", pull_request_event(
            "opened", full_name=FULL_NAME, repo_id=4005, installation_id=INSTALLATION_ID,
            clone_url=f"https://github.com/{FULL_NAME}.git", number=number, head_sha=sha, head_ref=f"pr{number}",
            base_sha=base))

    quiet = _completed(emulator, readme)
    summary = quiet["output"]["summary"]
    assert quiet["conclusion"] == "success" and not re.search(r"\bchanged\b", summary, re.IGNORECASE), summary
    assert "2 unchanged" in summary
    assert "Compile time not compared for 2 tests: 2 (base cold, head warm)." in summary, summary
    # It is the scenario of issue 29: the base compiled cold, the head loaded every graph from the trusted cache.
    store = Store(settings.database_url)
    for name in ("test_forward", "test_training_with_a_graph_break"):
        assert ledger_of(_metrics(store, base, name)).cache == "cold", name
        assert ledger_of(_metrics(store, readme, name)).cache == "warm", name

    rewritten = _completed(emulator, changed)
    assert "**Generated code changed in 1 test**" in rewritten["output"]["summary"], rewritten["output"]
    assert "test_signal.py__test_forward" in rewritten["output"]["summary"]  # the link to the test's page
    deadline = time.monotonic() + 30  # the comment follows the check run's report in the same task
    while not emulator.comments and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [c["issue_number"] for c in emulator.comments] == [52]  # the README-only one is all green and unchanged


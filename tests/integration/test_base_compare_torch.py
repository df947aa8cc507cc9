"""Pull requests of a model repository judged against their base with real torch.compile: a graph break added to a
declared model fails the [budgets] with dynamo's reason; a pass that changes generated code but not results is green
with the code change counted; a planted flaky test is flaky and green. One base run serves all of them."""

from __future__ import annotations

import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker

from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.deliveries import pull_request_event
from service.devkit.sandbox.sample_repo import commit_file
from service.devkit.sandbox.stack import INSTALLATION_ID
from service.jobs.tasks import create_worker_celery
from service.store import Store
from tests.conftest import make_settings
from tests.integration.test_base_judgement import deliver

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
FULL_NAME = "octo/zoo"
# Runs the repository's declared models under torch.compile with its declared post-grad pass, as a built-in suite
# does, in one small test per model (the built-in suites' whole corpus would take minutes on a busy host).
SUITE = '''
import importlib, inspect, json, os, pathlib, sys

import pytest
import torch

from suites.harness import custom_graph_pass, inductor_config, reset_dynamo

sys.path.insert(0, os.environ["COMPILE_CI_CHECKOUT"])
TARGETS = json.loads(os.environ.get("COMPILE_CI_TARGETS") or "{}")


def _load(spec):
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


class Model:
    """A declared model's example; `spec` names the declared target its test belongs to, as the built-in suites'
    parameters do (suites/sharding.py: what a change cannot reach is reused by that group)."""

    def __init__(self, spec, name, factory, inputs):
        self.spec, self.name, self.factory, self.inputs = spec, name, factory, inputs


MODELS = [Model(spec, *m) for spec in TARGETS.get("models", []) for m in _load(spec)()]
PASSES = [_load(spec) for spec in TARGETS.get("post_grad_passes", [])]


@pytest.mark.parametrize("model", MODELS, ids=[m.name for m in MODELS])
def test_declared_model(model):
    factory, inputs = model.factory, model.inputs
    reset_dynamo()
    torch.manual_seed(0)
    model = factory()
    expected = model(*inputs)
    # The pass's source is its cache key: a changed pass must not be served the base's cached code.
    passes = {}
    if PASSES:
        passes["post_grad_custom_post_pass"] = custom_graph_pass(PASSES[0], inspect.getsource(PASSES[0]))
    with inductor_config(**passes):
        actual = torch.compile(model)(*inputs)
    torch.testing.assert_close(actual, expected)


def test_flaky_when_planted():
    planted = pathlib.Path(os.environ["COMPILE_CI_CHECKOUT"]) / "flaky.txt"
    first = pathlib.Path(os.environ["COMPILE_CI_OUTPUT_DIR"]) / ".failed-once"
    if planted.exists() and not first.exists():
        first.write_text("1")
        raise AssertionError("fails on its first attempt in the job only")
'''
MODELS = '''
import torch
from torch import nn


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        h = torch.tanh(self.proj(x))
        return h + h


def examples():
    return [("residual", Residual, (torch.randn(4, 8),))]
'''
GRAPH_BREAK = MODELS.replace("        return h + h", "        n = h.sum().item()  # a host sync: a graph break\n"
                             "        return h + h + 0 * n")
PASSES = '''
import torch


def double_add_to_mul(graph):
    """Post-grad: nothing yet."""
'''
REWRITING_PASS = '''
import torch


def double_add_to_mul(graph):
    """Post-grad: x + x becomes x * 2 (the same numbers, other code)."""
    for node in list(graph.nodes):
        if node.target is torch.ops.aten.add.Tensor and len(node.args) == 2 and node.args[0] is node.args[1]:
            with graph.inserting_before(node):
                doubled = graph.call_function(torch.ops.aten.mul.Tensor, (node.args[0], 2))
            node.replace_all_uses_with(doubled)
            graph.erase_node(node)
'''
CONFIG = '''[suites]
devices = ["cpu"]
[targets]
models = ["zoo.models:examples"]
post_grad_passes = ["zoo.passes:double_add_to_mul"]
[budgets]
new_graph_breaks = 0
'''


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repos" / FULL_NAME
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    commit_file(path, "main", "zoo/__init__.py", "", "package")
    commit_file(path, "main", "zoo/models.py", MODELS, "a model")
    commit_file(path, "main", "zoo/passes.py", PASSES, "a pass")
    commit_file(path, "main", ".compile-ci.toml", CONFIG, "declare them")
    return path


@pytest.fixture
def settings(tmp_path: Path, redis_url: str, emulator: GitHubEmulator, app_keys: tuple[str, str],
             checkout_python: Path) -> Settings:
    # The job's interpreter imports `suites` (the plugin: graph-break reasons, in-job re-runs) from this checkout
    # (tests/conftest.py checkout_python).
    return make_settings(tmp_path, redis_url, emulator.url, app_keys[0], COMPILE_CI_RUNNER_PYTHON=str(checkout_python))


@pytest.fixture
def worker(settings: Settings, tmp_path: Path, emulator: GitHubEmulator) -> Iterator[None]:
    suite = tmp_path / "suites" / "correctness"
    suite.mkdir(parents=True)
    (suite / "test_declared.py").write_text(textwrap.dedent(SUITE))
    emulator.add_repo(FULL_NAME)
    emulator.add_installation(INSTALLATION_ID, repos=[FULL_NAME])
    app = create_worker_celery(settings, suites_dir=suite.parent)
    with start_worker(app, pool="threads", concurrency=3, perform_ping_check=False, shutdown_timeout=60,
                      queues=["cpu", "github"]):
        yield


def open_pr(settings: Settings, number: int, sha: str, base_sha: str) -> None:
    deliver(settings, "pull_request", pull_request_event(
        "opened", full_name=FULL_NAME, repo_id=4003, installation_id=INSTALLATION_ID,
        clone_url=f"https://github.com/{FULL_NAME}.git", number=number, head_sha=sha, head_ref=f"pr{number}",
        base_sha=base_sha))


def await_compared(emulator: GitHubEmulator, shas: list[str], timeout_s: float = 540) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while True:
        runs = {r["head_sha"]: r for r in emulator.check_runs(FULL_NAME)}
        if all(sha in runs and runs[sha]["status"] == "completed"
               and "Compared with the base" in runs[sha]["output"]["summary"] for sha in shas):
            return runs
        assert time.monotonic() < deadline, {sha: runs.get(sha, {}).get("output") for sha in shas}
        time.sleep(0.2)


def test_graph_break_budget_code_change_and_flaky_test_against_one_base_run(
    settings: Settings, repo: Path, worker: None, emulator: GitHubEmulator
) -> None:
    base = subprocess.run(["git", "-C", str(repo), "rev-parse", "main"], check=True, capture_output=True,
                          text=True).stdout.strip()
    breaking = commit_file(repo, "pr41", "zoo/models.py", GRAPH_BREAK, "sync on the host")
    rewriting = commit_file(repo, "pr42", "zoo/passes.py", REWRITING_PASS, "x + x -> x * 2")
    flaky = commit_file(repo, "pr43", "flaky.txt", "yes\n", "plant a flaky test")
    for number, sha in ((41, breaking), (42, rewriting), (43, flaky)):
        open_pr(settings, number, sha, base)
    runs = await_compared(emulator, [breaking, rewriting, flaky])

    broken = runs[breaking]
    assert broken["conclusion"] == "failure", broken["output"]
    # The flaky-test plant is of no declared target (the built-in corpus): a model change cannot reach it.
    assert broken["output"]["title"] == "1 budget violation, 1 reused from the base — 1 passed"
    (note,) = broken["annotations"]
    assert "test_declared_model[residual]: graph_breaks 0 → 1 (budget: at most 0 new)" in note["message"]
    assert "item" in note["message"]  # dynamo's own reason for the break names the Tensor.item() call

    rewritten = runs[rewriting]
    assert (rewritten["conclusion"], rewritten["output"]["title"]) == ("success", "2 passed"), rewritten["output"]
    assert "**Generated code changed in 1 test**" in rewritten["output"]["summary"]
    assert "test_declared_model_residual" in rewritten["output"]["summary"]  # the link to the test's page

    planted = runs[flaky]
    assert (planted["conclusion"], planted["output"]["title"]) == ("success", "Green — 1 flaky (2 passed)")
    assert [a["annotation_level"] for a in planted["annotations"]] == ["notice"]
    assert "earlier attempts in this job: failed" in planted["output"]["summary"]

    store = Store(settings.database_url)
    (base_run,) = [r for r in store.recent_runs() if r.trigger == "base"]
    assert all(r.base_run_id == base_run.id for sha in runs for r in store.runs_at_sha(FULL_NAME, sha))
    deadline = time.monotonic() + 30  # each comment follows its check run's report in the same task
    while {c["issue_number"] for c in emulator.comments} != {41, 42, 43} and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sorted(c["issue_number"] for c in emulator.comments) == [41, 42, 43]  # none is all green and unchanged

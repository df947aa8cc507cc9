"""Reuse by content, through the webhook, a real Celery worker, LocalRunner and the emulator: a test's result is
reused, named with the job that ran it, when nothing it depends on changed; the run-time fingerprint has the last
word; the verdict is the same whichever job finishes first; a pull request's own results never serve another run.

A model repository declares two models in their own modules; its tiny suites have a corpus test (no declared target)
and a test per declared model, and run through `suites.pytest_entry`, which writes the job's surface.json.
"""

from __future__ import annotations

import shutil
import subprocess
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker

from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.deliveries import pull_request_event, push_event
from service.devkit.sandbox.sample_repo import commit_file
from service.devkit.sandbox.stack import INSTALLATION_ID
from service.jobs.tasks import create_worker_celery
from service.store import Job, Run, Store, job_id_of_external
from service.store.reuse import inputs_of
from service.web.app import create_app
from suites.naming import sanitise_nodeid
from tests.conftest import make_settings, wrapper_python
from tests.integration.test_base_judgement import deliver, head_of

FULL_NAME = "octo/zoo"
REPO_ID = 4031
SUITE = '''
import importlib, json, os, pathlib, re, sys, time
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class Declared:  # as suites/targets.py hands a declared model to a test: with the spec it came from
    name: str
    spec: str
    value: str


@dataclass(frozen=True)
class TargetError:  # a declared target that could not be loaded: its test always runs, and fails
    spec: str
    message: str


def _declared():
    sys.path.insert(0, os.environ["COMPILE_CI_CHECKOUT"])
    found = []
    for spec in json.loads(os.environ.get("COMPILE_CI_TARGETS") or "{}").get("models", []):
        module, _, attr = spec.partition(":")
        try:
            found += [Declared(n, spec, v) for n, v in getattr(importlib.import_module(module), attr)()]
        except Exception as exc:
            found.append(TargetError(spec, repr(exc)))
    return found


def _gate():
    """A checkout whose zoo/gate.py names a gate waits until the test opens it: which job finishes first."""
    path = pathlib.Path(os.environ["COMPILE_CI_CHECKOUT"]) / "zoo" / "gate.py"
    found = re.search(r'GATE = "(\\w+)"', path.read_text()) if path.exists() else None
    gate = pathlib.Path(os.environ["ZOO_GATES"]) / found.group(1) if found else None
    deadline = time.monotonic() + 120
    while gate is not None and not gate.exists():
        assert time.monotonic() < deadline, f"{gate} never opened"
        time.sleep(0.05)


@pytest.mark.parametrize("model", _declared(), ids=lambda m: getattr(m, "name", m.spec))
def test_declared_model(model):
    _gate()
    assert not isinstance(model, TargetError), model.message
    assert model.value == "ok", f"{model.name} is broken"


def test_builtin_corpus():
    _gate()
'''
CONFIG = '''[comment]
always = true
[suites]
run = ["{suite}"]
devices = ["cpu"]
flaky_reruns = 0
[targets]
models = ["zoo.resnet:examples", "zoo.vit:examples"]
'''
FORGE = '''import json, os

# A pull request's code in its own job: it claims a compiler fingerprint and keeps the suites'
# plugin from writing the true one at the session's end, so that its results look reusable.
import suites.compiler_surface

suites.compiler_surface.write_record = lambda path: None
with open(os.path.join(os.environ["COMPILE_CI_OUTPUT_DIR"], "surface.json"), "w") as handle:
    json.dump({"fingerprint": "forged", "changes": []}, handle)
'''
RESNET = 'from .blocks import SCALE\n\n\ndef examples():\n    return [("resnet", "ok" if SCALE == 1 else "broken")]\n'
VIT = 'def examples():\n    return [("vit", "ok")]\n'
# Imported by nothing at the base: a model that starts importing it patches inductor, unseen by the static check
# (the file itself does not change), seen by the job's fingerprint.
SNEAKY = ('import torch\nimport torch._inductor.lowering as lowering\n\n\ndef _sin(x):\n    return x\n\n\n'
          'lowering.lowerings[torch.ops.aten.sin.default] = _sin\n')


@pytest.fixture(scope="module")
def gated_python(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The jobs' interpreter (this checkout's `suites`, tests/conftest.py) with the gates' directory set, one for the
    module: the runner checks an interpreter once per process and path, so the module's tests pay that once."""
    gates = tmp_path_factory.mktemp("zoo-gates")
    return wrapper_python(gates.parent / f"{gates.name}-python", ZOO_GATES=str(gates)), gates


@pytest.fixture
def gates(gated_python: tuple[Path, Path]) -> Path:
    _python, path = gated_python
    shutil.rmtree(path)  # no gate of an earlier test
    path.mkdir()
    return path


@pytest.fixture
def settings(tmp_path: Path, redis_url: str, emulator: GitHubEmulator, app_keys: tuple[str, str],
             gates: Path, gated_python: tuple[Path, Path]) -> Settings:
    return make_settings(tmp_path, redis_url, emulator.url, app_keys[0], COMPILE_CI_RUNNER_PYTHON=str(gated_python[0]))


def make_repo(root: Path, suite: str = "correctness", gate: str = "") -> Path:
    path = root / "repos" / FULL_NAME
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    for name, text in (("zoo/__init__.py", ""), ("zoo/blocks.py", "SCALE = 1\n"), ("zoo/resnet.py", RESNET),
                       ("zoo/vit.py", VIT), ("zoo/patches.py", "import torch._inductor.lowering  # a patch\n"),
                       ("zoo/sneaky.py", SNEAKY), ("zoo/gate.py", f'GATE = "{gate}"\n'),
                       ("README.md", "# zoo\n"), (".compile-ci.toml", CONFIG.format(suite=suite))):
        commit_file(path, "main", name, text, f"add {name}")
    return path


@pytest.fixture
def worker(settings: Settings, tmp_path: Path, emulator: GitHubEmulator) -> Iterator[None]:
    suites = tmp_path / "suites"
    for name in ("correctness", "ops"):  # the same tiny suite under both names: a pull request's and a sweep's
        (suites / name).mkdir(parents=True)
        (suites / name / "test_zoo.py").write_text(textwrap.dedent(SUITE))
    emulator.add_repo(FULL_NAME)
    emulator.add_installation(INSTALLATION_ID, repos=[FULL_NAME])
    app = create_worker_celery(settings, suites_dir=suites)
    with start_worker(app, pool="threads", concurrency=4, perform_ping_check=False, shutdown_timeout=30,
                      queues=["cpu", "github"]):
        yield


def open_pr(settings: Settings, number: int, sha: str, base: str) -> None:
    deliver(settings, "pull_request", pull_request_event(
        "opened", full_name=FULL_NAME, repo_id=REPO_ID, installation_id=INSTALLATION_ID,
        clone_url=f"https://github.com/{FULL_NAME}.git", number=number, head_sha=sha, head_ref=f"pr{number}",
        base_sha=base))


def push(settings: Settings, sha: str, before: str) -> None:
    deliver(settings, "push", push_event(full_name=FULL_NAME, repo_id=REPO_ID, installation_id=INSTALLATION_ID,
                                         clone_url=f"https://github.com/{FULL_NAME}.git", branch="main",
                                         before=before, after=sha))


def job_of(settings: Settings, check_run: dict[str, Any]) -> Job:
    job = Store(settings.database_url).get_job(job_id_of_external(check_run["external_id"]))
    assert job is not None
    return job


def results(settings: Settings, job: Job) -> dict[str, tuple[str, bool, str]]:
    """test -> (outcome, reused, the job it came from)."""
    return {r.nodeid.split("::")[-1]: (r.outcome, r.not_affected, r.reused_from)
            for r in Store(settings.database_url).results_of(job.id, job.attempt)}


def await_runs(emulator: GitHubEmulator, sha: str, until: Callable[[list[dict[str, Any]]], bool],
               timeout_s: float = 150) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while True:
        runs = sorted((r for r in emulator.check_runs(FULL_NAME) if r["head_sha"] == sha), key=lambda r: r["id"])
        if runs and until(runs):
            return runs
        assert time.monotonic() < deadline, f"the check runs of {sha[:12]} never got there: {runs}"
        time.sleep(0.1)


def final(emulator: GitHubEmulator, sha: str) -> dict[str, Any]:
    """The one check run of `sha`, completed and no longer waiting for its base."""
    return await_runs(emulator, sha, lambda runs: len(runs) == 1 and runs[0]["status"] == "completed"
                      and "base still running" not in runs[0]["output"]["title"])[0]


def push_job(settings: Settings, sha: str) -> Job:
    store = Store(settings.database_url)
    run = store.push_run_at(FULL_NAME, sha)
    assert run is not None
    (job,) = store.jobs_of(run.id)
    return job


def test_a_pull_request_reuses_what_its_change_cannot_reach_naming_the_job_that_ran_it(
    settings: Settings, tmp_path: Path, worker: None, emulator: GitHubEmulator
) -> None:
    repo = make_repo(tmp_path)
    base = head_of(repo)
    push(settings, base, "0" * 40)
    assert final(emulator, base)["output"]["title"] == "3 passed"
    source = push_job(settings, base)

    # README only: every test is the base's, named so on the check run, the comment, the job and test pages.
    readme = commit_file(repo, "pr1", "README.md", "# zoo\n\nNow documented.\n", "docs")
    open_pr(settings, 1, readme, base)
    check_run = final(emulator, readme)
    assert (check_run["conclusion"], check_run["output"]["title"]) == ("success",
                                                                       "Green — 3 reused from the base (no tests)")
    job = job_of(settings, check_run)
    assert set(results(settings, job).values()) == {("passed", True, source.id)}
    assert f"Reused from the base job ([job]({settings.public_url}/jobs/{source.id}))" in check_run["output"][
        "summary"]
    said = "Reused, not run (nothing they depend on changed since the base): correctness (cpu) 3 from"
    await_until(lambda: any(said in c["body"] for c in emulator.comments if c["issue_number"] == 1))
    client = create_app(settings).test_client()
    page = client.get(check_run["details_url"].removeprefix(settings.public_url)).get_data(as_text=True)
    assert "REUSED" in page and f'href="/jobs/{source.id}/tests/' in page
    corpus = next(r.nodeid for r in Store(settings.database_url).results_of(job.id, job.attempt)
                  if r.nodeid.endswith("test_builtin_corpus"))
    test_page = client.get(f"/jobs/{job.id}/tests/{sanitise_nodeid(corpus)}").get_data(as_text=True)
    assert 'id="reused-from"' in test_page and source.id in test_page
    log = client.get(f"/jobs/{job.id}/files/log.txt").get_data(as_text=True)
    assert "their results are reused, not run: (built-in corpus), zoo.resnet:examples" in log
    # Only documentation changed and the base had ended: no runner started for it (service/planning/reuse_whole.py).
    assert f"only documentation changed since job {source.id}" in log and "suites.pytest_entry" not in log

    # A Python file that no declared target imports: every test is reused too, but the runner starts, so that the
    # job's collection and run-time fingerprint are checked (a file nothing imports statically may still run).
    tool = commit_file(repo, "pr8", "tools/release.py", "print('release')\n", "a tool")
    open_pr(settings, 8, tool, base)
    check_run = final(emulator, tool)
    assert (check_run["conclusion"], check_run["output"]["title"]) == ("success",
                                                                       "Green — 3 reused from the base (no tests)")
    log = client.get(f"/jobs/{job_of(settings, check_run).id}/files/log.txt").get_data(as_text=True)
    assert "suites.pytest_entry" in log and "no runner was started" not in log

    # One model changed: its test runs (red); the corpus and the other model are the base's.
    vit = commit_file(repo, "pr2", "zoo/vit.py", 'def examples():\n    return [("vit", "broken")]\n', "break vit")
    open_pr(settings, 2, vit, base)
    check_run = final(emulator, vit)
    assert (check_run["conclusion"], check_run["output"]["title"]) == (
        "failure", "1 new failure, 2 reused from the base — 1 failed")
    assert results(settings, job_of(settings, check_run)) == {
        "test_declared_model[resnet]": ("passed", True, source.id), "test_declared_model[vit]": ("failed", False, ""),
        "test_builtin_corpus": ("passed", True, source.id)}

    # A file that patches the compiler: every test runs.
    patch = commit_file(repo, "pr3", "zoo/patches.py", "import torch._inductor.lowering  # v2\n", "patch v2")
    open_pr(settings, 3, patch, base)
    assert final(emulator, patch)["output"]["title"] == "3 passed"

    # A pull request's own job (untrusted code) forges its surface.json: only ever compared for itself. A pull
    # request stacked on its commit takes its base results from a base run of that commit, never from its job.
    commit_file(repo, "pr6", "zoo/forge.py", FORGE, "forge")
    forged = commit_file(repo, "pr6", "zoo/vit.py", "import zoo.forge  # noqa\n" + VIT, "vit forges")
    open_pr(settings, 6, forged, base)
    attacker = job_of(settings, final(emulator, forged))
    store = Store(settings.database_url)
    own = inputs_of(store, attacker.id, attacker.attempt)
    assert own is not None and own.fingerprint == "forged"
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "-B", "pr7", forged], check=True)
    stacked = commit_file(repo, "pr7", "README.md", "# zoo\n\nstacked\n", "docs")
    open_pr(settings, 7, stacked, forged)
    check_run = final(emulator, stacked)
    base_job = store.jobs_of(base_run_of(store, stacked).id)[0]
    sources = {source for _outcome, reused, source in results(settings, job_of(settings, check_run)).values()
               if reused}
    assert sources == {base_job.id} and base_job.run_id != attacker.run_id


@pytest.mark.heavy  # the same properties, without runners, in tests/unit/test_reuse_keys.py
def test_a_config_key_affects_its_own_target_and_install_reaches_every_test(
    settings: Settings, tmp_path: Path, worker: None, emulator: GitHubEmulator
) -> None:
    repo = make_repo(tmp_path)
    base = head_of(repo)
    push(settings, base, "0" * 40)
    final(emulator, base)
    source = push_job(settings, base)

    # A new model declared: the config changed one key of its own, so only that model runs; its base is a base run
    # (the config differs from the push's), which itself runs the new model only and reuses the rest of the push.
    commit_file(repo, "pr4", "zoo/mlp.py", 'def examples():\n    return [("mlp", "ok")]\n', "mlp")
    declared = CONFIG.format(suite="correctness").replace('"zoo.vit:examples"]', '"zoo.vit:examples", '
                                                                                   '"zoo.mlp:examples"]')
    mlp = commit_file(repo, "pr4", ".compile-ci.toml", declared, "declare mlp")
    open_pr(settings, 4, mlp, base)
    check_run = final(emulator, mlp)
    assert (check_run["conclusion"], check_run["output"]["title"]) == (
        "success", "Green — 3 reused from the base (1 passed)")
    ran = results(settings, job_of(settings, check_run))
    assert ran["test_declared_model[mlp]"] == ("passed", False, "")
    assert {ran[t] for t in ran if t != "test_declared_model[mlp]"} == {("passed", True, source.id)}  # who ran them
    base_job = Store(settings.database_url).jobs_of(base_run_of(Store(settings.database_url), mlp).id)[0]
    at_base = results(settings, base_job)
    assert at_base.pop("test_declared_model[zoo.mlp:examples]")[:2] == ("failed", False)  # not there yet
    assert set(at_base.values()) == {("passed", True, source.id)}

    # [install] reaches every test.
    install = commit_file(repo, "pr5", ".compile-ci.toml", "[install]\npackage = false\n" +
                          CONFIG.format(suite="correctness"), "no package")
    open_pr(settings, 5, install, base)
    assert final(emulator, install)["output"]["title"] == "3 passed"


def test_a_push_takes_the_previous_pushs_sweep_when_nothing_it_depends_on_changed(
    settings: Settings, tmp_path: Path, worker: None, emulator: GitHubEmulator
) -> None:
    repo = make_repo(tmp_path, suite="ops")
    first = head_of(repo)
    push(settings, first, "0" * 40)
    assert final(emulator, first)["output"]["title"] == "3 passed"
    sweep = push_job(settings, first)

    docs = commit_file(repo, "main", "README.md", "# zoo\n\nmore\n", "docs")
    push(settings, docs, first)
    check_run = final(emulator, docs)
    assert (check_run["conclusion"], check_run["output"]["title"]) == (
        "success", f"3 reused (3 passed) from job {sweep.id}; ran here: no tests")
    job = job_of(settings, check_run)
    assert set(results(settings, job).values()) == {("passed", True, sweep.id)}
    store = Store(settings.database_url)
    mine, theirs = inputs_of(store, job.id, job.attempt), inputs_of(store, sweep.id, sweep.attempt)
    assert mine is not None and theirs is not None and mine.fingerprint == theirs.fingerprint == ""

    docs_again = commit_file(repo, "main", "README.md", "# zoo\n\nmore still\n", "docs")  # a chain: the first ran it
    push(settings, docs_again, docs)
    again = job_of(settings, final(emulator, docs_again))
    assert set(results(settings, again).values()) == {("passed", True, sweep.id)}
    client = create_app(settings).test_client()
    for ran_none in (job, again):  # neither started a runner: only documentation changed since its source
        log = client.get(f"/jobs/{ran_none.id}/files/log.txt").get_data(as_text=True)
        assert "no runner was started" in log and "suites.pytest_entry" not in log

    patched = commit_file(repo, "main", "zoo/patches.py", "import torch._inductor.lowering  # v2\n", "patch")
    push(settings, patched, docs_again)
    assert final(emulator, patched)["output"]["title"] == "3 passed"


def test_a_run_time_fingerprint_that_differs_makes_the_reused_tests_run(
    settings: Settings, tmp_path: Path, worker: None, emulator: GitHubEmulator
) -> None:
    repo = make_repo(tmp_path)
    base = head_of(repo)
    push(settings, base, "0" * 40)
    final(emulator, base)
    # Statically only vit changed (the module it now imports is unchanged and patches inductor when imported).
    vit = commit_file(repo, "pr1", "zoo/vit.py", "import zoo.sneaky  # noqa\n" + VIT, "vit imports sneaky")
    open_pr(settings, 1, vit, base)
    runs = await_runs(emulator, vit, lambda runs: len(runs) == 2 and all(r["status"] == "completed" for r in runs))
    assert (runs[0]["conclusion"], runs[0]["output"]["title"]) == (
        "neutral", "Run again: its reused results did not hold")
    assert "compiler fingerprint at run time" in runs[0]["output"]["summary"]
    assert runs[1]["output"]["title"] == "3 passed"  # every test ran: the run-time answer wins
    job = job_of(settings, runs[1])
    assert not any(reused for _o, reused, _s in results(settings, job).values())
    store = Store(settings.database_url)
    refuted = inputs_of(store, job.id, 1)
    assert refuted is not None and "compiler fingerprint at run time" in refuted.refuted
    log = create_app(settings).test_client().get(f"/jobs/{job.id}/files/log.txt").get_data(as_text=True)
    assert "every test runs: the results reused before did not hold" in log


@pytest.mark.parametrize("first", ["head", "base"])
def test_the_verdict_is_the_same_whichever_job_finishes_first(
    first: str, settings: Settings, tmp_path: Path, gates: Path, worker: None, emulator: GitHubEmulator
) -> None:
    # No push run at the base: its results come from a base run, which the gate holds back (or the head's job).
    repo = make_repo(tmp_path, gate="base" if first == "head" else "")
    base = head_of(repo)
    commit_file(repo, "pr1", "zoo/gate.py", f'GATE = "{"head" if first == "base" else ""}"\n', "gate")
    head = commit_file(repo, "pr1", "zoo/vit.py", 'def examples():\n    return [("vit", "broken")]\n', "break")
    open_pr(settings, 1, head, base)
    store = Store(settings.database_url)
    if first == "head":
        pending = await_runs(emulator, head, lambda runs: runs[0]["status"] == "completed")[0]
        assert pending["output"]["title"].endswith("base still running")
        base_run = base_run_of(store, head)
        assert store.jobs_of(base_run.id)[0].state != "completed"
    else:
        await_until(lambda: base_done(store, head))
        assert [r["status"] for r in emulator.check_runs(FULL_NAME)] == ["in_progress"]  # held by its gate
    (gates / ("base" if first == "head" else "head")).touch()
    check_run = final(emulator, head)
    assert (check_run["conclusion"], check_run["output"]["title"]) == (
        "failure", "1 new failure, 2 reused from the base — 1 failed")
    base_job = store.jobs_of(base_run_of(store, head).id)[0]
    assert results(settings, job_of(settings, check_run)) == {
        "test_declared_model[resnet]": ("passed", True, base_job.id),
        "test_declared_model[vit]": ("failed", False, ""), "test_builtin_corpus": ("passed", True, base_job.id)}


def test_a_documentation_change_has_the_same_verdict_whether_its_base_had_ended_or_not(
    settings: Settings, tmp_path: Path, gates: Path, worker: None, emulator: GitHubEmulator
) -> None:
    """Both orders: while the base job runs, the pull request's job starts its runner (the source's tests are not
    known yet); once it has ended, the next one takes them without a runner. The same check run either way."""
    repo = make_repo(tmp_path, gate="base")  # every job of this commit's code waits until the test opens the gate
    base = head_of(repo)
    push(settings, base, "0" * 40)
    early = commit_file(repo, "pr1", "README.md", "# zoo\n\nearly\n", "docs")
    open_pr(settings, 1, early, base)
    store = Store(settings.database_url)
    await_until(lambda: any(r["status"] == "in_progress" for r in emulator.check_runs(FULL_NAME)
                            if r["head_sha"] == early))
    assert push_job(settings, base).state != "completed"
    (gates / "base").touch()
    first = final(emulator, early)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "-B", "pr2", base], check=True)
    late = commit_file(repo, "pr2", "README.md", "# zoo\n\nlate\n", "docs")
    open_pr(settings, 2, late, base)
    second = final(emulator, late)
    source = push_job(settings, base)
    client = create_app(settings).test_client()
    logs = [client.get(f"/jobs/{job_of(settings, c).id}/files/log.txt").get_data(as_text=True)
            for c in (first, second)]
    assert "suites.pytest_entry" in logs[0] and "no runner was started" in logs[1]
    assert [(c["conclusion"], c["output"]["title"]) for c in (first, second)] == [
        ("success", "Green — 3 reused from the base (no tests)")] * 2
    assert results(settings, job_of(settings, first)) == results(settings, job_of(settings, second))
    assert job_of(settings, second).torch_version == job_of(settings, first).torch_version != ""  # the table's
    assert set(results(settings, job_of(settings, second)).values()) == {("passed", True, source.id)}
    assert store.get_job(source.id).conclusion == "success"


def base_done(store: Store, head_sha: str) -> bool:
    base = base_run_of(store, head_sha)
    jobs = store.jobs_of(base.id) if base is not None else []
    return bool(jobs) and all(job.state == "completed" for job in jobs)


def base_run_of(store: Store, head_sha: str) -> Run | None:
    (run,) = [r for r in store.recent_runs(20) if r.head_sha == head_sha]
    return store.get_run(run.base_run_id) if run.base_run_id else None


def await_until(predicate: Callable[[], bool], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.1)


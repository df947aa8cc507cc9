"""`compile-ci repro` from a fresh clone, as a developer who has never installed the repository's dependencies:
the sandbox's sample model zoo (its models import `zoo-extras`, served by a package index only the service sees),
pull request #2's failing declared model run by the real correctness suite in a job environment the install phase
built. From the test page's URL alone the command puts the clone at the job's commit (fetched as GitHub serves a
pull request's head), installs the job's very wheel beside it, prints one command and fails the same way, without
inductor's generated code unless asked; bad arguments are sentences, not tracebacks."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from werkzeug.serving import make_server

from service.config import Settings
from service.devkit.sandbox.sample_index import DEPENDENCY, write_sample_index
from service.devkit.sandbox.sample_repo import _git, create_sample_repo
from service.jobs import install
from service.repro import ReproError, run_repro
from service.store import Store
from service.web.app import create_app
from suites.naming import sanitise_nodeid
from tests.browser.seed import SeededTest, seed_job, seed_run

from .suite_run import REPO, run_suite

TEST = "test_declared_model[counting_scale]"
NODEID = f"correctness/test_correctness.py::{TEST}"


@pytest.fixture
def serving(settings: Settings) -> Iterator[str]:
    server = make_server("127.0.0.1", 0, create_app(settings), threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def developer_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPILE_CI_")}
    env["PYTHONPATH"] = str(REPO)  # compile-ci, as the developer has it installed
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    return env


def cli(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "service.cli", "repro", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_repro_from_a_fresh_clone_installs_the_jobs_wheels_and_fails_the_same_way(
        tmp_path: Path, settings: Settings, serving: str) -> None:
    origin = create_sample_repo(tmp_path / "github" / "sandbox" / "model-zoo")
    # As GitHub serves a pull request from a fork: its head only under refs/pull/<n>/head, in no branch.
    _git(origin.path, "update-ref", "refs/pull/2/head", origin.buggy_sha)
    _git(origin.path, "branch", "-D", "add-counting-scale")
    job_settings = dataclasses.replace(settings, pip_index_url=write_sample_index(tmp_path / "index"))
    site = install.prepare(job_settings, (DEPENDENCY,), "repro-test")  # the worker's trusted half
    assert site is not None

    # The job: the PR's commit, the correctness suite with the environment on its path, as the runner runs it.
    checkout = tmp_path / "job" / "checkout"
    subprocess.run(["git", "clone", "-q", str(origin.path), str(checkout)], check=True)
    _git(checkout, "fetch", "-q", "origin", "refs/pull/2/head")
    _git(checkout, "checkout", "-q", origin.buggy_sha)
    out, work = tmp_path / "job" / "out", tmp_path / "job" / "work"
    work.mkdir()
    run = run_suite("correctness", "counting_scale", work, plugin="suites.plugin", extra_env={
        "COMPILE_CI_TARGETS": json.dumps({"models": ["samplezoo.zoo:examples"]}),
        "COMPILE_CI_CHECKOUT": str(checkout), "COMPILE_CI_OUTPUT_DIR": str(out),
        "PYTHONPATH": os.pathsep.join([str(REPO), str(site)])})
    assert run.outcomes.get(TEST) == "failed", run.describe()
    # Where the service annotates it: the model's class, in the repository's file.
    line = (checkout / "samplezoo" / "zoo.py").read_text().splitlines().index("class CountingScale(nn.Module):") + 1
    assert run.properties[TEST]["compile_ci_target"] == f"samplezoo/zoo.py:{line}", run.properties[TEST]
    repro = out / "tests" / sanitise_nodeid(NODEID) / "repro.py"
    assert str(tmp_path) not in repro.read_text(), "the repro names a path of the job's machine"

    # The service keeps the job's results, its repro and its wheels; the job's machine is gone.
    store = Store(settings.database_url)
    job = seed_job(settings, store, seed_run(store, repo="sandbox/model-zoo", pr=2, sha=origin.buggy_sha),
                   [SeededTest(NODEID, "failed")])
    attempt = settings.artifacts_dir / job.run_id / job.id / "1"
    shutil.copy(repro, attempt / repro.relative_to(out))
    install.record_wheels(attempt, site, (DEPENDENCY,), settings.artifacts_dir, 1)
    shutil.rmtree(tmp_path / "job")
    shutil.rmtree(tmp_path / "index")

    test_page = f"{serving}/jobs/{job.id}/tests/{sanitise_nodeid(NODEID)}"
    page = urllib.request.urlopen(test_page, timeout=30).read().decode()
    assert f"compile-ci repro {settings.public_url}/jobs/{job.id}/tests/{sanitise_nodeid(NODEID)}" in page
    assert page.index('id="repro-command"') < page.index("Generated code")  # near the top, above the code

    laptop = tmp_path / "laptop" / "model-zoo"
    subprocess.run(["git", "clone", "-q", str(origin.path), str(laptop)], check=True)  # the default branch
    env = developer_env(tmp_path)
    proc = cli([test_page], laptop, env)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-4000:]
    assert f"checked out the job's commit {origin.buggy_sha[:12]}" in output
    assert _git(laptop, "rev-parse", "HEAD") == origin.buggy_sha
    assert "the job's 1 wheel(s), sha256 checked" in output and "zoo_extras-1.0-py3-none-any.whl" in output
    first_line = run.messages[TEST].strip().splitlines()[0].removeprefix("Failed: ")
    assert "compiled result differs from eager" in first_line and first_line in output, output[-4000:]
    assert re.search(rf"^FAILED \S*{re.escape(NODEID)}", output, re.M), output[-4000:]  # pytest's summary line
    assert "async_compile" not in output  # no generated code between the failure and pytest's summary
    command = output.split("nothing to set up):\n  ", 1)[1].splitlines()[0]  # the one command, run by hand
    again = subprocess.run(f"{command} --output-code", shell=True, env=env, capture_output=True, text=True,
                           timeout=300, check=False)
    assert again.returncode == 1 and first_line in again.stdout and "async_compile" in again.stdout + again.stderr


def test_bad_arguments_are_sentences_not_tracebacks(tmp_path: Path, settings: Settings, serving: str) -> None:
    origin = create_sample_repo(tmp_path / "github" / "sandbox" / "model-zoo")
    store = Store(settings.database_url)
    job = seed_job(settings, store, seed_run(store, repo="sandbox/model-zoo", pr=2, sha=origin.buggy_sha),
                   [SeededTest(NODEID, "failed"), SeededTest("correctness/test_correctness.py::test_other", "failed")])
    url = f"{serving}/jobs/{job.id}"
    env = developer_env(tmp_path)
    for args, says in [
        ([url, "--clone", "/nonexistent"], "--clone /nonexistent: no such directory"),
        (["not a url or id"], "is neither a job page URL nor a job id"),
        ([job.id], "a bare job id needs the service's address"),
        (["http://127.0.0.1:9/jobs/x"], "cannot reach http://127.0.0.1:9/jobs/x/repro.json"),
        ([f"{serving}/jobs/{job.id}-nope"], "HTTP 404"),
        ([url, "no_such_test"], "no failed test matching 'no_such_test'"),
        ([url, "test_"], "matches several failed tests"),
    ]:
        proc = cli(args, tmp_path, env)
        assert (proc.returncode, proc.stdout) == (2, ""), (args, proc.stderr)
        assert says in proc.stderr and "Traceback" not in proc.stderr, (args, proc.stderr)

    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(origin.path), str(clone)], check=True)
    (clone / "README.md").write_text("not a tracked file: no matter\n")
    with pytest.raises(ReproError, match="the clone is at .*, the job ran"):
        run_repro(url, "counting", clone, checkout=False)
    (clone / "samplezoo" / "zoo.py").write_text("# work in progress\n")
    with pytest.raises(ReproError, match=r"uncommitted changes \(1 files\)"):
        run_repro(url, "counting", clone)
    assert _git(clone, "rev-parse", "HEAD") == origin.base_sha  # nothing of the developer's was touched
    with pytest.raises(ReproError, match="is not a git clone"):
        run_repro(url, "counting", tmp_path / "github")

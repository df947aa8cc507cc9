"""Issue 26's attacks through the whole service: a pull request whose own tests plant links, FIFOs, garbage and a
flood in the job's output directory, run by the real DockerRunner from a webhook, judged by a real Celery worker,
reported to the GitHub emulator and browsed through the web app. Nothing it plants is followed, nothing hangs,
each outcome is the job's own failure with a clear title, and the next pull request is unaffected."""

from __future__ import annotations

import contextlib
import dataclasses
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery.contrib.testing.worker import start_worker

from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.sample_repo import commit_file
from service.devkit.sandbox.stack import INSTALLATION_ID
from service.jobs.tasks import create_worker_celery
from service.store import Store, job_id_of_external
from service.web.app import create_app
from suites.naming import sanitise_nodeid
from tests.integration.test_pipeline import FULL_NAME, await_check_runs, open_pr

SECRET = "BEGIN RSA PRIVATE KEY: the App's key, never to be shown"
CONFIG = '[suites]\nrun = ["repo"]\ndevices = ["cpu"]\nrepo_tests = ["tests"]\n'
# After pytest has written junit.xml (pytest_sessionfinish), the PR's conftest replaces what the service reads.
CONFTEST = '''
import os, pathlib

def pytest_unconfigure(config):
    out = os.environ.get("COMPILE_CI_OUTPUT_DIR")
    attack = (pathlib.Path(__file__).parent / "attack.txt").read_text().split()
    if not out or not attack:
        return
    if attack[0] == "links":
        secret, victim = attack[1], attack[2]
        os.remove(os.path.join(out, "junit.xml"))
        os.mkfifo(os.path.join(out, "junit.xml"))
        os.makedirs(os.path.join(out, "tests", "t"), exist_ok=True)
        os.mkfifo(os.path.join(out, "tests", "t", "metrics.json"))
        for name, target in [("log.txt", secret), ("environment.json", secret), ("meta.json", victim),
                             ("tests/t/repro.py", "/etc/passwd"), ("tests/t/output_code_0.py", secret)]:
            path = os.path.join(out, name)
            if os.path.lexists(path):
                os.remove(path)
            os.symlink(target, path)
    elif attack[0] == "garbage":
        pathlib.Path(out, "junit.xml").write_text("<testsuite><testcase name='x' time='soon'")
    elif attack[0] == "numbers":  # well-formed files built to break a reader, and a name that is not UTF-8
        huge = "1" + "0" * 400
        from suites.naming import sanitise_nodeid
        folder = pathlib.Path(out, "tests", sanitise_nodeid("tests/test_ok.py::test_fine"))
        folder.mkdir(parents=True, exist_ok=True)
        for path in [folder / "metrics.json"]:
            path.write_text('{"compile_time_s": %s, "graphs": %s, "graph_break_reasons": ["a\\\\u0000b"]}'
                            % (huge, huge))
        pathlib.Path(out, "coverage.json").write_text('{"denominator": %s, "covered": ["add"]}' % huge)
        open(os.path.join(os.fsencode(out), b"bad\\xffname"), "w").write("x")
    elif attack[0] == "fill":
        try:
            with open(os.path.join(out, "big.bin"), "wb") as handle:
                for _ in range(40):
                    handle.write(b"x" * (1 << 20))
        except OSError:
            pass
'''


@pytest.fixture
def docker_settings(settings: Settings) -> Settings:
    docker = pytest.importorskip("docker")
    try:
        with contextlib.closing(docker.from_env()) as engine:  # its socket closed, not left to a later test
            engine.ping()
    except Exception as exc:  # noqa: BLE001 - any reason the engine does not answer
        pytest.skip(f"no Docker engine: {exc}")
    return dataclasses.replace(settings, runner="docker", output_mb=16)


@pytest.fixture
def hostile_repo(tmp_path: Path) -> Path:
    path = tmp_path / "repos" / FULL_NAME
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    commit_file(path, "main", ".compile-ci.toml", CONFIG, "config")
    commit_file(path, "main", "tests/conftest.py", CONFTEST, "the attack")
    commit_file(path, "main", "tests/test_ok.py", "def test_fine():\n    assert True\n", "a test")
    return path


@pytest.fixture
def docker_worker(docker_settings: Settings, tmp_path: Path, emulator: GitHubEmulator) -> Iterator[None]:
    (tmp_path / "suites" / "correctness").mkdir(parents=True)
    emulator.add_repo(FULL_NAME)
    emulator.add_installation(INSTALLATION_ID, repos=[FULL_NAME])
    app = create_worker_celery(docker_settings, suites_dir=tmp_path / "suites")
    with start_worker(app, pool="threads", concurrency=2, perform_ping_check=False, shutdown_timeout=30,
                      queues=["cpu", "github"]):
        yield


def _pull_request(settings: Settings, repo: Path, emulator: GitHubEmulator, number: int, attack: str) -> dict:
    sha = commit_file(repo, f"pr{number}", "tests/attack.txt", attack + "\n", attack.split()[0] if attack else "x")
    open_pr(settings, number, sha, f"pr{number}")
    (check_run,) = await_check_runs(emulator, sha, 1, timeout_s=240)
    assert check_run["status"] == "completed", check_run
    return check_run


def _text(check_run: dict) -> str:
    out = check_run["output"]
    return f"{out['title']}\n{out['summary']}\n{out.get('text') or ''}"


@pytest.mark.e2e
def test_planted_links_and_fifos_are_refused_everywhere(docker_settings: Settings, hostile_repo: Path,
                                                        docker_worker: None, emulator: GitHubEmulator,
                                                        tmp_path: Path) -> None:
    secret, victim = tmp_path / "app-key.pem", tmp_path / "root-owned.conf"
    secret.write_text(SECRET)
    victim.write_text("original\n")
    check_run = _pull_request(docker_settings, hostile_repo, emulator, 1, f"links {secret} {victim}")
    assert (check_run["conclusion"], check_run["output"]["title"]) == ("failure", "Invalid output"), _text(check_run)
    assert SECRET not in _text(check_run) and "root:" not in _text(check_run)
    assert victim.read_text() == "original\n"

    job_id = job_id_of_external(check_run["external_id"])
    client = create_app(docker_settings).test_client()
    started = time.monotonic()
    pages = {path: client.get(f"/jobs/{job_id}{path}") for path in (
        "", "/log", "/log/search?q=BEGIN", "/log/live?offset=0", "/artifacts", "/download.zip", "/files/log.txt",
        "/files/junit.xml", "/files/meta.json", "/tests/t", "/files/tests/t/repro.py")}
    assert time.monotonic() - started < 20  # no FIFO made a page wait
    for path, response in pages.items():
        assert response.status_code in (200, 404), (path, response.status_code)
        assert SECRET.encode() not in response.data and b"root:x:0:0" not in response.data, path
    job_page = pages[""].get_data(as_text=True)
    assert "invalid artifact" in job_page and "junit.xml" in job_page and "a FIFO" in job_page
    assert pages["/files/junit.xml"].status_code == 404 and pages["/files/tests/t/repro.py"].status_code == 404
    assert pages["/files/meta.json"].status_code == 200  # the worker's own, with what was refused
    assert b'"problem_count": 7' in pages["/files/meta.json"].data


@pytest.mark.e2e
def test_garbage_junit_a_flood_and_then_a_clean_pull_request(docker_settings: Settings, hostile_repo: Path,
                                                             docker_worker: None, emulator: GitHubEmulator) -> None:
    garbage = _pull_request(docker_settings, hostile_repo, emulator, 2, "garbage")
    assert (garbage["conclusion"], garbage["output"]["title"]) == ("failure", "Invalid junit.xml"), _text(garbage)
    assert "Infrastructure" not in _text(garbage)

    numbers = _pull_request(docker_settings, hostile_repo, emulator, 5, "numbers")
    assert (numbers["conclusion"], numbers["output"]["title"]) == ("failure", "Invalid output"), _text(numbers)
    job_id = job_id_of_external(numbers["external_id"])
    client = create_app(docker_settings).test_client()
    (result,) = Store(docker_settings.database_url).results_of(job_id, 1)
    assert result.outcome == "passed" and (result.metrics or {}).get("graphs", 0) is None  # 10**400: nothing
    for path in ("", "/artifacts", f"/tests/{sanitise_nodeid(result.nodeid)}"):
        assert client.get(f"/jobs/{job_id}{path}").status_code == 200, path
    assert "bad\\xffname" in client.get(f"/jobs/{job_id}").get_data(as_text=True)  # named, escaped

    flood = _pull_request(docker_settings, hostile_repo, emulator, 3, "fill")
    assert (flood["conclusion"], flood["output"]["title"]) == ("failure", "Output over 16 MB"), _text(flood)
    job = Store(docker_settings.database_url).get_job(job_id_of_external(flood["external_id"]))
    assert job is not None
    out = docker_settings.artifacts_dir / job.run_id / job.id / "1"
    assert sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) < 17 * 1024 * 1024

    clean = _pull_request(docker_settings, hostile_repo, emulator, 4, "")
    assert (clean["conclusion"], clean["output"]["title"]) == ("success", "1 passed"), _text(clean)

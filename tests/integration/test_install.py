"""The install phase with real parts: a package index (pypiserver) serving a wheel built here, a sample
repository that depends on it and has its own tests, the real DockerRunner, the GitHub emulator's check runs."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery.contrib.testing.worker import start_worker

from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.sample_repo import commit_file
from service.devkit.sandbox.stack import INSTALLATION_ID, free_port
from service.jobs import install
from service.jobs.tasks import create_worker_celery
from tests.integration.test_pipeline import FULL_NAME, await_check_runs, open_pr

CONFIG = """\
[install]
requirements = ["{requirement}"]
[suites]
run = ["repo"]
devices = ["cpu"]
repo_tests = ["tests"]
"""
PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "widgets"
version = "0.1"
dependencies = ["tinydep"]
"""
WIDGETS = 'from tinydep import greet\n\n\ndef hello():\n    return greet() + ", widgets"\n'
REPO_TEST = """\
import pathlib

import pytest
import tinydep
from widgets import hello


def test_hello_uses_the_dependency():
    assert hello() == "hello, widgets"


def test_the_shared_environment_cannot_be_poisoned_for_the_next_job():
    with pytest.raises(OSError):
        (pathlib.Path(tinydep.__file__).parent / "__init__.py").write_text("def greet():\\n    return 'pwned'\\n")
"""


def _wheel(root: Path, name: str, version: str, code: str, dependencies: tuple[str, ...] = ()) -> None:
    source = root / f"{name}-{version}-src"
    (source / name).mkdir(parents=True)
    (source / name / "__init__.py").write_text(code)
    (source / "pyproject.toml").write_text(f'[project]\nname = "{name}"\nversion = "{version}"\n'
                                           f'dependencies = {list(dependencies)!r}\n'
                                           '[build-system]\nrequires = ["setuptools"]\n'
                                           'build-backend = "setuptools.build_meta"\n')
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index", "--no-build-isolation", "-q",
                    "-w", str(root / "packages"), str(source)], check=True,
                   env={**os.environ, "PIP_CONFIG_FILE": os.devnull})  # a host's pip constraints may cap torch


@pytest.fixture(scope="module")
def package_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """pypiserver on loopback serving pure-python wheels built here, nothing else (no fallback to another index);
    (simple URL, access log). tinydep 1.0; visionlib 1.0 (needs torch>=2 and tinydep, as torchvision needs the
    runner's torch) and 2.0 (needs torch 99.0); a stand-in torch 99.0, newer than any runner's."""
    root = tmp_path_factory.mktemp("index")
    _wheel(root, "tinydep", "1.0", 'def greet():\n    return "hello"\n')
    _wheel(root, "visionlib", "1.0", "VERSION = 1\n", ("torch>=2", "tinydep"))
    _wheel(root, "visionlib", "2.0", "VERSION = 2\n", ("torch==99.0",))
    _wheel(root, "torch", "99.0", "")
    port, log = free_port(), root / "access.log"
    server = subprocess.Popen([sys.executable, "-m", "pypiserver", "run", "-p", str(port), "-i", "127.0.0.1",
                               "-a", ".", "-P", ".", "--disable-fallback", "-v", "--log-file", str(log),
                               str(root / "packages")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/simple/"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "tinydep/", timeout=2).read()
            break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                pytest.fail("pypiserver did not start")
            time.sleep(0.1)
    yield url, log
    server.terminate()
    server.wait(timeout=10)


@pytest.fixture
def index_settings(tmp_path: Path, package_index: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # only the deployment's index, as below
    return Settings("secret", "1", "key", data_dir=tmp_path / "data", pip_index_url=package_index[0])


@pytest.mark.parametrize("runner_key", ["docker-compile-ci-runner-cpu-latest-torch2.13.0", "local-python"])
def test_the_runners_torch_satisfies_requirements_and_is_never_downloaded(
    index_settings: Settings, package_index: tuple[str, Path], runner_key: str
) -> None:
    # A DockerRunner's image names its torch in the cache key (the worker's own packages are not the image's); the
    # LocalRunner's jobs run the worker's interpreter, whose torch pip sees installed. Either way visionlib's
    # `torch>=2` is met by the runner's torch though the index has a newer one.
    site = install.prepare(index_settings, ("visionlib==1.0",), runner_key)
    assert site is not None
    names = {path.name for path in site.iterdir()}
    assert {"visionlib", "tinydep"} <= names, names
    assert not any(name.startswith("torch") for name in names), names
    assert not any(p.name.startswith("torch") for p in (site.parent / "wheelhouse").iterdir())
    assert "GET /packages/visionlib-1.0" in package_index[1].read_text()


def test_a_requirement_that_would_replace_the_images_torch_fails_naming_both_versions(
    index_settings: Settings,
) -> None:
    with pytest.raises(install.InstallFailed) as caught:
        install.prepare(index_settings, ("visionlib==2.0",), "docker-compile-ci-runner-cpu-latest-torch2.13.0")
    text = "\n".join(caught.value.lines)
    assert caught.value.stage == "resolve" and "visionlib 2.0 requires torch==99.0" in text, text
    assert "the runner image's (2.13.0)" in text and "never replaced" in text, text


@pytest.fixture
def docker_settings(settings: Settings, package_index: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> Settings:
    docker = pytest.importorskip("docker")
    try:
        with contextlib.closing(docker.from_env()) as engine:  # its socket closed, not left to a later test
            engine.ping()
    except Exception as exc:  # noqa: BLE001 - any reason the engine does not answer
        pytest.skip(f"no Docker engine: {exc}")
    # Only the deployment's index: the worker's own pip configuration must not leak into the test.
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    return dataclasses.replace(settings, runner="docker", pip_index_url=package_index[0])


@pytest.fixture
def widgets(tmp_path: Path) -> Path:
    path = tmp_path / "repos" / FULL_NAME
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    commit_file(path, "main", "pyproject.toml", PYPROJECT, "package")
    commit_file(path, "main", "widgets/__init__.py", WIDGETS, "code")
    commit_file(path, "main", "tests/test_widgets.py", REPO_TEST, "its own tests")
    commit_file(path, "main", ".compile-ci.toml", CONFIG.format(requirement="tinydep==1.0"), "config")
    return path


@pytest.fixture
def docker_worker(docker_settings: Settings, suites_dir: Path, emulator: GitHubEmulator) -> Iterator[None]:
    emulator.add_repo(FULL_NAME)
    emulator.add_installation(INSTALLATION_ID, repos=[FULL_NAME])
    app = create_worker_celery(docker_settings, suites_dir=suites_dir)
    with start_worker(app, pool="threads", concurrency=2, perform_ping_check=False, shutdown_timeout=30,
                      queues=["cpu", "github"]):
        yield


@pytest.fixture
def suites_dir(tmp_path: Path) -> Path:
    (tmp_path / "suites" / "correctness").mkdir(parents=True)
    return tmp_path / "suites"


def _downloads(log: Path) -> int:
    return sum("GET /packages/tinydep-1.0" in line for line in log.read_text().splitlines())


def _output(check_run: dict[str, object]) -> str:
    out = check_run["output"]
    assert isinstance(out, dict)
    return f"{out['title']}\n{out['summary']}\n{out.get('text') or ''}"


@pytest.mark.e2e
def test_requirements_installed_offline_cached_and_install_failures_named(
    docker_settings: Settings, widgets: Path, docker_worker: None, emulator: GitHubEmulator,
    package_index: tuple[str, Path],
) -> None:
    log = package_index[1]
    before = _downloads(log)
    clean = commit_file(widgets, "clean", "notes.md", "hello\n", "docs")
    open_pr(docker_settings, 1, clean, "clean")
    (first,) = await_check_runs(emulator, clean, 1, timeout_s=300)
    assert (first["name"], first["conclusion"]) == ("repo (cpu)", "success"), _output(first)
    assert first["output"]["title"] == "2 passed"
    # The worker fetched the wheel (twice from this index: its resolution reads a wheel's metadata from the wheel
    # where the index serves none apart, as pypiserver; PyPI serves it, PEP 658); the job itself had no network.
    fetched = _downloads(log)
    assert before < fetched <= before + 2

    broken = commit_file(widgets, "broken", ".compile-ci.toml", CONFIG.format(requirement="tinydep==9.9"), "bump")
    open_pr(docker_settings, 2, broken, "broken")
    (failed,) = await_check_runs(emulator, broken, 1, timeout_s=300)
    text = _output(failed)
    assert (failed["conclusion"], failed["output"]["title"]) == ("failure", "Install failed"), text
    assert "No matching distribution found for tinydep==9.9" in text
    assert "pytest exited" not in text

    again = commit_file(widgets, "again", "notes.md", "hello again\n", "docs")
    open_pr(docker_settings, 3, again, "again")
    (second,) = await_check_runs(emulator, again, 1, timeout_s=300)
    assert second["conclusion"] == "success", _output(second)
    assert _downloads(log) == fetched  # the cached environment: nothing downloaded a second time

    # A failure in the package is annotated at the package's line, though the job imported it from its own copy.
    broke = commit_file(widgets, "broke", "widgets/__init__.py",
                        'from tinydep import greet\n\n\ndef hello():\n    raise ValueError("widgets broke")\n', "oops")
    open_pr(docker_settings, 5, broke, "broke")
    (red,) = await_check_runs(emulator, broke, 1, timeout_s=300)
    assert (red["conclusion"], red["output"]["title"]) == ("failure", "1 failed, 1 passed"), _output(red)
    (note,) = red["annotations"]
    assert (note["path"], note["start_line"]) == ("widgets/__init__.py", 5), note
    assert "test_hello_uses_the_dependency" in note["message"]


@pytest.mark.e2e
def test_a_broken_package_build_is_an_install_failure_with_pips_reason(
    docker_settings: Settings, widgets: Path, docker_worker: None, emulator: GitHubEmulator,
) -> None:
    bad = commit_file(widgets, "badbuild", "pyproject.toml", PYPROJECT.replace("setuptools.build_meta", "nope.backend"),
                      "a build backend that is not installed")
    open_pr(docker_settings, 4, bad, "badbuild")
    (check_run,) = await_check_runs(emulator, bad, 1, timeout_s=300)
    text = _output(check_run)
    assert (check_run["conclusion"], check_run["output"]["title"]) == ("failure", "Install failed"), text
    assert "installing the repository itself failed" in text and "nope" in text

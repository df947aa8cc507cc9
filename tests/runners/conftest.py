"""Runner fixtures: a real Docker engine and the CPU runner image (or a skip when no engine answers), the
LocalRunner, and `runner`, each test once with either."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from runners.docker_container import DEPLOYMENT_LABEL
from runners.docker_runner import DEFAULT_IMAGES, LABEL, DockerRunner
from runners.local import LocalRunner
from runners.protocol import Runner

BUILD_HINT = "compile-ci images build cpu --local-base (scripts/setup.sh does it when dockerd runs)"


@pytest.fixture(scope="session")
def docker_client() -> Iterator[object]:
    """A real Docker engine. Without one the Docker variants skip; CI starts dockerd, so there they run."""
    import docker

    try:
        client = docker.DockerClient.from_env(version="auto", timeout=30)
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.skip(f"no Docker engine answers: {exc}")
    try:
        client.images.get(DEFAULT_IMAGES["cpu"])
    except docker.errors.ImageNotFound:
        pytest.fail(f"the runner image {DEFAULT_IMAGES['cpu']} is missing: {BUILD_HINT}")
    yield client
    client.close()


@pytest.fixture
def docker_runner(docker_client: object) -> Iterator[DockerRunner]:
    # A deployment of its own: what another deployment on this engine runs or left is not this test's to count.
    runner = DockerRunner(deployment=f"tests-{uuid.uuid4().hex[:12]}")
    yield runner
    runner.sweep_leftovers()
    runner.close()


@pytest.fixture
def local_runner() -> LocalRunner:
    return LocalRunner()


@pytest.fixture(params=["docker", "local"])
def runner(request: pytest.FixtureRequest) -> Runner:
    return request.getfixturevalue(f"{request.param}_runner")


def job_containers(runner: DockerRunner) -> list[str]:
    """Names of the runner's job containers (its output holders included), running or not."""
    filters = {"label": [LABEL, f"{DEPLOYMENT_LABEL}={runner.deployment}"]}
    return [c.name for c in runner.client.containers.list(all=True, filters=filters)]

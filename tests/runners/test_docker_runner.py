"""What only the DockerRunner does: the container it asks for, path mapping, stale names, engine failures."""

from __future__ import annotations

import gc
from pathlib import Path

import docker
import pytest

from runners.docker_container import (
    CACHE_MOUNT,
    DEADLINE_SLACK_S,
    DEPLOYMENT_LABEL,
    IMAGE_SUITES,
    LABEL,
    container_config,
    container_name,
)
from runners.docker_runner import DockerRunner
from runners.protocol import RunSpec
from tests.runners.conftest import job_containers


def pipeline_like_spec(tmp_path: Path, device: str = "cpu") -> RunSpec:
    """Shaped like the pipeline's: worker paths in the command and the environment."""
    checkout, out, suites = (tmp_path / n for n in ("src", "out", "suites"))
    return RunSpec(job_id="r1-correctness-" + device, checkout_dir=checkout, output_dir=out, timeout_s=60,
                   command=("python", "-m", "pytest", f"--junitxml={out}/junit.xml", f"{suites}/correctness"),
                   env={"COMPILE_CI_CHECKOUT": str(checkout), "COMPILE_CI_OUTPUT_DIR": str(out)},
                   device=device, suites_dir=suites, memory_mb=2048, cpus=1.5, pids=256)


def test_worker_paths_become_mount_points(tmp_path: Path) -> None:
    cache = docker.types.Mount(CACHE_MOUNT, str(tmp_path / "cache"), type="bind")
    output = docker.types.Mount("/job/out", "compile-ci-out-x", type="volume", no_copy=True)
    config = container_config(pipeline_like_spec(tmp_path), "img", cache, output=output)
    assert config["command"] == ["timeout", "--kill-after=10", str(60 + DEADLINE_SLACK_S), "python", "-m", "pytest",
                                 "--junitxml=/job/out/junit.xml", f"{IMAGE_SUITES}/correctness"]
    assert config["environment"]["COMPILE_CI_CHECKOUT"] == "/job/checkout"
    assert config["environment"]["TORCHINDUCTOR_CACHE_DIR"] == f"{CACHE_MOUNT}/inductor"
    mounts = {m["Target"]: (m["Source"], m["ReadOnly"]) for m in config["mounts"]}
    # The job's output is its own capped volume, never the worker's results directory.
    assert mounts == {"/job/checkout": (str(tmp_path / "src"), True), "/job/out": ("compile-ci-out-x", False),
                      CACHE_MOUNT: (str(tmp_path / "cache"), False)}
    assert "/var/run/docker.sock" not in str(config)


def test_limits_come_from_the_job(tmp_path: Path) -> None:
    config = container_config(pipeline_like_spec(tmp_path), "img")
    assert (config["mem_limit"], config["memswap_limit"], config["nano_cpus"], config["pids_limit"]) == (
        "2048m", "2048m", 1_500_000_000, 256)
    assert config["network_mode"] == "none" and config["cap_drop"] == ["ALL"] and config["read_only"]
    assert config["security_opt"] == ["no-new-privileges"] and config["user"] == "10001:10001"
    assert "exec" in config["tmpfs"]["/tmp"].split(",") and "noexec" not in config["tmpfs"]["/tmp"]


def test_only_cuda_jobs_request_gpus(tmp_path: Path) -> None:
    # The GPU request itself cannot run on a host without the NVIDIA container toolkit; this pins what is asked.
    assert "device_requests" not in container_config(pipeline_like_spec(tmp_path, "cpu"), "img")
    (request,) = container_config(pipeline_like_spec(tmp_path, "cuda"), "img")["device_requests"]
    assert request["Count"] == -1 and request["Capabilities"] == [["gpu"]]


def test_a_stale_container_of_the_same_job_is_replaced(docker_runner: DockerRunner, docker_client: object,
                                                       tmp_path: Path) -> None:
    spec = RunSpec(job_id="stale-job", command=("python", "-c", "print('fresh run')"), checkout_dir=tmp_path,
                   output_dir=tmp_path / "out", timeout_s=60)
    docker_client.containers.create("compile-ci/runner-cpu:latest", ["sleep", "600"],  # type: ignore[attr-defined]
                                    name=container_name(spec.job_id))
    assert docker_runner.run(spec).exit_code == 0
    assert "fresh run" in spec.log_path.read_text()
    assert job_containers(docker_runner) == []
    assert not docker_client.containers.list(all=True, filters={"name": container_name(spec.job_id)})  # type: ignore[attr-defined]


def test_a_missing_image_is_an_infrastructure_error(docker_client: object, tmp_path: Path) -> None:
    runner = DockerRunner({"cpu": "compile-ci/no-such-image:never"})
    result = runner.run(RunSpec(job_id="no-image", command=("python", "-c", "pass"), checkout_dir=tmp_path,
                                output_dir=tmp_path / "out", timeout_s=60))
    runner.close()
    assert result.exit_code is None and "runner image missing" in (result.infra_error or "")


# docker-py leaves the socket of a failed unix connect unclosed; collect it here rather than in a later test.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_unreachable_engine_is_an_infrastructure_error(tmp_path: Path) -> None:
    client = docker.DockerClient(base_url=f"unix://{tmp_path}/no-engine.sock", version="1.41", timeout=3)
    runner = DockerRunner(client=client)
    result = runner.run(RunSpec(job_id="no-engine", command=("python", "-c", "pass"), checkout_dir=tmp_path,
                                output_dir=tmp_path / "out", timeout_s=60))
    runner.close()
    gc.collect()
    assert result.exit_code is None and "unreachable" in (result.infra_error or "")


@pytest.mark.parametrize("device", ["cpu"])
def test_cache_key_names_image_and_torch_version(docker_runner: DockerRunner, device: str) -> None:
    assert docker_runner.cache_key(device) == "docker-compile-ci-runner-cpu-latest-torch2.13.0"


def _leftover(client: object, job_id: str, deployment: str, command: tuple[str, ...], slack_s: int = 600) -> object:
    """A job container as a SIGKILLed worker leaves it: created and started, nobody waiting on it."""
    spec = RunSpec(job_id=job_id, command=command, checkout_dir=Path("/nonexistent"), output_dir=Path("/nonexistent"),
                   timeout_s=1)
    config = container_config(spec, "compile-ci/runner-cpu:latest", deployment=deployment, deadline_slack_s=slack_s)
    config["mounts"] = []  # nothing of the host is needed to stand in for a job
    container = client.containers.create(**config)  # type: ignore[attr-defined]
    container.start()
    return container


def test_a_container_whose_worker_died_stops_itself_at_its_deadline(docker_client: object) -> None:
    container = _leftover(docker_client, "orphan-deadline", "tests-a", ("sleep", "600"), slack_s=1)
    try:
        status = container.wait(timeout=30)  # type: ignore[attr-defined]
        assert status["StatusCode"] == 124  # coreutils' timeout, pid 1 of the container, ended it
    finally:
        container.remove(force=True)  # type: ignore[attr-defined]


def test_a_sweep_removes_only_its_own_deployments_orphans(docker_client: object) -> None:
    mine_orphan = _leftover(docker_client, "sweep-orphan", "tests-mine", ("sleep", "600"))
    mine_alive = _leftover(docker_client, "sweep-alive", "tests-mine", ("sleep", "600"))
    mine_exited = _leftover(docker_client, "sweep-exited", "tests-mine", ("true",))
    theirs = _leftover(docker_client, "sweep-theirs", "tests-theirs", ("sleep", "600"))
    mine_exited.wait(timeout=30)  # type: ignore[attr-defined]
    try:
        runner = DockerRunner(deployment="tests-mine")
        orphans = {"sweep-orphan", "sweep-theirs"}  # the other deployment's job has no worker either
        assert runner.sweep_leftovers(is_orphan=lambda job_id: job_id in orphans) == 2
        runner.close()
        left = {(c.labels[LABEL], c.labels[DEPLOYMENT_LABEL])  # type: ignore[attr-defined]
                for c in docker_client.containers.list(all=True, filters={"label": LABEL})}  # type: ignore[attr-defined]
        assert ("sweep-alive", "tests-mine") in left and ("sweep-theirs", "tests-theirs") in left
        assert ("sweep-orphan", "tests-mine") not in left and ("sweep-exited", "tests-mine") not in left
    finally:
        for container in (mine_orphan, mine_alive, mine_exited, theirs):
            try:
                container.remove(force=True)  # type: ignore[attr-defined]
            except docker.errors.NotFound:
                pass

"""DockerRunner: the job in a hardened, throwaway container (the only module that imports the docker SDK)."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types
import requests

from runners.protocol import RunResult, RunSpec, ShouldCancel

DEFAULT_IMAGES = {"cpu": "compile-ci/runner-cpu:latest", "cuda": "compile-ci/runner-cuda:latest"}
LABEL = "org.compile-ci.job"  # every job container carries it: leftovers are found by it
DEPLOYMENT_LABEL = "org.compile-ci.deployment"  # whose job it is: a sweep touches only its own deployment's
DEADLINE_LABEL = "org.compile-ci.deadline"  # epoch seconds after which the container stops itself
# The container stops itself this long after the job's time limit, whether or not a worker still watches it
# (a worker SIGKILLed mid-job leaves its container behind; the engine must not run it forever).
DEADLINE_SLACK_S = 30
WRAPPER_FAILED = "timeout: failed to run command"  # coreutils' words when the job's command cannot start
RUNNER_UID = 10001  # the image's unprivileged `runner` user
CHECKOUT_MOUNT = "/job/checkout"
OUTPUT_MOUNT = "/job/out"
# Inductor keeps part of its state (precompiled headers, the new-style caches) under
# /tmp/torchinductor_<user> whatever TORCHINDUCTOR_CACHE_DIR says, so the persistent cache is mounted exactly
# there and the cache variables point inside it.
CACHE_MOUNT = "/tmp/torchinductor_runner"
IMAGE_SUITES = "/opt/compile-ci/suites"
DEPS_MOUNT = "/job/deps"
TMPFS_MB = 4096
STOP_GRACE_S = 10


@dataclass(frozen=True)
class _Outcome:
    kind: str  # "exited" | "timeout" | "cancelled"


class DockerRunner:
    """Runs a RunSpec in a container: no network, no capabilities, non-root, read-only root, limits from the job."""

    name = "docker"
    python = "python"  # the image's interpreter (on its PATH)

    def __init__(self, images: Mapping[str, str] | None = None, client: docker.DockerClient | None = None,
                 deployment: str = "default") -> None:
        self.images = {**DEFAULT_IMAGES, **(images or {})}
        self._client = client
        self.deployment = deployment
        self._torch_versions: dict[str, str] = {}

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            # "auto": the engine's own API version, so an older engine (Debian's 20.10) still answers.
            self._client = docker.DockerClient.from_env(version="auto", timeout=30)
        return self._client

    def cache_key(self, device: str) -> str:
        """Compile caches are only valid for one (image, torch version): a new torch starts a fresh cache."""
        image = self.images[device]
        if image not in self._torch_versions:
            try:
                labels = self.client.images.get(image).labels or {}
                self._torch_versions[image] = labels.get("org.compile-ci.torch-version", "unknown")
            except docker.errors.DockerException:
                return f"docker-{_slug(image)}"  # the job will report the missing image itself
        return f"docker-{_slug(image)}-torch{self._torch_versions[image]}"

    def run(self, spec: RunSpec, should_cancel: ShouldCancel | None = None) -> RunResult:
        start = time.monotonic()
        spec.output_dir.mkdir(parents=True, exist_ok=True)
        name = container_name(spec.job_id)
        container = None
        try:
            _make_writable(spec.output_dir)
            if spec.cache_dir is not None:
                spec.cache_dir.mkdir(parents=True, exist_ok=True)
                _make_writable(spec.cache_dir)
            self._remove(name)  # a stale container from a crashed attempt holds the name
            config = container_config(spec, self.images[spec.device], self.deployment)
            container = self.client.containers.create(**config)
            container.start()
            with open(spec.log_path, "ab") as log:
                pump = threading.Thread(target=_pump_logs, args=(container, log), daemon=True)
                pump.start()
                outcome = _wait(container, spec.timeout_s, should_cancel)
                if outcome.kind != "exited":
                    container.kill()
                container.wait(timeout=STOP_GRACE_S)
                pump.join(timeout=STOP_GRACE_S)
            # Read before removal: once removed, whether the kernel OOM-killed the job is gone with it.
            container.reload()
            state = container.attrs["State"]
            exit_code = int(state["ExitCode"])
            duration = time.monotonic() - start
            if exit_code in (126, 127) and _log_starts_with(spec.log_path, WRAPPER_FAILED):
                return self._infra(start, f"the job's command cannot start: {_first_line(spec.log_path)}")
            return RunResult(exit_code, duration, timed_out=outcome.kind == "timeout",
                             cancelled=outcome.kind == "cancelled",
                             oom=bool(state.get("OOMKilled")) and outcome.kind == "exited")
        except docker.errors.ImageNotFound as exc:
            return self._infra(start, f"runner image missing: {exc.explanation or exc}")
        except docker.errors.APIError as exc:
            return self._infra(start, f"the Docker engine refused the job container: {exc.explanation or exc}")
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            return self._infra(start, f"the Docker engine is unreachable: {exc}")
        finally:
            self._remove(name)

    def _infra(self, start: float, message: str) -> RunResult:
        return RunResult(None, time.monotonic() - start, infra_error=message)

    def _remove(self, name: str) -> None:
        try:
            self.client.containers.get(name).remove(force=True, v=True)
        except docker.errors.NotFound:
            pass
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            pass  # unreachable engine: sweep_leftovers() clears it later; the result already says why

    def engine_answers(self) -> bool:
        try:
            probe = docker.DockerClient.from_env(version="auto", timeout=3)
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            return False
        try:
            return bool(probe.ping())
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            return False
        finally:
            probe.close()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def sweep_leftovers_quietly(self, is_orphan: Callable[[str], bool] | None = None) -> None:
        """At worker start: what a previous worker of this deployment left (a crash, a SIGKILL) goes now."""
        try:
            self.sweep_leftovers(is_orphan)
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            pass  # an engine that is down now is reported by the first job, as an infrastructure error

    def sweep_leftovers(self, is_orphan: Callable[[str], bool] | None = None) -> int:
        """Remove this deployment's job containers that no worker runs: stopped ones, ones past their deadline, and
        running ones whose job `is_orphan` (its worker is gone). Other deployments' containers are never touched."""
        removed = 0
        filters = {"label": [LABEL, f"{DEPLOYMENT_LABEL}={self.deployment}"]}
        for container in self.client.containers.list(all=True, filters=filters):
            labels = container.labels or {}
            if container.status == "running" and not _past(labels.get(DEADLINE_LABEL)) and not (
                    is_orphan is not None and is_orphan(labels.get(LABEL, ""))):
                continue
            try:
                container.remove(force=True, v=True)
                removed += 1
            except docker.errors.NotFound:
                pass
        return removed


def container_config(spec: RunSpec, image: str, deployment: str = "default",
                     deadline_slack_s: int = DEADLINE_SLACK_S) -> dict[str, Any]:
    """Everything `containers.create` gets for a job: pure, so the hardening is visible in one place."""
    paths = _path_map(spec)
    mounts = [
        docker.types.Mount(CHECKOUT_MOUNT, str(spec.checkout_dir), type="bind", read_only=True),
        # Results go to a bind mount: a tmpfs is invisible to the engine's archive copies and dies with it.
        docker.types.Mount(OUTPUT_MOUNT, str(spec.output_dir), type="bind", read_only=False),
    ]
    if spec.cache_dir is not None:
        mounts.append(docker.types.Mount(CACHE_MOUNT, str(spec.cache_dir), type="bind", read_only=False))
    if spec.deps_dir is not None:
        # Read-only: shared by every job with the same requirements, so no job may change it for the next.
        mounts.append(docker.types.Mount(DEPS_MOUNT, str(spec.deps_dir), type="bind", read_only=True))
    env = {key: _translate(value, paths) for key, value in spec.env.items()}
    env.update({"HOME": "/tmp", "TMPDIR": "/tmp", "USER": "runner", "PYTHONUNBUFFERED": "1"})
    deadline_s = int(spec.timeout_s) + deadline_slack_s
    config: dict[str, Any] = {
        "image": image,
        # Its own deadline: coreutils' timeout as pid 1 ends the job (then the container) even with no worker left.
        "command": ["timeout", "--kill-after=10", str(deadline_s), *(_translate(arg, paths) for arg in spec.command)],
        "name": container_name(spec.job_id),
        "labels": {LABEL: spec.job_id, DEPLOYMENT_LABEL: deployment,
                   DEADLINE_LABEL: str(int(time.time()) + deadline_s + 10)},
        "environment": env,
        "working_dir": "/tmp",
        "user": f"{RUNNER_UID}:{RUNNER_UID}",
        "network_mode": "none",
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "read_only": True,
        # Docker's default tmpfs is noexec, but inductor dlopen()s the objects it compiles under /tmp.
        "tmpfs": {"/tmp": f"rw,exec,nosuid,nodev,size={TMPFS_MB}m,mode=1777"},
        "mounts": mounts,
        "mem_limit": f"{spec.memory_mb}m",
        "memswap_limit": f"{spec.memory_mb}m",  # no swap: over the limit is an OOM kill, not a crawl
        "nano_cpus": int(spec.cpus * 1e9),
        "pids_limit": spec.pids,
        # No init process: `timeout` is pid 1; a command it cannot start is told apart from a test failure by its
        # message (an infrastructure error). Killing pid 1 ends the namespace.
        "init": False,
        "stdin_open": False,
        "detach": True,
    }
    if spec.device == "cuda":
        config["device_requests"] = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
    return config


def container_name(job_id: str) -> str:
    return "compile-ci-" + _slug(job_id)


def _slug(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_.-]+", "-", text).strip("-.")[:200]


def _path_map(spec: RunSpec) -> list[tuple[str, str]]:
    """Worker paths in the spec → where the container sees them; longest first so nested paths map right."""
    pairs = [(str(spec.checkout_dir), CHECKOUT_MOUNT), (str(spec.output_dir), OUTPUT_MOUNT)]
    if spec.cache_dir is not None:
        pairs.append((str(spec.cache_dir), CACHE_MOUNT))
    if spec.suites_dir is not None:
        pairs.append((str(spec.suites_dir), IMAGE_SUITES))
    if spec.deps_dir is not None:
        pairs.append((str(spec.deps_dir), DEPS_MOUNT))
    return sorted(pairs, key=lambda pair: -len(pair[0]))


def _translate(text: str, paths: list[tuple[str, str]]) -> str:
    for host, inside in paths:
        text = re.sub(re.escape(host) + r"(?=/|$|[\s\"',:;=])", inside, text)
    return text


def _make_writable(path: Path) -> None:
    """The job runs as uid 10001; a root worker hands it the directories it may write."""
    if os.geteuid() == 0:
        os.chown(path, RUNNER_UID, RUNNER_UID)
    elif os.geteuid() != RUNNER_UID:
        path.chmod(0o777)


def _pump_logs(container: Any, log: Any) -> None:
    stream = None
    try:
        stream = container.logs(stream=True, follow=True, stdout=True, stderr=True)
        for chunk in stream:
            log.write(chunk)
            log.flush()
    except (docker.errors.DockerException, requests.exceptions.RequestException):
        pass  # the container went away mid-stream (killed and removed): the log ends there
    finally:
        if stream is not None:
            stream.close()


def _wait(container: Any, timeout_s: float, should_cancel: ShouldCancel | None) -> _Outcome:
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return _Outcome("timeout")
        try:
            container.wait(timeout=min(1.0, remaining))
            return _Outcome("exited")
        except requests.exceptions.ReadTimeout:
            pass
        except requests.exceptions.ConnectionError as exc:
            # requests reports a read timeout on a streaming wait as a ConnectionError wrapping it.
            if "timed out" not in str(exc).lower():
                raise
        if should_cancel is not None and should_cancel():
            return _Outcome("cancelled")


def _past(deadline: str | None) -> bool:
    return deadline is not None and deadline.isdigit() and int(deadline) < time.time()


def _log_starts_with(path: Path, prefix: str) -> bool:
    return _first_line(path).startswith(prefix)


def _first_line(path: Path) -> str:
    """The job's own first line (after the worker's `$ command` header)."""
    try:
        with open(path, "rb") as log:
            lines = log.read(4096).decode(errors="replace").splitlines()
    except OSError:
        return ""
    own = [line for line in lines if not line.startswith("$ ")]
    return own[0] if own else ""

"""The DockerRunner's plain engine calls: waiting on a job's container, removing containers and volumes, whether the
engine answers, and sweeping what a worker left behind (a crash, a SIGKILL)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import docker
import docker.errors
import requests

from runners.compile_cache import process_alive
from runners.docker_container import DEPLOYMENT_LABEL, LABEL, past_deadline
from runners.docker_prestart import PRESTART_LABEL
from runners.protocol import ShouldCancel

ENGINE_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException)


@dataclass(frozen=True)
class Outcome:
    kind: str  # "exited" | "timeout" | "cancelled"


def wait(container: Any, timeout_s: float, should_cancel: ShouldCancel | None) -> Outcome:
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return Outcome("timeout")
        try:
            container.wait(timeout=min(1.0, remaining))
            return Outcome("exited")
        except requests.exceptions.ReadTimeout:
            pass
        except requests.exceptions.ConnectionError as exc:
            # requests reports a read timeout on a streaming wait as a ConnectionError wrapping it.
            if "timed out" not in str(exc).lower():
                raise
        if should_cancel is not None and should_cancel():
            return Outcome("cancelled")


def remove_container(client: Any, name: str) -> None:
    try:
        client.containers.get(name).remove(force=True, v=True)
    except docker.errors.NotFound:
        pass
    except ENGINE_ERRORS:
        pass  # unreachable engine: sweep() clears it later; the result already says why


def remove_volume(client: Any, volume: str) -> None:
    try:
        client.volumes.get(volume).remove(force=True)
    except docker.errors.NotFound:
        pass
    except ENGINE_ERRORS:
        pass  # in use or unreachable: sweep() clears it later


def container_exists(client: Any, name: str) -> bool:
    try:
        client.containers.get(name)
        return True
    except docker.errors.NotFound:
        return False


def engine_answers() -> bool:
    try:
        probe = docker.DockerClient.from_env(version="auto", timeout=3)
    except ENGINE_ERRORS:
        return False
    try:
        return bool(probe.ping())
    except ENGINE_ERRORS:
        return False
    finally:
        probe.close()


def sweep(client: Any, deployment: str, is_orphan: Callable[[str], bool] | None = None) -> int:
    """Remove this deployment's job containers that no worker runs: stopped ones, ones past their deadline, running
    ones whose job `is_orphan` (its worker is gone), and pre-started ones whose worker process is gone; then cache
    and output volumes no container uses. Other deployments' containers are never touched."""
    removed = 0
    filters = {"label": [LABEL, f"{DEPLOYMENT_LABEL}={deployment}"]}
    for container in client.containers.list(all=True, filters=filters):
        labels = container.labels or {}
        prestarted = labels.get(PRESTART_LABEL)
        if container.status == "running" and not past_deadline(labels) and (
                process_alive(prestarted) if prestarted else
                not (is_orphan is not None and is_orphan(labels.get(LABEL, "")))):
            continue
        try:
            container.remove(force=True, v=True)
            removed += 1
        except docker.errors.NotFound:
            pass
    for volume in client.volumes.list(filters=filters):
        remove_volume(client, volume.name)  # one still mounted by a running job is refused, and kept
    return removed

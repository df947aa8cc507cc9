"""What a job's container is: its hardening, mounts, labels and deadline, built as data (no engine is called here).

The Docker runner's half that is pure (runners/docker_runner.py talks to the engine), so the whole hardening can be
read, and tested, in one place.
"""

from __future__ import annotations

import time
from typing import Any

import docker.types

from runners.compile_cache import slug
from runners.cpu_shares import job_env, spell
from runners.gpus import gpu_job_env
from runners.outbox import Limits
from runners.protocol import RunSpec, map_paths
from runners.toolchain import linker_env

LABEL = "org.compile-ci.job"  # every job container carries it: leftovers are found by it
DEPLOYMENT_LABEL = "org.compile-ci.deployment"  # whose job it is: a sweep touches only its own deployment's
DEADLINE_LABEL = "org.compile-ci.deadline"  # epoch seconds after which the container has stopped itself
# The container stops itself this long after the job's time limit, whether or not a worker still watches it
# (a worker SIGKILLed mid-job leaves its container behind; the engine must not run it forever).
DEADLINE_SLACK_S = 30
WRAPPER_FAILED = "timeout: failed to run command"  # coreutils' words when the job's command cannot start
RUNNER_UID = 10001  # the image's unprivileged `runner` user
CHECKOUT_MOUNT = "/job/checkout"
OUTPUT_MOUNT = "/job/out"
DEPS_MOUNT = "/job/deps"
GRANTS_MOUNT = "/job/grants"
# Inductor keeps part of its state (precompiled headers, the new-style caches) under
# /tmp/torchinductor_<user> whatever TORCHINDUCTOR_CACHE_DIR says, so the persistent cache is mounted exactly
# there and the cache variables point inside it.
CACHE_MOUNT = "/tmp/torchinductor_runner"
IMAGE_SUITES = "/opt/compile-ci/suites"
TMPFS_MB = 4096


def container_config(spec: RunSpec, image: str, cache: docker.types.Mount | None = None, deployment: str = "default",
                     deadline_slack_s: int = DEADLINE_SLACK_S, gpus: tuple[str, ...] = (),
                     output: docker.types.Mount | None = None, cpus: tuple[int, ...] = ()) -> dict[str, Any]:
    """Everything `containers.create` gets for a job. `cache`: the job's compile cache, already resolved to its
    repository and trust class (DockerRunner._prepare_cache); `gpus`: the worker's GPUs (empty: all of them);
    `output`: the job's capped output volume (runners/docker_output.py), never a directory of the worker's; `cpus`:
    the job's part of the worker's CPUs (runners/cpu_shares.py; empty: no cpuset)."""
    paths = _path_map(spec)
    mounts = [docker.types.Mount(CHECKOUT_MOUNT, str(spec.checkout_dir), type="bind", read_only=True)]
    if output is not None:
        mounts.append(output)
    if spec.deps_dir is not None:
        # Read-only: shared by every job with the same requirements, so no job may change it for the next.
        mounts.append(docker.types.Mount(DEPS_MOUNT, str(spec.deps_dir), type="bind", read_only=True))
    if spec.grants is not None:
        # Read-only: the worker's answers to the job's requests for tests (runners/grants.py).
        mounts.append(docker.types.Mount(GRANTS_MOUNT, str(spec.grants.directory), type="bind", read_only=True))
    env = job_env(cpus, spec.cpus) if cpus else {}
    env.update({key: map_paths(value, paths) for key, value in spec.env.items()})
    env.update({"HOME": "/tmp", "TMPDIR": "/tmp", "USER": "runner", "PYTHONUNBUFFERED": "1",
                **linker_env(in_image=True), **gpu_job_env(spec.device)})
    if cache is not None:
        mounts.append(cache)
        # Compile caches outlive the job: a rerun of the same code skips inductor's C++/Triton builds.
        env.update({"TORCHINDUCTOR_CACHE_DIR": f"{CACHE_MOUNT}/inductor", "TRITON_CACHE_DIR": f"{CACHE_MOUNT}/triton"})
    deadline_s = int(spec.timeout_s) + deadline_slack_s
    config: dict[str, Any] = {
        "image": image,
        # Its own deadline: coreutils' timeout as pid 1 ends the job (then the container) even with no worker left.
        "command": ["timeout", "--kill-after=10", str(deadline_s), *(map_paths(arg, paths) for arg in spec.command)],
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
        **({"cpuset_cpus": spell(cpus)} if cpus else {}),
        "pids_limit": spec.pids,
        # No init process: `timeout` is pid 1; a command it cannot start is told apart from a test failure by its
        # message (an infrastructure error). Killing pid 1 ends the namespace.
        "init": False,
        "stdin_open": False,
        "detach": True,
        # The engine keeps its own copy of what the job prints: bounded like the worker's log.txt (runners/job_log.py).
        "log_config": docker.types.LogConfig(type="json-file", config={"max-size": "64m", "max-file": "2"}),
    }
    if spec.device == "cuda":
        # The NVIDIA toolkit exposes exactly the worker's GPUs (renumbered from 0 inside the container).
        wanted = {"device_ids": list(gpus)} if gpus else {"count": -1}
        config["device_requests"] = [docker.types.DeviceRequest(capabilities=[["gpu"]], **wanted)]
    return config


def output_volume_options(limits: Limits) -> dict[str, str]:
    """The local driver mounts a tmpfs: bytes and entries capped by the kernel while the job writes, owned by the
    job's user, gone with the volume. Its pages count against the job's memory limit, like /tmp's."""
    size_kb = max(limits.total_bytes // 1024, 1024)
    return {"type": "tmpfs", "device": "tmpfs",
            "o": f"size={size_kb}k,nr_inodes={limits.files + 64},uid={RUNNER_UID},gid={RUNNER_UID},mode=0700,"
                 "nosuid,nodev,noexec"}


def holder_config(spec: RunSpec, image: str, volume: str, name: str, labels: dict[str, str],
                  deadline_slack_s: int = DEADLINE_SLACK_S) -> dict[str, Any]:
    """A container that only sleeps with the output volume mounted read-only, so the tmpfs outlives the job's
    container until the worker has archived it; it stops itself after the job's deadline."""
    lifetime = int(spec.timeout_s) + deadline_slack_s + 600
    return {
        "image": image, "name": name, "command": ["sleep", str(lifetime)], "labels": labels,
        "user": f"{RUNNER_UID}:{RUNNER_UID}", "network_mode": "none", "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"], "read_only": True, "working_dir": "/",
        "mounts": [docker.types.Mount(OUTPUT_MOUNT, volume, type="volume", read_only=True, no_copy=True)],
        "mem_limit": "64m", "pids_limit": 16, "nano_cpus": int(0.25e9), "init": False, "detach": True,
    }


def output_volume_name(job_id: str) -> str:
    return "compile-ci-out-" + slug(job_id)


def container_name(job_id: str) -> str:
    return "compile-ci-" + slug(job_id)


def past_deadline(labels: dict[str, str]) -> bool:
    deadline = labels.get(DEADLINE_LABEL)
    return deadline is not None and deadline.isdigit() and int(deadline) < time.time()


def _path_map(spec: RunSpec) -> list[tuple[str, str]]:
    """Worker paths in the spec → where the container sees them; longest first so nested paths map right."""
    pairs = [(str(spec.checkout_dir), CHECKOUT_MOUNT), (str(spec.output_dir), OUTPUT_MOUNT)]
    if spec.suites_dir is not None:
        pairs.append((str(spec.suites_dir), IMAGE_SUITES))
    if spec.deps_dir is not None:
        pairs.append((str(spec.deps_dir), DEPS_MOUNT))
    if spec.grants is not None:
        pairs.append((str(spec.grants.directory), GRANTS_MOUNT))
    return sorted(pairs, key=lambda pair: -len(pair[0]))


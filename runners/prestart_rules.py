"""Which jobs may take a pre-started container and what must be equal for it (runners/docker_prestart.py): pure
functions of a job's description, no engine called."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from runners import first_code
from runners.compile_cache import UNTRUSTED
from runners.docker_container import CHECKOUT_MOUNT, OUTPUT_MOUNT
from runners.protocol import RunSpec

SHARED_VARIABLES = frozenset({"COMPILE_CI_SOURCE_KEYS"})
# What a job's description may differ in from its container's (everything else must be equal).
PER_JOB_KEYS = frozenset({"command", "name", "labels", "cpuset_cpus", "mounts", "environment"})
PER_JOB_MOUNTS = frozenset({CHECKOUT_MOUNT, OUTPUT_MOUNT})
LINE_MAX = 1 << 20


def per_job(name: str) -> bool:
    return name.startswith("COMPILE_CI_") and name not in SHARED_VARIABLES


def eligible(spec: RunSpec, python: str) -> str:
    """Why this job cannot take a pre-started container ('' when it can)."""
    if why := first_code.repository_code_first(spec.command, python, spec.env, str(spec.checkout_dir)):
        return why
    if spec.grants is not None:
        return "it takes its tests while it runs (the worker's answers are mounted for it)"
    if spec.cache is None or spec.cache.trusted:
        return "a trusted job (it writes the repository's compile cache)"
    return ""


def for_pull_requests(spec: RunSpec) -> RunSpec | None:
    """The description a pull request's job of this repository would have, from a push's job (its next container
    is then ready for the first pull request after it), or the job's own; None without a cache."""
    if spec.cache is None:
        return None
    if not spec.cache.trusted:
        return spec
    return dataclasses.replace(spec, cache=dataclasses.replace(spec.cache, trust=UNTRUSTED, pr=None))


def description_key(config: dict[str, Any], spec: RunSpec) -> str:
    """What must be equal between a job's container and a pre-started one: all but the per-job parts; its cache is
    the repository's (whichever pull request: a layer over the repository's trusted cache either way)."""
    assert spec.cache is not None
    mounts = [dict(mount) for mount in config["mounts"] if mount["Target"] not in PER_JOB_MOUNTS]
    for mount in mounts:
        if mount["Target"] != CHECKOUT_MOUNT and mount.get("Type") == "volume":
            mount.pop("Source", None)  # the cache layer's overlay volume: the container's own
    key = {"config": {k: v for k, v in config.items() if k not in PER_JOB_KEYS},
           "env": {k: v for k, v in config["environment"].items() if not per_job(k)},
           "mounts": mounts, "cache": repr(dataclasses.replace(spec.cache, pr=None)), "timeout": spec.timeout_s,
           "output_mb": spec.output_mb}
    return json.dumps(key, sort_keys=True, default=str)


def go_line(argv: list[str], env: dict[str, str]) -> bytes | None:
    """What a pre-started container reads (suites/warm_container.py); None when too long for it."""
    line = json.dumps({"argv": argv, "env": env}).encode() + b"\n"
    return line if len(line) <= LINE_MAX else None


def differ(key: str, other: str) -> list[str]:
    """Which parts of two descriptions differ (the log says why a job started its own container)."""
    mine, theirs = json.loads(key), json.loads(other)
    parts = [f"config.{k}" for k in set(mine["config"]) | set(theirs["config"])
             if mine["config"].get(k) != theirs["config"].get(k)]
    parts += [f"env.{k}" for k in set(mine["env"]) | set(theirs["env"]) if mine["env"].get(k) != theirs["env"].get(k)]
    return parts + [k for k in mine if k not in ("config", "env") and mine[k] != theirs.get(k)]

"""What a test's result is a function of, as keys (DESIGN §14): two results under equal keys are one fact.

A job attempt's inputs are compile-ci's suite code, the runner build (image id and torch) and device, the torch
version the job asked for, and the config keys that reach every test: all of `.compile-ci.toml` but `[targets]
models` and `fuse` (each spec of those is its own test group's), `[comment]` and `[canary]` (which reach no job).
A group's key adds its own inputs: a declared target's spec and the content of every file of its import closure;
the built-in corpus (tests of no declared target) has none of its own, since its closure is the compiler surface.
The compiler fingerprint is known only at run time, inside the job: it is kept beside the keys and compared when a
result is reused (service/planning/reuse_check.py).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from service.planning.import_closure import Closure, ModuleIndex
from service.repo_config import RepoConfig
from suites.shard_plan import CORPUS_GROUP

KEY_VERSION = "reuse-1"  # bump when what a key covers changes: older keys then match none
GROUP_KINDS = ("models", "fuse")  # the declared targets whose tests are parametrized by their spec (suites/sharding.py)
NO_JOB_FIELDS = ("comment_always", "canary")  # config that reaches no job


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Inputs:
    """What every test of a job attempt depends on, but its group's own files and the run-time fingerprint."""

    suites: str  # suites_digest() of compile-ci's suites
    build: str  # the runner build: image id and torch (Runner.build_id)
    device: str
    torch: str  # the version the job asked for ("" for the deployment's default)
    config: str  # config_digest()

    def key(self, group: str, closure: str) -> str:
        """A group's static key; `closure`: closure_digest() of a declared target, "" for the corpus."""
        return _digest(KEY_VERSION, self.suites, self.build, self.device, self.torch, self.config, group, closure)

    def differences(self, other: Inputs) -> list[str]:
        """Which inputs differ from `other`'s, in words (for the log line of a reuse that did not hold)."""
        words = {"suites": "compile-ci's suite code", "build": "the runner image", "device": "the device",
                 "torch": "the torch version", "config": "the config keys every test reads"}
        return [words[f.name] for f in dataclasses.fields(self) if getattr(self, f.name) != getattr(other, f.name)]


def shared_config(config: RepoConfig) -> dict[str, object]:
    """The config every test reads: all of it but the per-target groups' specs and what reaches no job."""
    data = dataclasses.asdict(config)
    data["targets"] = {k: sorted(v) for k, v in config.targets.items() if k not in GROUP_KINDS and v}
    for name in NO_JOB_FIELDS:
        data.pop(name, None)
    return data


def config_digest(config: RepoConfig) -> str:
    return _digest(json.dumps(shared_config(config), sort_keys=True, default=str))


def config_differences(head: RepoConfig, source: RepoConfig) -> list[str]:
    """The shared keys that differ ("install.requirements", "suites.run", "targets.post_grad_passes", ...)."""
    mine, theirs = shared_config(head), shared_config(source)
    names = {"requirements": "install.requirements", "install_package": "install.package", "suites": "suites.run",
             "devices": "suites.devices", "repo_tests": "suites.repo_tests",
             "timeout_minutes": "suites.timeout_minutes", "flaky_reruns": "suites.flaky_reruns",
             "torch": "suites.torch", "budgets": "budgets"}
    found = [names.get(k, k) for k in sorted(mine) if k != "targets" and mine[k] != theirs.get(k)]
    kinds = sorted(set(mine["targets"]) | set(theirs["targets"]))  # type: ignore[arg-type]
    return found + [f"targets.{k}" for k in kinds
                    if mine["targets"].get(k) != theirs["targets"].get(k)]  # type: ignore[union-attr]


def group_specs(config: RepoConfig) -> dict[str, tuple[str, ...]]:
    """Each declared target with a test group of its own -> the kinds that declare it."""
    found: dict[str, list[str]] = {}
    for kind in GROUP_KINDS:
        for spec in config.targets.get(kind, ()):
            found.setdefault(spec, []).append(kind)
    return {spec: tuple(kinds) for spec, kinds in sorted(found.items())}


def closure_digest(index: ModuleIndex, reach: Closure, read: Callable[[str], bytes | None]) -> str:
    """The content of a closure's files. One that imports by computed names may reach any module: every Python file
    of the checkout is counted then."""
    files = sorted(set(index.by_name.values()) if reach.dynamic else reach.files)
    parts = []
    for path in files:
        text = read(path)
        parts.append(f"{path}={hashlib.sha256(text).hexdigest() if text is not None else 'unreadable'}")
    # Names it imports that the checkout does not hold today: a new file by such a name changes what it imports.
    missing = sorted(n for n in reach.names if n not in index.by_name)
    return _digest(*parts, "missing:", *missing)


def group_keys(inputs: Inputs, config: RepoConfig, closures: Mapping[str, str | None]) -> dict[str, str]:
    """Every group's key: the corpus, and each declared target whose closure digest is known (None: not analysed,
    so it gets no key and is never reused)."""
    keys = {CORPUS_GROUP: inputs.key(CORPUS_GROUP, "")}
    for spec, kinds in group_specs(config).items():
        digest = closures.get(spec)
        if digest is not None:
            keys[spec] = inputs.key(f"{','.join(kinds)}:{spec}", digest)
    return keys


@functools.cache
def suites_digest(suites_dir: Path) -> str:
    """compile-ci's suite code as the jobs import it: every file under the suites directory (ours, trusted), read
    once per worker process (a new version is a new deployment, and a restarted worker)."""
    parts = []
    for directory, folders, files in os.walk(suites_dir):
        folders[:] = sorted(f for f in folders if f != "__pycache__" and not f.startswith("."))
        for name in sorted(files):
            if name.endswith((".pyc", ".pyo")):
                continue
            path = Path(directory) / name
            parts.append(f"{path.relative_to(suites_dir)}={hashlib.sha256(path.read_bytes()).hexdigest()}")
    return _digest(*parts)

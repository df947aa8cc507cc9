"""Pre-started job containers for the DockerRunner (COMPILE_CI_WARM_START): a pull-request job's container created,
started and through its imports before the job arrives (suites/warm_container.py), so a shard does not pay them.

Each container is made for one job, never reused, from an eligible job's own description (runners/docker_container.py:
image, hardening, limits, environment, mounts) when that job starts, at the engine's least CPU weight; the next job
takes it only if its description is the same but for: its checkout (hard-linked, never copied, links copied as
links, never followed, into the empty directory the container mounts read-only); its cache layer and output volume
(made for the container, of a fresh job's kinds); its per-job variables (COMPILE_CI_*, sent with its command),
cpuset and weight.

Which jobs: untrusted ones (a trusted job writes the repository's cache: it runs as before; it readies a container
for the repository's next pull request) whose command is `python -m suites.pytest_entry` (behind the install step or
not) on a built-in suite, with no `-p` plugin but compile-ci's and pytest's and no PYTEST_ADDOPTS or PYTEST_PLUGINS:
no code of the repository runs in the job's process before pytest's configure hooks, where a fresh process has made
the same imports. The container starts the job fresh when its checkout or install could change what they found.

A job's container has no network and no engine socket, and the next container is created by the worker with new
directories, layer and volume: nothing a job writes reaches the next one. At most `capacity` (the worker's slots)
wait at once; one unclaimed for IDLE_S is removed, and ends itself a minute later whoever watches it. A worker's
go when its process exits; a killed one's carry its host and pid, and are swept once that process is gone.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors
import docker.types
import requests

from runners.compile_cache import CacheScopeError
from runners.cpu_shares import spell
from runners.docker_container import CHECKOUT_MOUNT, DEADLINE_LABEL, DEADLINE_SLACK_S, LABEL
from runners.docker_output import OutputVolume
from runners.prestart_rules import description_key, differ, per_job
from runners.protocol import RunSpec

log = logging.getLogger(__name__)

PRESTART_LABEL = "org.compile-ci.prestart"  # "<host>:<pid>" of the worker that made it
IDLE_S = 300  # a worker gives no job a container older than this
IDLE_MARGIN_S = 60  # and the container ends itself unclaimed this much later (its worker may be gone)
LAUNCHER = ("-m", "suites.warm_container")
MAKE_WAIT_S = 60  # how long a closing worker waits for a container being made
WAITING_CPU_SHARES = 2  # the engine's least weight, while a container imports and waits
DEFAULT_CPU_SHARES = 1024  # the engine's default: what a job's own container has


@dataclass
class Prestarted:
    key: str
    container: Any
    output: OutputVolume
    cache: Any  # the runner's _JobCache
    staging: Path
    made: float

    def fill(self, checkout: Path) -> None:
        """The job's checkout, where the container's read-only mount shows it."""
        shutil.copytree(checkout, self.staging, symlinks=True, copy_function=_link, dirs_exist_ok=True)

    def go(self, line: bytes, cpus: tuple[int, ...]) -> None:
        """The job's CPUs, then its command and variables (`go_line`) on the container's stdin."""
        # The job's share of the CPUs is a fresh container's (the engine's default weight), its cpuset the job's.
        self.container.update(cpu_shares=DEFAULT_CPU_SHARES, **({"cpuset_cpus": spell(cpus)} if cpus else {}))
        sock = self.container.attach_socket(params={"stdin": 1, "stream": 1})
        raw = getattr(sock, "_sock", sock)
        try:
            raw.sendall(line)
        finally:
            sock.close()


def _link(source: str, target: str) -> str:
    """A hard link, never a copy: a checkout's size is the pull request's to choose (on another filesystem the
    link fails, and the job starts its own container, which mounts the checkout where it is)."""
    os.link(source, target, follow_symlinks=False)
    return target


_ALL: weakref.WeakSet[Prestarts] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    """A worker's (or a bench's) waiting containers go with its process; a SIGKILLed one's are swept later."""
    for prestarts in list(_ALL):
        prestarts.close()


def _forked() -> None:
    """A forked worker process (Celery's prefork child) runs one job at a time, with pools of its own."""
    for prestarts in list(_ALL):
        prestarts.after_fork()


os.register_at_fork(after_in_child=_forked)


class Prestarts:
    """The worker's pre-started containers. `runner` is its DockerRunner (client, images, _prepare_cache, ...)."""

    def __init__(self, runner: Any, capacity: int) -> None:
        self.runner = runner
        self.capacity = max(1, capacity)
        self.holder = f"{socket.gethostname()}:{os.getpid()}"
        self._entries: list[Prestarted] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._made = 0
        self._making: list[threading.Thread] = []
        self._closed = False
        self.taken = 0  # how many jobs took one (benches, tests)
        _ALL.add(self)

    def after_fork(self) -> None:
        """In a forked child: the parent's containers stay the parent's; this process readies at most one (for its
        own next job: it runs one at a time), marked with its own pid, so a child's are swept once it is gone."""
        self.holder = f"{socket.gethostname()}:{os.getpid()}"
        self.capacity = 1
        self._entries, self._making = [], []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)

    def take(self, key: str, job: str = "") -> Prestarted | None:
        with self._lock:
            old = [e for e in self._entries if time.monotonic() - e.made > IDLE_S]
            self._entries = [e for e in self._entries if e not in old]
            entry = next((e for e in self._entries if e.key == key), None)
            if entry is not None:
                self._entries.remove(entry)
                self.taken += 1
            waiting = [e.key for e in self._entries]
        for stale in old:
            self.discard(stale)
        if entry is not None:
            log.info("job %s: a container started %.0f s before it", job, time.monotonic() - entry.made)
        elif waiting:
            log.info("job %s: none of the %d waiting containers is of its description (%s differ)", job,
                     len(waiting), ", ".join(sorted({part for other in waiting for part in differ(key, other)})))
        return entry

    def wait_for(self, count: int, timeout: float) -> bool:
        """Whether `count` containers wait for jobs within `timeout` (tests, benches)."""
        with self._changed:
            return self._changed.wait_for(lambda: len(self._entries) >= count, timeout)

    def make_later(self, spec: RunSpec, cpus: tuple[int, ...], config_for: Callable[..., dict[str, Any]]) -> None:
        """Start one for the next job like `spec`, in the background."""
        thread = threading.Thread(target=self._make, args=(spec, cpus, config_for), name="prestart", daemon=True)
        with self._lock:  # job threads call this at once: none may drop another's thread from the list
            self._making = [t for t in self._making if t.is_alive()] + [thread]
        thread.start()

    def _make(self, spec: RunSpec, cpus: tuple[int, ...], config_for: Callable[..., dict[str, Any]]) -> None:
        with self._lock:
            if self._closed:
                return
            self._made += 1
            made = f"prestart-{os.getpid()}-{self._made}-{int(time.time())}"
        try:
            entry = self._create(made, spec, cpus, config_for)
        except (docker.errors.DockerException, requests.exceptions.RequestException, CacheScopeError, OSError) as exc:
            log.warning("prestart: no container made for the next job: %s", exc)
            return
        log.debug("prestart: %s made for the next job like %s", made, spec.job_id)
        with self._lock:
            if self._closed:
                leftovers = [entry]
            else:
                self._entries.append(entry)
                leftovers = self._entries[:-self.capacity] if len(self._entries) > self.capacity else []
                del self._entries[:len(leftovers)]
                self._changed.notify_all()
        for old in leftovers:
            self.discard(old)

    def _create(self, made: str, spec: RunSpec, cpus: tuple[int, ...],
                config_for: Callable[..., dict[str, Any]]) -> Prestarted:
        runner = self.runner
        # Beside the worker's checkouts (their parent's parent: data/work for the pipeline), so links reach them.
        staging = Path(tempfile.mkdtemp(prefix=".compile-ci-prestart-", dir=spec.checkout_dir.parent.parent))
        staging.chmod(0o755)
        cache = output = container = None
        try:
            cache = runner._prepare_cache(spec, made)
            labels = {**runner._labels(spec), LABEL: made, PRESTART_LABEL: self.holder}
            output = OutputVolume(runner.client, spec, runner.images[spec.device], runner.deployment,
                                  "compile-ci-out-" + made, labels)
            key = description_key(config_for(spec, None, None, cpus), spec)  # as a job's is (docker_runner.py)
            config = config_for(spec, cache.mount if cache is not None else None, output.open(), cpus)
            mounts = [docker.types.Mount(CHECKOUT_MOUNT, str(staging), type="bind", read_only=True)
                      if m["Target"] == CHECKOUT_MOUNT else m for m in config["mounts"]]
            deadline = IDLE_S + int(spec.timeout_s) + DEADLINE_SLACK_S
            labels[DEADLINE_LABEL] = str(int(time.time()) + deadline + 10)
            config.update(
                # Its imports take only CPU the running jobs leave idle: a job beside it is not slowed for the next.
                cpu_shares=WAITING_CPU_SHARES,
                name=f"compile-ci-{made}", labels=labels, mounts=mounts, stdin_open=True,
                environment={k: v for k, v in config["environment"].items() if not per_job(k)},
                command=["timeout", "--kill-after=10", str(deadline), spec.command[0], *LAUNCHER,
                         str(IDLE_S + IDLE_MARGIN_S)])
            container = runner.client.containers.create(**config)
            container.start()
        except BaseException:
            if container is not None:  # created but not started: it would wait for a sweep
                with contextlib.suppress(docker.errors.DockerException, requests.exceptions.RequestException):
                    container.remove(force=True)
            if output is not None:
                output.close()
            if cache is not None:
                runner._release_cache(cache, False)
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return Prestarted(key, container, output, cache, staging, time.monotonic())

    def discard(self, entry: Prestarted) -> None:
        try:
            entry.container.remove(force=True, v=True)
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            pass  # the next sweep removes it
        self.release(entry)

    def release(self, entry: Prestarted) -> None:
        """What an entry holds beside its container (after a job's end, or unclaimed)."""
        entry.output.close()
        if entry.cache is not None:
            self.runner._release_cache(entry.cache, False)
        shutil.rmtree(entry.staging, ignore_errors=True)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        for thread in list(self._making):  # one being made now is discarded when made, not left behind by an exit
            thread.join(timeout=MAKE_WAIT_S)
        with self._lock:
            entries, self._entries = self._entries, []
        for entry in entries:
            self.discard(entry)

"""Compile caches per repository and trust class: layout, locking, throwaway layers, size cap with LRU eviction.

Torch imports a cached module (inductor's generated .py, an FX-graph-cache entry) without checking it, so whoever
can write a cache runs code in every later job that reads it. Hence:

- one cache per (runner build, repository): a job is only ever given its own repository's directory;
- only pushes to the default branch write it (merged code, the repository's own baseline);
- every other job — pull requests of any author, base runs (a base sha with a pull request's config) — reads the
  trusted cache through a throwaway layer of its own (an overlay or a copy) that is deleted when the job ends and
  never merged back, so no pull request can change what a later base run or the default branch is served.

Layout under `<data_dir>/cache/<runner cache_key>/<repository id>/` (and every host's, in runners/shared_cache.py):
    trusted/ (inductor/, triton/: written by trusted jobs only) · layers/<job>/ (one untrusted job's layer: upper/ +
    work/ for an overlay, or copy/; gone after the job) · .lock (flock: shared by copies, else exclusive)
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from runners import header_seed, shared_cache
from runners.cache_size import evict_lru

log = logging.getLogger(__name__)

TRUSTED = "trusted"
UNTRUSTED = "untrusted"
DEFAULT_CAP_MB = 4096
# A layer that outlived this is a crashed worker's leftover (no job runs this long): removed at the next setup.
STALE_LAYER_S = 24 * 3600
_SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}")


class CacheScopeError(ValueError):
    """A scope that cannot name a directory safely: refused rather than sanitized into another repository's."""


@dataclass(frozen=True)
class CacheScope:
    """Which compile cache a job gets: its repository's, read-write when trusted, through a throwaway layer if not."""

    root: Path  # <data_dir>/cache; the runner adds its own cache_key (one interpreter/torch build)
    repo: str  # the repository's id: stable across renames, never shared by two repositories
    trust: str  # TRUSTED | UNTRUSTED
    pr: int | None = None
    cap_mb: int = DEFAULT_CAP_MB
    shared: Path | None = None  # COMPILE_CI_SHARED_CACHE_DIR: where every host reads trusted caches (shared_cache.py)

    def __post_init__(self) -> None:
        if not _SAFE_NAME.fullmatch(self.repo):
            raise CacheScopeError(f"a cache scope's repository must be a plain name, got {self.repo!r}")
        if self.trust not in (TRUSTED, UNTRUSTED):
            raise CacheScopeError(f"a cache scope's trust must be {TRUSTED} or {UNTRUSTED}, got {self.trust!r}")
        if self.cap_mb < 1:
            raise CacheScopeError(f"a cache cap must be at least 1 MB, got {self.cap_mb}")

    @property
    def trusted(self) -> bool:
        return self.trust == TRUSTED


def trust_class(trigger: str) -> str:
    """Only a push to the default branch writes the trusted cache. A trusted author's pull request is trusted to
    run, not to define what its base or the default branch is served: its cache writes would make a later base run
    fail its failures (a false green) or leave the default branch red until eviction, depending on queue order."""
    return TRUSTED if trigger == "push" else UNTRUSTED


@dataclass(frozen=True)
class RepoCache:
    """The directories of one repository's cache for one runner build."""

    base: Path

    @classmethod
    def of(cls, scope: CacheScope, runner_key: str) -> RepoCache:
        if not _SAFE_NAME.fullmatch(runner_key):
            raise CacheScopeError(f"a runner cache key must be a plain name, got {runner_key!r}")
        return cls(scope.root / runner_key / scope.repo)

    @property
    def trusted_dir(self) -> Path:
        return self.base / "trusted"

    def layer_dir(self, job_id: str) -> Path:
        return self.base / "layers" / slug(job_id)

    @contextmanager
    def locked(self, shared: bool = False) -> Iterator[None]:
        """Shared for copies (they only read: a pull request's shards copy at once), else exclusive."""
        self.base.mkdir(parents=True, exist_ok=True)
        with open(self.base / ".lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def new_layer(self, job_id: str) -> Path:
        """An empty layer directory for one untrusted job; stale leftovers of crashed workers go first."""
        self.trusted_dir.mkdir(parents=True, exist_ok=True)
        layers = self.base / "layers"
        layers.mkdir(exist_ok=True)
        cutoff = time.time() - STALE_LAYER_S
        for old in layers.iterdir():
            if old.stat().st_mtime < cutoff:
                shutil.rmtree(old, ignore_errors=True)
        layer = self.layer_dir(job_id)
        shutil.rmtree(layer, ignore_errors=True)  # a previous attempt of the same job
        layer.mkdir()
        return layer

    def copy_trusted(self, dest: Path) -> None:
        """A private copy of the trusted cache (reflinks where the filesystem has them, else a plain copy)."""
        dest.mkdir(parents=True, exist_ok=True)
        self.trusted_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with self.locked(shared=True):  # set-ups, evictions, drops and pulls change trusted/ under the exclusive one
            subprocess.run(["cp", "-a", "--reflink=auto", f"{self.trusted_dir}/.", str(dest)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        log.info("compile cache %s: a private copy in %.1f s", self.base, time.monotonic() - started)

    def writing_marker(self, job_id: str) -> Path:
        return self.base / "writing" / slug(job_id)

    def begin_writing(self, job_id: str, holder: str) -> None:
        """A trusted job is about to write: if it does not end cleanly, what it half-wrote must not be kept."""
        marker = self.writing_marker(job_id)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(holder)

    def discard_unfinished(self, active: Callable[[str, str], bool]) -> list[str]:
        """Empty trusted/ when a trusted job that wrote to it did not end cleanly and is not running any more (its
        worker was killed, its container killed mid-compile): torch loads a truncated `.so` or module it finds there
        and fails every later job ("file too short"). Under the lock; returns the jobs whose writes were dropped."""
        writing = self.base / "writing"
        stale = [m for m in writing.iterdir() if not active(m.name, m.read_text())] if writing.is_dir() else []
        if stale:
            shutil.rmtree(self.trusted_dir, ignore_errors=True)
            self.trusted_dir.mkdir(parents=True, exist_ok=True)
            for marker in stale:
                marker.unlink(missing_ok=True)
            log.warning("compile cache %s: dropped after unfinished trusted job(s) %s", self.base,
                        ", ".join(m.name for m in stale))
        return [m.name for m in stale]


@dataclass(frozen=True)
class JobCache:
    """The cache directory one job got, and what to tidy when it ends."""

    repo: RepoCache
    scope: CacheScope
    job_id: str
    directory: Path | None  # what the job reads and writes (a bind mount), or None for an overlay
    layer: Path | None = None  # an untrusted job's throwaway layer
    overlay_options: str = ""  # lowerdir=trusted,upperdir=...,workdir=... for the engine to mount
    shared: Path | None = None  # the repository's shared cache, which a trusted job's clean end publishes to

    def close(self, clean: bool = True) -> None:
        """An untrusted job's layer is never merged back: it goes. A trusted job's writes stay, under the cap, when
        it ended cleanly (exited by itself); killed, cancelled or out of memory, it may have left a half-written
        module or object, so the repository's cache is dropped (the next job starts cold, not broken)."""
        if self.layer is not None:
            shutil.rmtree(self.layer, ignore_errors=True)
            return
        try:
            with self.repo.locked():
                if not clean:
                    shutil.rmtree(self.repo.trusted_dir, ignore_errors=True)
                    self.repo.trusted_dir.mkdir(parents=True, exist_ok=True)
                self.repo.writing_marker(self.job_id).unlink(missing_ok=True)
                evict_lru(self.repo.trusted_dir, self.scope.cap_mb * 1024 * 1024)
                # Published by the last trusted writer, under the lock: no half-written file of another reaches a host.
                if clean and self.shared is not None and not any((self.repo.base / "writing").glob("*")):
                    shared_cache.publish(self.repo.trusted_dir, self.shared, self.scope.cap_mb * 1024 * 1024)
        except OSError:
            # The job's result stands; the next trusted job of the repository tries again.
            log.warning("compile cache %s: eviction failed", self.repo.base, exc_info=True)


def open_job_cache(scope: CacheScope, runner_key: str, job_id: str, layer_kind: str, uid: int | None,
                   active: Callable[[str, str], bool] = lambda job, holder: False,
                   seed: Path | None = None) -> JobCache:
    """Resolve a job's scope to directories. layer_kind ("overlay" | "copy") says how an untrusted job reads the
    trusted cache; uid, when given, is the job's user, handed the directories it may write. `active(job, holder)`:
    whether another trusted job that marked itself writing (with `holder`, see begin_writing) still runs. `seed`:
    the runner build's precompiled header (runners/header_seed.py), under every job's cache."""
    repo = RepoCache.of(scope, runner_key)
    shared = scope.shared / runner_key / scope.repo if scope.shared is not None else None
    with repo.locked():
        repo.trusted_dir.mkdir(parents=True, exist_ok=True)
        repo.discard_unfinished(active)
        if shared is not None:  # what other hosts' trusted jobs published since this host last looked
            shared_cache.pull(repo.base, repo.trusted_dir, shared, uid)
        if scope.trusted:
            repo.begin_writing(job_id, f"{socket.gethostname()}:{os.getpid()}")
            header_seed.install(seed, repo.trusted_dir, uid, scope.cap_mb << 20)
    if scope.trusted:
        hand_to(repo.trusted_dir, uid)
        return JobCache(repo, scope, job_id, repo.trusted_dir, shared=shared)
    if layer_kind == "overlay" and any(c in f"{repo.base}{seed or ''}" for c in ",:"):
        # Overlay options are comma and colon separated: such a path would mount other directories.
        raise CacheScopeError(f"an overlay cannot be mounted under a path holding ',' or ':': {repo.base}")
    with repo.locked():
        layer = repo.new_layer(job_id)
    if layer_kind == "copy":
        repo.copy_trusted(layer / "copy")
        header_seed.install(seed, layer / "copy", uid, scope.cap_mb << 20)
        hand_to(layer / "copy", uid)
        return JobCache(repo, scope, job_id, layer / "copy", layer)
    upper, work = layer / "upper", layer / "work"
    upper.mkdir()
    work.mkdir()
    hand_to(upper, uid)  # the merged root takes the upper directory's owner
    lower = f"{repo.trusted_dir}:{seed}" if seed is not None else str(repo.trusted_dir)
    # The trusted directory (over the seed) is the overlay's lower layer: the job reads it, writes land in upper/.
    return JobCache(repo, scope, job_id, None, layer, f"lowerdir={lower},upperdir={upper},workdir={work}")


def process_alive(holder: str) -> bool:
    """Whether a `host:pid` holder is a live (not zombie) process of this host; another host's is assumed alive."""
    host, _, pid = holder.partition(":")
    if host != socket.gethostname():
        return True
    try:
        with open(f"/proc/{int(pid)}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, ValueError, IndexError):
        return False


def hand_to(path: Path, uid: int | None) -> None:
    """A job running as another user than the worker gets the directories it may write."""
    if uid is None or os.geteuid() == uid:
        return
    if os.geteuid() == 0:
        os.chown(path, uid, uid)
    else:
        path.chmod(0o777)


def slug(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_.-]+", "-", text).strip("-.")[:200]

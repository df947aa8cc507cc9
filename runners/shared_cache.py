"""The trusted compile cache where every worker host reads it: published by trusted jobs, pulled by every host.

Each host keeps its compile caches on its own disk (runners/compile_cache.py), so N hosts paid the cold compile of a
repository N times. With `COMPILE_CI_SHARED_CACHE_DIR` on the volume every host already shares (the artifacts
volume), a trusted job's host publishes its repository's trusted cache there when the job ended cleanly, and every
host pulls what is new into its own trusted cache before it sets up a job of that repository. Jobs never see the
shared directory: they get their host's trusted cache as before (read-write for a trusted job, a throwaway layer for
any other), so what reaches the shared directory is exactly what reached a trusted cache: written by pushes to the
default branch only.

Copies go both ways file by file, regular files only: a link, FIFO or device in a trusted cache (a default branch's
code can make one) is never followed nor copied, so it cannot carry another repository's cache or a host's file
into what every host reads. A file lands under a temporary name and is renamed, so a reader sees it whole or not at
all; a file already there with the same size is skipped (inductor names its entries by content). The shared copy is
capped like a host's (least recently used files first).

Layout under `<shared>/<runner cache_key>/<repository id>/`:
    files/        the published trusted cache
    generation    bumped by every publish: a host pulls only when it changed since its last pull
    .lock         flock: publishes and pulls of one repository never interleave (NFSv4, CephFS: across hosts)
"""

from __future__ import annotations

import fcntl
import logging
import os
import stat
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)
PULLED = ".shared-generation"  # in a host's repository directory, beside trusted/: the generation it last pulled


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def generation(shared: Path) -> str:
    try:
        return (shared / "generation").read_text()[:100]
    except OSError:
        return ""


def copy_regular_files(source: Path, dest: Path, owner: tuple[int, int] | None = None) -> int:
    """Every regular file under `source` missing from `dest` (or of another size there), never following a link;
    returns the bytes copied. `owner`: who gets what is created."""
    dest.mkdir(parents=True, exist_ok=True)
    copied = 0
    for dirpath, dirs, files in os.walk(source):  # os.walk does not descend into links to directories
        relative = Path(dirpath).relative_to(source)
        dirs[:] = [d for d in dirs if stat.S_ISDIR(os.lstat(os.path.join(dirpath, d)).st_mode)]
        for name in files:
            path = os.path.join(dirpath, name)
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(info.st_mode):
                continue
            target = dest / relative / name
            try:
                if os.lstat(target).st_size == info.st_size:
                    continue
            except FileNotFoundError:
                pass
            copied += _copy_file(path, target, info.st_mode, dest, owner)
    return copied


def _copy_file(path: str, target: Path, mode: int, dest: Path, owner: tuple[int, int] | None) -> int:
    for parent in reversed([p for p in target.parents if p.is_relative_to(dest) and p != dest]):
        if not parent.exists():
            parent.mkdir()
            if owner is not None:
                os.chown(parent, *owner)
    partial = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.partial")
    try:
        source_fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)  # replaced by a link since lstat: refused
    except OSError:
        return 0
    size = 0
    try:
        with os.fdopen(source_fd, "rb") as source, open(partial, "wb") as out:
            while chunk := source.read(1 << 20):
                out.write(chunk)
                size += len(chunk)
        os.chmod(partial, (mode & 0o777) | 0o600)
        if owner is not None:
            os.chown(partial, *owner)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return size


def publish(trusted: Path, shared: Path, cap_bytes: int) -> int:
    """After a trusted job ended cleanly: its repository's trusted cache into the shared one; bytes copied."""
    from runners.cache_size import evict_lru

    with locked(shared):
        copied = copy_regular_files(trusted, shared / "files")
        if copied:
            evict_lru(shared / "files", cap_bytes)
            partial = shared / f".generation.{uuid.uuid4().hex[:8]}"
            partial.write_text(uuid.uuid4().hex)
            os.replace(partial, shared / "generation")
    return copied


def pull(repo_base: Path, trusted: Path, shared: Path, uid: int | None) -> int:
    """Before a job: what was published since this host last pulled, into its trusted cache; bytes copied. The
    caller holds the host's repository lock; `uid`: the jobs' user, who gets what is created (as if its own trusted
    job had written it: the compiles of later jobs write into those directories)."""
    if not (shared / "files").is_dir():
        return 0
    with locked(shared):
        current = generation(shared)
        marker = repo_base / PULLED
        pulled = marker.exists() and marker.read_text() == current
        if not current or pulled and any(trusted.iterdir()):  # emptied since (a dropped cache): pull again
            return 0
        owner = (uid, uid) if uid is not None and os.geteuid() == 0 else None
        copied = copy_regular_files(shared / "files", trusted, owner)
        marker.write_text(current)
    if copied:
        log.info("compile cache %s: pulled %d bytes from the shared cache", repo_base, copied)
    return copied

"""Compile cache scopes, trust classes, throwaway layers and the size cap (least recently used eviction)."""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from runners.cache_size import disk_usage, evict_lru
from runners.compile_cache import (
    STALE_LAYER_S,
    TRUSTED,
    UNTRUSTED,
    CacheScope,
    CacheScopeError,
    RepoCache,
    trust_class,
)
from runners.docker_runner import DockerRunner
from runners.protocol import Runner, RunSpec

MB = 1024 * 1024


@pytest.mark.parametrize(("trigger", "expected"), [
    ("push", TRUSTED),  # only pushes to the default branch run: merged code writes the cache
    ("pull_request", UNTRUSTED),  # any author's: a member's pull request must not define what its base is served
    ("base", UNTRUSTED),  # a base sha run with a pull request's config
    ("something-new", UNTRUSTED),
])
def test_trust_classes(trigger: str, expected: str) -> None:
    assert trust_class(trigger) == expected


@pytest.mark.parametrize("repo", ["../101", "a/b", "", ".", "..", "101\n"])
def test_a_scope_never_names_a_directory_outside_its_repository(tmp_path: Path, repo: str) -> None:
    with pytest.raises(CacheScopeError):
        CacheScope(tmp_path, repo, TRUSTED)


def test_a_scope_needs_a_known_trust_class_and_a_positive_cap(tmp_path: Path) -> None:
    with pytest.raises(CacheScopeError):
        CacheScope(tmp_path, "101", "approved")
    with pytest.raises(CacheScopeError):
        CacheScope(tmp_path, "101", TRUSTED, cap_mb=0)


def write(path: Path, size: int, used: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path, (used, used))
    return path


def test_eviction_removes_the_least_recently_used_first(tmp_path: Path) -> None:
    now = time.time()
    old = write(tmp_path / "inductor" / "aa" / "old.py", MB, now - 300)
    read_lately = write(tmp_path / "inductor" / "bb" / "read.so", MB, now - 200)
    os.utime(read_lately, (now - 10, now - 200))  # written long ago, read a moment ago
    newest = write(tmp_path / "triton" / "cc" / "new.json", MB, now - 100)
    freed = evict_lru(tmp_path, 2 * MB)
    assert freed == MB and not old.exists() and read_lately.exists() and newest.exists()
    assert not (tmp_path / "inductor" / "aa").exists(), "emptied directories go too"
    assert evict_lru(tmp_path, MB) == MB and not newest.exists() and read_lately.exists()
    assert disk_usage(tmp_path) == MB


def test_eviction_under_the_cap_removes_nothing(tmp_path: Path) -> None:
    write(tmp_path / "a", MB, time.time())
    assert evict_lru(tmp_path, 2 * MB) == 0 and disk_usage(tmp_path) == MB


def test_a_crashed_workers_layers_are_cleared_at_the_next_setup(tmp_path: Path) -> None:
    repo = RepoCache.of(CacheScope(tmp_path, "101", UNTRUSTED, 4), "docker-img")
    stale = repo.new_layer("crashed-job")
    (stale / "upper").mkdir()
    os.utime(stale, (time.time() - STALE_LAYER_S - 60,) * 2)
    running = repo.new_layer("running-job")
    fresh = repo.new_layer("next-job")
    assert not stale.exists() and running.exists() and fresh.exists()



def _copy_in_thread(repo: RepoCache, dest: Path) -> threading.Thread:
    copier = threading.Thread(target=repo.copy_trusted, args=(dest,), daemon=True)
    copier.start()
    return copier


def test_untrusted_copies_run_at_once_and_wait_only_for_what_changes_the_trusted_cache(tmp_path: Path) -> None:
    # Four untrusted shards of a pull request start together on one worker: each copies the trusted cache, and a
    # copy held another's turn (a real model's cache took seconds per shard on the GPU host). A set-up, eviction or
    # drop of the trusted cache still goes alone: a copy started meanwhile waits, and gets what it left.
    repo = RepoCache.of(CacheScope(tmp_path, "101", UNTRUSTED), "local-py")
    write(repo.trusted_dir / "inductor" / "kept.py", 10, time.time())
    with open(repo.base / ".lock", "a") as other:  # another job's copy, mid-way (its own open file: its own lock)
        fcntl.flock(other, fcntl.LOCK_SH)
        copier = _copy_in_thread(repo, tmp_path / "first")
        copier.join(30)
        assert not copier.is_alive(), "a copy waited for another copy"
    assert (tmp_path / "first" / "inductor" / "kept.py").read_bytes() == b"x" * 10
    with repo.locked():  # a trusted job's set-up (or an eviction) changes the directory under the lock
        copier = _copy_in_thread(repo, tmp_path / "second")
        copier.join(0.5)
        assert copier.is_alive(), "a copy read the trusted cache while it was being changed"
        (repo.trusted_dir / "inductor" / "kept.py").unlink()
        write(repo.trusted_dir / "inductor" / "after.py", 10, time.time())
    copier.join(30)
    assert not copier.is_alive()
    assert sorted(p.name for p in (tmp_path / "second" / "inductor").iterdir()) == ["after.py"]

FILL = ("import os, pathlib, time\n"
        "cache = pathlib.Path(os.environ['TORCHINDUCTOR_CACHE_DIR'])\n"
        "cache.mkdir(parents=True, exist_ok=True)\n"
        "for i in range(3):\n"
        "    (cache / f'entry{i}.bin').write_bytes(b'x' * (1 << 20))\n"
        "    t = time.time() - 100 + i; os.utime(cache / f'entry{i}.bin', (t, t))\n")


def test_a_trusted_job_leaves_its_repository_under_the_cap(runner: Runner, tmp_path: Path) -> None:
    scope = CacheScope(tmp_path / "cache", "101", TRUSTED, cap_mb=2)
    spec = RunSpec(job_id="fill", command=(runner.python, "-c", FILL), checkout_dir=tmp_path,
                   output_dir=tmp_path / "out", timeout_s=120, cache=scope)
    assert runner.run(spec).exit_code == 0, spec.log_path.read_text()
    inductor = RepoCache.of(scope, runner.cache_key("cpu")).trusted_dir / "inductor"
    assert sorted(p.name for p in inductor.iterdir()) == ["entry1.bin", "entry2.bin"]


def test_an_untrusted_job_adds_nothing_to_the_repositorys_cache(runner: Runner, tmp_path: Path) -> None:
    scope = CacheScope(tmp_path / "cache", "101", UNTRUSTED, pr=9, cap_mb=64)
    spec = RunSpec(job_id="fill-untrusted", command=(runner.python, "-c", FILL), checkout_dir=tmp_path,
                   output_dir=tmp_path / "out", timeout_s=120, cache=scope)
    assert runner.run(spec).exit_code == 0, spec.log_path.read_text()
    repo = RepoCache.of(scope, runner.cache_key("cpu"))
    assert disk_usage(repo.base) == 0 and list((repo.base / "layers").iterdir()) == []


def test_a_scope_that_cannot_be_mounted_is_an_infrastructure_error(docker_runner: DockerRunner,
                                                                      tmp_path: Path) -> None:
    # Overlay options are comma/colon separated: a data directory holding either cannot be mounted safely.
    scope = CacheScope(tmp_path / "odd,dir", "101", UNTRUSTED, pr=1)
    spec = RunSpec(job_id="odd", command=("true",), checkout_dir=tmp_path, output_dir=tmp_path / "out",
                   timeout_s=60, cache=scope)
    result = docker_runner.run(spec)
    assert result.infra_error and "compile cache" in result.infra_error
    assert not list((tmp_path / "odd,dir").rglob("layers")), "nothing of the refused job is left"


HALF_WRITE = ("import os, pathlib, time\n"
              "cache = pathlib.Path(os.environ['TORCHINDUCTOR_CACHE_DIR'])\n"
              "cache.mkdir(parents=True, exist_ok=True)\n"
              "(cache / 'kernel.so').write_bytes(b'\\x7fELF')  # a link the kill cut short\n"
              "print('written', flush=True)\n"
              "time.sleep(600)\n")


def test_a_trusted_job_killed_mid_write_leaves_nothing_half_written(runner: Runner, tmp_path: Path) -> None:
    scope = CacheScope(tmp_path / "cache", "101", TRUSTED, cap_mb=64)
    trusted = RepoCache.of(scope, runner.cache_key("cpu")).trusted_dir
    clean = RunSpec(job_id="clean", command=(runner.python, "-c", FILL), checkout_dir=tmp_path,
                    output_dir=tmp_path / "out-clean", timeout_s=120, cache=scope)
    assert runner.run(clean).exit_code == 0 and (trusted / "inductor" / "entry2.bin").exists()
    killed = RunSpec(job_id="killed", command=(runner.python, "-c", HALF_WRITE), checkout_dir=tmp_path,
                     output_dir=tmp_path / "out-killed", timeout_s=8, cache=scope)
    assert runner.run(killed).timed_out and "written" in killed.log_path.read_text()
    # torch would load the truncated kernel.so ("file too short") in every later job: the cache is dropped instead.
    assert list(trusted.rglob("*")) == []


def test_an_unfinished_trusted_job_of_a_dead_worker_is_dropped_at_the_next_job(runner: Runner, tmp_path: Path) -> None:
    scope = CacheScope(tmp_path / "cache", "101", TRUSTED, cap_mb=64)
    repo = RepoCache.of(scope, runner.cache_key("cpu"))
    gone = subprocess.Popen(["true"])
    gone.wait()
    repo.trusted_dir.mkdir(parents=True)
    (repo.trusted_dir / "kernel.so").write_bytes(b"\x7fELF")  # left by a job whose worker was SIGKILLed
    repo.begin_writing("ghost-job", f"{socket.gethostname()}:{gone.pid}")  # no such process, no such container
    spec = RunSpec(job_id="next", command=(runner.python, "-c", "print('ok')"), checkout_dir=tmp_path,
                   output_dir=tmp_path / "out", timeout_s=120, cache=scope)
    assert runner.run(spec).exit_code == 0
    assert not (repo.trusted_dir / "kernel.so").exists() and not repo.writing_marker("ghost-job").exists()


def test_a_trusted_job_of_a_live_worker_still_starting_keeps_the_cache(runner: Runner, tmp_path: Path) -> None:
    """Two shards of a push start together: the second's set-up ran while the first was marked writing but had no
    container yet, took it for a dead worker's unfinished job and emptied the repository's cache under both (on
    Docker both shards then ended in pytest's internal error, exit 3). A live worker's job is starting, not lost."""
    scope = CacheScope(tmp_path / "cache", "101", TRUSTED, cap_mb=64)
    repo = RepoCache.of(scope, runner.cache_key("cpu"))
    repo.trusted_dir.mkdir(parents=True)
    (repo.trusted_dir / "kernel.so").write_bytes(b"\x7fELF")
    repo.begin_writing("starting-job", f"{socket.gethostname()}:{os.getpid()}")  # this worker; no container yet
    spec = RunSpec(job_id="next", command=(runner.python, "-c", "print('ok')"), checkout_dir=tmp_path,
                   output_dir=tmp_path / "out", timeout_s=120, cache=scope)
    assert runner.run(spec).exit_code == 0
    assert (repo.trusted_dir / "kernel.so").exists() and repo.writing_marker("starting-job").exists()

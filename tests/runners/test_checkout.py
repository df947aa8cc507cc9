"""Checkout of repo@sha: several jobs of one repository fetch into its mirror at the same time (a head and its base
run, two suites) and each gets its commit, where git's own shallow.lock used to fail all but one."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from runners.checkout import Checkout
from service.devkit.sandbox.sample_repo import commit_file


def test_concurrent_fetches_into_one_mirror_all_succeed(tmp_path: Path) -> None:
    origin = tmp_path / "origin"
    subprocess.run(["git", "init", "-q", "-b", "main", str(origin)], check=True)
    shas = [commit_file(origin, "main", f"file{n}.txt", f"{n}\n", f"commit {n}") for n in range(6)]
    checkout = Checkout(tmp_path / "mirrors")
    with ThreadPoolExecutor(max_workers=6) as pool:
        mirrors = list(pool.map(lambda sha: checkout.fetch(origin.as_uri(), sha, key="octo-widgets"), shas))
    assert len(set(mirrors)) == 1
    for n, sha in enumerate(shas):
        assert checkout.read_file(mirrors[0], sha, f"file{n}.txt") == f"{n}\n"


def test_a_fetch_clears_the_locks_a_dead_git_left_in_the_mirror(tmp_path: Path) -> None:
    """A worker killed mid-fetch leaves git's shallow.lock (and others): every later fetch of that repository
    failed with "File exists" until someone removed it by hand. Under the mirror's flock no other fetch runs,
    so a lock found there is stale."""
    origin = tmp_path / "origin"
    subprocess.run(["git", "init", "-q", "-b", "main", str(origin)], check=True)
    first = commit_file(origin, "main", "a.txt", "a\n", "first")
    second = commit_file(origin, "main", "b.txt", "b\n", "second")
    checkout = Checkout(tmp_path / "mirrors")
    mirror = checkout.fetch(origin.as_uri(), first, key="octo-widgets")
    stale = [mirror / "shallow.lock", mirror / "packed-refs.lock", mirror / "refs" / "heads" / "main.lock"]
    for lock in stale:
        lock.write_text("left by a killed git fetch\n")

    assert checkout.fetch(origin.as_uri(), second, key="octo-widgets") == mirror
    assert checkout.read_file(mirror, second, "b.txt") == "b\n"
    assert [lock for lock in stale if lock.exists()] == []

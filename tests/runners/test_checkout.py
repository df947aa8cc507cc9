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

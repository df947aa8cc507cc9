"""The trusted compile cache every worker host reads (runners/shared_cache.py): two hosts on this machine, each with
its own cache directory, and one shared directory standing in for the volume every host mounts.

The cache-poisoning attack replayed across hosts: host A's default branch fills and publishes the cache; an approved
pull request on host B starts warm from it, poisons every module it can reach and runs its payload in its own job;
nothing of it reaches the shared cache or any later job on either host, and another repository sees none of it.
And what a trusted cache may hold that is not a plain file (a link to a host's file, a FIFO) never travels."""

from __future__ import annotations

import json
import os
from pathlib import Path

from runners import shared_cache
from runners.compile_cache import TRUSTED, UNTRUSTED, CacheScope, JobCache, RepoCache, open_job_cache
from runners.docker_runner import DockerRunner
from runners.protocol import RunSpec
from tests.runners.test_compile_cache_attack import JOB, SEEDED, fx_hits, tree_digest


def test_a_pull_request_on_another_host_starts_warm_and_poisons_nothing(docker_runner: DockerRunner,
                                                                          tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    counter = iter(range(100))

    def run(host: str, repo: str, trust: str, pr: int | None, mode: str = "compile") -> dict:
        n = next(counter)
        out = tmp_path / f"out-{n}"
        scope = CacheScope(tmp_path / host / "cache", repo, trust, pr, shared=shared)
        spec = RunSpec(job_id=f"shared-{n}", command=(docker_runner.python, "-c", JOB, mode), checkout_dir=tmp_path,
                       output_dir=out, timeout_s=300, env={"OUT": str(out)}, cache=scope, memory_mb=4096)
        result = docker_runner.run(spec)
        assert result.exit_code == 0, (spec.log_path.read_text(), result)
        return json.loads((out / "report.json").read_text())

    key = docker_runner.cache_key("cpu")
    published = shared / key / "101" / "files"
    seed = run("host-a", "101", TRUSTED, None)
    assert fx_hits(seed["first"]) == 0
    pristine = tree_digest(published)
    assert any(name.endswith(".py") for name in pristine), "host A's default branch published its cache"

    attack = run("host-b", "101", UNTRUSTED, 7, mode="attack")
    assert fx_hits(attack["first"]) >= 1, "host B's first pull request starts warm from what host A published"
    assert attack["pwned"], "the payload runs in the attacker's own job: the replay is a real attack"
    assert tree_digest(published) == pristine, "an untrusted job changed the shared cache"
    trusted_b = RepoCache.of(CacheScope(tmp_path / "host-b" / "cache", "101", TRUSTED), key).trusted_dir
    assert tree_digest(trusted_b) == pristine, "host B's trusted cache holds exactly what was published"

    for host in ("host-a", "host-b"):
        later = run(host, "101", UNTRUSTED, 8)
        assert not later["pwned"] and not later["marker_before"] and later["py_with_payload"] == 0, (host, later)
        assert fx_hits(later["first"]) >= 1, host
    other_repo = run("host-b", "202", TRUSTED, None)
    # Only the image's precompiled header (runners/header_seed.py), which every repository's cache starts with.
    own = [name for name in other_repo["files_before"] if not name.startswith(SEEDED)]
    assert own == [] and fx_hits(other_repo["first"]) == 0, "B never sees A's entries"
    assert tree_digest(published) == pristine


def _trusted_job(root: Path, shared: Path, job: str, repo: str = "101") -> tuple[Path, JobCache]:
    cache = open_job_cache(CacheScope(root, repo, TRUSTED, shared=shared), "key", job, "copy", None)
    assert cache.directory is not None
    return cache.directory, cache


def test_only_plain_files_travel_and_only_from_a_clean_trusted_end(tmp_path: Path) -> None:
    shared, secret = tmp_path / "shared", tmp_path / "host-secret"
    secret.write_text("a host's file")
    directory, cache = _trusted_job(tmp_path / "a", shared, "push-1")
    (directory / "inductor" / "ab").mkdir(parents=True)
    (directory / "inductor" / "ab" / "kernel.py").write_text("compiled")
    (directory / "inductor" / "link.py").symlink_to(secret)
    (directory / "inductor" / "linked-dir").symlink_to(tmp_path, target_is_directory=True)
    os.mkfifo(directory / "inductor" / "fifo")
    cache.close(clean=True)
    files = shared / "key" / "101" / "files"
    assert sorted(str(p.relative_to(files)) for p in files.rglob("*")) == ["inductor", "inductor/ab",
                                                                            "inductor/ab/kernel.py"]
    assert not any(p.is_symlink() for p in files.rglob("*"))

    # Host B, a pull request: its copy holds the published kernel and nothing else.
    pulled = open_job_cache(CacheScope(tmp_path / "b", "101", UNTRUSTED, 3, shared=shared), "key", "pr-3", "copy",
                            None)
    assert pulled.directory is not None
    assert sorted(p.name for p in pulled.directory.rglob("*") if p.is_file()) == ["kernel.py"]
    (pulled.directory / "inductor" / "ab" / "kernel.py").write_text("poisoned by the pull request")
    pulled.close()
    assert (files / "inductor" / "ab" / "kernel.py").read_text() == "compiled"

    # A trusted job that did not end cleanly (killed mid-write) publishes nothing.
    directory, cache = _trusted_job(tmp_path / "a", shared, "push-2")
    (directory / "inductor" / "half.so").write_text("half written")
    cache.close(clean=False)
    assert not (files / "inductor" / "half.so").exists()


def test_a_host_pulls_what_is_new_and_again_after_its_cache_was_dropped(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    directory, cache = _trusted_job(tmp_path / "a", shared, "push-1")
    (directory / "one").write_text("1")
    cache.close(clean=True)
    repo_b = RepoCache.of(CacheScope(tmp_path / "b", "101", TRUSTED), "key")
    b_job, b_cache = _trusted_job(tmp_path / "b", shared, "push-b")
    assert (b_job / "one").read_text() == "1"
    b_cache.close(clean=True)
    published = shared_cache.generation(shared / "key" / "101")

    directory, cache = _trusted_job(tmp_path / "a", shared, "push-2")
    (directory / "two").write_text("2")
    cache.close(clean=True)
    assert shared_cache.generation(shared / "key" / "101") != published
    _trusted_job(tmp_path / "b", shared, "push-b2")[1].close(clean=True)
    assert sorted(p.name for p in repo_b.trusted_dir.iterdir()) == ["one", "two"]

    # Host B's cache dropped (a killed trusted job): the next job pulls everything again.
    _trusted_job(tmp_path / "b", shared, "push-b3")[1].close(clean=False)
    assert list(repo_b.trusted_dir.iterdir()) == []
    _trusted_job(tmp_path / "b", shared, "push-b4")[1].close(clean=True)
    assert sorted(p.name for p in repo_b.trusted_dir.iterdir()) == ["one", "two"]
    # Another repository's shared cache is never pulled into this one, nor this one's into it.
    other, other_cache = _trusted_job(tmp_path / "b", shared, "push-c", repo="202")
    assert list(other.iterdir()) == []
    other_cache.close(clean=True)


def test_only_the_last_trusted_writer_publishes(tmp_path: Path) -> None:
    """Two trusted jobs of one repository on one host at once (a push's shards, two pushes): the first to end must
    not publish what the other is still writing; the last one publishes both."""
    shared = tmp_path / "shared"
    first, first_cache = _trusted_job(tmp_path / "a", shared, "push-shard-0")
    second, second_cache = _trusted_job(tmp_path / "a", shared, "push-shard-1")
    (first / "done.so").write_text("whole")
    (second / "half.so").write_text("still being writ")
    first_cache.close(clean=True)
    assert not (shared / "key" / "101" / "files").exists()
    (second / "half.so").write_text("still being written, now whole")
    second_cache.close(clean=True)
    files = shared / "key" / "101" / "files"
    assert sorted(p.name for p in files.iterdir()) == ["done.so", "half.so"]
    assert (files / "half.so").read_text() == "still being written, now whole"

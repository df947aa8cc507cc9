"""Inductor's precompiled header, built once per worker host and runner build (runners/header_seed.py): a cold job
compiles without building it, and no job can change what the next job is served."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import threading
from pathlib import Path

import pytest

from runners import header_seed
from runners.compile_cache import TRUSTED, UNTRUSTED, CacheScope, RepoCache, open_job_cache
from runners.protocol import Runner, RunSpec

NAME = "cowdmmdsxaqvufmlntqf734sraqakbbadujfiwnh5uday4vtpfhi.h"

# The job: compile one small function, then say whether the header it used was older than the job (the seed) or
# built by it; then try to overwrite that header, as a hostile pull request would, to poison the next job.
JOB = """
import hashlib, json, os, pathlib, time
start = time.time()
import torch
from torch._inductor import codecache
torch.compile(lambda x: (x * 3.0).cos() - x)(torch.randn(32))
headers = sorted(pathlib.Path(codecache._HEADER_DIR).glob("*.gch"))
report = {"headers": [h.name for h in headers], "built_in_job": [h.stat().st_mtime >= start for h in headers],
          "served": {h.name: hashlib.sha256(h.read_bytes()).hexdigest() for h in headers}}
try:
    for h in headers:
        os.chmod(h, 0o644)
        h.write_bytes(b"poison")
    report["overwrote"] = True
except OSError as exc:
    report["overwrote"] = f"refused: {exc.strerror}"
print("REPORT", json.dumps(report))
"""


def _report(spec: RunSpec) -> dict[str, object]:
    import json

    lines = [line for line in spec.log_path.read_text().splitlines() if line.startswith("REPORT ")]
    assert lines, spec.log_path.read_text()[-3000:]
    return json.loads(lines[-1].removeprefix("REPORT "))


def _digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_a_cold_pull_request_job_builds_no_header_and_cannot_poison_the_seed(runner: Runner, tmp_path: Path) -> None:
    """The run's seed directory (tests/conftest.py), as every job of this host is served it."""
    scope = CacheScope(tmp_path / "cache", "101", UNTRUSTED, pr=5)
    first = RunSpec(job_id="pr-5", command=(runner.python, "-c", JOB), checkout_dir=tmp_path,
                    output_dir=tmp_path / "out-1", timeout_s=300, cache=scope)
    assert runner.run(first).exit_code == 0, first.log_path.read_text()[-3000:]
    report = _report(first)
    assert report["headers"] and report["built_in_job"] == [False] * len(report["headers"]), report
    key = runner.cache_key("cpu")
    seeds = list(Path(os.environ[header_seed.SEED_ENV]).glob(f".seeds/{key}/*/precompiled_headers"))
    assert len(seeds) == 1, seeds
    # Whatever the job did to the header it was served (refused on Docker's read-only lower layer; done to its
    # private copy on the LocalRunner), the seed every later job is served from is what this job was served.
    assert report["overwrote"] is True or str(report["overwrote"]).startswith("refused"), report
    seed = {name: digest for name, digest in _digest(seeds[0]).items() if name.endswith(".gch")}
    assert seed == report["served"], (seed, report)
    assert not (RepoCache.of(scope, key).trusted_dir / "precompiled_headers").exists()


def _seed_with(tmp_path: Path, files: dict[str, bytes]) -> Path:
    seed = tmp_path / "seed"
    (seed / "precompiled_headers").mkdir(parents=True)
    for name, data in files.items():
        (seed / "precompiled_headers" / name).write_bytes(data)
    return seed


def test_a_trusted_cache_gets_the_seed_once_and_an_overlay_reads_it_from_below(tmp_path: Path) -> None:
    seed = _seed_with(tmp_path, {NAME: b"#include <x>\n", NAME + ".gch": b"g" * 4096})
    trusted = open_job_cache(CacheScope(tmp_path / "c", "101", TRUSTED), "key", "push-1", "overlay", None, seed=seed)
    assert trusted.directory is not None
    assert _digest(trusted.directory / "precompiled_headers") == _digest(seed)
    (trusted.directory / "precompiled_headers" / (NAME + ".gch")).write_bytes(b"built by a trusted job")
    trusted.close()
    again = open_job_cache(CacheScope(tmp_path / "c", "101", TRUSTED), "key", "push-2", "overlay", None, seed=seed)
    assert again.directory is not None
    assert (again.directory / "precompiled_headers" / (NAME + ".gch")).read_bytes() == b"built by a trusted job"
    again.close()
    untrusted = open_job_cache(CacheScope(tmp_path / "c", "101", UNTRUSTED, pr=3), "key", "pr-3", "overlay", None,
                               seed=seed)
    assert f"lowerdir={again.directory}:{seed}," in untrusted.overlay_options
    untrusted.close()
    copy = open_job_cache(CacheScope(tmp_path / "c", "102", UNTRUSTED, pr=4), "key", "pr-4", "copy", None, seed=seed)
    assert copy.directory is not None and _digest(copy.directory / "precompiled_headers") == _digest(seed)
    copy.close()
    # A cap smaller than the seed: not laid there (it would be evicted at the job's end and copied again).
    small = open_job_cache(CacheScope(tmp_path / "c", "103", TRUSTED, cap_mb=1), "key", "push-3", "overlay", None,
                           seed=_seed_with(tmp_path / "big", {NAME + ".gch": b"g" * (2 << 20)}))
    assert small.directory is not None and not (small.directory / "precompiled_headers").exists()
    small.close()


def _tar(entries: list[tarfile.TarInfo], data: bytes = b"x") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for entry in entries:
            archive.addfile(entry, io.BytesIO(data) if entry.isfile() else None)
    return buffer.getvalue()


def _entry(name: str, kind: bytes = tarfile.REGTYPE, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, target, 1 if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize("entry", [
    _entry("precompiled_headers/" + NAME, tarfile.SYMTYPE, "/etc/shadow"),
    _entry("precompiled_headers/" + NAME, tarfile.LNKTYPE, "/etc/shadow"),
    _entry("precompiled_headers/../../" + NAME),
    _entry("/etc/" + NAME),
    _entry("precompiled_headers/evil.so"),
    _entry("precompiled_headers/" + NAME, tarfile.FIFOTYPE),
])
def test_an_archive_with_anything_but_header_files_builds_no_seed(tmp_path: Path, entry: tarfile.TarInfo) -> None:
    data = _tar([_entry("precompiled_headers", tarfile.DIRTYPE), entry])
    seed = header_seed.ensure(tmp_path / "seeds" / "build", header_seed.from_archive(lambda: [data]))
    assert seed is None
    assert [p.name for p in (tmp_path / "seeds").iterdir()] == [".lock"], "nothing half-built is left"
    assert not (tmp_path / "etc").exists()


def test_a_seed_is_built_once_for_concurrent_jobs_and_replaces_an_older_builds(tmp_path: Path) -> None:
    calls: list[int] = []
    gate = threading.Event()

    def build(scratch: Path) -> None:
        calls.append(1)
        gate.wait(5)
        (scratch / "precompiled_headers" / NAME).write_text("#include <x>\n")

    (tmp_path / "key" / "old-build" / "precompiled_headers").mkdir(parents=True)
    results: list[Path | None] = []
    threads = [threading.Thread(target=lambda: results.append(header_seed.ensure(tmp_path / "key" / "new", build)))
               for _ in range(3)]
    for thread in threads:
        thread.start()
    gate.set()
    for thread in threads:
        thread.join()
    assert calls == [1] and results == [tmp_path / "key" / "new"] * 3
    assert sorted(p.name for p in (tmp_path / "key").iterdir()) == [".lock", "new"]
    assert (tmp_path / "key" / "new" / "precompiled_headers" / NAME).stat().st_mode & 0o222 == 0


def test_the_image_seed_is_the_header_a_job_of_that_image_would_build(docker_runner: Runner, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The seed comes out of the image (built at its build, `python -m suites.header_seed`); a trusted push job
    then finds it in its repository's cache and builds nothing, and the header stays there for later jobs."""
    monkeypatch.setenv(header_seed.SEED_ENV, str(tmp_path / "seeds"))
    scope = CacheScope(tmp_path / "cache", "101", TRUSTED)
    push = RunSpec(job_id="push", command=(docker_runner.python, "-c", JOB.split("try:")[0] + "print('REPORT', "
                                                                                            "json.dumps(report))"),
                   checkout_dir=tmp_path, output_dir=tmp_path / "out", timeout_s=300, cache=scope)
    assert docker_runner.run(push).exit_code == 0, push.log_path.read_text()[-3000:]
    report = _report(push)
    assert report["built_in_job"] == [False], report
    trusted = RepoCache.of(scope, docker_runner.cache_key("cpu")).trusted_dir
    assert [p.name for p in (trusted / "precompiled_headers").glob("*.gch")] == report["headers"]


def test_no_seed_to_be_had_leaves_jobs_building_their_own(tmp_path: Path) -> None:
    """An image built before seeds, an engine error, a seed directory that
    cannot be written: the job runs as before, building its header, never an infrastructure error."""
    def engine_error(_scratch: Path) -> None:
        raise RuntimeError("404 Client Error: Could not find the file /opt/compile-ci/seed/precompiled_headers")

    assert header_seed.ensure(tmp_path / "seeds" / "build", engine_error) is None
    (tmp_path / "file").write_text("")
    assert header_seed.ensure(tmp_path / "file" / "key" / "build", engine_error) is None
    assert header_seed.install(None, tmp_path / "cache") == [] and not (tmp_path / "cache").exists()


def test_a_seed_removed_under_a_running_worker_is_taken_again(docker_runner: Runner, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """An operator cleaning the cache directory while the worker runs: the next job is not handed a directory that
    is gone (an infrastructure error: the engine cannot mount it), the worker takes the seed out of the image again."""
    import shutil

    monkeypatch.setenv(header_seed.SEED_ENV, str(tmp_path / "seeds"))
    for n in range(2):
        spec = RunSpec(job_id=f"pr-{n}", command=(docker_runner.python, "-c", "print('ran')"), checkout_dir=tmp_path,
                       output_dir=tmp_path / f"out-{n}", timeout_s=120,
                       cache=CacheScope(tmp_path / "cache", "101", UNTRUSTED, pr=n + 1))
        result = docker_runner.run(spec)
        assert (result.exit_code, result.infra_error) == (0, None), spec.log_path.read_text()
        assert list((tmp_path / "seeds").rglob("*.gch")), "the seed is there for the job"
        shutil.rmtree(tmp_path / "seeds")


def test_a_seed_gone_before_it_is_laid_is_no_error(tmp_path: Path) -> None:
    assert header_seed.install(tmp_path / "gone", tmp_path / "cache") == []


def test_a_worker_process_forked_mid_preparation_waits_for_that_build_and_takes_its_seed(tmp_path: Path) -> None:
    """Celery forks its pool while the worker prepares the host (service/jobs/tasks.py): the child must neither wait
    forever on a lock a parent's thread held at the fork nor build the seed again."""
    import signal

    from runners import local, toolchain

    building, done = threading.Event(), threading.Event()

    def build(scratch: Path) -> None:
        building.set()
        done.wait(20)
        (scratch / "precompiled_headers" / NAME).write_text("#include <x>\n")

    def prepare() -> None:  # what LocalRunner.prepare holds while it builds
        with toolchain._isa_lock, local._seed_lock:
            header_seed.ensure(tmp_path / "key" / "build", build)

    preparing = threading.Thread(target=prepare)
    preparing.start()
    assert building.wait(10)
    child = os.fork()
    if child == 0:
        signal.alarm(30)  # a lock never released ends the child here, and the test fails
        with toolchain._isa_lock, local._seed_lock:
            seed = header_seed.ensure(tmp_path / "key" / "build", lambda _scratch: os._exit(3))  # builds: a failure
        os._exit(0 if seed is not None and (seed / "precompiled_headers" / NAME).is_file() else 4)
    done.set()
    preparing.join()
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0

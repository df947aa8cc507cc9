"""Jobs that run at once on one worker each get their own part of its CPUs (runners/cpu_shares.py), and size torch's
threads and inductor's compile workers to it (suites/cpu_share.py), through a real LocalRunner (fresh and forked
from the warm interpreter) and a real DockerRunner.

A sample repository with its own package and test: the test meets the other job's (both must be running at once,
so both hold a lease), records the CPUs its process may use, torch's threads and inductor's compile workers, and
compiles a function on the CPU (whose C++ kernel is specialised on torch's thread count). On this 2-core host a
worker of two slots gives each job one CPU: the two jobs' CPUs are disjoint and cover the worker's, each runs one
torch thread and one compile worker, its log says so, and the compiled function is right. (One slot, the default,
leaves a job every CPU, as before: every other job of the tests runs so.)
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import uuid
from pathlib import Path

import pytest

from runners import warm_start
from runners.compile_cache import TRUSTED, CacheScope
from runners.local import LocalRunner
from runners.protocol import RunResult, RunSpec
from service.jobs.pipeline import pytest_command

ROOT = Path(__file__).resolve().parents[2]
FORKED = "forked from this host's warm interpreter"
MODEL = '''
import torch


def scaled_tanh(x):
    return torch.tanh(x) * 3 - x
'''
TESTS = '''
import json, os, time

import torch

from sharepkg.model import scaled_tanh


def test_meets_the_other_job_and_records_its_share():
    meet = os.environ.get("SHARE_MEET_DIR")
    if meet:  # wait (polling a directory: the jobs share nothing else) until every job of the round has started
        with open(os.path.join(meet, "count")) as handle:
            count = int(handle.read()) + 1
        open(os.path.join(meet, str(os.getpid())), "w").close()
        deadline = time.monotonic() + 120
        while len(os.listdir(meet)) < count and time.monotonic() < deadline:
            time.sleep(0.05)
    import torch._inductor.config as config

    x = torch.linspace(-3, 3, 4099)
    torch.testing.assert_close(torch.compile(scaled_tanh)(x), scaled_tanh(x))
    state = {"cpus": sorted(os.sched_getaffinity(0)), "threads": torch.get_num_threads(),
             "compile_threads": config.compile_threads, "met": len(os.listdir(meet)) - 1 if meet else 0}
    with open(os.path.join(os.environ["COMPILE_CI_OUTPUT_DIR"], "share.json"), "w") as handle:
        json.dump(state, handle)
'''


def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "sharepkg").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "sharepkg" / "__init__.py").write_text("")
    (root / "sharepkg" / "model.py").write_text(MODEL)
    (root / "conftest.py").write_text("import sys, os\nsys.path.insert(0, os.path.dirname(__file__))\n")
    (root / "tests" / "test_share.py").write_text(TESTS)
    return root


def spec_for(python: str, repo: Path, out: Path, meet: Path | None) -> RunSpec:
    command = (*pytest_command(python, out / "junit.xml"), "--rootdir", str(repo), str(repo / "tests"))
    env = {"COMPILE_CI_DEVICE": "cpu", "COMPILE_CI_CHECKOUT": str(repo), "COMPILE_CI_OUTPUT_DIR": str(out),
           "COMPILE_CI_TARGETS": "{}", "COMPILE_CI_DEADLINE": str(int(time.time() + 300))}
    if meet is not None:  # the same for every job (the warm interpreter is keyed by the job's environment)
        env["SHARE_MEET_DIR"] = str(meet)
    # One trusted cache for every job of a test, as a repository's pushes share theirs: the precompiled header is
    # built once, and the forked round is served what the fresh round compiled (the same thread count: one).
    cache = CacheScope(out.parent.parent / "cache", "share", TRUSTED)
    return RunSpec(job_id=f"share-{out.parent.name}-{out.name}", command=command, checkout_dir=repo, output_dir=out,
                   timeout_s=300, env=env, cache=cache, suites_dir=ROOT / "suites")


def at_once(runner, repo: Path, base: Path, count: int) -> list[tuple[RunResult, dict, str]]:
    """`count` jobs started together on one runner; each one's result, recorded share and log."""
    # One directory for every round (the warm interpreter is keyed by the job's environment); emptied for each.
    meet = base.parent / "meet"
    shutil.rmtree(meet, ignore_errors=True)
    meet.mkdir()
    (meet / "count").write_text(str(count))
    outs = [base / f"job{i}" for i in range(count)]
    results: list[RunResult | None] = [None] * count

    def one(index: int) -> None:
        results[index] = runner.run(spec_for(runner.python, repo, outs[index], meet))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    found = []
    for out, result in zip(outs, results, strict=True):
        assert result is not None and result.exit_code == 0, (result, (out / "log.txt").read_text()[-3000:])
        found.append((result, json.loads((out / "share.json").read_text()),
                      (out / "log.txt").read_text(errors="replace")))
    return found


def assert_dealt(found: list[tuple[RunResult, dict, str]], worker_cpus: set[int]) -> None:
    shares = [set(state["cpus"]) for _, state, _ in found]
    assert all(state["met"] == len(found) for _, state, _ in found), "the jobs did not run at once"
    assert set().union(*shares) == worker_cpus and sum(map(len, shares)) == len(worker_cpus), shares
    for (_, state, log), share in zip(found, shares, strict=True):
        assert state["threads"] == state["compile_threads"] == len(share), state
        assert _line(tuple(sorted(share))) in log, log[:2000]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to deal")
def test_jobs_at_once_on_local_slots_each_run_on_their_own_cpus_fresh_and_forked(tmp_path: Path) -> None:
    """Fresh (the first job starts the warm interpreter), then forked from it (the default, COMPILE_CI_WARM_START):
    each job pinned by the runner, a forked one by itself in the child."""
    warm_start.close_all()
    repo = checkout(tmp_path)
    runner = LocalRunner(warm=True, slots=2)
    try:
        # No warm interpreter yet: both start fresh (the first starts one), each pinned by the runner.
        fresh = at_once(runner, repo, tmp_path / "fresh", 2)
        assert_dealt(fresh, set(os.sched_getaffinity(0)))
        assert not any(FORKED in log for _, _, log in fresh)
        # Forked from it: each pins itself and sets its threads in the child.
        assert warm_start.wait_until_ready(120)
        forked = at_once(runner, repo, tmp_path / "forked", 2)
        assert_dealt(forked, set(os.sched_getaffinity(0)))
        assert all(FORKED in log for _, _, log in forked)
    finally:
        warm_start.close_all()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to deal")
def test_a_docker_job_beside_another_gets_a_cpuset_of_its_own(tmp_path: Path, docker_client: object) -> None:
    """A container cannot reach the host's directory the local jobs meet in: the other job is a lease held here."""
    from runners.docker_runner import DockerRunner

    repo = checkout(tmp_path)
    runner = DockerRunner(deployment=f"tests-{uuid.uuid4().hex[:12]}", slots=2)
    try:
        with runner.shares.lease() as held:
            out = tmp_path / "job"
            result = runner.run(spec_for(runner.python, repo, out, None))
        log = (out / "log.txt").read_text(errors="replace")
        assert result.exit_code == 0, (result, log[-3000:])
        state = json.loads((out / "share.json").read_text())
        assert_dealt([(result, {**state, "met": 2}, log), (result, {"cpus": held, "threads": len(held),
                      "compile_threads": len(held), "met": 2}, _line(held))], set(os.sched_getaffinity(0)))
    finally:
        runner.sweep_leftovers()
        runner.close()


def _line(cpus: tuple[int, ...]) -> str:
    spelled = ",".join(map(str, cpus)) if len(cpus) == 1 else f"{min(cpus)}-{max(cpus)}"
    return f"this job runs on CPUs {spelled}: {len(cpus)} torch threads, {len(cpus)} compile workers"

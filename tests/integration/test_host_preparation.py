"""A job worker prepares its host as it starts (service/jobs/tasks.py, runners/local.py's `prepare`): the CPU-ISA
verdict, inductor's source keys, the precompiled-header seed and the warm interpreter of its built-in suites' jobs are
made before the first job, which no longer waits for them; a worker of reports only makes none of it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from celery.contrib.testing.worker import start_worker

from runners import header_seed, warm_start
from service.devkit.github_emulator import GitHubEmulator
from service.jobs.tasks import create_worker_celery, wait_prepared
from tests.conftest import make_settings, settings_env

ROOT = Path(__file__).resolve().parents[2]


def test_a_job_worker_prepares_the_host_as_it_starts_and_a_report_worker_does_not(
        tmp_path: Path, redis_url: str, emulator: GitHubEmulator, app_keys: tuple[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    seeds = tmp_path / "host-seeds"
    monkeypatch.setenv(header_seed.SEED_ENV, str(seeds))
    settings = make_settings(tmp_path, redis_url, emulator.url, app_keys[0])
    made, warm = {}, {}
    for queues in (["github"], ["cpu", "github"]):
        warm_start.close_all()
        app = create_worker_celery(settings)
        with start_worker(app, pool="threads", concurrency=1, perform_ping_check=False, shutdown_timeout=30,
                          queues=queues):
            assert wait_prepared(600)  # before any job was sent
            # and the warm interpreter its built-in suites' cpu jobs fork from (no GPU visible), ready
            assert warm_start.wait_until_ready(180)
            warm[",".join(queues)] = [(kind, w.why) for (_, _, kind), w in warm_start._pool.items()]
        made[",".join(queues)] = sorted(p.name for p in seeds.glob(".seeds/*/*/precompiled_headers/*.gch"))
    assert made["github"] == [] and len(made["cpu,github"]) == 1, made
    assert warm == {"github": [], "cpu,github": [("compiler:", "")]}, warm


def test_a_prefork_worker_prepares_as_it_starts_and_each_pool_process_as_it_is_forked(
        tmp_path: Path, redis_url: str, emulator: GitHubEmulator, app_keys: tuple[str, str]) -> None:
    """A deployment's job worker (`compile-ci worker`: Celery's prefork pool): the pool's child, which runs the jobs
    and keeps the ISA verdict and source keys in its memory, makes them as it is forked, not at its first job."""
    # The run's seed directory (tests/conftest.py): the seed is the other test's to prove; here, who prepares.
    env = {**os.environ, **settings_env(tmp_path, redis_url, emulator.url, app_keys[0]), "PYTHONPATH": str(ROOT)}
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "service.worker", "worker", "-Q", "cpu",
                                   "-c", "1", "--loglevel", "INFO", "--without-heartbeat", "--without-mingle",
                                   "--without-gossip"], stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 300
        prepared: list[str] = []
        while len(prepared) < 2 and time.monotonic() < deadline and worker.poll() is None:
            prepared = [line for line in log.read_text(errors="replace").splitlines() if "host prepared" in line]
            time.sleep(0.5)
        assert len(prepared) == 2, log.read_text(errors="replace")[-3000:]
        assert {"MainProcess" in line for line in prepared} == {True, False}, prepared  # the main one and its child
        # The warm interpreter is the child's, which runs the jobs; the main process, which runs none, starts none.
        pids = [pid for pid in os.listdir("/proc") if pid.isdigit()]
        ours = {worker.pid} | {int(pid) for pid in pids if _parent(pid) == worker.pid}
        parents = [_parent(pid) for pid in pids if _is_warm(pid) and _parent(pid) in ours]
        assert parents and worker.pid not in parents, (parents, worker.pid)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)


def _is_warm(pid: str) -> bool:
    try:
        return b"suites.warm_process" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _parent(pid: str) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1

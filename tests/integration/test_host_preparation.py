"""A job worker prepares its host as it starts (service/jobs/tasks.py, runners/local.py's `prepare`): the CPU-ISA
verdict, inductor's source keys and the precompiled-header seed are made before the first job, which no longer waits
for them; a worker of reports only makes none of it."""

from __future__ import annotations

from pathlib import Path

import pytest
from celery.contrib.testing.worker import start_worker

from runners import header_seed
from service.devkit.github_emulator import GitHubEmulator
from service.jobs.tasks import create_worker_celery, wait_prepared
from tests.conftest import make_settings


def test_a_job_worker_prepares_the_host_as_it_starts_and_a_report_worker_does_not(
        tmp_path: Path, redis_url: str, emulator: GitHubEmulator, app_keys: tuple[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    seeds = tmp_path / "host-seeds"
    monkeypatch.setenv(header_seed.SEED_ENV, str(seeds))
    settings = make_settings(tmp_path, redis_url, emulator.url, app_keys[0])
    made = {}
    for queues in (["github"], ["cpu", "github"]):
        app = create_worker_celery(settings)
        with start_worker(app, pool="threads", concurrency=1, perform_ping_check=False, shutdown_timeout=30,
                          queues=queues):
            assert wait_prepared(600)  # before any job was sent
        made[",".join(queues)] = sorted(p.name for p in seeds.glob(".seeds/*/*/precompiled_headers/*.gch"))
    assert made["github"] == [] and len(made["cpu,github"]) == 1, made

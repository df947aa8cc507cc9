"""An embedded Celery worker whose built-in `correctness` suite is a given test file: the pipeline judged on
outcomes a test chooses (a crash, every kind of pytest outcome) in seconds, through LocalRunner."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from celery.contrib.testing.worker import start_worker

from service.config import Settings
from service.devkit.github_emulator import GitHubEmulator
from service.devkit.sandbox.stack import INSTALLATION_ID
from service.jobs.tasks import create_worker_celery
from tests.integration.test_pipeline import FULL_NAME


@contextmanager
def worker_running_suite(settings: Settings, tmp_path: Path, emulator: GitHubEmulator, filename: str,
                         source: str, full_name: str = FULL_NAME) -> Iterator[None]:
    suite = tmp_path / f"suites-{Path(filename).stem}" / "correctness"
    suite.mkdir(parents=True)
    (suite / filename).write_text(textwrap.dedent(source))
    emulator.add_repo(full_name)
    emulator.add_installation(INSTALLATION_ID, repos=[full_name])
    app = create_worker_celery(settings, suites_dir=suite.parent)
    with start_worker(app, pool="threads", concurrency=4, perform_ping_check=False, shutdown_timeout=30,
                      queues=["cpu", "github"]):
        yield

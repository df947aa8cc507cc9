"""From validated ids to rows and directories: the only place a request's path becomes a file-system path."""

from __future__ import annotations

import re
from pathlib import Path

from flask import abort

from service.store import Job, Run
from service.web.browser.access import require_read, wiring

RUN_ID = re.compile(r"^[0-9a-f]{16}$")
JOB_ID = re.compile(r"^[0-9a-f]{16}-[a-z]+-(cpu|cuda|none)$")  # none: the approval gate's job
TEST_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$")  # never "." or ".." (the parent)


def load_run(run_id: str) -> Run:
    run = wiring().store.get_run(run_id) if RUN_ID.match(run_id) else None
    if run is None:
        abort(404)
    require_read(run)
    return run


def load_job(job_id: str) -> tuple[Run, Job, Path]:
    """The job, its run (access checked) and its attempt's artifact directory."""
    job = wiring().store.get_job(job_id) if JOB_ID.match(job_id) else None
    if job is None:
        abort(404)
    run = load_run(job.run_id)
    return run, job, wiring().settings.artifacts_dir / job.run_id / job.id / str(job.attempt)


def test_dir(directory: Path, name: str) -> Path:
    if not TEST_NAME.match(name) or not (directory / "tests" / name).is_dir():
        abort(404)
    return directory / "tests" / name


def contained_file(directory: Path, relative: str) -> Path:
    """A regular file under `directory`, symlinks resolved: a runner's output may hold a link to /etc."""
    try:
        target = (directory / relative).resolve(strict=True)
    except (OSError, RuntimeError):
        abort(404)
    if not target.is_relative_to(directory.resolve()) or not target.is_file():
        abort(404)
    return target

"""From validated ids to rows and directories: the only place a request's path becomes a file-system path."""

from __future__ import annotations

import re
from pathlib import Path

from flask import abort

from runners.untrusted_files import open_dir
from service.store import Job, Run
from service.torch_versions import NAME as TORCH_NAME
from service.web.browser.access import require_read, wiring

RUN_ID = re.compile(r"[0-9a-f]{16}")  # fullmatch everywhere: "$" would let a trailing newline in
# none: the approval gate's job; -torch2.14: a torch version other than the deployment's default
JOB_ID = re.compile(rf"[0-9a-f]{{16}}-[a-z]+-(cpu|cuda|none)(-torch{TORCH_NAME})?")
TEST_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")  # never "." or ".." (the parent)


def load_run(run_id: str) -> Run:
    run = wiring().store.get_run(run_id) if RUN_ID.fullmatch(run_id) else None
    if run is None:
        abort(404)
    require_read(run)
    return run


def load_job(job_id: str) -> tuple[Run, Job, Path]:
    """The job, its run (access checked) and its attempt's artifact directory."""
    job = wiring().store.get_job(job_id) if JOB_ID.fullmatch(job_id) else None
    if job is None:
        abort(404)
    run = load_run(job.run_id)
    return run, job, wiring().settings.artifacts_dir / job.run_id / job.id / str(job.attempt)


def test_dir(directory: Path, name: str) -> Path:
    """A test's folder, reached without following a link (an older attempt's job could plant `tests/x -> /etc`)."""
    folder = test_dir_if_any(directory, name)
    if folder is None:
        abort(404)
    return folder


def test_dir_if_any(directory: Path, name: str) -> Path | None:
    """The folder, or None for a test that left no artifacts (it failed before compiling anything, say)."""
    if not TEST_NAME.fullmatch(name):
        abort(404)
    try:
        with open_dir(directory, f"tests/{name}"):
            pass
    except FileNotFoundError:
        return None
    except OSError:  # a link or something else where a folder should be
        abort(404)
    return directory / "tests" / name


def number_arg(raw: str | None, default: int, digits: int = 18) -> int:
    """A query's page, line or offset: ASCII digits only ("²".isdigit() is true, int() refuses it) and at most
    `digits` of them, so the number fits the database's integer columns and the file system's offsets."""
    raw = (raw or "").strip()
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= digits else default

"""Run and job pages: what the check run's Details link opens (server-rendered, escaped)."""

from __future__ import annotations

import re
from pathlib import Path

from flask import Blueprint, Response, abort, current_app, render_template, send_from_directory

blueprint = Blueprint("pages", __name__)
ID = re.compile(r"^[0-9a-f]{16}(-[a-z]+-(cpu|cuda))?$")
LOG_INLINE_LIMIT = 512 * 1024


def _wiring():  # noqa: ANN202 - Flask's extension registry is untyped
    return current_app.extensions["compile_ci"]


def _checked(identifier: str) -> str:
    if not ID.match(identifier):
        abort(404)
    return identifier


@blueprint.get("/")
def runs() -> str:
    return render_template("runs.html", runs=_wiring().store.recent_runs(100))


@blueprint.get("/runs/<run_id>")
def run_page(run_id: str) -> str:
    store = _wiring().store
    run = store.get_run(_checked(run_id))
    if run is None:
        abort(404)
    return render_template("run.html", run=run, jobs=store.jobs_of(run.id))


def _job_dir(job_id: str) -> tuple[object, Path]:
    store = _wiring().store
    job = store.get_job(_checked(job_id))
    if job is None:
        abort(404)
    return job, _wiring().settings.artifacts_dir / job.run_id / job.id / str(job.attempt)


@blueprint.get("/jobs/<job_id>")
def job_page(job_id: str) -> str:
    job, directory = _job_dir(job_id)
    store = _wiring().store
    run = store.get_run(job.run_id)
    log_path = directory / "log.txt"
    log_text, truncated = "", False
    if log_path.is_file():
        with open(log_path, "rb") as handle:
            handle.seek(max(0, log_path.stat().st_size - LOG_INLINE_LIMIT))
            truncated = log_path.stat().st_size > LOG_INLINE_LIMIT
            log_text = handle.read().decode("utf-8", errors="replace")
    results = store.results_of(job.id, job.attempt)
    results.sort(key=lambda r: (r.outcome not in ("failed", "error"), r.nodeid))
    return render_template(
        "job.html", job=job, run=run, results=results, log_text=log_text, truncated=truncated,
        artifacts=store.artifacts_of(job.id, job.attempt),
    )


@blueprint.get("/jobs/<job_id>/files/<path:relative>")
def job_file(job_id: str, relative: str) -> Response:
    _job, directory = _job_dir(job_id)
    # send_from_directory refuses paths that leave `directory` (404), so `..` never escapes.
    return send_from_directory(directory, relative, mimetype="text/plain")

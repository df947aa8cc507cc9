"""Run and job pages: what the check run's Details link opens (server-rendered, escaped)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from flask import Blueprint, Response, abort, current_app, render_template, send_from_directory
from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from suites.naming import sanitise_nodeid

blueprint = Blueprint("pages", __name__)
ID = re.compile(r"^[0-9a-f]{16}(-[a-z]+-(cpu|cuda))?$")
TEST_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$")  # no "." or ".." (the parent)
LOG_INLINE_LIMIT = 512 * 1024
CODE_INLINE_LIMIT = 256 * 1024


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
    artifacts = store.artifacts_of(job.id, job.attempt)
    per_test = _artifacts_per_test([a.path for a in artifacts])
    rows = []
    for result in results:
        name = sanitise_nodeid(result.nodeid)
        files = per_test.get(name, [])
        graphs = sum(f.startswith("output_code_") for f in files)
        rows.append((result, name if files else "", graphs, "repro.py" in files))
    return render_template(
        "job.html", job=job, run=run, rows=rows, log_text=log_text, truncated=truncated, artifacts=artifacts,
    )


def _artifacts_per_test(paths: list[str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for path in paths:
        parts = path.split("/")
        if len(parts) == 3 and parts[0] == "tests":
            grouped.setdefault(parts[1], []).append(parts[2])
    return grouped


@blueprint.get("/jobs/<job_id>/tests/<name>")
def test_page(job_id: str, name: str) -> str:
    job, directory = _job_dir(job_id)
    if not TEST_NAME.match(name) or not (directory / "tests" / name).is_dir():
        abort(404)
    test_dir = directory / "tests" / name
    metrics = json.loads((test_dir / "metrics.json").read_text()) if (test_dir / "metrics.json").is_file() else {}
    formatter = HtmlFormatter(linenos="table", cssclass="code")
    codes = []
    for path in sorted(test_dir.glob("output_code_*.py"), key=lambda p: int(p.stem.rsplit("_", 1)[1])):
        text = path.read_text(errors="replace")
        shown = text[:CODE_INLINE_LIMIT]
        codes.append((path.name, Markup(highlight(shown, PythonLexer(), formatter)), len(text) > len(shown)))
    repro = (test_dir / "repro.py").read_text(errors="replace") if (test_dir / "repro.py").is_file() else ""
    return render_template("test.html", job=job, name=name, metrics=metrics, codes=codes, repro=repro,
                           pygments_css=Markup(formatter.get_style_defs(".code")))


@blueprint.get("/jobs/<job_id>/files/<path:relative>")
def job_file(job_id: str, relative: str) -> Response:
    _job, directory = _job_dir(job_id)
    # send_from_directory refuses paths that leave `directory` (404), so `..` never escapes.
    return send_from_directory(directory, relative, mimetype="text/plain")

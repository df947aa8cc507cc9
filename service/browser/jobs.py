"""A job: its tests (failures first), the log (tail, pages with line anchors, live chunks), files and zip."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flask import Blueprint, Response, abort, jsonify, redirect, render_template, request, send_from_directory

from service.browser import logs
from service.browser.export import zip_chunks
from service.browser.lookup import contained_file, load_job, wiring
from service.store import Artifact, TestResult
from suites.naming import sanitise_nodeid

blueprint = Blueprint("jobs", __name__)
TAIL_BYTES = 128 * 1024
LIVE_CHUNK_BYTES = 256 * 1024
SHOWN_METRICS = ("compile_time_s", "graphs", "graph_breaks", "recompiles", "kernels_generated")


@dataclass(frozen=True)
class TestRow:
    result: TestResult
    name: str  # the test's artifact directory, "" when it has none
    graphs: int
    repro: bool
    metrics: dict[str, Any]

    @property
    def failing(self) -> bool:
        return self.result.outcome in ("failed", "error")


def _rows(results: list[TestResult], artifacts: list[Artifact], directory: Path) -> list[TestRow]:
    per_test: dict[str, list[str]] = {}
    for artifact in artifacts:
        parts = artifact.path.split("/")
        if len(parts) == 3 and parts[0] == "tests":
            per_test.setdefault(parts[1], []).append(parts[2])
    rows = []
    for result in results:
        name = sanitise_nodeid(result.nodeid)
        files = per_test.get(name, [])
        metrics = result.metrics or (read_metrics(directory / "tests" / name) if "metrics.json" in files else {})
        rows.append(TestRow(result, name if files else "", sum(f.startswith("output_code_") for f in files),
                            "repro.py" in files, metrics))
    rows.sort(key=lambda row: (not row.failing, row.result.nodeid))
    return rows


def read_metrics(test_directory: Path) -> dict[str, Any]:
    try:
        loaded = json.loads((test_directory / "metrics.json").read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _tree(artifacts: list[Artifact]) -> dict[str, Any]:
    """Nested {name: subtree or Artifact}, for the collapsible artifact tree."""
    root: dict[str, Any] = {}
    for artifact in artifacts:
        *folders, leaf = artifact.path.split("/")
        node = root
        for folder in folders:
            node = node.setdefault(folder, {})
        node[leaf] = artifact
    return root


@blueprint.get("/jobs/<job_id>")
def job_page(job_id: str) -> str:
    run, job, directory = load_job(job_id)
    store = wiring().store
    artifacts = store.artifacts_of(job.id, job.attempt)
    rows = _rows(store.results_of(job.id, job.attempt), artifacts, directory)
    log_path = directory / "log.txt"
    log_lines, log_offset, log_cut, pages = [], 0, False, 1
    if log_path.is_file():
        log_lines, log_offset, log_cut = logs.tail(log_path, TAIL_BYTES)
        pages = logs.page_count(log_path)
    return render_template(
        "job.html", run=run, job=job, rows=rows, failing=[r for r in rows if r.failing], tree=_tree(artifacts),
        artifact_count=len(artifacts), log_lines=log_lines, log_offset=log_offset, log_cut=log_cut, log_pages=pages,
        has_log=log_path.is_file(), shown_metrics=SHOWN_METRICS, lines_per_page=logs.LINES_PER_PAGE,
    )


@blueprint.get("/jobs/<job_id>/log")
def log_page(job_id: str) -> Response | str:
    run, job, directory = load_job(job_id)
    path = directory / "log.txt"
    if not path.is_file():
        abort(404)
    pages = logs.page_count(path)
    line = request.args.get("line", "")
    if line.isdigit():  # /log?line=N: the page holding line N, scrolled to it
        number = max(1, int(line))
        return redirect(f"/jobs/{job.id}/log?page={(number - 1) // logs.LINES_PER_PAGE + 1}#L{number}")
    raw = request.args.get("page", "")
    number = min(int(raw), pages) if raw.isdigit() and int(raw) > 0 else pages
    return render_template("log.html", run=run, job=job, lines=logs.page(path, number), page=number, pages=pages)


@blueprint.get("/jobs/<job_id>/log/live")
def log_live(job_id: str) -> Response:
    """Lines written since `offset`, rendered; the page appends them until the job completes."""
    _run, job, directory = load_job(job_id)
    path = directory / "log.txt"
    raw = request.args.get("offset", "0")
    offset = int(raw) if raw.isdigit() else 0
    finished = job.state == "completed"
    lines, next_offset = logs.chunk_from(path, offset, LIVE_CHUNK_BYTES, finished) if path.is_file() else ([], 0)
    html = "".join(render_template("log_line.html", line=line) for line in lines)
    more = next_offset < path.stat().st_size if path.is_file() else False
    return jsonify(html=html, offset=next_offset, state=job.state, conclusion=job.conclusion, more=more)


@blueprint.get("/jobs/<job_id>/files/<path:relative>")
def job_file(job_id: str, relative: str) -> Response:
    _run, _job, directory = load_job(job_id)
    contained_file(directory, relative)
    # Served as text whatever the name (a runner could write .html); nosniff keeps browsers from guessing.
    response = send_from_directory(directory, relative, mimetype="text/plain")
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


@blueprint.get("/jobs/<job_id>/download.zip")
def job_zip(job_id: str) -> Response:
    _run, job, directory = load_job(job_id)
    if not directory.is_dir():
        abort(404)
    top = f"{job.id}-attempt{job.attempt}"
    return Response(zip_chunks(directory, top), mimetype="application/zip",
                    headers={"Content-Disposition": f'attachment; filename="{top}.zip"'})

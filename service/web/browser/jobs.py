"""A job's attempt: its tests (failures first), the log's tail, files and zip; the other attempts listed."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flask import Blueprint, Response, abort, render_template
from markupsafe import Markup, escape

from runners import untrusted_files
from runners.untrusted_files import is_regular, read_bounded, read_json_data
from service.web.browser import base_lookup, coverage_view, logs, metrics_view, queries
from service.web.browser.attempts import AttemptView, load_attempt
from service.web.browser.export import zip_chunks
from service.web.browser.lookup import wiring
from suites.naming import sanitise_nodeid

blueprint = Blueprint("jobs", __name__)
TAIL_BYTES = 64 * 1024
ROW_CACHE_JOBS = 16
SHOWN_METRICS = ("compile_time_s", "graphs", "graph_breaks", "recompiles", "kernels_generated")


@dataclass(frozen=True)
class TestRow:
    result: queries.ResultRow
    name: str  # the test's artifact directory, "" when it has none
    graphs: int
    repro: bool
    metrics: dict[str, Any]
    # The table row, escaped, built once: thousands of rows through the template cost more than the budget.
    html: Markup = Markup("")

    @property
    def failing(self) -> bool:
        return self.result.outcome in ("failed", "error")


def _row_html(base: str, result: queries.ResultRow, name: str, graphs: int, repro: bool,
              metrics: dict[str, Any], compare: bool) -> Markup:
    # f-strings over escape(): Markup.format costs ~4x more, which thousands of rows feel.
    cells = "".join(f"<td>{metrics_view.cell(key, metrics)}</td>" for key in SHOWN_METRICS)
    link = (f'<a href="{base}/tests/{name}">{graphs} graph{"" if graphs == 1 else "s"}'
            f'{", repro" if repro else ""}</a>') if name else (  # base and name match safe patterns
        f'<a href="{base}/tests/{sanitise_nodeid(result.nodeid)}">history</a>')
    if name and compare:
        link += f' · <a class="diff-link" href="{base}/tests/{name}/diff">vs base</a>'
    if result.reused_from:  # a job id of our store, escaped all the same
        source = escape(result.reused_from)
        link += (f' · <a class="reused-from" href="/jobs/{source}/tests/{sanitise_nodeid(result.nodeid)}">reused '
                 f'from job {source}</a>')
    outcome = escape(result.outcome)
    # The verdict badges, as templates/_badges.html writes them (the words are ours: NEW, AT BASE, ...).
    marks = "".join(f' <span class="badge verdict b-{w.lower().replace(" ", "-")}">{w}</span>' for w in result.badges)
    return Markup(f'<tr><td><code>{escape(result.nodeid)}</code>{marks}</td><td class="{outcome}">{outcome}</td>'
                  f"<td>{result.duration_s:.2f} s</td>{cells}<td>{link}</td></tr>\n")


def _rows(base: str, results: list[queries.ResultRow], files: list[tuple[str, int]],
          directory: Path, compare: bool) -> list[TestRow]:
    per_test: dict[str, list[str]] = {}
    for path, _size in files:
        parts = path.split("/")
        if len(parts) == 3 and parts[0] == "tests":
            per_test.setdefault(parts[1], []).append(parts[2])
    rows = []
    for result in results:
        name = sanitise_nodeid(result.nodeid)
        found = per_test.get(name, [])
        # The store's metrics column when the pipeline filled it, else the suite's metrics.json.
        metrics = result.metrics or (read_metrics(directory / "tests" / name) if "metrics.json" in found else {})
        graphs, repro = sum(f.startswith("output_code_") for f in found), "repro.py" in found
        name = name if found else ""
        html = _row_html(base, result, name, graphs, repro, metrics, compare)
        rows.append(TestRow(result, name, graphs, repro, metrics, html))
    rows.sort(key=lambda row: (not row.failing, row.result.nodeid))
    return rows


_completed_rows: OrderedDict[str, list[TestRow]] = OrderedDict()
_completed_lock = threading.Lock()


def test_rows(job: AttemptView, directory: Path, compare: bool = False) -> list[TestRow]:
    """A completed attempt never changes, so its rows (thousands of metrics files read) are built once.
    `compare`: the run has a base, so each test links its diff against the base."""
    # The attempt's own directory (unique per deployment, job and attempt), and its verdict: the badges change when
    # its base finishes and it is judged again.
    key = f"{directory}|{job.base}|{compare}|{job.conclusion}|{job.title}"
    with _completed_lock:
        if key in _completed_rows:
            _completed_rows.move_to_end(key)
            return _completed_rows[key]
    store = wiring().store
    results = queries.results_of(store, job.id, job.attempt)
    rows = _rows(job.base, results, queries.artifact_files(store, job.id, job.attempt), directory, compare)
    if job.state == "completed":
        with _completed_lock:
            _completed_rows[key] = rows
            while len(_completed_rows) > ROW_CACHE_JOBS:
                _completed_rows.popitem(last=False)
    return rows


MAX_METRICS_BYTES = 256 * 1024  # the pipeline keeps no more of it either (service/jobs/outcome.py)


def read_metrics(test_directory: Path) -> dict[str, Any]:
    """A test's metrics.json, which the job wrote: a plain file of at most 256 KB, else nothing."""
    try:
        loaded = read_json_data(test_directory, "metrics.json", MAX_METRICS_BYTES)
    except (OSError, ValueError, RecursionError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def output_problems(directory: Path) -> tuple[list[dict[str, str]], int]:
    """What the runner refused to copy out of the job's output (links, FIFOs, ...), from the worker's meta.json."""
    try:
        output = json.loads(read_bounded(directory, "meta.json", MAX_METRICS_BYTES)).get("output") or {}
        problems = [p for p in output.get("problems", []) if isinstance(p, dict)]
        return problems, int(output.get("problem_count") or len(problems))
    except (OSError, ValueError, AttributeError, TypeError):
        return [], 0


def _tree(files: list[tuple[str, int]], per_test: bool) -> dict[str, Any]:
    """Nested {name: subtree or (path, size)}; without `per_test` the tests/ folder is one summary entry."""
    root: dict[str, Any] = {}
    for path, size in files:
        *folders, leaf = path.split("/")
        if folders and folders[0] == "tests" and not per_test:
            continue
        node = root
        for folder in folders:
            node = node.setdefault(folder, {})
        node[leaf] = (path, size)
    return root


@blueprint.get("/jobs/<job_id>")
@blueprint.get("/jobs/<job_id>/attempts/<int:number>")
def job_page(job_id: str, number: int | None = None) -> str:
    run, job, directory, attempts = load_attempt(job_id, number)
    files = queries.artifact_files(wiring().store, job.id, job.attempt, per_test=False) if job.ran else []
    compare = base_lookup.has_base(run)
    rows = test_rows(job, directory, compare) if job.ran else []
    base = base_lookup.base_of(wiring().store, wiring().settings.artifacts_dir, run, job.suite, job.device, job.torch)
    log_path = directory / "log.txt"
    log_lines, log_offset, log_cut, pages = [], 0, False, 1
    has_log = job.ran and is_regular(directory, "log.txt")
    if has_log:
        log_lines, log_offset, log_cut = logs.tail(log_path, TAIL_BYTES)
        pages = logs.page_count(log_path)
    problems, problem_count = output_problems(directory) if job.ran else ([], 0)
    return render_template(
        "job.html", run=run, job=job, attempts=attempts, rows=rows, table=Markup("").join(row.html for row in rows),
        failing=[r for r in rows if r.failing], tree=_tree(files, False),
        test_dirs=sum(1 for r in rows if r.name), has_files=job.ran and directory.is_dir(),
        log_lines=log_lines, log_offset=log_offset, log_cut=log_cut, log_pages=pages,
        has_log=has_log, problems=problems, problem_count=problem_count,
        shown_metrics=[metrics_view.label(m) for m in SHOWN_METRICS],
        lines_per_page=logs.LINES_PER_PAGE, base=base if compare else None,
        coverage=coverage_view.render_coverage(directory, job.base) if job.ran else Markup(""),
    )


@blueprint.get("/jobs/<job_id>/artifacts")
@blueprint.get("/jobs/<job_id>/attempts/<int:number>/artifacts")
def artifacts_page(job_id: str, number: int | None = None) -> str:
    run, job, _directory, _attempts = load_attempt(job_id, number)
    files = queries.artifact_files(wiring().store, job.id, job.attempt) if job.ran else []
    return render_template("artifacts.html", run=run, job=job, tree=_tree(files, True), artifact_count=len(files))


@blueprint.get("/jobs/<job_id>/files/<path:relative>")
@blueprint.get("/jobs/<job_id>/attempts/<int:number>/files/<path:relative>")
def job_file(job_id: str, relative: str, number: int | None = None) -> Response:
    _run, job, directory, _attempts = load_attempt(job_id, number)
    if not job.ran:
        abort(404)
    try:
        size = untrusted_files.file_size_or_raise(directory, relative)
    except (OSError, ValueError):  # missing, outside, or not a plain file (an older attempt's link or FIFO)
        abort(404)
    # Served as text whatever the name (a runner could write .html); nosniff keeps browsers from guessing.
    response = Response(untrusted_files.iter_chunks(directory, relative), mimetype="text/plain",
                        headers={"Content-Length": str(size), "X-Content-Type-Options": "nosniff"})
    return response


@blueprint.get("/jobs/<job_id>/download.zip")
@blueprint.get("/jobs/<job_id>/attempts/<int:number>/download.zip")
def job_zip(job_id: str, number: int | None = None) -> Response:
    _run, job, directory, _attempts = load_attempt(job_id, number)
    if not job.ran or not directory.is_dir():
        abort(404)
    top = f"{job.id}-attempt{job.attempt}"
    return Response(zip_chunks(directory, top), mimetype="application/zip",
                    headers={"Content-Disposition": f'attachment; filename="{top}.zip"'})

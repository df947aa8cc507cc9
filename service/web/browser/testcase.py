"""A test of a job: each compiled graph's generated code (highlighted), compile metrics, repro, history chart."""

from __future__ import annotations

import os
from pathlib import Path

from flask import Blueprint, abort, render_template
from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from runners.untrusted_files import is_folder, is_regular, read_head
from service.compare import bisection
from service.compare.history import KnownFlaky, known_flaky, summarize
from service.compare.inputs import evidence_of
from service.compare.job_verdict import BADGES
from service.compare.verdicts import Verdict
from service.store import Run, utcnow
from service.store.history import results_across_runs
from service.torch_versions import queue_for
from service.web.browser import base_lookup, charts, metrics_view, queries
from service.web.browser.attempts import AttemptView, load_attempt
from service.web.browser.code_compare import code_paths, test_of
from service.web.browser.jobs import read_metrics
from service.web.browser.lookup import test_dir_if_any, wiring
from service.web.browser.test_history import history_url
from suites.naming import sanitise_nodeid

blueprint = Blueprint("testcase", __name__)
CODE_INLINE_LIMIT = 128 * 1024  # highlighted HTML is ~10x the source


def _highlighted(path: Path, formatter: HtmlFormatter) -> tuple[Markup, bool]:
    raw, size = read_head(path.parent, path.name, CODE_INLINE_LIMIT)
    shown, cut = raw.decode("utf-8", errors="replace"), size > CODE_INLINE_LIMIT
    # Pygments escapes the source; the Markup only marks its (safe) HTML output.
    return Markup(highlight(shown[:CODE_INLINE_LIMIT], PythonLexer(), formatter)), cut


def _history_chart(run: Run, job: AttemptView, nodeid: str) -> tuple[Markup, int]:
    points = queries.history_of_test(wiring().store, run, job, nodeid)
    shown = []
    for point in points:
        compile_time = point.compile_time_s
        if compile_time is None:  # a row stored before the pipeline kept metrics: its metrics.json
            folder = wiring().settings.artifacts_dir / point.run_id / point.job_id / str(point.attempt)
            relative = f"tests/{sanitise_nodeid(nodeid)}"
            value = read_metrics(folder / relative).get("compile_time_s") if is_folder(folder, relative) else None
            compile_time = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
        label = f"{point.head_sha[:8]} {point.created_at:%Y-%m-%d %H:%M}"
        shown.append(charts.Point(label, point.outcome, point.baseline, (point.duration_s, compile_time)))
    own = f"PR #{run.pr_number}" if run.pr_number else "this run"
    return charts.history_chart(shown, ("duration", "compile time"), x_label="runs of this test, oldest to newest",
                                own_label=own), len(points)


def _known_flaky(run: Run, job: AttemptView, nodeid: str, badges: list[str]) -> KnownFlaky | None:
    """The known-flaky state as the job was judged (the evidence up to its end, as service/compare/inputs.py reads
    it), never today's: beside a NEW badge the failure was counted as new, and the page must not call it a warning."""
    if BADGES[Verdict.NEW_FAILURE] in badges:
        return None
    when = job.finished_at or utcnow()
    evidence = evidence_of(wiring().store, run, job.suite, job.device, job.torch, when, [nodeid])
    return known_flaky(evidence, when, exclude_pr=run.pr_number).get(nodeid)


def _repro(folder: Path) -> str:
    try:
        return read_head(folder, "repro.py", CODE_INLINE_LIMIT)[0].decode("utf-8", errors="replace")
    except OSError:  # none, or not a plain file (the job wrote it)
        return ""


# What suites/explain.py leaves beside a failing test's repro.py: torch's minifier on the model, and the generated
# module that crashed (runnable on its own). Linked through the job's file route, which serves plain files only.
REPRO_EXTRAS = (("minify.py", "runs torch's minifier on the model, down to the smallest failing graph"),
                ("crashed_graph.py", "the generated module that crashed, runnable on its own"))


def _repro_extras(folder: Path) -> list[tuple[str, str]]:
    return [(name, said) for name, said in REPRO_EXTRAS if is_regular(folder, name)]


@blueprint.get("/jobs/<job_id>/tests/<name>")
@blueprint.get("/jobs/<job_id>/attempts/<int:number>/tests/<name>")
def test_page(job_id: str, name: str, number: int | None = None) -> str:
    run, job, directory, _attempts = load_attempt(job_id, number)
    folder = test_dir_if_any(directory, name)
    metrics = read_metrics(folder) if folder is not None else {}
    nodeid, result = test_of(job.id, job.attempt, name, metrics)
    if folder is None and result is None:
        abort(404)
    outcome = result.outcome if result else str(metrics.get("outcome") or "")
    failure = (result.details or result.message) if result and outcome in ("failed", "error") else ""
    formatter = HtmlFormatter(linenos="table", cssclass="code")
    codes = [(path.name, *_highlighted(path, formatter)) for path in code_paths(folder)] if folder else []
    repro = _repro(folder) if folder is not None else ""
    extras = _repro_extras(folder) if folder is not None else []
    found = bisection.read_bisection(folder) if folder is not None else None
    log, log_cut = bisection.read_log(folder) if folder is not None else ("", False)
    # A bisect.json that is not one (too big, a link, not the suites' shape) is said to be so, and nothing of it shown.
    refused = found is None and folder is not None and os.path.lexists(folder / bisection.RESULT_FILE)
    public_url = wiring().settings.public_url  # the address the developer's compile-ci repro reaches
    chart, points = _history_chart(run, job, nodeid)
    classification = base_lookup.classification_of(wiring().store, job.id, job.attempt, nodeid)
    across = results_across_runs(wiring().store, run.repo_full_name, job.suite, job.device, [nodeid], limit=100,
                                 torch=job.torch)
    return render_template("test.html", run=run, job=job, name=name, nodeid=nodeid, codes=codes, outcome=outcome,
                           metrics=metrics_view.rows({k: v for k, v in metrics.items() if k != "outcome"}),
                           failure=failure,
                           repro=repro, extras=extras, chart=chart, points=points,
                           bisection=found, bisection_line=bisection.text(found) if found else "",
                           bisect_log=log, bisect_cut=log_cut, bisect_refused=refused,
                           across=summarize(across, run.pr_number),
                           known=_known_flaky(run, job, nodeid, classification),
                           history=history_url(run.repo_id, job.suite, queue_for(job.device, job.torch), nodeid),
                           repro_command=f"compile-ci repro {public_url.rstrip('/')}{job.base}/tests/{name}",
                           compare=f"{job.base}/tests/{name}/diff" if base_lookup.has_base(run) else "",
                           classification=classification, reused_from=result.reused_from if result else "",
                           pygments_css=Markup(formatter.get_style_defs(".code")))

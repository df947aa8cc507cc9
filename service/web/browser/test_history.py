"""A test across its repository's runs (`/tests/<repo id>/<suite>/<device>/<test>`): the default branch and every
pull request, its failure rate, where it fails now, whether it is known flaky and until when, and a chart."""

from __future__ import annotations

from flask import Blueprint, abort, render_template
from markupsafe import Markup
from sqlalchemy import select

from service.compare.history import FLAKY_WINDOW, KNOWN_AFTER, known_flaky, summarize
from service.compare.job_verdict import badges_of
from service.store import Run, utcnow
from service.store.history import TestRun, nodeids_of, results_across_runs
from service.torch_versions import split_lane
from service.web.browser import charts
from service.web.browser.access import require_read
from service.web.browser.lookup import TEST_NAME, wiring
from suites.naming import sanitise_nodeid

blueprint = Blueprint("test_history", __name__)
SHOWN = 100
SUITE_OR_DEVICE = TEST_NAME  # letters, digits, '.', '_', '-'


def history_url(repo_id: int, suite: str, device: str, nodeid: str) -> str:
    """`device` is a lane: `cpu`, or `cpu-torch2.14` for a version other than the deployment's default."""
    return f"/tests/{repo_id}/{suite}/{device}/{sanitise_nodeid(nodeid)}"


@blueprint.get("/tests/<int:repo_id>/<suite>/<device>/<name>")
def test_history_page(repo_id: int, suite: str, device: str, name: str) -> str:
    if not all(SUITE_OR_DEVICE.fullmatch(part) for part in (suite, device, name)) or repo_id > 2**31 - 1:
        abort(404)
    store = wiring().store
    with store.session() as s:
        run = s.scalars(select(Run).where(Run.repo_id == repo_id).order_by(Run.created_at.desc()).limit(1)).first()
    if run is None:
        abort(404)
    require_read(run)  # a private repository's history is its readers' alone
    device, torch = split_lane(device)
    nodeid = next((n for n in nodeids_of(store, run.repo_full_name, suite, device, torch=torch)
                   if sanitise_nodeid(n) == name), None)
    if nodeid is None:
        abort(404)
    rows = results_across_runs(store, run.repo_full_name, suite, device, [nodeid], limit=SHOWN, torch=torch)
    known = known_flaky(rows, utcnow()).get(nodeid)
    return render_template("test_history.html", run=run, nodeid=nodeid, suite=suite, device=device, rows=rows,
                           summary=summarize(rows), known=known, window_days=FLAKY_WINDOW.days, known_after=KNOWN_AFTER,
                           chart=_chart(rows), badges_of=badges_of)


def _chart(rows: list[TestRun]) -> Markup:
    points = [charts.Point(f"{r.head_sha[:8]} {r.created_at:%Y-%m-%d %H:%M}", r.outcome, r.default_branch,
                           (_compile_time(r.metrics),)) for r in reversed(rows)]
    return charts.history_chart(points, ("compile time",), x_label="runs of this test, oldest to newest",
                                own_label="pull requests")


def _compile_time(metrics: object) -> float | None:
    value = metrics.get("compile_time_s") if isinstance(metrics, dict) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

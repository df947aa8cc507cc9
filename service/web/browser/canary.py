"""`/canary`: per repository, what the deployment's advisory torch breaks that its default one does not, from each
repository's newest canary run (service/jobs/canary.py) against the push run of the same commit."""

from __future__ import annotations

from flask import Blueprint, render_template

from service.compare.canary_diff import compare_canary
from service.store.default_branches import newest_runs
from service.store.rows import CANARY_TRIGGER
from service.torch_versions import advisory_of
from service.web.browser.access import can_read, wiring
from suites.naming import sanitise_nodeid

blueprint = Blueprint("canary", __name__)


def test_link(job_id: str, nodeid: str) -> str:
    return f"/jobs/{job_id}/tests/{sanitise_nodeid(nodeid)}"


@blueprint.get("/canary")
def canary_page() -> str:
    settings = wiring().settings
    canaries = newest_runs(wiring().store, CANARY_TRIGGER)
    shown = [(run, compare_canary(wiring().store, run)) for run in canaries if can_read(run)]
    # Repositories with something broken first, then by name: the page is read for what needs attention.
    shown.sort(key=lambda pair: (not any(c.breaks_something for c in pair[1]), pair[0].repo_full_name))
    return render_template("canary.html", shown=shown, hidden=len(canaries) - len(shown),
                           advisory=advisory_of(settings.torch_versions), default=settings.torch_versions[0],
                           hour=settings.canary_hour, test_link=test_link, github=settings.github_web_url)

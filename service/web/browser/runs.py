"""The runs list (filtered, paginated) and a run's suite × device grid."""

from __future__ import annotations

from urllib.parse import urlencode

from flask import Blueprint, render_template, request

from service.store import Job
from service.web.browser import base_lookup, queries
from service.web.browser.access import readable_private_repos, wiring
from service.web.browser.lookup import load_run, number_arg

blueprint = Blueprint("runs", __name__)


def _filter_from_query() -> queries.RunFilter:
    args = request.args
    pr = number_arg(args.get("pr", "").strip().lstrip("#"), -1, digits=9)  # pr_number is a 32-bit INTEGER
    status = args.get("status", "")
    return queries.RunFilter(
        repo=_text_arg("repo"), pr=pr if pr >= 0 else None, branch=_text_arg("branch"),
        sha=_text_arg("sha"), status=status if status in queries.STATUSES else "",
    )


def _text_arg(name: str) -> str:
    # PostgreSQL refuses NUL in text parameters: such a filter could match nothing anyway.
    value = request.args.get(name, "").strip()
    return "" if "\x00" in value else value


@blueprint.get("/")
def runs() -> str:
    wanted = _filter_from_query()
    found = queries.runs_page(wiring().store, wanted, max(1, number_arg(request.args.get("page"), 1)),
                              readable_private_repos())
    kept = {k: v for k, v in request.args.items() if k != "page" and v}

    def page_url(number: int) -> str:
        return "/?" + urlencode({**kept, "page": number})

    return render_template("runs.html", found=found, wanted=wanted, statuses=queries.STATUSES, page_url=page_url)


@blueprint.get("/runs/<run_id>")
def run_page(run_id: str) -> str:
    run = load_run(run_id)
    jobs = wiring().store.jobs_of(run.id)
    suites = sorted({job.suite for job in jobs})
    # A column per device and torch version: `cpu`, `cpu, torch 2.14` (the default version's column is the device).
    devices = sorted({_column(job) for job in jobs})
    grid = {(job.suite, _column(job)): job for job in jobs}
    store = wiring().store
    return render_template("run.html", run=run, suites=suites, devices=devices, grid=grid,
                           github=wiring().settings.github_web_url, base_run=base_lookup.base_run_of(store, run),
                           has_base=base_lookup.has_base(run),
                           based_on=base_lookup.runs_based_on(store, run))


def _column(job: Job) -> str:
    return f"{job.device}, torch {job.torch}" if job.torch else job.device

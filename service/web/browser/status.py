"""The status page: queue depth per Celery queue and who consumes it (a queue no worker serves is flagged: its
jobs wait forever), workers online, jobs running now. One broadcast of half a second, as a ping cost before."""

from __future__ import annotations

from typing import Any

from celery import Celery
from flask import Blueprint, current_app, render_template
from redis.exceptions import RedisError

from service.celery_app import QUEUES, create_celery, workers_by_queue
from service.web.browser import queries
from service.web.browser.access import can_read, wiring

blueprint = Blueprint("status", __name__)


def _celery() -> Celery:
    extensions: dict[str, Any] = current_app.extensions
    if "compile_ci_celery" not in extensions:
        extensions["compile_ci_celery"] = create_celery(wiring().settings)
    return extensions["compile_ci_celery"]


@blueprint.get("/status")
def status() -> str:
    problems: list[str] = []
    try:
        depths: dict[str, int | None] = dict(wiring().claims.queue_depths(QUEUES))
    except RedisError as exc:
        depths, problems = dict.fromkeys(QUEUES), [f"Redis unreachable: {exc.__class__.__name__}"]
    served: dict[str, list[str]] | None = None
    if not problems:
        try:
            served = workers_by_queue(_celery())
        except Exception as exc:  # noqa: BLE001 - a broker hiccup must not take the status page down
            problems.append(f"asking the workers failed: {exc.__class__.__name__}")
    workers = sorted({w for names in (served or {}).values() for w in names})
    devices = wiring().settings.devices
    # Unserved: a queue this deployment sends work to (its devices, and github) that no worker consumes.
    unserved = [q for q in QUEUES if served is not None and not served.get(q) and (q in devices or q == "github")]
    running = queries.running_jobs(wiring().store)
    shown = [(job, run) for job, run in running if not run.private or can_read(run)]
    return render_template("status.html", depths=depths, workers=workers, served=served, unserved=unserved,
                           devices=devices, running=shown,
                           hidden=len(running) - len(shown), problems=problems)

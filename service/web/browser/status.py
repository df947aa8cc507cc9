"""The status page: queue depth per Celery queue, workers answering a ping, jobs running now."""

from __future__ import annotations

from typing import Any

from celery import Celery
from flask import Blueprint, current_app, render_template
from redis.exceptions import RedisError

from service.celery_app import QUEUES, create_celery
from service.web.browser import queries
from service.web.browser.access import can_read, wiring

blueprint = Blueprint("status", __name__)
PING_TIMEOUT_S = 0.5  # a worker busy with a job still answers pings (a separate thread); slower means gone


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
    workers: list[str] = []
    if not problems:
        try:
            replies = _celery().control.ping(timeout=PING_TIMEOUT_S) or []
            workers = sorted(name for reply in replies for name in reply)
        except Exception as exc:  # noqa: BLE001 - a broker hiccup must not take the status page down
            problems.append(f"worker ping failed: {exc.__class__.__name__}")
    running = queries.running_jobs(wiring().store)
    shown = [(job, run) for job, run in running if not run.private or can_read(run)]
    return render_template("status.html", depths=depths, workers=workers, running=shown,
                           hidden=len(running) - len(shown), problems=problems)

"""The status page: queue depth per Celery queue and who consumes it (a queue no worker serves is flagged: its
jobs wait forever), workers online, jobs running now. One broadcast of half a second, as a ping cost before."""

from __future__ import annotations

from typing import Any

from celery import Celery
from flask import Blueprint, current_app, render_template
from redis.exceptions import RedisError

from service.celery_app import all_queues, create_celery, workers_by_queue
from service.torch_versions import TorchVersion, job_torch, queue_for
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
    settings = wiring().settings
    queues = all_queues(settings)
    try:
        depths: dict[str, int | None] = dict(wiring().claims.queue_depths(queues))
    except RedisError as exc:
        depths, problems = dict.fromkeys(queues), [f"Redis unreachable: {exc.__class__.__name__}"]
    served: dict[str, list[str]] | None = None
    if not problems:
        try:
            served = workers_by_queue(_celery())
        except Exception as exc:  # noqa: BLE001 - a broker hiccup must not take the status page down
            problems.append(f"asking the workers failed: {exc.__class__.__name__}")
    workers = sorted({w for names in (served or {}).values() for w in names})
    devices = settings.devices
    lanes = _lanes(settings.torch_versions, devices)
    # Unserved: a queue this deployment sends work to (its devices on each torch, and github) that no worker consumes.
    sent_to = {queue for _version, row in lanes for _device, queue in row} | {"github"}
    unserved = [q for q in queues if served is not None and not served.get(q) and q in sent_to]
    running = queries.running_jobs(wiring().store)
    shown = [(job, run) for job, run in running if not run.private or can_read(run)]
    return render_template("status.html", depths=depths, workers=workers, served=served, unserved=unserved,
                           devices=devices, running=shown, lanes=lanes,
                           hidden=len(running) - len(shown), problems=problems)


Lanes = list[tuple[TorchVersion, list[tuple[str, str]]]]


def _lanes(versions: tuple[TorchVersion, ...], devices: tuple[str, ...]) -> Lanes:
    """Per torch version of the deployment, its (device, queue) pairs: whose workers serve which version."""
    return [(v, [(d, queue_for(d, job_torch(versions, v.name))) for d in devices]) for v in versions]

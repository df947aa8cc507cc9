"""The web process's part: GET /metrics, webhook counts and ack latency, the delivery id in every log line."""

from __future__ import annotations

import time
from collections.abc import Iterator

from celery import Celery
from flask import Flask, Response, g, request
from flask.signals import got_request_exception

from service.config import Settings
from service.jobs.lifecycle import JobState
from service.observability import logs
from service.observability.metrics import (
    CONTENT_TYPE,
    FunctionCollector,
    Metric,
    gauge,
    recorded,
    scrape,
    use_multiprocess_dir,
)
from service.store import Store


class QueueLengths:
    """Messages waiting in each Celery queue: what a worker autoscaler (KEDA) scales on."""

    def __init__(self, celery: Celery) -> None:
        self._celery = celery

    def __call__(self) -> Iterator[Metric]:
        samples: list[tuple[list[str], float]] = []
        try:
            with self._celery.connection_for_read() as connection:
                channel = connection.default_channel
                for queue in [q.name for q in self._celery.conf.task_queues]:  # cpu-torch2.14 too
                    samples.append(([queue], float(channel.queue_declare(queue=queue, passive=False).message_count)))
        except Exception:  # noqa: BLE001 - a broker outage must not break the scrape: the gauge is left out
            recorded().errors.labels("metrics_broker").inc()
        yield gauge("compile_ci_queue_depth", "Messages waiting in each Celery queue", ["queue"], samples)


class JobCounts:
    """Jobs not yet completed, by state (completed ones are the job duration histogram's counts)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def __call__(self) -> Iterator[Metric]:
        samples: list[tuple[list[str], float]] = []
        try:
            for state in (JobState.QUEUED, JobState.RUNNING):
                samples.append(([str(state)], float(len(self._store.jobs_in_state(state)))))
        except Exception:  # noqa: BLE001 - a database outage must not break the scrape: the gauge is left out
            samples = []
            recorded().errors.labels("metrics_database").inc()
        yield gauge("compile_ci_jobs", "Jobs by state (queued, running)", ["state"], samples)


def install(app: Flask, settings: Settings, store: Store, celery: Celery) -> None:
    logs.configure_logging(settings.log_format, "web")
    if settings.metrics_dir is not None:
        use_multiprocess_dir(settings.metrics_dir / "web")
    metrics = recorded()
    live = [FunctionCollector(QueueLengths(celery)), FunctionCollector(JobCounts(store))]

    @app.before_request
    def _begin() -> None:
        logs.clear()
        g.compile_ci_started = time.perf_counter()
        if request.path == "/webhook":
            logs.bind(delivery_id=request.headers.get("X-GitHub-Delivery", "")[:80],
                      event=request.headers.get("X-GitHub-Event", "")[:40])

    @app.after_request
    def _count(response: Response) -> Response:
        if request.path == "/webhook" and request.method == "POST":
            # Only a signed delivery names its event: an unsigned one must not mint series of its own choosing.
            signed = response.status_code != 401
            event = (request.headers.get("X-GitHub-Event", "")[:40] or "none") if signed else "unverified"
            metrics.deliveries.labels(event, str(response.status_code)).inc()
            metrics.ack_seconds.observe(time.perf_counter() - g.get("compile_ci_started", time.perf_counter()))
        return response

    def _failed(_sender: object, **_extra: object) -> None:
        metrics.errors.labels("web").inc()

    got_request_exception.connect(_failed, app, weak=False)

    @app.get("/metrics")
    def _metrics() -> Response:
        return Response(scrape(live), mimetype=None, content_type=CONTENT_TYPE)

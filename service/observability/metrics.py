"""The metrics compile-ci records, and the registries a scrape reads.

Processes that fork (gunicorn's workers, a Celery prefork pool) share nothing in memory, so their counters are
kept in prometheus-client's multiprocess mode: each process writes its samples to files in one directory, and a
scrape sums the files. `use_multiprocess_dir` must run before the first metric is made, which is why the metrics
are built lazily (`recorded()`), never at import.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest, start_http_server
from prometheus_client import values as prometheus_values
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
ACK_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
JOB_BUCKETS = (5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600)
START_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)


@dataclass(frozen=True)
class Recorded:
    deliveries: Counter
    ack_seconds: Histogram
    job_seconds: Histogram
    start_latency: Histogram
    cache_lookups: Counter
    github_calls: Counter
    errors: Counter


def use_multiprocess_dir(path: Path) -> None:
    """Keep this process's samples in `path`, shared with its siblings (gunicorn workers, pool children)."""
    path.mkdir(parents=True, exist_ok=True)
    # Forked or spawned children read the variable; this process switches now, before any metric exists.
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(path)
    prometheus_values.ValueClass = prometheus_values.MultiProcessValue()


_recorded: list[Recorded] = []
_recorded_lock = threading.Lock()


def recorded() -> Recorded:
    """The metrics, made once per process. Under a lock: the github worker's threads report their first tasks
    at the same moment, and two of them registering the same names fail with DuplicateTimeseries."""
    if not _recorded:
        with _recorded_lock:
            if not _recorded:
                _recorded.append(_make())
    return _recorded[0]


def _make() -> Recorded:
    return Recorded(
        deliveries=Counter("compile_ci_webhook_deliveries", "Webhook deliveries answered, by event and HTTP status",
                           ["event", "status"]),
        ack_seconds=Histogram("compile_ci_webhook_ack_seconds", "Time to answer a webhook delivery",
                              buckets=ACK_BUCKETS),
        job_seconds=Histogram("compile_ci_job_duration_seconds", "Wall time of a job attempt in its runner",
                              ["suite", "device", "conclusion"], buckets=JOB_BUCKETS),
        start_latency=Histogram("compile_ci_job_start_latency_seconds",
                                "From a job queued to its attempt started by a worker's runner", ["device"],
                                buckets=START_BUCKETS),
        cache_lookups=Counter("compile_ci_compile_cache_lookups",
                              "Inductor FX-graph cache lookups of the tests a job ran", ["device", "result"]),
        github_calls=Counter("compile_ci_github_api_calls", "HTTP requests sent to GitHub's API, by method and status",
                             ["method", "status"]),
        errors=Counter("compile_ci_errors", "Errors: failed tasks, infrastructure errors of jobs, web 500s",
                       ["source"]),
    )


class FunctionCollector(Collector):
    """Samples computed at scrape time (queue lengths, job counts, cache sizes): always current, never stored."""

    def __init__(self, produce: Callable[[], Iterable[Metric]]) -> None:
        self._produce = produce

    def collect(self) -> Iterator[Metric]:
        yield from self._produce()


class _Process(Collector):
    """This process's own registry, for a single-process deployment without a multiprocess directory."""

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()


def registry_with(collectors: Iterable[Collector]) -> CollectorRegistry:
    """Every process's samples (multiprocess mode) or this one's, plus the live ones."""
    registry = CollectorRegistry()
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
        MultiProcessCollector(registry)
    else:
        registry.register(_Process())
    for collector in collectors:
        registry.register(collector)
    return registry


def scrape(collectors: Iterable[Collector]) -> bytes:
    return generate_latest(registry_with(collectors))


def serve(port: int, collectors: Iterable[Collector]) -> None:
    """A worker's own /metrics on `port`, served by a thread of its main process."""
    start_http_server(port, registry=registry_with(collectors))


def gauge(name: str, documentation: str, labels: list[str], samples: Iterable[tuple[list[str], float]]) -> Metric:
    family = GaugeMetricFamily(name, documentation, labels=labels)
    for label_values, value in samples:
        family.add_metric(label_values, value)
    return family

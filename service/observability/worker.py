"""A worker's part: its own metrics port, job metrics, GitHub calls, and the ids of the task in every log line."""

from __future__ import annotations

import logging
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from celery import Celery
from celery.signals import task_failure, task_postrun, task_prerun, worker_init, worker_shutdown

from runners.protocol import RunResult
from service.celery_app import PLAN_RUN, REPORT_JOB, RUN_JOB
from service.config import Settings
from service.observability import logs
from service.observability.metrics import FunctionCollector, Metric, gauge, recorded, serve, use_multiprocess_dir
from service.store import Job, Store, TestRecord

log = logging.getLogger(__name__)
CACHE_SIZE_EVERY_S = 30.0
METRICS_PREFIX = "compile-ci-metrics-"


class CacheSize:
    """Bytes of the compile caches under this worker's data directory (walked at most every 30 s)."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._at = -CACHE_SIZE_EVERY_S
        self._sizes: dict[str, int] = {}

    def __call__(self) -> Iterator[Metric]:
        if time.monotonic() - self._at >= CACHE_SIZE_EVERY_S:
            self._at = time.monotonic()
            self._sizes = {d.name: _bytes_under(d) for d in sorted(self._root.glob("*")) if d.is_dir()}
        yield gauge("compile_ci_compile_cache_bytes", "Size of this worker's compile caches, by cache key",
                    ["cache"], [([k], float(v)) for k, v in self._sizes.items()])


def _bytes_under(path: Path) -> int:
    total = 0
    for entry in path.rglob("*"):
        try:
            total += entry.stat().st_size if entry.is_file() else 0
        except OSError:  # a job evicting or writing meanwhile
            continue
    return total


class GitHubCalls(logging.Filter):
    """Counts PyGithub's HTTP requests and keeps the rate limit GitHub reported, from its per-request debug record.

    The record is dropped here, so nothing is formatted or written: debug logging of PyGithub stays off in effect.
    """

    def __init__(self) -> None:
        super().__init__()
        self.remaining: float | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        # (verb, scheme, host, url, request headers, body, status, response headers, output): PyGithub's __log.
        if isinstance(args, tuple) and len(args) == 9 and isinstance(args[7], dict):
            method, status, headers = str(args[0]), args[6], args[7]
            recorded().github_calls.labels(method, str(status)).inc()
            if "x-ratelimit-remaining" in headers:
                try:
                    self.remaining = float(headers["x-ratelimit-remaining"])
                except ValueError:
                    pass
        return False

    def __call__(self) -> Iterator[Metric]:
        samples = [([], self.remaining)] if self.remaining is not None else []
        yield gauge("compile_ci_github_rate_limit_remaining", "Requests left in GitHub's rate-limit window, as "
                    "its last answer to this process said", [], samples)


_CALLS = GitHubCalls()


def install_worker(app: Celery, settings: Settings, store: Store) -> None:
    """Log format now; the metrics port and directory when the worker starts (never in beat, which imports too)."""
    logs.configure_logging(settings.log_format, "worker")
    requester_log = logging.getLogger("github.Requester")
    if _CALLS not in requester_log.filters:
        requester_log.addFilter(_CALLS)
        requester_log.setLevel(logging.DEBUG)

    # Celery's signals are global to the process: each handler answers for its own app only.
    def _started(sender: Any = None, **_kw: Any) -> None:
        if settings.metrics_port and getattr(sender, "app", None) is app:
            # The pool's children fork from here, so they inherit the directory their samples go to.
            use_multiprocess_dir(own_metrics_dir())
            serve(settings.metrics_port, [FunctionCollector(CacheSize(settings.cache_dir)),
                                          FunctionCollector(_CALLS)])
            log.info("metrics on port %d", settings.metrics_port)

    def _prerun(task: Any = None, args: Sequence[Any] = (), **_kw: Any) -> None:
        if getattr(task, "app", None) is not app:
            return
        logs.clear()
        name = getattr(task, "name", "")
        logs.bind(task=name)
        if name in (RUN_JOB, REPORT_JOB) and args:
            job = store.get_job(str(args[0]))
            logs.bind(job_id=str(args[0]), run_id=job.run_id if job else None)
            if name == REPORT_JOB and job is not None:
                logs.bind(attempt=job.attempt)  # the attempt being reported; a run's attempt is bound once it starts
        elif name == PLAN_RUN and args:
            logs.bind(run_id=str(args[0]))

    def _failed(sender: Any = None, **_kw: Any) -> None:
        if getattr(sender, "app", None) is app:
            recorded().errors.labels(f"task:{getattr(sender, 'name', 'unknown')}").inc()

    def _stopping(sender: Any = None, **_kw: Any) -> None:
        if settings.metrics_port and getattr(sender, "app", None) is app and _own:
            shutil.rmtree(_own.pop(), ignore_errors=True)

    worker_init.connect(_started, weak=False)
    worker_shutdown.connect(_stopping, weak=False)
    task_prerun.connect(_prerun, weak=False)
    task_postrun.connect(lambda **_kw: logs.clear(), weak=False)
    task_failure.connect(_failed, weak=False)


_own: list[Path] = []


def own_metrics_dir(temp: Path | None = None) -> Path:
    """This worker's samples directory (its pool children's too), named by its pid and removed when it stops; those
    left by workers that are gone (killed before their shutdown) are removed first: a directory of ours whose pid
    names no process. Anything else of that name in the shared temporary directory (a link, another user's) is left
    alone."""
    temp = temp or Path(tempfile.gettempdir())
    for old in temp.glob(f"{METRICS_PREFIX}*-*"):
        pid = old.name[len(METRICS_PREFIX):].partition("-")[0]
        try:
            seen = old.lstat()
            if not pid.isdigit() or not stat.S_ISDIR(seen.st_mode) or seen.st_uid != os.getuid():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(old, ignore_errors=True)
        except OSError:  # gone meanwhile, or another user's process: alive
            continue
    own = Path(tempfile.mkdtemp(prefix=f"{METRICS_PREFIX}{os.getpid()}-", dir=temp))
    _own.append(own)
    return own


def job_started(job: Job) -> None:
    """A worker's runner took the job: how long it waited, and its new attempt in the log lines that follow."""
    logs.bind(job_id=job.id, run_id=job.run_id, attempt=job.attempt)
    if job.started_at is not None and job.queued_at is not None:
        waited = (job.started_at - job.queued_at).total_seconds()
        recorded().start_latency.labels(job.device).observe(max(0.0, waited))


def job_finished(job: Job, conclusion: str, result: RunResult, records: Sequence[TestRecord]) -> None:
    metrics = recorded()
    metrics.job_seconds.labels(job.suite, job.device, conclusion).observe(result.duration_s)
    if result.infra_error:
        metrics.errors.labels("runner").inc()
    hits = sum(float((r.metrics or {}).get("fx_graph_cache_hits", 0) or 0) for r in records)
    misses = sum(float((r.metrics or {}).get("fx_graph_cache_misses", 0) or 0) for r in records)
    metrics.cache_lookups.labels(job.device, "hit").inc(hits)
    metrics.cache_lookups.labels(job.device, "miss").inc(misses)



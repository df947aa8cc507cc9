"""The Celery app: Redis broker, queues cpu / cuda / cuda2 / github (and cpu-torch2.14 ... per further torch
version), late acks, JSON, one message at a time."""

from __future__ import annotations

import re
import time
from typing import Any

from celery import Celery
from celery.schedules import crontab
from kombu import Queue

from service.config import Settings
from service.torch_versions import device_queues, queue_for, torch_of_job_id

# cuda2: cuda jobs of suites that need two GPUs of one host (service.planning.plan.job_queue), for workers given two.
_SHARD_SUFFIX = re.compile(r"-a[0-9]+s[0-9]+$")  # service.store.shard_id_for
QUEUES = ("cpu", "cuda", "cuda2", "github")
# kombu's Redis transport keeps one list per priority step (0, 3, 6, 9) and takes from the lowest number first:
# a job whose worker died goes first, then jobs whose message was lost (they had their place in line), then the rest,
# and a pull request's base run last: a head job never waits behind a base job that is merely queued.
FIRST, AGAIN, NORMAL, LOW = 0, 3, 6, 9
PLAN_RUN = "compile_ci.plan_run"
RUN_JOB = "compile_ci.run_job"
RUN_SHARD = "compile_ci.run_shard"
REPORT_JOB = "compile_ci.report_job"
HANDLE_COMMENT = "compile_ci.handle_comment"
REAP_JOBS = "compile_ci.reap_jobs"
START_CANARIES = "compile_ci.start_canaries"


def all_queues(settings: Settings) -> tuple[str, ...]:
    """QUEUES and the job queues of the deployment's further torch versions (`cpu-torch2.14`, ...)."""
    return tuple(dict.fromkeys((*QUEUES, *device_queues(("cpu", "cuda", "cuda2"), settings.torch_versions))))


def create_celery(settings: Settings) -> Celery:
    app = Celery("compile_ci", broker=settings.redis_url, set_as_current=False)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        # A job is acknowledged only once it finished, so a worker that dies mid-job does not lose it;
        # prefetch 1 stops a busy worker from sitting on jobs another worker could run.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_transport_options={"visibility_timeout": settings.visibility_timeout_seconds},
        broker_connection_retry_on_startup=True,
        task_queues=[Queue(name) for name in all_queues(settings)],
        task_default_queue="github",
        worker_hijack_root_logger=False,
        # `compile-ci beat` (or a worker started with --beat) sends this; the github workers run it.
        beat_schedule={"reap-jobs": {"task": REAP_JOBS, "schedule": float(settings.reaper_interval_seconds),
                                     "options": {"queue": "github", "expires": settings.reaper_interval_seconds}},
                       # Every installed repository's default branch on the advisory torch (service/jobs/canary.py).
                       "torch-canary": {"task": START_CANARIES,
                                        "schedule": crontab(minute=0, hour=settings.canary_hour),
                                        "options": {"queue": "github", "expires": 3600}}},
        beat_schedule_filename=str(settings.data_dir / "celerybeat-schedule"),
    )
    return app


PRESENCE_TIMEOUT_S = 0.5  # a worker busy with a job still answers (a separate thread); slower means gone
PRESENCE_CACHE_S = 30.0
SLOTS_TIMEOUT_S = 1.0  # two broadcasts (queues, pool sizes), asked by a worker about to split a job


def workers_by_queue(app: Celery, timeout: float = PRESENCE_TIMEOUT_S) -> dict[str, list[str]]:
    """Queue -> the workers consuming it that answered within `timeout` (one broadcast); broker errors raise."""
    replies = app.control.inspect(timeout=timeout).active_queues() or {}
    served: dict[str, list[str]] = {}
    for worker, queues in sorted(replies.items()):
        for queue in queues or []:
            served.setdefault(str(queue.get("name", "")), []).append(worker)
    return served


def slots_by_queue(app: Celery, timeout: float = SLOTS_TIMEOUT_S) -> dict[str, int]:
    """Queue -> how many tasks the workers consuming it that answered run at once (their pools' concurrency)."""
    inspect = app.control.inspect(timeout=timeout)
    queues, stats = inspect.active_queues() or {}, inspect.stats() or {}
    slots: dict[str, int] = {}
    for worker, consumed in queues.items():
        size = ((stats.get(worker) or {}).get("pool") or {}).get("max-concurrency")
        for queue in consumed or []:
            name = str(queue.get("name", ""))
            slots[name] = slots.get(name, 0) + (size if isinstance(size, int) and size > 0 else 1)
    return slots


class CeleryQueue:
    """Producer side: enqueue ids only; every task re-reads the store."""

    def __init__(self, app: Celery) -> None:
        self._app = app
        self._served: tuple[float, frozenset[str] | None] = (-PRESENCE_CACHE_S, None)
        self._slots: tuple[float, dict[str, int] | None] = (-PRESENCE_CACHE_S, None)

    def served_queues(self) -> frozenset[str] | None:
        """Queues some worker consumes now (asked at most every 30 s); None when the broker did not answer."""
        asked_at, served = self._served
        if time.monotonic() - asked_at >= PRESENCE_CACHE_S:
            try:
                served = frozenset(workers_by_queue(self._app))
            except Exception:  # noqa: BLE001 - unknown is an answer: the caller then assumes every queue is served
                served = None
            self._served = (time.monotonic(), served)
        return served

    def worker_slots(self) -> dict[str, int] | None:
        """Tasks the live workers of each queue run at once (asked at most every 30 s); None when nobody answered."""
        asked_at, slots = self._slots
        if time.monotonic() - asked_at >= PRESENCE_CACHE_S:
            try:
                slots = slots_by_queue(self._app) or None
            except Exception:  # noqa: BLE001 - unknown is an answer: the caller then runs one shard
                slots = None
            self._slots = (time.monotonic(), slots)
        return slots

    def plan_run(self, run_id: str, *, retry_of: int | None = None, delay_s: float = 0.0) -> None:
        """`retry_of`: the failed try of planning this message retries (one retry chain per run, see
        run_planning); `delay_s`: not before this many seconds."""
        args: list[object] = [run_id] if retry_of is None else [run_id, retry_of]
        self._app.send_task(PLAN_RUN, args=args, queue="github", countdown=delay_s or None)

    def run_job(self, job_id: str, queue: str, *, first: bool = False, again: bool = False,
                low: bool = False) -> None:
        """`first`: ahead of every job waiting (it had started and lost its worker); `again`: ahead of the jobs
        queued normally (its message was lost, not its place in line); `low`: behind them all (a base run)."""
        priority = FIRST if first else AGAIN if again else LOW if low else NORMAL
        # The job id names its torch version (none: the default), and only that version's workers may run it.
        self._app.send_task(RUN_JOB, args=[job_id], queue=queue_for(queue, torch_of_job_id(job_id)), priority=priority)

    def run_shard(self, shard_id: str, device: str, *, first: bool = False, low: bool = False,
                  started: bool = False) -> None:
        """One shard of a sharded job (service/jobs/sharding.py), with a job's places in line, on its torch's queue;
        `started`: a shard of a job that has just fanned out, ahead of the jobs that have not started (AGAIN's step:
        behind a lost job's, with the lost messages', ahead of every job queued normally)."""
        priority = FIRST if first else LOW if low else AGAIN if started else NORMAL
        torch = torch_of_job_id(_SHARD_SUFFIX.sub("", shard_id))
        self._app.send_task(RUN_SHARD, args=[shard_id], queue=queue_for(device, torch), priority=priority)

    def report_job(self, job_id: str) -> None:
        self._app.send_task(REPORT_JOB, args=[job_id], queue="github")

    def handle_comment(self, request: dict[str, Any]) -> None:
        # Primitive fields of the comment (ids, logins, the command lines); the worker asks GitHub the rest.
        self._app.send_task(HANDLE_COMMENT, args=[request], queue="github")

"""Celery tasks: thin wrappers that carry ids and call the pipeline, which re-reads the store."""

from __future__ import annotations

import logging
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from celery import Celery, Task
from celery.signals import worker_init, worker_process_init, worker_process_shutdown

import suites
from runners.checkout import Checkout
from runners.local import LocalRunner
from runners.protocol import Runner
from service.celery_app import (
    HANDLE_COMMENT,
    PLAN_RUN,
    REAP_JOBS,
    REPORT_JOB,
    RUN_JOB,
    RUN_SHARD,
    START_CANARIES,
    CeleryQueue,
    create_celery,
)
from service.config import Settings
from service.github import reporting
from service.github.api import GitHubApp, GoneError, TransientGitHubError
from service.jobs import (
    canary,
    comment_commands,
    pipeline,
    reaper,
    reused,
    run_planning,
    shard_reaper,
    sharding,
)
from service.jobs.context import Leases, WorkerContext
from service.jobs.lease import orphaned_jobs
from service.observability.worker import install_worker
from service.planning import torch_matrix
from service.store import Store
from service.store.claims import Claims

log = logging.getLogger(__name__)
RETRY_KW = {"max_retries": 8, "retry_backoff": 2, "retry_backoff_max": 300, "retry_jitter": True}


_RUNNERS: weakref.WeakSet[Runner] = weakref.WeakSet()


@worker_process_shutdown.connect
def _close_runners(**_: object) -> None:
    """A prefork child ends with os._exit, past atexit: its runners' pre-started containers go with it."""
    for runner in list(_RUNNERS):
        closing = getattr(runner, "close", None)
        if closing is not None:
            closing()


_PREPARING: list[threading.Thread] = []


def start_preparing(runner: Runner, cache_root: Path, devices: tuple[str, ...] = ()) -> None:
    """A job worker's runner makes, as the worker starts, what every job of the host needs (runners/local.py's
    `prepare`: the ISA verdict, inductor's source keys, the precompiled header), so no job waits for it; and, in the
    process that runs the jobs, what each of `devices` needs there (LocalRunner: the warm interpreters)."""
    prepare = getattr(runner, "prepare", None)
    if prepare is None:
        return

    def run() -> None:
        started = time.monotonic()
        try:
            prepare(cache_root, devices)
        except Exception:  # noqa: BLE001 - a job makes what is missing itself, as before
            log.exception("the host's preparation failed; the first job makes what it needs")
            return
        log.info("host prepared for jobs in %.1f s", time.monotonic() - started)

    thread = threading.Thread(target=run, name="prepare-host", daemon=True)
    _PREPARING.append(thread)
    thread.start()


def queue_devices(queues: set[str]) -> tuple[str, ...]:
    """The devices of a worker's job queues (`cpu`, `cuda2`, `cpu-torch2.14`: cpu and cuda)."""
    return tuple(sorted({"cuda" if q.startswith("cuda") else "cpu" for q in queues if q.partition("-torch")[0]
                         in ("cpu", "cuda", "cuda2")}))


def wait_prepared(timeout: float) -> bool:
    """Whether every preparation this process started has ended within `timeout` (benches)."""
    deadline = time.monotonic() + timeout
    for thread in list(_PREPARING):
        thread.join(max(0.0, deadline - time.monotonic()))
    return not any(t.is_alive() for t in _PREPARING)


def build_context(settings: Settings, app: Celery, suites_dir: Path | None = None) -> WorkerContext:
    claims = Claims(settings.redis_url, settings.delivery_ttl_seconds)
    return WorkerContext(
        settings=settings,
        store=Store(settings.database_url),
        claims=claims,
        github=GitHubApp(settings),
        queue=CeleryQueue(app),
        runner=select_runner(settings, claims),
        checkout=Checkout(settings.data_dir / "mirrors"),
        suites_dir=suites_dir or Path(suites.__file__).parent,
    )


def select_runner(settings: Settings, claims: Leases | None = None) -> Runner:
    """COMPILE_CI_RUNNER: docker, local, or auto (docker wherever a Docker engine answers).

    A Docker worker starts by removing what a dead worker of this deployment left on the engine: stopped job
    containers, and running ones whose job lease no live worker holds.
    """
    if settings.runner == "local":
        return _local(settings)
    # Imported here: a worker that never uses Docker needs neither the SDK nor an engine.
    from runners.docker_runner import DockerRunner

    images = torch_matrix.runner_images(settings)  # this worker's torch version's
    docker_runner = DockerRunner(images, deployment=settings.deployment, gpus=settings.gpus,
                                 slots=settings.job_slots, cpus=settings.cpus, warm=settings.prestart)
    if settings.runner == "docker" or docker_runner.engine_answers():
        docker_runner.sweep_leftovers_quietly(orphaned_jobs(claims) if claims is not None else None)
        return docker_runner
    log.warning("COMPILE_CI_RUNNER=auto: no Docker engine answers; jobs run with LocalRunner on this host")
    return _local(settings)


def _local(settings: Settings) -> LocalRunner:
    return LocalRunner(settings.runner_python, settings.gpus, settings.warm_start, settings.job_slots, settings.cpus)


def _retry_later(task: Task, exc: TransientGitHubError) -> None:
    """Honour GitHub's Retry-After / rate-limit reset instead of hammering it."""
    countdown = exc.retry_after if exc.retry_after is not None else min(300, 2 ** (task.request.retries + 1))
    raise task.retry(exc=exc, countdown=countdown, max_retries=RETRY_KW["max_retries"])


def prepare_data_dir(settings: Settings) -> None:
    """Workers and beat keep their state (mirrors, caches, beat's schedule) in the data directory, which nothing
    else creates when the database is not an SQLite file in it."""
    try:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        log.error("data directory %s (COMPILE_CI_DATA_DIR) cannot be created: %s", settings.data_dir, exc.strerror)


def create_worker_celery(settings: Settings, suites_dir: Path | None = None) -> Celery:
    prepare_data_dir(settings)
    app = create_celery(settings)
    ctx = build_context(settings, app, suites_dir)
    install_worker(app, settings, ctx.store)
    _RUNNERS.add(ctx.runner)

    job_worker: list[tuple[str, ...]] = []  # set in the worker's main process, so its pool's children inherit it

    def _prepare(sender: Any = None, **_kw: Any) -> None:  # Celery's signals are global: this app's worker only
        if getattr(sender, "app", None) is not app:
            return
        queues = set(app.amqp.queues.consume_from or {}) - {"github"}
        if queues:
            job_worker.append(queue_devices(queues))
            prefork = "prefork" in str(getattr(sender.pool_cls, "__module__", sender.pool_cls))
            start_preparing(ctx.runner, settings.cache_dir, () if prefork else job_worker[0])

    def _prepare_child(**_kw: Any) -> None:  # a prefork child runs the jobs: what it keeps in memory, made now
        if job_worker:
            start_preparing(ctx.runner, settings.cache_dir, job_worker[0])

    worker_init.connect(_prepare, weak=False)
    worker_process_init.connect(_prepare_child, weak=False)

    @app.task(name=PLAN_RUN, bind=True, shared=False)
    def plan_run(self: Task, run_id: str, retry_of: int | None = None) -> None:
        # A head that cannot be fetched is retried by run_planning itself (counted in the store, one chain per
        # run); what is retried here is reporting a planned run's check runs.
        try:
            run_planning.plan_run(ctx, run_id, retry_of)
        except TransientGitHubError as exc:
            _retry_later(self, exc)

    @app.task(name=RUN_JOB, bind=True, shared=False)
    def run_job(self: Task, job_id: str) -> None:
        first = sharding.run_sharded(ctx, job_id)  # fanned out to shards when the deployment has the workers
        if first is sharding.NOT_SHARDED:
            pipeline.run_job(ctx, job_id)
        elif first:  # fanned out now: this slot runs the first shard (the others are queued)
            sharding.run_shard(ctx, first)

    @app.task(name=RUN_SHARD, bind=True, shared=False)
    def run_shard(self: Task, shard_id: str) -> None:
        sharding.run_shard(ctx, shard_id)

    @app.task(name=REPORT_JOB, bind=True, shared=False)
    def report_job(self: Task, job_id: str) -> None:
        try:
            reused.judge_reused(ctx, job_id)  # its reused results, or a re-run when they do not hold
            reporting.report_job(ctx, job_id)
            reused.tell_consumers(ctx, job_id)  # the jobs that reuse its results
        except TransientGitHubError as exc:
            _retry_later(self, exc)

    @app.task(name=HANDLE_COMMENT, bind=True, shared=False)
    def handle_comment(self: Task, request: dict[str, Any]) -> None:
        try:
            comment_commands.handle_comment(ctx, request)
        except TransientGitHubError as exc:
            _retry_later(self, exc)
        except GoneError as exc:  # the pull request or repository went away meanwhile
            log.info("handle_comment on %s#%s: %s", request.get("repo"), request.get("number"), exc)

    @app.task(name=REAP_JOBS, bind=True, shared=False)
    def reap_jobs(self: Task) -> None:
        reaper.reap(ctx)

    @app.task(name=START_CANARIES, bind=True, shared=False)
    def start_canaries(self: Task) -> None:
        canary.start_canaries(ctx)

    try:
        reaper.recover_jobs_of_dead_workers_here(ctx)
        shard_reaper.recover_shards_of_dead_workers_here(ctx)
    except Exception as exc:  # Redis or the database not up yet: the reaper finds these jobs a little later
        log.warning("worker start: lost jobs not recovered now: %s", exc)
    app.conf.compile_ci_context = ctx
    return app

"""Two Celery workers embedded in one process (the cache-verdicts flow, bench/shards.py) with a real Redis: each has
an event loop of its own (service/devkit/embedded_workers.py), so neither reads the other's replies; both take tasks
at once."""

from __future__ import annotations

from celery import Celery
from celery.contrib.testing.worker import start_worker

from service.devkit.embedded_workers import own_loop_worker


def _app(redis_url: str, name: str) -> Celery:
    app = Celery(name, broker=redis_url, backend=redis_url)
    app.conf.update(task_default_queue=name, broker_connection_retry_on_startup=True)

    @app.task(name=f"{name}.double")
    def double(value: int) -> int:
        return 2 * value

    return app


def test_each_embedded_worker_has_its_own_loop_and_both_work(redis_url: str) -> None:
    first, second = _app(redis_url, "first"), _app(redis_url, "second")
    with start_worker(first, pool="threads", concurrency=1, perform_ping_check=False, shutdown_timeout=30,
                      queues=["first"]) as one:
        with own_loop_worker(second, pool="threads", concurrency=1, perform_ping_check=False, shutdown_timeout=30,
                             queues=["second"]) as two:
            assert one.hub is not None and two.hub is not None and one.hub is not two.hub
            results = [(app.tasks[f"{app.main}.double"].delay(n), 2 * n)
                       for n in range(20) for app in (first, second)]
            assert [result.get(timeout=60) for result, _ in results] == [want for _, want in results]

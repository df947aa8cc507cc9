"""Celery workers embedded in one process (the tests' and benches' stacks), each with an event loop of its own.

Celery gives a worker the process's current kombu event loop (`kombu.asynchronous.get_event_loop`) and creates one
only when there is none, so a second embedded worker shares the first's: two threads then read one poller, a reply
is read by the wrong one (kombu's BRPOP: "too many values to unpack"), and that worker stops. Start and stop such
workers together: stopping one ends the others too (celery.worker.state is the process's). A production worker is a
process of its own and meets none of this."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from celery import Celery
from celery.contrib.testing.worker import start_worker
from kombu.asynchronous import get_event_loop, set_event_loop


@contextlib.contextmanager
def own_loop_worker(app: Celery, **options: Any) -> Iterator[Any]:
    """`celery.contrib.testing.worker.start_worker(app, **options)` with a kombu event loop of its own; the
    process's current loop is put back afterwards."""
    shared = get_event_loop()
    set_event_loop(None)
    try:
        with start_worker(app, **options) as worker:
            yield worker
    finally:
        set_event_loop(shared)

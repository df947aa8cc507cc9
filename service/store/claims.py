"""Redis-backed delivery claims and live log tails (the only module that imports redis)."""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager

import redis

log = logging.getLogger(__name__)
# kombu's Redis transport: a queue is a list of that name (plus one list per priority step, the name followed by
# this separator and the step), and a message a worker took but has not acknowledged sits in the hash `unacked`.
PRIORITY_SEP = "\x06\x16"
UNACKED = "unacked"
UNACKED_INDEX = "unacked_index"  # delivery tag -> when a worker took it


class Claims:
    def __init__(self, redis_url: str, ttl_seconds: int) -> None:
        self._redis = redis.Redis.from_url(redis_url)
        self._ttl = ttl_seconds

    def claim_delivery(self, delivery_id: str) -> bool:
        """True the first time a delivery id is seen; GitHub redelivers with the same id."""
        return bool(self._redis.set(f"compile-ci:delivery:{delivery_id}", b"1", nx=True, ex=self._ttl))

    def release_delivery(self, delivery_id: str) -> None:
        # Processing failed: let GitHub's (manual or automatic) redelivery try again.
        self._redis.delete(f"compile-ci:delivery:{delivery_id}")

    def ping(self) -> bool:
        return bool(self._redis.ping())

    def acquire_lease(self, job_id: str, owner: str, ttl_seconds: int) -> bool:
        """A running job holds a lease it refreshes; a lease that lapsed means its worker died."""
        return bool(self._redis.set(f"compile-ci:lease:{job_id}", owner, nx=True, ex=ttl_seconds))

    def lease_holder(self, job_id: str) -> str | None:
        value = self._redis.get(f"compile-ci:lease:{job_id}")
        return value.decode() if isinstance(value, bytes) else None

    def refresh_lease(self, job_id: str, owner: str, ttl_seconds: int) -> bool:
        """Keep the lease; False once another owner holds it (this attempt was given up on: stop it).

        A lease that vanished with a Redis restart is taken again, so a live job is never judged lost for it.
        """
        key = f"compile-ci:lease:{job_id}"
        self._redis.set(key, owner, nx=True, ex=ttl_seconds)
        if self.lease_holder(job_id) != owner:
            return False
        self._redis.expire(key, ttl_seconds)
        return True

    def release_lease(self, job_id: str, owner: str) -> None:
        """Best effort: a lease that cannot be released now lapses by itself within its TTL."""
        try:
            if self.lease_holder(job_id) == owner:
                self._redis.delete(f"compile-ci:lease:{job_id}")
        except redis.RedisError as exc:
            log.warning("lease of %s not released (it lapses by itself): %s", job_id, exc)

    def report_lock(self, job_id: str) -> AbstractContextManager[object]:
        # One report of a job at a time, so a slow in_progress PATCH can never land after completed.
        return self._redis.lock(f"compile-ci:report-lock:{job_id}", timeout=120, blocking_timeout=60)

    def recall(self, key: str) -> str | None:
        value = self._redis.get(f"compile-ci:memo:{key}")
        return value.decode() if isinstance(value, bytes) else None

    def remember(self, key: str, value: str) -> None:
        """Keep what a task already did, so its retry (after a GitHub error) does not do it twice."""
        self._redis.set(f"compile-ci:memo:{key}", value, nx=True, ex=self._ttl)

    def count(self, key: str) -> int:
        """How often this happened (one more now), remembered as long as delivery ids."""
        name = f"compile-ci:count:{key}"
        value = int(self._redis.incr(name))
        self._redis.expire(name, self._ttl)
        return value

    def queue_depths(self, queues: tuple[str, ...]) -> dict[str, int]:
        """Messages waiting per Celery queue (kombu's Redis transport keeps each queue as a list of its name)."""
        return {name: sum(int(self._redis.llen(key)) for key in _lists(name)) for name in queues}

    def pending_tasks(self, queues: tuple[str, ...], stranded_after_s: float = 30.0
                      ) -> Iterator[tuple[str, list[object]]]:
        """(task name, args) of every message waiting in these queues, or taken by a worker and not acknowledged for
        less than `stranded_after_s`: a live worker starts a task it took at once (prefetch 1, late acks), so an older
        unacknowledged message of a job still queued belongs to a worker that died, and waits hours for redelivery."""
        for queue in queues:
            for name in _lists(queue):
                for raw in self._redis.lrange(name, 0, -1):
                    yield from _task_of(raw)
        recent = self._redis.zrangebyscore(UNACKED_INDEX, time.time() - stranded_after_s, "+inf")
        for raw in self._redis.hmget(UNACKED, recent) if recent else []:
            try:
                message = json.loads(raw)[0]
            except (ValueError, IndexError, KeyError, TypeError):
                continue
            yield from _task_of(json.dumps(message).encode())

def _lists(queue: str) -> list[str]:
    return [queue, *(f"{queue}{PRIORITY_SEP}{step}" for step in range(1, 10))]


def _task_of(raw: bytes) -> Iterator[tuple[str, list[object]]]:
    try:
        message = json.loads(raw)
        body = message["body"]
        if message.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args = json.loads(body)[0]
        yield str(message["headers"]["task"]), list(args)
    except (ValueError, KeyError, IndexError, TypeError):
        return

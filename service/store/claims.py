"""Redis-backed delivery claims and live log tails (the only module that imports redis)."""

from __future__ import annotations

from contextlib import AbstractContextManager

import redis


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

    def refresh_lease(self, job_id: str, owner: str, ttl_seconds: int) -> None:
        if self.lease_holder(job_id) == owner:
            self._redis.expire(f"compile-ci:lease:{job_id}", ttl_seconds)

    def release_lease(self, job_id: str, owner: str) -> None:
        if self.lease_holder(job_id) == owner:
            self._redis.delete(f"compile-ci:lease:{job_id}")

    def report_lock(self, job_id: str) -> AbstractContextManager[object]:
        # One report of a job at a time, so a slow in_progress PATCH can never land after completed.
        return self._redis.lock(f"compile-ci:report-lock:{job_id}", timeout=120, blocking_timeout=60)

    def recall(self, key: str) -> str | None:
        value = self._redis.get(f"compile-ci:memo:{key}")
        return value.decode() if isinstance(value, bytes) else None

    def remember(self, key: str, value: str) -> None:
        """Keep what a task already did, so its retry (after a GitHub error) does not do it twice."""
        self._redis.set(f"compile-ci:memo:{key}", value, nx=True, ex=self._ttl)

    def queue_depths(self, queues: tuple[str, ...]) -> dict[str, int]:
        """Messages waiting per Celery queue (kombu's Redis transport keeps each queue as a list of its name)."""
        return {name: int(self._redis.llen(name)) for name in queues}

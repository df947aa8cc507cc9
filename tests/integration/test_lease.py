"""A job's lease with a real Redis: kept by its own thread, taken again after a Redis restart, lost to a rival."""

from __future__ import annotations

import time

import redis

from service.devkit.sandbox.stack import free_port
from service.jobs.lease import LeaseKeeper
from service.store.claims import Claims


def _until(condition: object, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_a_lease_that_vanished_with_redis_is_taken_again_by_its_live_worker(redis_url: str) -> None:
    claims = Claims(redis_url, 60)
    assert claims.acquire_lease("job-1", "worker-a", 2)
    with LeaseKeeper(claims, "job-1", "worker-a", ttl_s=2) as keeper:
        redis.Redis.from_url(redis_url).flushdb()  # what a Redis restart without persistence does
        assert _until(lambda: claims.lease_holder("job-1") == "worker-a")
        time.sleep(2.5)  # longer than the TTL: only the keeper's refreshes keep it
        assert claims.lease_holder("job-1") == "worker-a" and not keeper.lost
    assert claims.lease_holder("job-1") is None  # released at the end of the attempt


def test_an_attempt_whose_lease_another_worker_took_is_told_to_stop(redis_url: str) -> None:
    claims = Claims(redis_url, 60)
    assert claims.acquire_lease("job-2", "worker-a", 2)
    with LeaseKeeper(claims, "job-2", "worker-a", ttl_s=2) as keeper:
        redis.Redis.from_url(redis_url).delete("compile-ci:lease:job-2")
        redis.Redis.from_url(redis_url).set("compile-ci:lease:job-2", "worker-b", ex=30)  # the reaper's re-queue won
        assert _until(lambda: keeper.lost)
    assert claims.lease_holder("job-2") == "worker-b"  # not released by the loser


def test_releasing_a_lease_while_redis_is_down_does_not_raise() -> None:
    claims = Claims(f"redis://127.0.0.1:{free_port()}", 60)  # nothing listens there
    claims.release_lease("job-3", "worker-a")  # the lease lapses by itself; the job's retry message still goes out

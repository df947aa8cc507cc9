"""Redis-backed job leases, report locks, memos and queue inspection (the only module that imports redis)."""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager

import redis
import redis.exceptions
import redis.lock

log = logging.getLogger(__name__)
# kombu's Redis transport: a queue is a list of that name (plus one list per priority step, the name followed by
# this separator and the step), and a message a worker took but has not acknowledged sits in the hash `unacked`.
PRIORITY_SEP = "\x06\x16"
UNACKED = "unacked"
UNACKED_INDEX = "unacked_index"  # delivery tag -> when a worker took it
# A lock lives this long unless its holder's keeper thread extends it (every third of it): a killed holder's lock
# is free again within seconds, a live holder keeps it however long its GitHub calls take.
LOCK_TTL_S = 10.0
# Claims.grant_unit, atomic: KEYS units, next, the shard's answers; ARGV request, units, ttl -> {units known, unit}.
GRANT_SCRIPT = """
local given = redis.call('LINDEX', KEYS[3], ARGV[1])
local known = redis.call('GET', KEYS[1])
if not known then
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
  known = ARGV[2]
end
if given then return {known, given} end
if tonumber(known) ~= tonumber(ARGV[2]) then return {known, -1} end
local unit = redis.call('INCR', KEYS[2]) - 1
redis.call('EXPIRE', KEYS[2], ARGV[3])
if unit >= tonumber(ARGV[2]) then return {known, -1} end
redis.call('RPUSH', KEYS[3], unit)
redis.call('EXPIRE', KEYS[3], ARGV[3])
return {known, unit}
"""


class KeptLock:
    """A Redis lock held for a `with` block and kept alive from a thread; released only by its owner's token."""

    def __init__(self, lock: redis.lock.Lock, ttl_s: float) -> None:
        self._lock, self._ttl = lock, ttl_s
        self._stop = threading.Event()
        self._keeper = threading.Thread(target=self._keep, name=f"lock-{lock.name!r}", daemon=True)

    def __enter__(self) -> KeptLock:
        if not self._lock.acquire():
            raise redis.exceptions.LockError(f"{self._lock.name!r} is held by another process")
        self._keeper.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._keeper.join(timeout=5)
        try:
            self._lock.release()
        except redis.exceptions.LockError:
            log.warning("lock %r lapsed before its holder released it", self._lock.name)
        except redis.RedisError as exc:
            log.warning("lock %r not released (it lapses by itself): %s", self._lock.name, exc)

    def _keep(self) -> None:
        while not self._stop.wait(self._ttl / 3):
            try:
                self._lock.reacquire()  # owner-checked: only while the key still holds our token
            except redis.exceptions.LockNotOwnedError:
                log.warning("lock %r was taken over: its holder stalled past %g s", self._lock.name, self._ttl)
                return
            except redis.RedisError as exc:
                log.warning("lock %r not extended: %s", self._lock.name, exc)


class Claims:
    def __init__(self, redis_url: str, ttl_seconds: int, lock_ttl_s: float = LOCK_TTL_S) -> None:
        self._redis = redis.Redis.from_url(redis_url)
        self._grant = self._redis.register_script(GRANT_SCRIPT)
        self._ttl = ttl_seconds
        self._lock_ttl = lock_ttl_s

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
        lock = self._redis.lock(f"compile-ci:report-lock:{job_id}", timeout=self._lock_ttl, blocking_timeout=60,
                                thread_local=False)  # the keeper thread extends it with the holder's token
        return KeptLock(lock, self._lock_ttl)

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

    def grant_unit(self, attempt: str, shard: int, request: int, units: int) -> int:
        """The unit of tests a shard's `request` is given (suites/claiming.py): the one its shard's earlier attempt
        was given for that request, else the job attempt's next; -1 once none is left. Units are counted from one
        counter per job attempt, never given twice whichever worker asks, and each shard's answers are kept in order,
        in one script (a worker killed between the count and the record would lose a unit); ValueError when the
        shard cut its tests into another number of units than its siblings did."""
        base = f"compile-ci:grants:{attempt}"
        known, unit = self._grant(keys=[f"{base}:units", f"{base}:next", f"{base}:shard:{shard}"],
                                  args=[request, units, self._ttl])
        if int(known) != units:
            raise ValueError(f"this shard cut its tests into {units} units, a shard before it into {int(known)}")
        return int(unit)

    def nothing_left(self, attempt: str, shard: int) -> bool:
        """Whether every unit of the job attempt was given before this shard was given any: it has nothing to run."""
        base = f"compile-ci:grants:{attempt}"
        units, given = self._redis.get(f"{base}:units"), self._redis.get(f"{base}:next")
        return units is not None and given is not None and int(given) >= int(units) \
            and not self._redis.llen(f"{base}:shard:{shard}")

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

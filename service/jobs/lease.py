"""A job's lease: held from a thread of its own for the whole attempt, so a lapsed lease means a dead worker.

The lease is refreshed every LEASE_TTL_S / 4 whatever the attempt is doing (fetching a large repository, waiting
for its container), and the reaper re-queues a running job whose lease lapsed: a worker killed mid-job is
replaced within TTL + two reaper passes, not at the job's time limit.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from types import TracebackType

from service.jobs.context import Leases
from service.store import Job, Shard

log = logging.getLogger(__name__)
LEASE_TTL_S = 15
# A job's or shard's first message is sent right after its row is written: give it this long to show up in the broker.
MESSAGE_IN_FLIGHT = timedelta(seconds=2 * LEASE_TTL_S)


class LeaseKeeper:
    def __init__(self, claims: Leases, job_id: str, owner: str, ttl_s: int = LEASE_TTL_S) -> None:
        self.claims, self.job_id, self.owner, self.ttl_s = claims, job_id, owner, ttl_s
        self.lost = False  # another owner holds it now: this attempt was given up on and must stop
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep, name=f"lease-{job_id}", daemon=True)

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.claims.release_lease(self.job_id, self.owner)

    def _keep(self) -> None:
        while not self._stop.wait(self.ttl_s / 4):
            try:
                if not self.claims.refresh_lease(self.job_id, self.owner, self.ttl_s):
                    log.warning("job %s: its lease is held by another worker; stopping this attempt", self.job_id)
                    self.lost = True
                    return
            except Exception as exc:  # Redis is down: keep trying, the job itself is not affected
                log.warning("job %s: lease not refreshed: %s", self.job_id, exc)


def owner_of(job_id: str) -> str:
    """Who holds a lease: host, process and thread, so a restarted worker can tell a dead holder on its host."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}:{job_id}"


def orphaned_jobs(claims: Leases) -> Callable[[str], bool]:
    """Whether a job's container has no live worker: no lease, or a lease of a process of this host that is gone."""

    def orphaned(job_id: str) -> bool:
        try:
            holder = claims.lease_holder(job_id)
        except Exception:  # Redis down at worker start: leave running containers be, their deadline ends them
            return False
        return holder is None or held_by_a_dead_process_here(holder)

    return orphaned


ALIVE, OVERDUE, JUST_LAPSED, LAPSED = "alive", "overdue", "just lapsed", "lapsed"


def running_state(claims: Leases, row: Job | Shard, limit_s: float, now: datetime) -> str:
    """What the reaper makes of a running job or shard (its lease has the row's id): ALIVE (its lease is held,
    within its time limit + grace: `limit_s`), OVERDUE (held past it), JUST_LAPSED (no lease, first seen so: a worker
    whose lease vanished with Redis renews it by the next pass, so nothing is done yet) or LAPSED (no lease on two
    passes: its worker is gone)."""
    if claims.lease_holder(row.id) is not None:
        return ALIVE if (row.started_at or row.queued_at) + timedelta(seconds=limit_s) > now else OVERDUE
    seen_lapsed = f"lease-lapsed:{row.id}:{row.attempt}"
    if claims.recall(seen_lapsed) is None:
        claims.remember(seen_lapsed, now.isoformat())
        return JUST_LAPSED
    return LAPSED


def held_by_a_dead_process_here(holder: str) -> bool:
    """A lease owner (see owner_of) that is a process of this host which no longer exists."""
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    return host == socket.gethostname() and pid.isdigit() and not _alive(int(pid))


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie (a killed worker's pool child may linger as one, unreaped)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")

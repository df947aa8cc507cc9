"""Queue messages held back until the rows they refer to are committed, and sent after: by the webhook at once,
or by the reaper when the process that committed them died (or the broker was down) before they went out."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from service.jobs.context import JobQueue
from service.store import Store
from service.store import deliveries as delivery_rows
from service.store.deliveries import Message

log = logging.getLogger(__name__)
METHODS = ("plan_run", "run_job", "report_job", "handle_comment")
# A webhook sends its messages within milliseconds of its commit: older unsent ones were left behind.
LEFT_BEHIND_AFTER = timedelta(seconds=30)


class RecordingQueue:
    """The queue as a delivery's handlers see it: each call is recorded, to be held with the delivery's rows."""

    def __init__(self, queue: JobQueue) -> None:
        self._queue = queue
        self.messages: list[Message] = []

    def plan_run(self, run_id: str, *, retry_of: int | None = None, delay_s: float = 0.0) -> None:
        self.messages.append(("plan_run", [run_id], {"retry_of": retry_of, "delay_s": delay_s}))

    def run_job(self, job_id: str, device: str, *, first: bool = False, again: bool = False,
                low: bool = False) -> None:
        self.messages.append(("run_job", [job_id, device], {"first": first, "again": again, "low": low}))

    def report_job(self, job_id: str) -> None:
        self.messages.append(("report_job", [job_id], {}))

    def handle_comment(self, request: dict[str, Any]) -> None:
        self.messages.append(("handle_comment", [request], {}))

    def served_queues(self) -> frozenset[str] | None:
        return self._queue.served_queues()


def send_held(store: Store, queue: JobQueue, delivery_id: str, messages: list[Message]) -> bool:
    """Send a committed delivery's messages, then mark them sent; False (logged) when the broker refused them:
    they stay held, and the reaper sends them later. Sent twice at worst, which every task tolerates."""
    try:
        for name, args, kwargs in messages:
            if name not in METHODS:
                log.error("delivery %s: unknown queue call %r dropped", delivery_id, name)
                continue
            getattr(queue, name)(*args, **kwargs)
        if messages:
            delivery_rows.mark_sent(store, delivery_id)
    except Exception as exc:  # noqa: BLE001 - the broker or the database: either way the reaper retries
        log.warning("delivery %s: messages not sent yet (the reaper sends them): %s", delivery_id, exc)
        return False
    return True


def send_left_behind(store: Store, queue: JobQueue, keep_for: timedelta, now: datetime) -> list[str]:
    """The reaper's part: messages committed but never sent, and old deliveries forgotten; what it did."""
    did = []
    for delivery_id, messages in delivery_rows.unsent(store, now - LEFT_BEHIND_AFTER):
        if send_held(store, queue, delivery_id, messages):
            did.append(f"delivery {delivery_id}: {len(messages)} message(s) left unsent; sent now")
    delivery_rows.forget_older_than(store, keep_for)
    return did

"""Handling a delivery exactly once: its claim (the delivery id, a unique key in the store), the rows its handlers
write and the messages they send commit as one transaction. A process killed before the commit leaves nothing, so
GitHub's redelivery is handled in full; after the commit, a redelivery is a duplicate. Two copies handled at once:
the second's claim cannot commit, its transaction is rolled back and tried again, and finds the first's."""

from __future__ import annotations

import dataclasses
import logging

from service.intake.handlers.deps import HandlerDeps
from service.intake.router import Event, Outcome, Router
from service.jobs.outbox import RecordingQueue, send_held
from service.store import Conflict, Store
from service.store import deliveries as delivery_rows

log = logging.getLogger(__name__)
TRIES = 3  # a unit that lost a race (the same delivery, or another for the same commit) sees the winner's rows


def handle_once(store: Store, router: Router, deps: HandlerDeps, event: Event) -> list[Outcome] | None:
    """The handlers' outcomes, or None when this delivery was handled before. BadPayload and database errors
    propagate, with nothing recorded."""
    for tries_left in reversed(range(TRIES)):
        outbox = RecordingQueue(deps.queue)
        try:
            with store.unit_of_work():
                if delivery_rows.seen(store, event.delivery_id):
                    return None
                outcomes = router.dispatch(event, dataclasses.replace(deps, queue=outbox))
                delivery_rows.claim(store, event.delivery_id, event.name, outbox.messages)
        except Conflict:
            if not tries_left:
                raise
            log.info("delivery %s: a concurrent transaction won a key; trying again", event.delivery_id)
            continue
        send_held(store, deps.queue, event.delivery_id, outbox.messages)
        return outcomes
    raise AssertionError("unreachable")

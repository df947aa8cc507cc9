"""Webhook deliveries: each X-GitHub-Delivery recorded once, in the same transaction as what its handlers wrote,
with the queue messages they sent held until they went out (a transactional outbox)."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import JSON, DateTime, String, delete, select, update
from sqlalchemy.orm import Mapped, mapped_column

from service.store.rows import Base, utcnow
from service.store.store import Store

# One queue call as a handler made it: (JobQueue method, positional args, keyword args).
Message = tuple[str, list[object], dict[str, object]]


class Delivery(Base):
    """A delivery that was handled. Its id is the primary key: a second insert of it cannot commit."""

    __tablename__ = "deliveries"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    event: Mapped[str] = mapped_column(String(64))
    received_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow, index=True)
    # The queue calls its handlers made, until they are sent; then None.
    unsent: Mapped[list | None] = mapped_column(JSON(none_as_null=True), nullable=True)


def seen(store: Store, delivery_id: str) -> bool:
    """Whether this delivery was handled before (a redelivery)."""
    with store.session() as s:
        return s.get(Delivery, delivery_id) is not None


def claim(store: Store, delivery_id: str, event: str, messages: list[Message]) -> None:
    """Inside the delivery's unit of work, after its handlers: the claim, with the messages they sent, commits with
    the rows they wrote. A concurrent handling of the same id fails this insert (a Conflict) and rolls back."""
    unsent = [[name, args, kwargs] for name, args, kwargs in messages] or None
    with store.session() as s:
        s.add(Delivery(id=delivery_id, event=event, unsent=unsent))
        s.flush()


def mark_sent(store: Store, delivery_id: str) -> None:
    with store.session() as s:
        s.execute(update(Delivery).where(Delivery.id == delivery_id).values(unsent=None))


def unsent(store: Store, older_than: datetime) -> list[tuple[str, list[Message]]]:
    """Deliveries whose messages did not go out (the process died after its commit, or the broker was down)."""
    with store.session() as s:
        query = select(Delivery).where(Delivery.unsent.is_not(None), Delivery.received_at < older_than)
        rows = list(s.scalars(query.order_by(Delivery.received_at).limit(500)))
    return [(row.id, [(str(n), list(a), dict(k)) for n, a, k in row.unsent or []]) for row in rows]


def forget_older_than(store: Store, age: timedelta) -> int:
    """Deliveries older than GitHub would redeliver are forgotten (the table stays small)."""
    with store.session() as s:
        cutoff = utcnow() - age
        return int(s.execute(delete(Delivery).where(Delivery.received_at < cutoff, Delivery.unsent.is_(None)))
                   .rowcount or 0)

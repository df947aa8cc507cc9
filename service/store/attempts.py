"""What each check run of a job ended as, kept when a re-run starts the next one: the job row holds only the
newest, and a Details link on GitHub must keep showing its own attempt (the page /jobs/<id>/attempts/<n>)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, Integer, String, Text, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from service.store.rows import Base, Job
from service.store.store import Store


class AttemptRecord(Base):
    """One finished check run of a job (generation `rerun`); `attempt` names its artifact directory, 0 when it
    never ran (cancelled in the queue, or not run at all)."""

    __tablename__ = "job_attempts"
    job_id: Mapped[str] = mapped_column(String(80), primary_key=True)
    rerun: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    conclusion: Mapped[str] = mapped_column(String(20), default="")
    title: Mapped[str] = mapped_column(Text, default="")
    detail: Mapped[str] = mapped_column(Text, default="")
    runner: Mapped[str] = mapped_column(String(60), default="")
    torch_version: Mapped[str] = mapped_column(String(60), default="")
    started_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


def record_finished(store: Store, job: Job, conclusion: str, title: str) -> None:
    """Keep a completed job's outcome under its generation, as its check run shows it (`conclusion`, `title`: the
    judged verdict, which a later report may change when the base finishes); the rest is kept as first recorded."""
    if job.state != "completed":
        return
    # Cancelled in the queue: the job row's attempt counter still names the previous check run's directory.
    never_ran = job.started_at is None and any(r.attempt == job.attempt for r in attempts_of(store, job.id))
    row = AttemptRecord(job_id=job.id, rerun=job.rerun, attempt=0 if never_ran else job.attempt,
                        conclusion=conclusion, title=title, detail=job.detail, runner=job.runner,
                        torch_version=job.torch_version, started_at=job.started_at, finished_at=job.finished_at)
    try:
        with store.session() as s:
            if s.get(AttemptRecord, (job.id, job.rerun)) is None:
                s.add(row)
            else:  # judged again (its base finished): the record keeps what its check run says now
                s.execute(update(AttemptRecord).where(AttemptRecord.job_id == job.id, AttemptRecord.rerun == job.rerun)
                          .values(conclusion=conclusion, title=title))
    except IntegrityError:  # a concurrent report recorded it first
        pass


def attempts_of(store: Store, job_id: str) -> list[AttemptRecord]:
    with store.session() as s:
        query = select(AttemptRecord).where(AttemptRecord.job_id == job_id).order_by(AttemptRecord.rerun)
        return list(s.scalars(query))

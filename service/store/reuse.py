"""What each job attempt's results are a function of (service/planning/reuse_keys.py), and where its reused results
come from: facts the worker records in the store, where no job writes. Only the compiler fingerprint comes from the
job (its surface.json, read as untrusted data), and it is only ever compared, never served to a more-trusted job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sqlalchemy import JSON, Integer, String, Text, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from service.store.rows import Base, Job, TestResult
from service.store.shards import NOT_RUN
from service.store.store import Store


class JobInputs(Base):
    """One attempt of a job: its inputs' keys, the source of the groups it reuses, and its run-time fingerprint."""

    __tablename__ = "job_inputs"
    job_id: Mapped[str] = mapped_column(String(80), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    suites: Mapped[str] = mapped_column(String(64), default="")
    build: Mapped[str] = mapped_column(String(200), default="")
    device: Mapped[str] = mapped_column(String(10), default="")
    torch: Mapped[str] = mapped_column(String(20), default="")
    config: Mapped[str] = mapped_column(String(64), default="")
    keys: Mapped[dict | None] = mapped_column(JSON, nullable=True)  # group -> static key (reuse_keys.group_keys)
    source_job_id: Mapped[str] = mapped_column(String(80), default="", index=True)  # "": reuses nothing
    source_run_id: Mapped[str] = mapped_column(String(40), default="")
    reused: Mapped[list | None] = mapped_column(JSON, nullable=True)  # the groups left to the source
    note: Mapped[str] = mapped_column(Text, default="")  # the decision, as the job's log says it
    # The compiler fingerprint the job measured ("" none changed); None until read, or when it could not be read.
    fingerprint: Mapped[str | None] = mapped_column(String(200), nullable=True)
    refuted: Mapped[str] = mapped_column(Text, default="")  # why its reuse did not hold: the job ran again whole


@dataclass(frozen=True)
class Planned:
    """What the worker decided for an attempt, to be recorded before the job runs."""

    suites: str
    build: str
    device: str
    torch: str
    config: str
    keys: Mapping[str, str]
    source_job_id: str
    source_run_id: str
    reused: tuple[str, ...]
    note: str


def record_plan(store: Store, job_id: str, attempt: int, plan: Planned) -> None:
    """Once per attempt: a redelivered start of the same attempt keeps the first record."""
    row = JobInputs(job_id=job_id, attempt=attempt, suites=plan.suites, build=plan.build, device=plan.device,
                    torch=plan.torch, config=plan.config, keys=dict(plan.keys), source_job_id=plan.source_job_id,
                    source_run_id=plan.source_run_id, reused=list(plan.reused), note=plan.note[:4000], refuted="")
    try:
        with store.session() as s:
            if s.get(JobInputs, (job_id, attempt)) is None:
                s.add(row)
    except IntegrityError:
        pass


def record_fingerprint(store: Store, job_id: str, attempt: int, fingerprint: str | None) -> None:
    with store.session() as s:
        s.execute(update(JobInputs).where(JobInputs.job_id == job_id, JobInputs.attempt == attempt)
                  .values(fingerprint=fingerprint))


def record_refuted(store: Store, job_id: str, attempt: int, why: str) -> None:
    with store.session() as s:
        s.execute(update(JobInputs).where(JobInputs.job_id == job_id, JobInputs.attempt == attempt)
                  .values(refuted=why[:4000]))


def inputs_of(store: Store, job_id: str, attempt: int) -> JobInputs | None:
    with store.session() as s:
        return s.get(JobInputs, (job_id, attempt))


def refuted_before(store: Store, job_id: str) -> str:
    """Why reuse did not hold for an earlier attempt of this job ("" when it always held): it then runs whole."""
    with store.session() as s:
        found = s.scalars(select(JobInputs.refuted).where(JobInputs.job_id == job_id, JobInputs.refuted != "")
                          .order_by(JobInputs.attempt.desc()).limit(1)).first()
    return found or ""


def consumers_of(store: Store, source_job_id: str) -> list[str]:
    """The jobs whose current attempt reuses results of this job (judged again when it finishes)."""
    with store.session() as s:
        rows = s.execute(select(JobInputs.job_id, JobInputs.attempt).join(Job, Job.id == JobInputs.job_id)
                         .where(JobInputs.source_job_id == source_job_id, Job.attempt == JobInputs.attempt)).all()
    return sorted({job_id for job_id, _attempt in rows})


COPIED = ("outcome", "duration_s", "message", "details", "file", "line", "metrics", "repo_path", "repo_line")


def fill_reused(store: Store, job_id: str, attempt: int, source_job: Job,
                source: Mapping[str, TestResult]) -> int:
    """Fill the reused rows from their source's results, each naming the job that ran it (its own source's, for a
    result the source itself reused). How many rows were filled."""
    filled = 0
    with store.session() as s:
        rows = s.scalars(select(TestResult).where(TestResult.job_id == job_id, TestResult.attempt == attempt,
                                                  TestResult.not_affected.is_(True)))
        for row in rows:
            found = source.get(row.nodeid)
            if found is None:
                continue
            values = {name: getattr(found, name) for name in COPIED}
            values["reused_from"] = found.reused_from or source_job.id
            s.execute(update(TestResult).where(TestResult.id == row.id).values(**values))
            filled += 1
    return filled


def reset_reused(store: Store, job_id: str, attempt: int) -> None:
    """Back to not run (their source was re-run, or did not hold): nothing of an older source stays shown."""
    with store.session() as s:
        s.execute(update(TestResult).where(TestResult.job_id == job_id, TestResult.attempt == attempt,
                                           TestResult.not_affected.is_(True))
                  .values(outcome=NOT_RUN, duration_s=0.0, message="", details="", metrics=None, reused_from=""))


def reused_counts(results: Iterable[TestResult]) -> tuple[int, int, set[str]]:
    """(reused, of them still not run, the jobs they came from) of a job's results."""
    reused = [r for r in results if r.not_affected]
    return len(reused), sum(r.outcome == NOT_RUN for r in reused), {r.reused_from for r in reused if r.reused_from}

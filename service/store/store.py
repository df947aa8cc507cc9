"""Store: rows and queries in SQLAlchemy (SQLite by default, PostgreSQL in deploy).

State fields of runs and jobs (state, gate, conclusion, attempt, ...) are written only by service.jobs.lifecycle.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TypeVar

from sqlalchemy import create_engine, delete, event, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from service.store.rows import (
    INTERNAL_TRIGGERS,
    Artifact,
    InstalledRepo,
    Job,
    NewRun,
    PullComment,
    Run,
    Shard,
    TestRecord,
    TestResult,
    utcnow,
)
from service.store.schema import UNAVAILABLE, create_schema, sqlite_pragmas, unavailable_reason

Row = TypeVar("Row", Run, Job, Shard)
log = logging.getLogger(__name__)
# The session every store call of a unit of work shares (Store.unit_of_work), per thread and per store.
_UNIT: ContextVar[tuple[Store, Session] | None] = ContextVar("compile_ci_store_unit", default=None)


class Conflict(Exception):
    """A unit of work lost a race for a key (the same delivery, the same run) to a concurrent one."""


class Store:
    def __init__(self, database_url: str) -> None:
        if database_url.startswith("sqlite:///"):
            try:
                Path(database_url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                log.error("database directory cannot be created: %s", exc)
        # A server's connections go stale when it restarts: each is pinged before use. An SQLite file's never do.
        sqlite = database_url.startswith("sqlite")
        self.engine: Engine = create_engine(database_url, future=True, pool_pre_ping=not sqlite)
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", sqlite_pragmas)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._schema_lock = threading.Lock()
        self._schema_ready = False
        try:
            self._ensure_schema()
        except UNAVAILABLE as exc:
            # The process starts anyway (the web answers 503, workers retry): the schema is made once it answers.
            log.error("database unavailable: %s", unavailable_reason(exc))

    def _ensure_schema(self) -> None:
        if self._schema_ready:
            return
        with self._schema_lock:
            if self._schema_ready:
                return
            create_schema(self.engine)
            self._schema_ready = True

    @contextmanager
    def session(self) -> Iterator[Session]:
        unit = _UNIT.get()
        if unit is not None and unit[0] is self:
            yield unit[1]  # part of a unit of work: committed (or rolled back) with all of it
            return
        self._ensure_schema()
        with self._sessions.begin() as session:
            yield session

    def in_unit_of_work(self) -> bool:
        unit = _UNIT.get()
        return unit is not None and unit[0] is self

    @contextmanager
    def unit_of_work(self) -> Iterator[Session]:
        """Every call on this store inside the block, in this thread, shares one transaction: all of it is
        committed at the end, or none of it (an exception, a killed process). Conflict when a concurrent
        transaction wrote one of the same keys first: the whole unit may then be tried again."""
        self._ensure_schema()
        try:
            with self._sessions.begin() as session:
                token = _UNIT.set((self, session))
                try:
                    yield session
                finally:
                    _UNIT.reset(token)
        except IntegrityError as exc:
            raise Conflict(unavailable_reason(exc)) from exc

    def create_run_if_absent(self, new: NewRun) -> tuple[Run, bool]:
        try:
            with self.session() as s:
                existing = s.get(Run, new.run_id)
                if existing is not None:
                    return existing, False
                fields = {k: v for k, v in new.__dict__.items() if k != "trigger_ref"}
                run = Run(id=new.run_id, **fields)
                s.add(run)
                s.flush()
            return run, True
        except IntegrityError:  # a concurrent delivery of the same event won the insert
            if self.in_unit_of_work():
                raise  # its transaction is spoilt: the unit's caller tries the whole unit again
            with self.session() as s:
                return s.get_one(Run, new.run_id), False

    def get_run(self, run_id: str) -> Run | None:
        with self.session() as s:
            return s.get(Run, run_id)

    def get_job(self, job_id: str) -> Job | None:
        with self.session() as s:
            return s.get(Job, job_id)

    def jobs_of(self, run_id: str) -> list[Job]:
        with self.session() as s:
            return list(s.scalars(select(Job).where(Job.run_id == run_id).order_by(Job.suite, Job.device)))

    def recent_runs(self, limit: int = 50) -> list[Run]:
        with self.session() as s:
            return list(s.scalars(select(Run).order_by(Run.created_at.desc()).limit(limit)))

    def add_jobs_if_absent(self, jobs: Iterable[Job]) -> None:
        """Insert the jobs no row has yet. Two workers can plan the same job at the same moment (two pull requests
        sharing one base run): the later commit fails as a whole, and then inserts what is still absent."""
        self.add_if_absent(Job, jobs)

    def add_if_absent(self, model: type[Row], rows: Iterable[Row]) -> None:
        """Insert the rows (of `model`, keyed by `id`) no row has yet; a commit beaten by another worker's insert
        is tried again with what is still absent."""
        pending = list(rows)
        for attempt in range(3):
            try:
                with self.session() as s:
                    for row in pending:
                        if s.get(model, row.id) is None:
                            s.add(row)
                return
            except IntegrityError:
                if attempt == 2 or self.in_unit_of_work():
                    raise

    def transition(self, model: type[Row], row_id: str, when: Mapping[str, object],
                   values: Mapping[str, object]) -> Row | None:
        """One conditional UPDATE of one row: its fresh state when every `when` held, else None.

        Only service.jobs.lifecycle calls this for state fields: a condition in the UPDATE itself (not a read
        and then a write) is what keeps two workers, or a worker and a webhook, from both winning a race.
        A tuple in `when` means any of its values.
        """
        conditions = [model.id == row_id]
        for key, expected in when.items():
            column = getattr(model, key)
            conditions.append(column.in_(expected) if isinstance(expected, tuple) else column == expected)
        with self.session() as s:
            if not s.execute(update(model).where(*conditions).values(**values)).rowcount:
                return None
            return s.get(model, row_id, populate_existing=True)

    def runs_of_pr(self, repo_full_name: str, pr_number: int) -> list[Run]:
        with self.session() as s:
            query = select(Run).where(Run.repo_full_name == repo_full_name, Run.pr_number == pr_number)
            return list(s.scalars(query.order_by(Run.created_at)))

    def runs_at_sha(self, repo_full_name: str, head_sha: str) -> list[Run]:
        with self.session() as s:
            # Base runs and canaries are internal (no check runs): GitHub's buttons at a sha never re-run them.
            query = select(Run).where(Run.repo_full_name == repo_full_name, Run.head_sha == head_sha,
                                      Run.trigger.not_in(INTERNAL_TRIGGERS))
            return list(s.scalars(query.order_by(Run.created_at)))

    def push_run_at(self, repo_full_name: str, sha: str, base_key: str | None = None) -> Run | None:
        """The default branch's run at `sha` (the baseline a pull request on that base is judged against); with
        `base_key`, only one planned under that key (service/planning/base_runs.py)."""
        with self.session() as s:
            query = select(Run).where(Run.repo_full_name == repo_full_name, Run.head_sha == sha,
                                      Run.trigger == "push", Run.cancelled_reason.is_(None))
            if base_key is not None:
                query = query.where(Run.base_key == base_key)
            return s.scalars(query.order_by(Run.created_at.desc()).limit(1)).first()

    def runs_based_on(self, base_run_id: str) -> list[Run]:
        with self.session() as s:
            return list(s.scalars(select(Run).where(Run.base_run_id == base_run_id)))

    def link_base(self, run_id: str, base_run_id: str) -> None:
        with self.session() as s:
            s.execute(update(Run).where(Run.id == run_id).values(base_run_id=base_run_id))

    def record_config(self, run_id: str, config_text: str, base_key: str = "") -> None:
        with self.session() as s:
            s.execute(update(Run).where(Run.id == run_id, Run.config_text.is_(None))
                      .values(config_text=config_text, base_key=base_key))

    def record_verdicts(self, job_id: str, attempt: int, verdicts: Mapping[str, tuple[str, str, bool]]) -> None:
        """Each test's verdict against the base (nodeid -> (verdict, detail, over budget)), for the pages."""
        with self.session() as s:
            for row in s.scalars(select(TestResult).where(TestResult.job_id == job_id, TestResult.attempt == attempt)):
                verdict, detail, over = verdicts.get(row.nodeid, ("", "", False))
                row.verdict, row.verdict_detail, row.over_budget = verdict, detail, int(over)

    def record_shown(self, job: Job, conclusion: str, title: str) -> None:
        """What this generation's completed check run says; an older generation's report never overwrites it."""
        with self.session() as s:
            s.execute(update(Job).where(Job.id == job.id, Job.rerun == job.rerun, Job.attempt == job.attempt,
                                        Job.state == "completed")
                      .values(verdict_conclusion=conclusion, verdict_title=title))

    def pull_comment(self, run_id: str) -> PullComment | None:
        with self.session() as s:
            return s.get(PullComment, run_id)

    def save_pull_comment(self, run_id: str, comment_id: int, digest: str) -> None:
        with self.session() as s:
            row = s.get(PullComment, run_id)
            if row is None:
                s.add(PullComment(run_id=run_id, comment_id=comment_id, digest=digest))
            else:
                row.comment_id, row.digest = comment_id, digest

    def runs_in_state(self, *states: str) -> list[Run]:
        with self.session() as s:
            return list(s.scalars(select(Run).where(Run.state.in_(states))))

    def jobs_in_state(self, *states: str) -> list[Job]:
        with self.session() as s:
            return list(s.scalars(select(Job).where(Job.state.in_(states))))

    def record_report(self, job_id: str, rerun: int, **fields: object) -> bool:
        """Save what was sent to GitHub, unless the job was re-run meanwhile (that is another check run)."""
        with self.session() as s:
            return bool(s.execute(update(Job).where(Job.id == job_id, Job.rerun == rerun).values(**fields)).rowcount)

    def set_installed(self, full_name: str, installation_id: int, installed: bool) -> None:
        with self.session() as s:
            row = s.get(InstalledRepo, full_name)
            if row is None:
                s.add(InstalledRepo(full_name=full_name, installation_id=installation_id, installed=installed))
            else:
                row.installation_id, row.installed, row.changed_at = installation_id, installed, utcnow()

    def repos_of_installation(self, installation_id: int) -> list[str]:
        with self.session() as s:
            query = select(InstalledRepo.full_name).where(InstalledRepo.installation_id == installation_id)
            return list(s.scalars(query))

    def installed_repos(self) -> list[str]:
        """The repositories the App is installed on now, as recorded (by name)."""
        with self.session() as s:
            query = select(InstalledRepo.full_name).where(InstalledRepo.installed.is_(True))
            return list(s.scalars(query.order_by(InstalledRepo.full_name)))

    def is_uninstalled(self, full_name: str) -> bool:
        """True only for a removal we recorded: repositories installed before we kept records still run."""
        with self.session() as s:
            row = s.get(InstalledRepo, full_name)
            return row is not None and not row.installed

    def replace_results(self, job_id: str, attempt: int, records: Iterable[TestRecord]) -> None:
        with self.session() as s:
            s.execute(delete(TestResult).where(TestResult.job_id == job_id, TestResult.attempt == attempt))
            s.add_all(TestResult(job_id=job_id, attempt=attempt, **r.__dict__) for r in records)

    def results_of(self, job_id: str, attempt: int) -> list[TestResult]:
        with self.session() as s:
            query = select(TestResult).where(TestResult.job_id == job_id, TestResult.attempt == attempt)
            return list(s.scalars(query.order_by(TestResult.id)))

    def replace_artifacts(self, job_id: str, attempt: int, files: Iterable[tuple[str, int]]) -> None:
        with self.session() as s:
            s.execute(delete(Artifact).where(Artifact.job_id == job_id, Artifact.attempt == attempt))
            s.add_all(Artifact(job_id=job_id, attempt=attempt, path=p, size=n) for p, n in files)

    def artifacts_of(self, job_id: str, attempt: int) -> list[Artifact]:
        with self.session() as s:
            query = select(Artifact).where(Artifact.job_id == job_id, Artifact.attempt == attempt)
            return list(s.scalars(query.order_by(Artifact.path)))

"""A sharded job's rows: its shards, each shard's test results, the merged order, the tests not run because their
results are reused, and the recorded durations a split is made from."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from sqlalchemy import delete, select

from service.store.rows import Job, Run, Shard, TestRecord, TestResult
from service.store.store import Store

NOT_RUN = "not_run"  # the outcome of a reused test until its source job has a result for it (service/store/reuse.py)
HISTORY_JOBS = 6  # the newest finished jobs of a suite and device whose durations a split is made from
MAX_TEST_SECONDS = 86_400.0  # a recorded duration above a day, or not a number, is read as this / as 0


def add_shards_if_absent(store: Store, shards: Iterable[Shard]) -> None:
    """A retried fan-out (its worker died after the first insert) adds only what is missing."""
    store.add_if_absent(Shard, shards)


def get_shard(store: Store, shard_id: str) -> Shard | None:
    with store.session() as s:
        return s.get(Shard, shard_id)


def shards_of(store: Store, job_id: str, job_attempt: int) -> list[Shard]:
    with store.session() as s:
        query = select(Shard).where(Shard.job_id == job_id, Shard.job_attempt == job_attempt)
        return list(s.scalars(query.order_by(Shard.index)))


def shards_in_state(store: Store, *states: str) -> list[Shard]:
    with store.session() as s:
        return list(s.scalars(select(Shard).where(Shard.state.in_(states))))


def replace_shard_results(store: Store, job_id: str, attempt: int, shard: int, records: Iterable[TestRecord]) -> None:
    """One shard's results under its job's attempt; a shard run again replaces only its own."""
    with store.session() as s:
        s.execute(delete(TestResult).where(TestResult.job_id == job_id, TestResult.attempt == attempt,
                                           TestResult.shard == shard))
        s.add_all(TestResult(job_id=job_id, attempt=attempt, shard=shard, **r.__dict__) for r in records)


def order_results(store: Store, job_id: str, attempt: int, order: Sequence[str]) -> None:
    """Rows in the order one runner would have run the tests (pytest's collection order; results are listed by row
    id): the merged attempt reads like the unsharded one. Tests not in `order` keep their place after them. A test
    two shards ran (a runner image whose suites cannot split runs everything in every shard) is kept once."""
    rank = {nodeid: index for index, nodeid in enumerate(order)}
    with store.session() as s:
        rows = list(s.scalars(select(TestResult).where(TestResult.job_id == job_id, TestResult.attempt == attempt)
                              .order_by(TestResult.id)))
        kept, seen = [], set()
        for row in sorted(rows, key=lambda r: (rank.get(r.nodeid, len(rank)), r.shard, r.id)):
            if row.nodeid not in seen:
                seen.add(row.nodeid)
                kept.append(row)
        if [r.id for r in kept] == [r.id for r in rows]:
            return
        copies = [_copy(r) for r in kept]
        s.execute(delete(TestResult).where(TestResult.job_id == job_id, TestResult.attempt == attempt))
        s.add_all(copies)


def _copy(row: TestResult) -> TestResult:
    fields = {c.name: getattr(row, c.name) for c in TestResult.__table__.columns if c.name != "id"}
    return TestResult(**fields)


def add_not_affected(store: Store, job_id: str, attempt: int, nodeids: Iterable[str]) -> int:
    """Rows for the tests a job did not run because their results are reused (copied in when their source job has
    one: service/store/reuse.py); none for a test the job ran after all. How many were added."""
    with store.session() as s:
        have = set(s.scalars(select(TestResult.nodeid).where(TestResult.job_id == job_id,
                                                             TestResult.attempt == attempt)))
        fresh = [n for n in dict.fromkeys(nodeids) if n not in have]
        s.add_all(TestResult(job_id=job_id, attempt=attempt, nodeid=n, outcome=NOT_RUN, not_affected=True)
                  for n in fresh)
    return len(fresh)


def not_affected_results(store: Store, job_id: str, attempt: int) -> list[TestResult]:
    with store.session() as s:
        return list(s.scalars(select(TestResult).where(TestResult.job_id == job_id, TestResult.attempt == attempt,
                                                       TestResult.not_affected.is_(True))))


def recorded_durations(store: Store, repo: str, suite: str, device: str) -> dict[str, float]:
    """Seconds per test from the newest finished jobs of this suite and device: the default branch's first (its
    newest push run), then any run's, for tests it does not have. Results copied from a base are not measurements."""
    return {nodeid: seconds for nodeid, (seconds, _groups) in recorded_tests(store, repo, suite, device).items()}


def recorded_tests(store: Store, repo: str, suite: str, device: str) -> dict[str, tuple[float, tuple[str, ...]]]:
    """`recorded_durations`, each with the groups its job said the test belongs to (its declared targets' specs, or
    the built-in corpus: the plugin's `targets` metric; () where it said none). Job output: only ever a shard count's
    input, bounded by the worker slots either way."""
    jobs = (select(Job.id, Job.attempt).join(Run, Run.id == Job.run_id)
            .where(Run.repo_full_name == repo, Job.suite == suite, Job.device == device, Job.state == "completed",
                   Job.conclusion.in_(("success", "failure")))
            .order_by((Run.trigger == "push").desc(), Job.finished_at.desc()).limit(HISTORY_JOBS))
    found: dict[str, tuple[float, tuple[str, ...]]] = {}
    with store.session() as s:
        for job_id, attempt in s.execute(jobs).all():
            rows = s.execute(select(TestResult.nodeid, TestResult.duration_s, TestResult.metrics).where(
                TestResult.job_id == job_id, TestResult.attempt == attempt, TestResult.not_affected.is_(False)))
            for nodeid, seconds, metrics in rows:
                said = (metrics or {}).get("targets") if isinstance(metrics, dict) else None
                groups = tuple(g for g in said if isinstance(g, str)) if isinstance(said, list) else ()
                found.setdefault(nodeid, (_bounded(seconds), groups))
    return found


def _bounded(seconds: object) -> float:
    """A stored duration as a planner may add it up: finite, from 0 to MAX_TEST_SECONDS (job output, stored by any
    version: an infinite or huge one would overflow a shard count's arithmetic)."""
    try:
        value = float(seconds or 0.0)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0
    return min(value, MAX_TEST_SECONDS) if math.isfinite(value) and value > 0 else 0.0


def has_records(store: Store, repo: str, suite: str, device: str) -> bool:
    """Whether `recorded_tests` would find a finished job to take times from (without reading its results)."""
    found = (select(Job.id).join(Run, Run.id == Job.run_id)
             .where(Run.repo_full_name == repo, Job.suite == suite, Job.device == device, Job.state == "completed",
                    Job.conclusion.in_(("success", "failure"))).limit(1))
    with store.session() as s:
        return s.execute(found).first() is not None

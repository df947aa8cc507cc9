"""A push's shard counts chosen for its whole run (service/jobs/run_plan.py), and plan_for asking it with the store's
records: on the real-model sample's recorded one-slot cold push, on named queues, and on random runs (seeded,
printed) against the per-job rule."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, cast

import pytest

from service.config import Settings
from service.jobs import lifecycle
from service.jobs.context import WorkerContext
from service.jobs.lifecycle import Conclusion, Outcome
from service.jobs.run_plan import Work, choose, makespan, piece_loads, shard_count
from service.jobs.shard_plan import plan_for
from service.secret import Secret
from service.store import NewRun, Run, Store, TestRecord

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "bench" / "records" / "h200-models-repo-cold-one-slot.json"


def _sample() -> list[Work]:
    """The six suites of the real-model sample as its one-slot cold push on the H200 recorded them (363 tests)."""
    run = json.loads(RECORD.read_text())["runs"][0]
    return [Work(job["suite"], {nodeid: seconds for nodeid, _shard, seconds in job["each_test"]})
            for job in run["jobs"]]


def _span(work: list[Work], counts: list[int], slots: int, start_s: float) -> float:
    return makespan([piece_loads(w.durations, c) for w, c in zip(work, counts, strict=True)], slots, start_s)


def test_the_real_model_sample_on_four_slots_ends_sooner_with_fewer_shards_than_the_per_job_rule() -> None:
    work = _sample()
    rule = [shard_count(4, 4, w.durations, 30) for w in work]
    assert rule == [3, 4, 2, 1, 2, 2]  # 14 shards: what the 2026-11-29 H200 runs measured (148-155 s)
    planned = choose(work, 4, 4, 30, 8, rule)
    print(f"rule {rule}: {_span(work, rule, 4, 8):.1f} s; planned {planned}: {_span(work, planned, 4, 8):.1f} s")
    assert sum(planned) < sum(rule) - 3  # fewer starts ...
    assert _span(work, planned, 4, 8) < 0.9 * _span(work, rule, 4, 8)  # ... and an earlier end
    assert planned[1] >= 2  # the longest suite is still cut: it is more than a slot's share of the run
    assert choose(work, 1, 4, 30, 8, rule) == [1] * 6  # one slot: nothing to share out


def test_the_slot_that_fans_a_job_out_runs_its_first_piece_and_the_rest_go_ahead_of_the_waiting_jobs() -> None:
    # Two slots. Job 0 fans out (1 s) into two 10 s pieces: the first slot runs one at once (ends at 11), the other is
    # queued. The second slot takes job 1's message at 0 (the piece is not queued yet) and runs it whole (5 s); at 5 it
    # takes the queued piece, ahead of job 2's message (ends at 15); job 2 (20 s) then waits for the first slot: 31.
    assert makespan([[10.0, 10.0], [5.0], [20.0]], 2, 0.0) == 31.0
    # Each start paid: 1 + 2 + 10 = 13 on the first slot; 7, then the piece 7 + 2 + 10 = 19; job 2 13 + 22 = 35.
    assert makespan([[10.0, 10.0], [5.0], [20.0]], 2, 2.0) == 35.0
    # One slot: everything one after the other, each piece paying its start.
    assert makespan([[10.0, 10.0], [30.0]], 1, 2.0) == pytest.approx(1 + 12 + 12 + 32)


def test_piece_loads_are_the_plugins_split_of_the_recorded_times() -> None:
    durations = {"a": 8.0, "b": 5.0, "c": 4.0, "d": 3.0}
    assert piece_loads(durations, 1) == [20.0]
    assert sorted(piece_loads(durations, 2)) == [9.0, 11.0]  # longest first onto the lightest: 8+3, 5+4
    assert sorted(piece_loads(durations, 3)) == [5.0, 7.0, 8.0]
    assert sorted(piece_loads({"a": 9.0}, 3)) == [9.0]  # one test: one piece, however many shards


def test_every_job_of_the_run_reaches_the_same_counts_whatever_order_it_read_the_records_in() -> None:
    work = _sample()
    shuffled = []
    for w in work:
        items = list(w.durations.items())
        random.Random(7).shuffle(items)
        shuffled.append(Work(w.name, dict(items)))
    assert choose(shuffled, 4, 4, 30, 8) == choose(work, 4, 4, 30, 8)


@pytest.mark.parametrize("fixed", [None, 11, 404])  # None: a fresh seed each run (an id xdist's workers agree on)
def test_random_runs_never_end_later_than_the_per_job_rule_nor_break_its_bounds(fixed: int | None) -> None:
    seed = random.SystemRandom().randrange(2**32) if fixed is None else fixed
    print(f"seed {seed}")
    rng = random.Random(seed)
    for _ in range(40):
        slots, cap = rng.randint(1, 8), rng.randint(1, 8)
        least, start = rng.choice([0, 10, 30]), rng.choice([0.0, 2.0, 8.0, 20.0])
        work = [Work(f"s{j}", {f"t{i}": rng.choice([0.0, rng.uniform(0, 5), rng.uniform(0, 90)])
                               for i in range(rng.randint(1, 30))}) for j in range(rng.randint(1, 7))]
        rule = [shard_count(cap, slots, w.durations, least) for w in work]
        planned = choose(work, slots, cap, least, start, rule)
        for w, count in zip(work, planned, strict=True):
            assert 1 <= count <= shard_count(cap, slots, w.durations, least) <= max(1, min(cap, slots))
        assert _span(work, planned, slots, start) <= _span(work, rule, slots, start) + 1e-6, (seed, rule, planned)
        assert _span(work, planned, slots, start) <= _span(work, [1] * len(work), slots, start) + 1e-6


# plan_for with the store: a push asks the plan of its run; a pull request keeps the per-job rule.

class _Slots:
    """The worker-slot broadcast plan_for asks (Celery's, in the service): four live cpu slots."""

    def worker_slots(self) -> dict[str, int]:
        return {"cpu": 4}


def _context(tmp_path: Path, store: Store) -> WorkerContext:
    settings = Settings(webhook_secret=Secret("s"), github_app_id=1, github_private_key=Secret("k"),
                        data_dir=tmp_path, max_shards=4, shard_min_seconds=30, shard_start_seconds=8)
    unused = cast(Any, None)
    return WorkerContext(settings, store, unused, unused, cast(Any, _Slots()), unused, unused, tmp_path)


def _run(store: Store, trigger: str, sha: str) -> Run:
    run, _ = store.create_run_if_absent(NewRun(
        repo_full_name="octo/zoo", repo_id=1, installation_id=2, clone_url="file:///x", private=False,
        trigger=trigger, trigger_ref=f"{trigger}/{sha}", pr_number=1 if trigger == "pull_request" else None,
        branch="main", head_sha=sha * 40, sender="o"))
    return run


def _record(store: Store, work: list[Work]) -> None:
    """A finished push that ran every suite and recorded each test's time."""
    run = _run(store, "push", "a")
    lifecycle.plan(store, run, [lifecycle.new_job(run, w.name, "cpu", 60) for w in work], None)
    for job in store.jobs_of(run.id):
        job = lifecycle.start(store, job.id, "local")
        durations = next(w.durations for w in work if w.name == job.suite)
        store.replace_results(job.id, job.attempt, [TestRecord(nodeid=n, outcome="passed", duration_s=s)
                                                    for n, s in durations.items()])
        lifecycle.complete(store, job, Outcome(Conclusion.SUCCESS, "passed"))


def test_a_push_takes_its_count_from_its_runs_plan_and_a_pull_request_from_its_own_time(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'ci.db'}")
    work = _sample()
    _record(store, work)
    ctx = _context(tmp_path, store)
    rule = [shard_count(4, 4, w.durations, 30) for w in work]
    planned = choose(work, 4, 4, 30, 8, rule)
    assert planned != rule
    for trigger, expected in (("push", planned), ("pull_request", rule)):
        run = _run(store, trigger, "b" if trigger == "push" else "c")
        lifecycle.plan(store, run, [lifecycle.new_job(run, w.name, "cpu", 60) for w in work], None)
        counts = {job.suite: plan_for(ctx, run, job)[0] for job in store.jobs_of(run.id)}
        assert [counts[w.name] for w in work] == expected, trigger
    # A push with a suite that has no record yet: its run's work is unknown, so every job keeps the per-job rule, and
    # the one without records (its shards take their tests while they run) two shards a slot over the run's 7 jobs.
    run = _run(store, "push", "d")
    lifecycle.plan(store, run, [lifecycle.new_job(run, w.name, "cpu", 60) for w in work]
                   + [lifecycle.new_job(run, "ops", "cpu", 60)], None)
    counts = {job.suite: plan_for(ctx, run, job)[0] for job in store.jobs_of(run.id)}
    assert [counts[w.name] for w in work] == rule and counts["ops"] == 2
    # A repository's first push: no job has records; six jobs on four slots take two shards each, one job alone four.
    fresh = Store(f"sqlite:///{tmp_path / 'fresh.db'}")
    ctx = _context(tmp_path, fresh)
    for suites, expected in ((["autograd", "correctness", "freezing", "fusion", "layout", "passes"], 2),
                             (["correctness"], 4)):
        run = _run(fresh, "push", "a" if len(suites) > 1 else "b")
        lifecycle.plan(fresh, run, [lifecycle.new_job(run, suite, "cpu", 60) for suite in suites], None)
        assert [plan_for(ctx, run, job) for job in fresh.jobs_of(run.id)] == [(expected, {})] * len(suites)


def test_a_jobs_infinite_or_huge_durations_cannot_break_the_next_pushs_plan(tmp_path: Path) -> None:
    """Trust boundary: a job's durations are its output (its junit.xml, or its tests' metrics.json when it dies
    first), stored and read back for the next push's plan. JSON's Infinity and NaN never become a time (the untrusted
    reader refuses those files, and a number beyond its bound reads as none); junit's `time="1e308"` is finite and was
    stored as it was: fifty of them added up to infinity, and a shard count's arithmetic raised. The store's read for
    planning bounds each duration, and the plan still counts shards within the slots."""
    from service.jobs.outcome import partial_records

    out = tmp_path / "attempt"
    for i, raw in enumerate(("Infinity", "NaN", "-Infinity", "1e308", "2.5")):
        (out / "tests" / f"t{i}").mkdir(parents=True)
        (out / "tests" / f"t{i}" / "metrics.json").write_text(
            f'{{"nodeid": "t::{i}", "outcome": "passed", "duration_s": {raw}}}')
    assert [(r.nodeid, r.duration_s) for r in partial_records(out)] == [("t::3", 0.0), ("t::4", 2.5)]
    store = Store(f"sqlite:///{tmp_path / 'ci.db'}")
    # As junit.xml's times are stored (finite, unbounded), and one no reader should have let through (infinity).
    hostile = [Work("correctness", {"t::inf": float("inf"), "t::huge": 1e308, "t::big": 1e300, "t::ok": 5.0}),
               Work("fusion", {f"t::{i}": 1e308 for i in range(50)})]
    _record(store, hostile)
    ctx = _context(tmp_path, store)
    run = _run(store, "push", "e")
    lifecycle.plan(store, run, [lifecycle.new_job(run, w.name, "cpu", 60) for w in hostile], None)
    counts = {job.suite: plan_for(ctx, run, job)[0] for job in store.jobs_of(run.id)}
    assert all(1 <= count <= 4 for count in counts.values()), counts


def test_a_first_push_queues_its_heaviest_suite_first_and_a_push_with_records_keeps_the_plans_order(
        tmp_path: Path) -> None:
    from service.jobs.queue_order import queue_order

    six = ["autograd", "correctness", "freezing", "fusion", "layout", "passes"]
    fresh = Store(f"sqlite:///{tmp_path / 'fresh.db'}")
    run = _run(fresh, "push", "a")
    lifecycle.plan(fresh, run, [lifecycle.new_job(run, suite, "cpu", 60) for suite in six + ["custom"]], None)
    order = [job.suite for job in queue_order(_context(tmp_path, fresh), run, fresh.jobs_of(run.id))]
    # Longest first by the suites' weight; a suite the weights do not know sits with the middle ones.
    assert order == ["correctness", "autograd", "freezing", "custom", "passes", "layout", "fusion"]
    # Once any of them has records the run plan chooses counts for the store's order, so that is the queue's.
    store = Store(f"sqlite:///{tmp_path / 'ci.db'}")
    _record(store, [Work("fusion", {"t::a": 1.0})])
    run = _run(store, "push", "b")
    lifecycle.plan(store, run, [lifecycle.new_job(run, suite, "cpu", 60) for suite in six], None)
    jobs = store.jobs_of(run.id)
    assert queue_order(_context(tmp_path, store), run, jobs) == jobs and [j.suite for j in jobs] == six

"""Shards in the lifecycle and the store: conditional transitions (a stale shard attempt never overwrites a newer one),
each shard's results its own, the merged order, tests left to their base, and the durations a split is made from."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.jobs import lifecycle
from service.jobs.lifecycle import Conclusion, JobState, Outcome
from service.jobs.shard_plan import reachable, shard_count
from service.store import NewRun, Run, Store, TestRecord
from service.store.reuse import fill_reused
from service.store.shards import (
    NOT_RUN,
    add_not_affected,
    add_shards_if_absent,
    order_results,
    recorded_durations,
    recorded_tests,
    replace_shard_results,
    shards_of,
)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'ci.db'}")


def _run(store: Store, trigger: str = "pull_request", sha: str = "a") -> Run:
    run, _ = store.create_run_if_absent(NewRun(
        repo_full_name="octo/zoo", repo_id=1, installation_id=2, clone_url="file:///x", private=False,
        trigger=trigger, trigger_ref=f"{trigger}/{sha}", pr_number=1 if trigger == "pull_request" else None,
        branch="b", head_sha=sha * 40, sender="o"))
    return run


def _sharded(store: Store, count: int = 3) -> str:
    run = _run(store)
    lifecycle.plan(store, run, [lifecycle.new_job(run, "correctness", "cpu", 60)], None)
    (job,) = store.jobs_of(run.id)
    started = lifecycle.start_sharded(store, job.id, "local", count)
    assert started is not None and (started.state, started.attempt, started.shards) == (JobState.RUNNING, 1, count)
    add_shards_if_absent(store, lifecycle.new_shards(started, "{}"))
    add_shards_if_absent(store, lifecycle.new_shards(started, "{}"))  # a retried fan-out adds nothing twice
    return job.id


def test_a_job_fans_out_once_and_a_rerun_starts_whole_again(store: Store) -> None:
    job_id = _sharded(store)
    assert lifecycle.start_sharded(store, job_id, "local", 3) is None  # a redelivered message: already running
    assert [s.index for s in shards_of(store, job_id, 1)] == [0, 1, 2]
    job = store.get_job(job_id)
    lifecycle.complete(store, job, Outcome(Conclusion.SUCCESS, "3 passed"))
    again = lifecycle.rerun(store, job_id)
    assert again is not None and again.shards == 1  # the next attempt decides its shards afresh
    assert shards_of(store, job_id, 2) == []


def test_a_stale_shard_attempt_never_completes_a_newer_one(store: Store) -> None:
    job_id = _sharded(store)
    shard = shards_of(store, job_id, 1)[1]
    first = lifecycle.start_shard(store, shard.id, "local")
    second = lifecycle.start_shard(store, shard.id, "local")  # its worker was lost; another took it
    assert first is not None and second is not None and (first.attempt, second.attempt) == (1, 2)
    ok = Outcome(Conclusion.SUCCESS, "1 passed", counts={"passed": 1})
    assert lifecycle.complete_shard(store, first, ok, "tests") is None
    done = lifecycle.complete_shard(store, second, ok, "tests")
    assert done is not None and (done.state, done.kind, done.title) == (JobState.COMPLETED, "tests", "1 passed")
    assert store.get_job(job_id).state == JobState.RUNNING  # the job completes only when merged


def test_a_shard_is_retried_alone_once_for_infrastructure_and_once_when_lost(store: Store) -> None:
    job_id = _sharded(store)
    first, second, _third = shards_of(store, job_id, 1)
    running = lifecycle.start_shard(store, first.id, "local")
    assert lifecycle.retry_shard_after_infra_error(store, running, "engine unreachable")
    running = lifecycle.start_shard(store, first.id, "local")
    assert not lifecycle.retry_shard_after_infra_error(store, running, "again")  # once
    lost = lifecycle.start_shard(store, second.id, "local")
    assert lifecycle.requeue_lost_shard(store, lost)
    lost = lifecycle.start_shard(store, second.id, "local")
    assert lost.infra_failures == 1 and lifecycle.give_up_lost_shard(store, lost, "lost twice")
    shards = shards_of(store, job_id, 1)
    assert [(s.state, s.attempt) for s in shards] == [("running", 2), ("completed", 2), ("queued", 0)]
    assert shards[1].title == lifecycle.INFRA_TITLE and store.get_job(job_id).attempt == 1  # never the whole job


def test_only_a_queued_shard_is_cancelled_without_running(store: Store) -> None:
    job_id = _sharded(store)
    first, second, _ = shards_of(store, job_id, 1)
    lifecycle.start_shard(store, first.id, "local")
    assert not lifecycle.cancel_shard(store, first.id, "superseded")  # running: its watch stops it
    assert lifecycle.cancel_shard(store, second.id, "superseded")
    assert shards_of(store, job_id, 1)[1].conclusion == Conclusion.CANCELLED


def _records(*pairs: tuple[str, str]) -> list[TestRecord]:
    return [TestRecord(nodeid=n, outcome=o, duration_s=float(len(n))) for n, o in pairs]


def test_each_shard_keeps_its_own_results_and_the_merge_puts_them_in_pytest_order(store: Store) -> None:
    job_id = _sharded(store, 2)
    replace_shard_results(store, job_id, 1, 1, _records(("t::b", "passed"), ("t::d", "failed"), ("t::a", "failed")))
    replace_shard_results(store, job_id, 1, 0, _records(("t::a", "passed"), ("t::old", "passed")))
    replace_shard_results(store, job_id, 1, 0, _records(("t::a", "passed"), ("t::c", "skipped")))  # run again
    order_results(store, job_id, 1, ["t::a", "t::b", "t::c", "t::d"])
    assert [(r.nodeid, r.shard, r.outcome) for r in store.results_of(job_id, 1)] == [
        ("t::a", 0, "passed"), ("t::b", 1, "passed"), ("t::c", 0, "skipped"), ("t::d", 1, "failed")]  # once each


def test_reused_tests_take_their_sources_results_naming_it_and_stay_not_run_without_one(store: Store) -> None:
    job_id = _sharded(store, 1)
    replace_shard_results(store, job_id, 1, 0, _records(("t::vit", "failed")))
    assert add_not_affected(store, job_id, 1, ["t::resnet", "t::gone", "t::vit", "t::resnet"]) == 2
    source, rows = _base_rows(store)
    assert fill_reused(store, job_id, 1, source, {r.nodeid: r for r in rows}) == 1
    rows = {r.nodeid: (r.outcome, r.not_affected, r.message, r.reused_from) for r in store.results_of(job_id, 1)}
    assert rows == {"t::vit": ("failed", False, "", ""),
                    "t::resnet": ("failed", True, "the base's own failure", source.id),
                    "t::gone": (NOT_RUN, True, "", "")}


def _base_rows(store: Store) -> tuple:
    run = _run(store, "push", "b")
    lifecycle.plan(store, run, [lifecycle.new_job(run, "correctness", "cpu", 60)], None)
    (job,) = store.jobs_of(run.id)
    store.replace_results(job.id, 0, [TestRecord(nodeid="t::resnet", outcome="failed", duration_s=2.0,
                                                 message="the base's own failure")])
    return job, store.results_of(job.id, 0)


def test_durations_come_from_the_default_branch_first_then_any_run(store: Store) -> None:
    for trigger, sha, seconds in (("push", "b", 5.0), ("pull_request", "c", 9.0)):
        run = _run(store, trigger, sha)
        lifecycle.plan(store, run, [lifecycle.new_job(run, "correctness", "cpu", 60)], None)
        (job,) = store.jobs_of(run.id)
        job = lifecycle.start(store, job.id, "local")
        records = [TestRecord(nodeid="t::shared", outcome="passed", duration_s=seconds),
                   TestRecord(nodeid=f"t::only-{trigger}", outcome="failed", duration_s=seconds)]
        store.replace_results(job.id, job.attempt, records)
        add_not_affected(store, job.id, job.attempt, ["t::copied"])  # a base's result, not a measurement
        lifecycle.complete(store, job, Outcome(Conclusion.FAILURE, "1 failed, 1 passed"))
    assert recorded_durations(store, "octo/zoo", "correctness", "cpu") == {
        "t::shared": 5.0, "t::only-push": 5.0, "t::only-pull_request": 9.0}
    assert recorded_durations(store, "octo/zoo", "fusion", "cpu") == {}


def test_a_pull_request_is_split_by_the_tests_its_change_reaches_not_by_the_whole_suite(store: Store) -> None:
    """A push recorded each test's groups (the plugin's `targets` metric); a pull request that changes one model
    leaves the others' tests to its base, so its shard count comes from that model's tests alone."""
    run = _run(store, "push", "b")
    lifecycle.plan(store, run, [lifecycle.new_job(run, "correctness", "cpu", 60)], None)
    (job,) = store.jobs_of(run.id)
    job = lifecycle.start(store, job.id, "local")
    groups = {"resnet": ["zoo.resnet:examples"], "gpt2": ["zoo.gpt2:examples"], "corpus": ["(built-in corpus)"],
              "both": ["zoo.gpt2:examples", "zoo.resnet:examples"], "unsaid": None}
    records = [TestRecord(nodeid=f"t::{name}{i}", outcome="passed", duration_s=10.0,
                          metrics={} if said is None else {"targets": said})
               for name, said in groups.items() for i in range(4)]
    store.replace_results(job.id, job.attempt, records)
    lifecycle.complete(store, job, Outcome(Conclusion.SUCCESS, "20 passed"))
    recorded = recorded_tests(store, "octo/zoo", "correctness", "cpu")
    assert recorded["t::both0"] == (10.0, ("zoo.gpt2:examples", "zoo.resnet:examples"))
    assert recorded["t::unsaid0"] == (10.0, ())
    everything = reachable(recorded, ())
    assert len(everything) == 20 and shard_count(4, 4, everything, 40) == 4
    # Only gpt2 changed: resnet's and the corpus's tests are left to the base; gpt2's, the test of both models and
    # the tests whose groups were never said run (120 s: three shards of 40 s, not four).
    left = reachable(recorded, ("zoo.resnet:examples", "(built-in corpus)"))
    assert sorted({n[:-1] for n in left}) == ["t::both", "t::gpt2", "t::unsaid"]
    assert shard_count(4, 4, left, 40) == 3
    assert reachable(recorded, ("zoo.resnet:examples", "zoo.gpt2:examples", "(built-in corpus)")) == {
        f"t::unsaid{i}": 10.0 for i in range(4)}

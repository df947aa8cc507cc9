"""A push's shards are cut no smaller than half a slot's share of its recorded work (service/jobs/shard_plan.py):
when the push alone fills every slot, more pieces only add starts. Other runs keep COMPILE_CI_SHARD_MIN_SECONDS."""

from __future__ import annotations

import itertools
from pathlib import Path
from types import SimpleNamespace

import pytest

from service.jobs import lifecycle
from service.jobs.lifecycle import Conclusion, Outcome
from service.jobs.shard_plan import push_min_seconds, shard_count
from service.store import Job, NewRun, Run, Store, TestRecord

# The real-model sample's six suites, their recorded seconds on one cuda slot (twelfth device session).
RECORDED = {"autograd": 74.5, "correctness": 164.6, "freezing": 50.9, "fusion": 14.0, "layout": 30.6, "passes": 42.7}
_refs = itertools.count()


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'ci.db'}")


def run_of(store: Store, trigger: str, suites: dict[str, str]) -> tuple[Run, dict[str, Job]]:
    made, _ = store.create_run_if_absent(NewRun(
        repo_full_name="octo/zoo", repo_id=1, installation_id=2, clone_url="file:///x", private=False,
        trigger=trigger, trigger_ref=f"{trigger}/{next(_refs)}", pr_number=7 if trigger == "pull_request" else None,
        branch="main", head_sha=f"{next(_refs):040d}", sender="o"))  # type: ignore[arg-type]
    store.add_jobs_if_absent([lifecycle.new_job(made, suite, device, 600) for suite, device in suites.items()])
    return made, {job.suite: job for job in store.jobs_of(made.id)}


def recorded(store: Store, seconds: dict[str, float], device: str = "cuda") -> None:
    """An earlier push whose jobs ran each suite in that many seconds (ten tests each)."""
    _run, jobs = run_of(store, "push", dict.fromkeys(seconds, device))
    for suite, job in jobs.items():
        started = lifecycle.start(store, job.id, "local")
        assert started is not None
        store.replace_results(job.id, started.attempt, [TestRecord(f"{suite}::t{i}", "passed", seconds[suite] / 10)
                                                        for i in range(10)])
        assert lifecycle.complete(store, started, Outcome(Conclusion.SUCCESS, "ok")) is not None


def context(store: Store, least: int = 30) -> SimpleNamespace:
    return SimpleNamespace(store=store, settings=SimpleNamespace(shard_min_seconds=least))


def test_a_push_that_fills_every_slot_is_cut_into_fewer_larger_shards(store: Store) -> None:
    recorded(store, RECORDED)
    push, jobs = run_of(store, "push", dict.fromkeys(RECORDED, "cuda"))
    least = push_min_seconds(context(store), push, jobs["layout"], 4)  # type: ignore[arg-type]
    assert least == pytest.approx(sum(RECORDED.values()) / 8)  # 377.3 s of work on 4 slots: 47.2 s a shard at least
    counts = {suite: shard_count(4, 4, {f"t{i}": s / 10 for i in range(10)}, least) for suite, s in RECORDED.items()}
    assert counts == {"autograd": 2, "correctness": 4, "freezing": 2, "fusion": 1, "layout": 1, "passes": 1}
    before = {suite: shard_count(4, 4, {f"t{i}": s / 10 for i in range(10)}, 30) for suite, s in RECORDED.items()}
    assert sum(counts.values()) == 11 and sum(before.values()) == 14  # three starts fewer


def test_a_light_push_and_other_runs_keep_the_deployments_minimum(store: Store) -> None:
    recorded(store, {"fusion": 14.0, "layout": 30.6})
    push, jobs = run_of(store, "push", {"fusion": "cuda", "layout": "cuda"})
    assert push_min_seconds(context(store), push, jobs["layout"], 4) == 30  # type: ignore[arg-type]
    recorded(store, RECORDED)
    pull, jobs = run_of(store, "pull_request", dict.fromkeys(RECORDED, "cuda"))
    assert push_min_seconds(context(store), pull, jobs["layout"], 4) == 30  # type: ignore[arg-type]
    push, jobs = run_of(store, "push", dict.fromkeys(RECORDED, "cuda"))
    assert push_min_seconds(context(store, least=0), push, jobs["layout"], 4) == 0  # type: ignore[arg-type]


def test_only_the_jobs_of_the_same_queue_count(store: Store) -> None:
    recorded(store, RECORDED, device="cpu")  # the cpu jobs' records: another queue's slots
    recorded(store, {"layout": 30.6})
    push, jobs = run_of(store, "push", {"layout": "cuda", "correctness": "cpu", "autograd": "cpu"})
    assert push_min_seconds(context(store), push, jobs["layout"], 1) == 30  # type: ignore[arg-type]
